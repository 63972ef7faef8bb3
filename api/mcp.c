/*
 * mcp.c - the Model Context Protocol's sessions and tools (h_mcp.c is
 * the route): what an agent sees of interpd through POST /mcp.
 *
 * Each tool is the REST API, asked on the agent's behalf: a worker of
 * the MCP queue (app->mcp_wq) sends the request to this server itself
 * (127.0.0.1 or the listen address, the agent's own Authorization and
 * X-User-Id), so a tool has exactly the routes' checks, scoping, limits
 * and results (a token's scopes included), and its failures come back to
 * the agent as tool results with isError, as MCP wants them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "../service/common/live.h"
#include "../service/common/util.h"
#include "http.h"
#include "mcp.h"

/* ---- sessions ----------------------------------------------------------- */

struct mcp_session {
    char id[IPD_ID_MAX];
    char tenant[IPD_TENANT_MAX];
    char user_id[IPD_USER_ID_MAX];
    int64_t used_ms; /* monotonic */
};

struct ipd_mcp {
    pthread_mutex_t lock;
    struct mcp_session s[IPD_MCP_SESSIONS_MAX];
    size_t n;
};

struct ipd_mcp *ipd_mcp_new(void)
{
    struct ipd_mcp *m = ipd_xcalloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void ipd_mcp_free(struct ipd_mcp *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static struct mcp_session *find(struct ipd_mcp *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->s[i].id, id))
            return &m->s[i];
    return NULL;
}

void ipd_mcp_session_new(struct ipd_mcp *m, const struct ipd_principal *who,
                         char id[IPD_ID_MAX])
{
    pthread_mutex_lock(&m->lock);
    int64_t now = ipd_mono_ms();
    struct mcp_session *s = NULL, *own = NULL;
    size_t mine = 0;
    /* A tenant at its share makes room among its own sessions: it can
     * never push the other tenants' out. */
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->s[i].tenant, who->tenant)) {
            mine++;
            if (!own || m->s[i].used_ms < own->used_ms)
                own = &m->s[i];
        }
    if (mine >= IPD_MCP_SESSIONS_PER_TENANT)
        s = own;
    for (size_t i = 0; i < m->n && !s; i++)
        if (now - m->s[i].used_ms > IPD_MCP_SESSION_IDLE_MS)
            s = &m->s[i]; /* an idle one's place */
    if (!s && m->n < IPD_MCP_SESSIONS_MAX)
        s = &m->s[m->n++];
    if (!s) { /* full: the least recently used goes */
        s = &m->s[0];
        for (size_t i = 1; i < m->n; i++)
            if (m->s[i].used_ms < s->used_ms)
                s = &m->s[i];
    }
    ipd_id_new("mcps", s->id);
    snprintf(s->tenant, sizeof s->tenant, "%s", who->tenant);
    snprintf(s->user_id, sizeof s->user_id, "%s", who->user_id);
    s->used_ms = now;
    memcpy(id, s->id, IPD_ID_MAX);
    pthread_mutex_unlock(&m->lock);
}

bool ipd_mcp_session_use(struct ipd_mcp *m, const char *id,
                         const struct ipd_principal *who, bool end)
{
    bool ok = false;
    pthread_mutex_lock(&m->lock);
    struct mcp_session *s = id ? find(m, id) : NULL;
    int64_t now = ipd_mono_ms();
    if (s && now - s->used_ms <= IPD_MCP_SESSION_IDLE_MS &&
        !strcmp(s->tenant, who->tenant) && !strcmp(s->user_id, who->user_id)) {
        ok = true;
        s->used_ms = now;
        if (end) {
            *s = m->s[--m->n];
            memset(&m->s[m->n], 0, sizeof(m->s[m->n]));
        }
    }
    pthread_mutex_unlock(&m->lock);
    return ok;
}

/* ---- the REST API, asked on the agent's behalf -------------------------- */

static size_t collect(char *p, size_t size, size_t n, void *ctx)
{
    struct ipd_buf *b = ctx;
    return ipd_buf_add(b, p, size * n) == IPD_OK ? size * n : 0;
}

/* A request to this server itself: plain http, never through a proxy
 * from the environment (http_proxy, all_proxy: it would see the agent's
 * credentials), no signals. */
static void no_proxy(CURL *e)
{
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
}

/* The agent's headers for a REST request: its Authorization, its
 * X-User-Id (none with a token), the MCP request's X-Request-Id, and
 * Content-Type: application/json when json. */
static struct curl_slist *agent_headers(const struct ipd_mcp_call *c, bool json)
{
    char auth[sizeof c->auth + 32], user[IPD_USER_ID_MAX + 16],
        rid[sizeof c->request_id + 16];
    struct curl_slist *h = NULL;
    snprintf(auth, sizeof auth, "Authorization: %s", c->auth);
    h = curl_slist_append(h, auth);
    if (c->user_id[0]) {
        snprintf(user, sizeof user, "X-User-Id: %s", c->user_id);
        h = curl_slist_append(h, user);
    }
    snprintf(rid, sizeof rid, "X-Request-Id: %s", c->request_id);
    h = curl_slist_append(h, rid);
    if (json)
        h = curl_slist_append(h, "Content-Type: application/json");
    memset(auth, 0, sizeof auth);
    return h;
}

/* A transfer of method path (text: its JSON body, or NULL) to this server
 * as the agent: URL, the agent's headers (*h, freed by agent_perform),
 * never a proxy.  NULL when curl cannot make one. */
static CURL *agent_request(const struct ipd_mcp_call *c, const char *method,
                           const char *path, const char *text,
                           struct curl_slist **h)
{
    char url[512];
    *h = agent_headers(c, text != NULL);
    CURL *e = curl_easy_init();
    if (!e)
        return NULL;
    snprintf(url, sizeof url, "%s%s", c->base, path);
    curl_easy_setopt(e, CURLOPT_URL, url); /* curl keeps a copy */
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, *h);
    no_proxy(e);
    if (text)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
    return e;
}

/* Performs e (NULL: nothing to do) and frees it and h: the HTTP status,
 * 0 when there was no answer or the transfer was stopped. */
static long agent_perform(CURL *e, struct curl_slist *h)
{
    long status = 0;
    if (e && curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (e)
        curl_easy_cleanup(e);
    curl_slist_free_all(h);
    return status;
}

/* method path (with body, or NULL) as the agent: the status (0: no
 * answer), the JSON answer in *out (new, or NULL). */
static long rest(const struct ipd_mcp_call *c, const char *method,
                 const char *path, const json_t *body, long timeout_s,
                 json_t **out)
{
    struct ipd_buf got;
    struct curl_slist *h = NULL;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

    *out = NULL;
    ipd_buf_init(&got, IPD_MCP_ANSWER_MAX);
    CURL *e = agent_request(c, method, path, text, &h);
    if (e) {
        curl_easy_setopt(e, CURLOPT_TIMEOUT, timeout_s);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &got);
    }
    long status = agent_perform(e, h);
    free(text);
    if (status && got.len)
        *out = json_loadb(got.buf, got.len, 0, NULL);
    ipd_buf_release(&got);
    return status;
}

/* A tool result: one text, isError as said. */
static json_t *text_result(bool error, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static json_t *text_result(bool error, const char *fmt, ...)
{
    struct ipd_buf b;
    va_list ap;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    va_start(ap, fmt);
    IPD_ASSERT(ipd_buf_vaddf(&b, fmt, ap) == IPD_OK);
    va_end(ap);
    json_t *r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
                          "text", b.buf ? b.buf : "", "isError", error);
    ipd_buf_release(&b);
    return r;
}

/* A REST answer that is not what the tool wanted, as its result. */
static json_t *rest_failure(long status, const json_t *doc, const char *what)
{
    const char *code = json_string_value(
        json_object_get(json_object_get(doc, "error"), "code"));
    const char *msg = json_string_value(
        json_object_get(json_object_get(doc, "error"), "message"));
    if (!status)
        return text_result(true, "%s: the server did not answer", what);
    return text_result(true, "%s: %ld %s: %s", what, status, code ? code : "?",
                       msg ? msg : "(no message)");
}

/* The text of an execution's result, for an agent to read. */
static void result_text(const json_t *res, struct ipd_buf *b)
{
    const char *out = json_string_value(json_object_get(res, "stdout"));
    const char *err = json_string_value(json_object_get(res, "stderr"));
    const json_t *e = json_object_get(res, "error");
    const json_t *files = json_object_get(res, "generated_files");
    size_t i;
    const json_t *f;
    if (out && *out)
        ipd_buf_addf(b, "%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
    if (err && *err)
        ipd_buf_addf(b, "[stderr]\n%s", err);
    if (json_is_object(e))
        ipd_buf_addf(b, "[error] %s: %s\n",
                     json_string_value(json_object_get(e, "type")),
                     json_string_value(json_object_get(e, "message")));
    json_array_foreach(files, i, f)
        ipd_buf_addf(b, "[file] %s (%s, %lld bytes)\n",
                     json_string_value(json_object_get(f, "filename")),
                     json_is_string(json_object_get(f, "file_id"))
                         ? json_string_value(json_object_get(f, "file_id"))
                         : "not stored",
                     (long long)json_integer_value(json_object_get(f, "size")));
    if (!b->len)
        ipd_buf_adds(b, "(no output)\n");
}

/* Content for an execution's result: its text, then each image (a
 * generated PNG returned inline, a display bundle's image/png) while
 * they total at most IPD_MCP_IMAGES_MAX bytes of base64, then each
 * display's text/plain. */
static json_t *run_content(const json_t *res)
{
    struct ipd_buf b;
    size_t i, images = 0;
    const json_t *f;
    json_t *content = json_array();
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    result_text(res, &b);
    json_array_append_new(
        content, json_pack("{s:s, s:s}", "type", "text", "text", b.buf));
    ipd_buf_release(&b);
    json_array_foreach(json_object_get(res, "generated_files"), i, f)
    {
        const char *mime = json_string_value(json_object_get(f, "mime_type"));
        const char *data = json_string_value(json_object_get(f, "data_base64"));
        if (mime && data && !strncmp(mime, "image/", 6) &&
            (images += strlen(data)) <= IPD_MCP_IMAGES_MAX)
            json_array_append_new(content,
                                  json_pack("{s:s, s:s, s:s}", "type", "image",
                                            "data", data, "mimeType", mime));
    }
    json_array_foreach(json_object_get(res, "display"), i, f)
    {
        const char *png = json_string_value(json_object_get(f, "image/png"));
        const char *txt = json_string_value(json_object_get(f, "text/plain"));
        if (png && (images += strlen(png)) <= IPD_MCP_IMAGES_MAX)
            json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type",
                                                     "image", "data", png,
                                                     "mimeType", "image/png"));
        else if (txt)
            json_array_append_new(
                content, json_pack("{s:s, s:s}", "type", "text", "text", txt));
    }
    return content;
}

/* ---- the tools ---------------------------------------------------------- */

static json_t *tool_run_python(const struct ipd_mcp_call *c)
{
    json_t *body = json_deep_copy(c->args), *res = NULL;
    const json_t *t = json_object_get(c->args, "timeout");
    double want = json_is_number(t) ? json_number_value(t) : 300;
    long wait_s = 60 + (want > 0 && want < 86400 ? (long)want : 300);
    long st = rest(c, "POST", "/v1/executions", body, wait_s, &res);
    json_decref(body);
    json_t *out;
    if (st == 200 && json_is_object(res))
        out = json_pack("{s:o, s:b}", "content", run_content(res), "isError",
                        !json_is_true(json_object_get(res, "success")));
    else
        out = rest_failure(st, res, "run_python");
    json_decref(res);
    return out;
}

static json_t *tool_upload_file_from_url(const struct ipd_mcp_call *c)
{
    json_t *res = NULL;
    long st = rest(c, "POST", "/v1/files", c->args, 300, &res);
    json_t *out =
        st == 201
            ? text_result(
                  false, "stored %s as %s (%lld bytes, %s)",
                  json_string_value(json_object_get(c->args, "url")),
                  json_string_value(json_object_get(res, "file_id")),
                  (long long)json_integer_value(json_object_get(res, "size")),
                  json_string_value(json_object_get(res, "file_type")))
            : rest_failure(st, res, "upload_file_from_url");
    json_decref(res);
    return out;
}

static json_t *tool_list_files(const struct ipd_mcp_call *c)
{
    json_t *res = NULL;
    long st = rest(c, "GET", "/v1/files?limit=100", NULL, 60, &res);
    if (st != 200) {
        json_t *out = rest_failure(st, res, "list_files");
        json_decref(res);
        return out;
    }
    struct ipd_buf b;
    size_t i;
    const json_t *f;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    json_array_foreach(json_object_get(res, "files"), i, f)
        ipd_buf_addf(&b, "%s\t%s\t%lld bytes\t%s\texpires %s\n",
                     json_string_value(json_object_get(f, "file_id")),
                     json_string_value(json_object_get(f, "filename")),
                     (long long)json_integer_value(json_object_get(f, "size")),
                     json_string_value(json_object_get(f, "file_type")),
                     json_is_string(json_object_get(f, "expires_at"))
                         ? json_string_value(json_object_get(f, "expires_at"))
                         : "never");
    json_t *out = text_result(false, "%s", b.len ? b.buf : "(no files)\n");
    ipd_buf_release(&b);
    json_decref(res);
    return out;
}

static json_t *tool_create_session(const struct ipd_mcp_call *c)
{
    json_t *res = NULL, *body = json_object();
    long st = rest(c, "POST", "/v1/sessions", body, 120, &res);
    json_decref(body);
    json_t *out =
        st == 201
            ? text_result(false, "%s",
                          json_string_value(json_object_get(res, "session_id")))
            : rest_failure(st, res, "create_session");
    json_decref(res);
    return out;
}

/* The session_id argument as a path (checked: an id, nothing else). */
static bool session_path(const struct ipd_mcp_call *c, const char *tail,
                         char *path, size_t n)
{
    const char *id = json_string_value(json_object_get(c->args, "session_id"));
    if (!id || !ipd_id_valid("sess", id))
        return false;
    snprintf(path, n, "/v1/sessions/%s%s", id, tail);
    return true;
}

static json_t *tool_list_variables(const struct ipd_mcp_call *c)
{
    char path[128];
    json_t *res = NULL;
    if (!session_path(c, "/variables", path, sizeof path))
        return text_result(true, "list_variables: no such session");
    long st = rest(c, "GET", path, NULL, 60, &res);
    char *text = st == 200 ? json_dumps(res, JSON_INDENT(1)) : NULL;
    json_t *out = text ? text_result(false, "%s", text)
                       : rest_failure(st, res, "list_variables");
    free(text);
    json_decref(res);
    return out;
}

static json_t *tool_end_session(const struct ipd_mcp_call *c)
{
    char path[128];
    json_t *res = NULL;
    if (!session_path(c, "", path, sizeof path))
        return text_result(true, "end_session: no such session");
    long st = rest(c, "DELETE", path, NULL, 60, &res);
    json_t *out = st == 204 ? text_result(false, "ended")
                            : rest_failure(st, res, "end_session");
    json_decref(res);
    return out;
}

/* One line per package: its requirement, status, version and message;
 * an error when any is neither installed nor already there. */
static json_t *tool_install_packages(const struct ipd_mcp_call *c)
{
    json_t *res = NULL;
    long st = rest(c, "POST", "/v1/packages", c->args, 900, &res);
    if (st != 200) {
        json_t *out = rest_failure(st, res, "install_packages");
        json_decref(res);
        return out;
    }
    struct ipd_buf b;
    size_t i;
    const json_t *p;
    bool bad = false;
    ipd_buf_init(&b, IPD_BUF_UNLIMITED);
    json_array_foreach(json_object_get(res, "results"), i, p)
    {
        const char *status = json_string_value(json_object_get(p, "status"));
        const char *v = json_string_value(json_object_get(p, "version"));
        const char *m = json_string_value(json_object_get(p, "message"));
        bad |= !status || (strcmp(status, "installed") &&
                           strcmp(status, "already_installed"));
        ipd_buf_addf(&b, "%s: %s%s%s%s%s\n",
                     json_string_value(json_object_get(p, "package")),
                     status ? status : "?", v ? " " : "", v ? v : "",
                     m ? ": " : "", m ? m : "");
    }
    json_t *out = text_result(bad, "%s", b.len ? b.buf : "(nothing)\n");
    ipd_buf_release(&b);
    json_decref(res);
    return out;
}

/* Each tool: its schema (JSON text: exactly these arguments) and its
 * work. */
static const struct mcp_tool {
    const char *name, *description, *schema;
    json_t *(*run)(const struct ipd_mcp_call *c);
} tools[] = {
    {"run_python",
     "Run Python code in a sandbox and return its output (stdout, stderr, "
     "the error with its traceback), its charts and displayed values as "
     "images and text, and the files it wrote. FILES and load_file(id) "
     "give the user's files the call names; in a session, variables "
     "persist between calls.",
     "{\"type\":\"object\",\"additionalProperties\":false,\"required\":["
     "\"code\"],\"properties\":{\"code\":{\"type\":\"string\"},\"files\":{"
     "\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":"
     "\"file ids (list_files)\"},\"session_id\":{\"type\":\"string\","
     "\"description\":\"run in this session (create_session)\"},"
     "\"timeout\":{\"type\":\"number\",\"description\":\"seconds\"}}}",
     tool_run_python},
    {"upload_file_from_url",
     "Fetch a file from an http(s) URL into the user's files (48 hours).",
     "{\"type\":\"object\",\"additionalProperties\":false,\"required\":["
     "\"url\"],\"properties\":{\"url\":{\"type\":\"string\"},\"filename\":{"
     "\"type\":\"string\"}}}",
     tool_upload_file_from_url},
    {"list_files", "List the user's files: id, name, size, type, expiry.",
     "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
     tool_list_files},
    {"create_session",
     "Start a session: a Python interpreter whose variables persist "
     "between run_python calls that name it. Returns its id.",
     "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
     tool_create_session},
    {"list_variables", "List a session's variables: name, type, repr.",
     "{\"type\":\"object\",\"additionalProperties\":false,\"required\":["
     "\"session_id\"],\"properties\":{\"session_id\":{\"type\":\"string\"}}}",
     tool_list_variables},
    {"end_session", "End a session (its variables are gone).",
     "{\"type\":\"object\",\"additionalProperties\":false,\"required\":["
     "\"session_id\"],\"properties\":{\"session_id\":{\"type\":\"string\"}}}",
     tool_end_session},
    {"install_packages",
     "Install allowlisted Python packages for later runs (pip "
     "requirements, e.g. \"tabulate==0.9.0\").",
     "{\"type\":\"object\",\"additionalProperties\":false,\"required\":["
     "\"packages\"],\"properties\":{\"packages\":{\"type\":\"array\","
     "\"items\":{\"type\":\"string\"}}}}",
     tool_install_packages},
};

json_t *ipd_mcp_tools(void)
{
    json_t *list = json_array();
    for (size_t i = 0; i < IPD_ARRAY_LEN(tools); i++)
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:o}", "name", tools[i].name,
                            "description", tools[i].description, "inputSchema",
                            json_loads(tools[i].schema, 0, NULL)));
    return list;
}

/* args against the tool's schema: an object with only its properties,
 * the required ones there, each of its type.  A message, or NULL. */
static const char *args_wrong(const struct mcp_tool *t, const json_t *args)
{
    json_t *schema = json_loads(t->schema, 0, NULL);
    json_t *props = json_object_get(schema, "properties");
    const char *key, *wrong = NULL;
    json_t *v;
    size_t i;
    if (!json_is_object(args))
        wrong = "arguments must be an object";
    json_array_foreach(json_object_get(schema, "required"), i,
                       v) if (!wrong &&
                              !json_object_get(args, json_string_value(v)))
        wrong = "a required argument is missing";
    json_object_foreach((json_t *)(uintptr_t)args, key, v)
    {
        const char *type = json_string_value(
            json_object_get(json_object_get(props, key), "type"));
        if (wrong)
            break;
        if (!type)
            wrong = "an argument the tool does not take";
        else if ((!strcmp(type, "string") && !json_is_string(v)) ||
                 (!strcmp(type, "number") && !json_is_number(v)) ||
                 (!strcmp(type, "array") && !json_is_array(v)))
            wrong = "an argument of the wrong type";
    }
    json_decref(schema);
    return wrong;
}

bool ipd_mcp_tool_known(const char *name, const json_t *args, const char **why)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(tools); i++)
        if (name && !strcmp(tools[i].name, name)) {
            *why = args_wrong(&tools[i], args);
            return true;
        }
    *why = "no such tool";
    return false;
}

json_t *ipd_mcp_tool_run(const struct ipd_mcp_call *c)
{
    for (size_t i = 0; i < IPD_ARRAY_LEN(tools); i++)
        if (!strcmp(tools[i].name, c->tool))
            return tools[i].run(c);
    return text_result(true, "no such tool: %s", c->tool);
}

/* ---- run_python with progress: a stream ----------------------------------
 *
 * With a progressToken, run_python asks for a streamed execution and
 * hands each stdout or stderr chunk to the agent as notifications/progress
 * while the code runs, then the tool's response, all on the live channel
 * the MCP request answers with (text/event-stream, each a "message"
 * event).  The agent gone (the channel no longer streamed), the REST
 * stream is dropped, which cancels the run. */

struct ipd_mcp_stream {
    struct ipd_mcp_call call;
    json_t *id, *token;       /* references */
    struct ipd_live *live;    /* a reference */
    struct ipd_buf sse;       /* the REST stream's bytes not yet an event */
    size_t scanned;           /* of sse, searched for an event's end */
    char exec_id[IPD_ID_MAX]; /* the REST stream's X-Execution-Id */
    json_t *result;           /* its result event's data */
    long progress;
};

struct ipd_mcp_stream *ipd_mcp_stream_new(const struct ipd_mcp_call *c,
                                          json_t *id, json_t *token,
                                          struct ipd_live *live)
{
    struct ipd_mcp_stream *s = ipd_xcalloc(1, sizeof(*s));
    s->call = *c;
    s->call.args = json_incref(c->args);
    s->id = json_incref(id);
    s->token = json_incref(token);
    s->live = ipd_live_ref(live);
    ipd_buf_init(&s->sse, IPD_MCP_ANSWER_MAX);
    return s;
}

void ipd_mcp_stream_free(void *arg)
{
    struct ipd_mcp_stream *s = arg;
    json_decref(s->call.args);
    json_decref(s->id);
    json_decref(s->token);
    json_decref(s->result);
    ipd_buf_release(&s->sse);
    ipd_live_unref(s->live);
    free(s);
}

/* The code called its client (call_client): an agent cannot answer, so
 * the call is refused at once rather than left to its timeout. */
static void refuse_call(struct ipd_mcp_stream *s, const char *call_id)
{
    char path[160];
    json_t *res = NULL;
    if (!call_id || !ipd_id_valid("call", call_id) ||
        !ipd_id_valid("exec", s->exec_id))
        return;
    snprintf(path, sizeof path, "/v1/executions/%s/calls/%s", s->exec_id,
             call_id);
    json_t *body =
        json_pack("{s:{s:s, s:s}}", "error", "type", "RuntimeError", "message",
                  "interpd: an MCP agent cannot answer calls from the code");
    (void)rest(&s->call, "POST", path, body, 30, &res);
    json_decref(body);
    json_decref(res);
}

/* One REST event: output becomes a progress notification, a call is
 * refused, the result is kept. */
static void stream_event(struct ipd_mcp_stream *s, const char *kind,
                         const char *data, size_t len)
{
    json_t *d = json_loadb(data, len, JSON_DECODE_ANY, NULL);
    if (!strcmp(kind, "result")) {
        json_decref(s->result);
        s->result = json_incref(d);
    } else if (!strcmp(kind, "call")) {
        refuse_call(s, json_string_value(json_object_get(d, "call_id")));
    } else if ((!strcmp(kind, "stdout") || !strcmp(kind, "stderr")) &&
               json_is_string(d)) {
        json_t *n = json_pack("{s:s, s:s, s:{s:O, s:I, s:s}}", "jsonrpc", "2.0",
                              "method", "notifications/progress", "params",
                              "progressToken", s->token, "progress",
                              (json_int_t)++s->progress, "message",
                              json_string_value(d));
        char *text = json_dumps(n, JSON_COMPACT);
        if (text)
            ipd_live_event(s->live, "message", text, strlen(text));
        free(text);
        json_decref(n);
    }
    json_decref(d);
}

/* The REST stream's bytes: whole events out of them (SSE: "event:" and
 * "data:" lines, a blank line ends one). */
static size_t stream_bytes(char *p, size_t size, size_t n, void *arg)
{
    struct ipd_mcp_stream *s = arg;
    if (!ipd_live_streamed(s->live) || ipd_buf_add(&s->sse, p, size * n))
        return 0; /* the agent left, or over the bound: drop the run */
    char *end;
    /* Searched from where the last search stopped (one less: "\n\n"
     * may straddle), so a long event costs its length, not its square. */
    while ((end = memmem(s->sse.buf + s->scanned, s->sse.len - s->scanned,
                         "\n\n", 2)) != NULL) {
        size_t blk = (size_t)(end - s->sse.buf);
        char kind[32] = "";
        const char *data = NULL, *line = s->sse.buf;
        size_t dlen = 0;
        while (line < s->sse.buf + blk) {
            const char *nl = memchr(line, '\n', (size_t)(end - line));
            size_t ll = nl ? (size_t)(nl - line) : (size_t)(end - line);
            if (ll > 7 && !strncmp(line, "event: ", 7))
                snprintf(kind, sizeof kind, "%.*s", (int)(ll - 7), line + 7);
            else if (ll > 6 && !strncmp(line, "data: ", 6))
                data = line + 6, dlen = ll - 6;
            line += ll + 1;
        }
        if (kind[0] && data)
            stream_event(s, kind, data, dlen);
        memmove(s->sse.buf, end + 2, s->sse.len - blk - 2);
        s->sse.len -= blk + 2;
        s->scanned = 0;
    }
    s->scanned = s->sse.len ? s->sse.len - 1 : 0;
    return size * n;
}

/* The REST stream's response headers: its X-Execution-Id. */
static size_t stream_header(char *p, size_t size, size_t n, void *arg)
{
    struct ipd_mcp_stream *s = arg;
    size_t len = size * n;
    static const char name[] = "x-execution-id:";
    if (len > sizeof name && !strncasecmp(p, name, sizeof name - 1)) {
        const char *v = p + sizeof name - 1;
        size_t vl = len - (sizeof name - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        if (vl < sizeof s->exec_id)
            snprintf(s->exec_id, sizeof s->exec_id, "%.*s", (int)vl, v);
    }
    return len;
}

/* Called about once a second while the REST stream is quiet: the agent
 * gone, the transfer stops (non-zero). */
static int stream_check(void *arg, curl_off_t a, curl_off_t b, curl_off_t c,
                        curl_off_t d)
{
    struct ipd_mcp_stream *s = arg;
    (void)a, (void)b, (void)c, (void)d;
    return !ipd_live_streamed(s->live);
}

/* POST /v1/executions streamed, the events through stream_bytes: the
 * HTTP status (0: none, or the transfer was stopped). */
static long stream_post(struct ipd_mcp_stream *s, struct ipd_buf *err)
{
    json_t *body = json_deep_copy(s->call.args);
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct curl_slist *h = NULL;
    CURL *e = text ? agent_request(&s->call, "POST", "/v1/executions", text, &h)
                   : NULL;
    if (e) {
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, stream_bytes);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, stream_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, s);
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, stream_check);
        curl_easy_setopt(e, CURLOPT_XFERINFODATA, s);
    }
    long status = agent_perform(e, h);
    free(text);
    /* Not a stream: the route refused it, its JSON error is the bytes. */
    if (status != 200)
        ipd_buf_add(err, s->sse.buf ? s->sse.buf : "", s->sse.len);
    return status;
}

void ipd_mcp_stream_run(void *arg, bool stopping)
{
    struct ipd_mcp_stream *s = arg;
    struct ipd_buf err;
    json_t *out;
    ipd_buf_init(&err, IPD_MCP_ANSWER_MAX);
    long st = stopping ? 0 : stream_post(s, &err);
    if (st == 200 && json_is_object(s->result)) {
        out = json_pack("{s:o, s:b}", "content", run_content(s->result),
                        "isError",
                        !json_is_true(json_object_get(s->result, "success")));
    } else {
        json_t *doc = err.len ? json_loadb(err.buf, err.len, 0, NULL) : NULL;
        out = rest_failure(st, doc, "run_python");
        json_decref(doc);
    }
    ipd_buf_release(&err);
    json_t *resp = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", s->id,
                             "result", out);
    char *text = json_dumps(resp, JSON_COMPACT);
    json_decref(resp);
    if (text)
        ipd_live_end_as(s->live, "message", text, strlen(text));
    else
        ipd_live_end(s->live, NULL, 0);
}

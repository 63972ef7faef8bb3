/*
 * h_mcp.c - /mcp: the Model Context Protocol over its Streamable HTTP
 * transport (JSON-RPC 2.0; docs/API.md "MCP").  POST carries one
 * JSON-RPC message: a request is answered with its response
 * (application/json), a notification or a response with 202.  Methods:
 * initialize (which opens a session: Mcp-Session-Id), ping, tools/list,
 * tools/call; every request after initialize names its session.  DELETE
 * ends the session; GET is 405 (no stream the server starts).
 *
 * The same key (and X-User-Id) or token as the REST API; a tool is the
 * REST API asked on the agent's behalf by a worker of the MCP queue
 * (mcp.c), so its checks and scoping are the routes' own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../service/common/live.h"
#include "../service/common/util.h"
#include "../service/exec/policy.h"
#include "http.h"
#include "mcp.h"

/* JSON-RPC 2.0's error codes. */
enum {
    RPC_PARSE = -32700,
    RPC_INVALID = -32600,
    RPC_NO_METHOD = -32601,
    RPC_PARAMS = -32602,
};

/* The protocol versions this server speaks, newest first: an initialize
 * asking for one of these gets it, any other the first. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                       "2024-11-05"};

struct mcp_state {
    struct ipd_live *live; /* a streamed run_python's (a reference) */
    json_t *id;            /* the request's id (a reference) */
    struct ipd_mcp_call call;
    json_t *result; /* the tool's, after the worker ran it */
    bool stopping;
};

static void reply_rpc(struct ipd_req *r, json_t *id, json_t *result)
{
    ipd_reply_json(r, MHD_HTTP_OK,
                   json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                             id ? id : json_null(), "result", result));
}

static void reply_rpc_error(struct ipd_req *r, json_t *id, int code,
                            const char *msg)
{
    ipd_reply_json(r, MHD_HTTP_OK,
                   json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                             id ? id : json_null(), "error", "code", code,
                             "message", msg));
}

static json_t *initialize(struct ipd_req *r, const json_t *params)
{
    const char *want =
        json_string_value(json_object_get(params, "protocolVersion"));
    const char *v = versions[0];
    for (size_t i = 0; want && i < IPD_ARRAY_LEN(versions); i++)
        if (!strcmp(want, versions[i]))
            v = versions[i];
    ipd_mcp_session_new(r->app->mcp, &r->principal, r->mcp_session);
    return json_pack(
        "{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion", v,
        "capabilities", "tools", "listChanged", false, "serverInfo", "name",
        "interpd", "version", IPD_VERSION, "instructions",
        "interpd runs Python in a sandbox for this user: run_python runs "
        "code (charts come back as images); upload_file_from_url and "
        "list_files manage the user's files (read them in code with "
        "load_file(file_id)); create_session keeps variables between "
        "runs.");
}

/* Where this server listens, for a worker's REST calls. */
static void own_base(struct ipd_req *r, char *out, size_t n)
{
    const char *listen = r->app->cfg->listen ? r->app->cfg->listen : "";
    const char *colon = strrchr(listen, ':');
    char host[128] = "127.0.0.1";
    if (colon && colon > listen && (size_t)(colon - listen) < sizeof host) {
        snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
        if (!strcmp(host, "0.0.0.0") || !strcmp(host, "*"))
            snprintf(host, sizeof host, "127.0.0.1");
        else if (!strcmp(host, "[::]") || !strcmp(host, "::"))
            snprintf(host, sizeof host, "[::1]");
    }
    snprintf(out, n, "http://%s:%u", host,
             (unsigned)ipd_daemon_port(r->daemon));
}

static void tool_work(struct ipd_req *r, bool stopping)
{
    struct mcp_state *st = r->state;
    st->stopping = stopping;
    if (!stopping)
        st->result = ipd_mcp_tool_run(&st->call);
}

/* run_python with a progressToken: the answer is a stream at once, its
 * events the notifications and then the response (mcp.c). */
static void tools_call_streamed(struct ipd_req *r, struct mcp_state *st,
                                json_t *token, int64_t share)
{
    struct ipd_live_consumer c;
    st->live = ipd_live_new();
    if (!st->live) {
        ipd_reply_failure(r, IPD_ERR_UNAVAILABLE,
                          "the server is out of file descriptors; retry",
                          "streaming the tool call");
        return;
    }
    ipd_sse_consumer(r, &c);
    ipd_live_stream(st->live, &c);
    struct ipd_mcp_stream *job =
        ipd_mcp_stream_new(&st->call, st->id, token, st->live);
    if (!ipd_bg_submit_detached(r->app->mcp_wq, r, ipd_mcp_stream_run,
                                ipd_mcp_stream_free, job, share,
                                "MCP tool calls", "tenant-running")) {
        ipd_mcp_stream_free(job);
        return; /* refused: it replied */
    }
    ipd_sse_reply(r, st->live);
}

/* tools/call: checked here, run by a worker (the connection waits). */
static void tools_call(struct ipd_req *r, json_t *id, const json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    const char *why = NULL;
    json_t *empty = NULL;
    if (!args)
        args = empty = json_object();
    if (!ipd_mcp_tool_known(name, args, &why) || why) {
        reply_rpc_error(r, id, RPC_PARAMS, why);
        json_decref(empty);
        return;
    }
    struct mcp_state *st = ipd_xcalloc(1, sizeof(*st));
    st->id = json_incref(id);
    snprintf(st->call.tool, sizeof st->call.tool, "%s", name);
    st->call.args = json_incref(args);
    json_decref(empty);
    own_base(r, st->call.base, sizeof st->call.base);
    snprintf(st->call.auth, sizeof st->call.auth, "%s",
             ipd_req_header(r, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!r->principal.token)
        snprintf(st->call.user_id, sizeof st->call.user_id, "%s",
                 r->principal.user_id);
    snprintf(st->call.request_id, sizeof st->call.request_id, "%s",
             r->request_id);
    r->state = st;
    const struct ipd_exec_policy *kp = ipd_req_key_policy(r);
    int64_t share = kp ? kp->tenant_running : -50;
    json_t *token =
        json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (!strcmp(name, "run_python") &&
        (json_is_string(token) || json_is_integer(token))) {
        tools_call_streamed(r, st, token, share);
        return;
    }
    if (!ipd_bg_submit_shared(r->app->mcp_wq, r, tool_work, share,
                              "MCP tool calls", "tenant-running")) {
        r->state = NULL; /* refused: it replied */
        json_decref(st->id);
        json_decref(st->call.args);
        free(st);
    }
}

/* A JSON-RPC request: answer it (or hand tools/call to a worker). */
static void request(struct ipd_req *r, json_t *id, const char *method,
                    const json_t *params)
{
    if (!strcmp(method, "initialize"))
        reply_rpc(r, id, initialize(r, params));
    else if (!strcmp(method, "ping"))
        reply_rpc(r, id, json_object());
    else if (!strcmp(method, "tools/list"))
        reply_rpc(r, id, json_pack("{s:o}", "tools", ipd_mcp_tools()));
    else if (!strcmp(method, "tools/call"))
        tools_call(r, id, params);
    else
        reply_rpc_error(r, id, RPC_NO_METHOD, "no such method");
}

/* The session the request names: false (after replying) when it is
 * missing (400) or not a live one of the caller's (404). */
static bool session_ok(struct ipd_req *r, bool end)
{
    const char *sid = ipd_req_header(r, "Mcp-Session-Id");
    if (!sid) {
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "Mcp-Session-Id is required after initialize");
        return false;
    }
    if (!ipd_mcp_session_use(r->app->mcp, sid, &r->principal, end)) {
        ipd_reply_code(r, IPD_HE_NOT_FOUND,
                       "no such MCP session: initialize again");
        return false;
    }
    snprintf(r->mcp_session, sizeof r->mcp_session, "%s", sid);
    return true;
}

static bool version_ok(struct ipd_req *r)
{
    const char *v = ipd_req_header(r, "MCP-Protocol-Version");
    for (size_t i = 0; v && i < IPD_ARRAY_LEN(versions); i++)
        if (!strcmp(v, versions[i]))
            return true;
    if (v)
        ipd_reply_code(r, IPD_HE_INVALID_REQUEST,
                       "unsupported MCP-Protocol-Version: %s", v);
    return !v;
}

static void mcp_answer(struct ipd_req *r)
{
    struct mcp_state *st = r->state;
    if (st->live)
        return; /* a stream: answered already */
    if (st->stopping || !st->result)
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "the server is shutting down");
    else
        reply_rpc(r, st->id, json_incref(st->result));
}

static void mcp_post(struct ipd_req *r)
{
    json_error_t jerr;
    if (r->state) {
        mcp_answer(r);
        return;
    }
    if (!r->app->mcp) {
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "MCP is unavailable here");
        return;
    }
    json_t *msg = json_loadb(r->body.buf ? r->body.buf : "", r->body.len,
                             JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        reply_rpc_error(r, NULL, RPC_PARSE, "not JSON");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    const char *method = json_string_value(json_object_get(msg, "method"));
    const json_t *params = json_object_get(msg, "params");
    if (!json_is_object(msg) ||
        !json_is_string(json_object_get(msg, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") ||
        (params && !json_is_object(params)) ||
        (id && !json_is_string(id) && !json_is_integer(id))) {
        reply_rpc_error(r, json_is_object(msg) ? id : NULL, RPC_INVALID,
                        "not a JSON-RPC 2.0 message (a batch is not taken)");
    } else if (method && id && !strcmp(method, "initialize")) {
        request(r, id, method, params);
    } else if (!version_ok(r) || !session_ok(r, false)) {
        /* replied */
    } else if (!method || !id) {
        ipd_reply_empty(r, MHD_HTTP_ACCEPTED); /* a notification, a reply */
    } else {
        request(r, id, method, params);
    }
    json_decref(msg);
}

static void mcp_delete(struct ipd_req *r)
{
    if (!r->app->mcp)
        ipd_reply_code(r, IPD_HE_UNAVAILABLE, "MCP is unavailable here");
    else if (session_ok(r, true))
        ipd_reply_empty(r, MHD_HTTP_NO_CONTENT);
}

static void mcp_cleanup(struct ipd_req *r)
{
    struct mcp_state *st = r->state;
    if (!st)
        return;
    if (st->live) { /* the agent left, or the stream is over */
        ipd_live_unstream(st->live);
        ipd_live_unref(st->live);
    }
    json_decref(st->id);
    json_decref(st->call.args);
    json_decref(st->result);
    free(st);
    r->state = NULL;
}

const struct ipd_handler ipd_h_mcp_post = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .finish = mcp_post,
    .cleanup = mcp_cleanup,
};

const struct ipd_handler ipd_h_mcp_delete = {
    .flags = IPD_H_AUTH | IPD_H_USER,
    .scope = IPD_SCOPE_EXECUTIONS,
    .finish = mcp_delete,
};

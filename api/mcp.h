/*
 * mcp.h - the Model Context Protocol's sessions and tools (mcp.c), for
 * the route POST /mcp (h_mcp.c; docs/API.md "MCP").
 */
#ifndef IPD_API_MCP_H
#define IPD_API_MCP_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "../service/common/principal.h"
#include "../service/common/token.h"
#include "../service/common/util.h"

#define IPD_MCP_SESSIONS_MAX 1024 /* per node; the least used goes */
#define IPD_MCP_SESSIONS_PER_TENANT                                            \
    256 /* beyond: the tenant's own least                                      \
           used goes */
#define IPD_MCP_SESSION_IDLE_MS (60LL * 60 * 1000)
#define IPD_MCP_ANSWER_MAX (64 * 1024 * 1024) /* a REST answer read */
#define IPD_MCP_WORKERS 8 /* tool calls running at once, per node */
#define IPD_MCP_IMAGES_MAX (8 * 1024 * 1024) /* base64 in one result */
#define IPD_MCP_QUEUE_MAX 64 /* waiting for a worker; beyond: 429 */

struct ipd_mcp;
struct ipd_mcp *ipd_mcp_new(void);
void ipd_mcp_free(struct ipd_mcp *m); /* NULL is fine */

/* A new session of who's into id (initialize). */
void ipd_mcp_session_new(struct ipd_mcp *m, const struct ipd_principal *who,
                         char id[IPD_ID_MAX]);
/* True when id is a live session of who's (then used now; ended when
 * end). */
bool ipd_mcp_session_use(struct ipd_mcp *m, const char *id,
                         const struct ipd_principal *who, bool end);

/* One tool call, as a worker runs it. */
struct ipd_mcp_call {
    char tool[32];
    json_t *args;   /* a reference: checked against the tool's schema */
    char base[160]; /* "http://127.0.0.1:PORT": this server */
    char auth[IPD_TOKEN_MAX + 16]; /* the agent's Authorization */
    char user_id[IPD_USER_ID_MAX]; /* its X-User-Id, "" with a token */
    char request_id[IPD_REQUEST_ID_MAX];
};

/* The tools' list (tools/list's "tools"): a new array. */
json_t *ipd_mcp_tools(void);
/* True when name is a tool; *why (static) says what is wrong with args,
 * or NULL. */
bool ipd_mcp_tool_known(const char *name, const json_t *args, const char **why);
/* Run the call (blocks: a worker's): the tool result, {"content": [...],
 * "isError": bool}, new. */
json_t *ipd_mcp_tool_run(const struct ipd_mcp_call *c);

/* run_python with a progressToken (mcp.c): its output as
 * notifications/progress on live while it runs, then the response
 * (id's) as the last event ("message"), as a worker runs it
 * (ipd_mcp_stream_run, then ipd_mcp_stream_free as its done). */
struct ipd_live;
struct ipd_mcp_stream;
struct ipd_mcp_stream *ipd_mcp_stream_new(const struct ipd_mcp_call *c,
                                          json_t *id, json_t *token,
                                          struct ipd_live *live);
void ipd_mcp_stream_run(void *arg, bool stopping);
void ipd_mcp_stream_free(void *arg);

#endif

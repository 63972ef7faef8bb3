// interpd's POST /mcp driven by the official MCP TypeScript SDK's client
// (@modelcontextprotocol/sdk, pinned in package.json): Client over
// StreamableHTTPClientTransport, as an agent framework would use it.
//
//   node mcp_check.mjs BASE KEY
//
// BASE is a running interpd (http://127.0.0.1:PORT) that may fetch from
// 127.0.0.1 (--fetch-allow 127.0.0.1/32), KEY a key it accepts.
// tests/clients/test_mcp_client.py (ctest clients/mcp) starts the server
// and runs this.  Prints ok/FAIL lines and exits non-zero on any failure.
import http from 'node:http';
import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StreamableHTTPClientTransport} from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [base, key, otherKey] = process.argv.slice(2);
let failed = 0;

function check(ok, what) {
  if (!ok) failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} mcp: ${what}`);
  return ok;
}

function textOf(result) {
  return (result.content || [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

// A CSV the server ingests by URL, from this process.
const CSV = 'month,amount\nJan,120\nFeb,80\nMar,150\n';
const files = http.createServer((req, res) => {
  res.writeHead(200, {'Content-Type': 'text/csv'});
  res.end(CSV);
});
await new Promise((ok) => files.listen(0, '127.0.0.1', ok));
const csvUrl = `http://127.0.0.1:${files.address().port}/sales.csv`;

async function connect(user) {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: {headers: {Authorization: `Bearer ${key}`, 'X-User-Id': user}},
  });
  const client = new Client({name: 'interpd-check', version: '1.0.0'});
  await client.connect(transport);
  return {client, transport};
}

async function main() {
  const {client, transport} = await connect('agent-1');
  check(/^mcps_/.test(transport.sessionId || ''), `a session: ${transport.sessionId}`);
  const info = client.getServerVersion();
  check(info && info.name === 'interpd', `server info ${JSON.stringify(info)}`);

  const {tools} = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  const want = ['create_session', 'end_session', 'install_packages', 'list_files',
    'list_variables', 'run_python', 'upload_file_from_url'];
  check(JSON.stringify(names) === JSON.stringify(want), `tools ${names}`);
  check(tools.every((t) => t.inputSchema && t.inputSchema.type === 'object'),
    'every tool has an object input schema');

  // A CSV by URL, read and charted by run_python.
  const up = await client.callTool({name: 'upload_file_from_url',
    arguments: {url: csvUrl, filename: 'sales.csv'}});
  const fid = (textOf(up).match(/file_[a-z0-9]{26}/) || [])[0];
  check(!up.isError && fid, `upload_file_from_url: ${textOf(up)}`);
  const listed = await client.callTool({name: 'list_files', arguments: {}});
  check(textOf(listed).includes(fid) && textOf(listed).includes('sales.csv'),
    `list_files names it: ${textOf(listed)}`);
  const run = await client.callTool({name: 'run_python', arguments: {
    code: "df = load_file('sales.csv')\nprint(int(df['amount'].sum()))\n" +
      "import matplotlib.pyplot as plt\ndf.plot(x='month', y='amount')\nplt.show()\n",
    files: [fid]}});
  check(!run.isError && textOf(run).startsWith('350\n'), `run_python text: ${textOf(run)}`);
  const img = (run.content || []).find((c) => c.type === 'image');
  check(img && img.mimeType === 'image/png' &&
    Buffer.from(img.data, 'base64').subarray(1, 4).toString() === 'PNG',
    'run_python returns the chart as a PNG image');

  // A session keeps a variable across two calls.
  const s = await client.callTool({name: 'create_session', arguments: {}});
  const sid = textOf(s).trim();
  check(!s.isError && /^sess_/.test(sid), `create_session: ${sid}`);
  const a = await client.callTool({name: 'run_python',
    arguments: {code: 'x = 41', session_id: sid}});
  const b = await client.callTool({name: 'run_python',
    arguments: {code: 'print(x + 1)', session_id: sid}});
  check(!a.isError && textOf(b) === '42\n', `the session kept x: ${textOf(b)}`);
  const vars = await client.callTool({name: 'list_variables', arguments: {session_id: sid}});
  check(textOf(vars).includes('"x"'), `list_variables: ${textOf(vars).slice(0, 200)}`);
  const end = await client.callTool({name: 'end_session', arguments: {session_id: sid}});
  check(!end.isError, `end_session: ${textOf(end)}`);
  const after = await client.callTool({name: 'run_python',
    arguments: {code: 'print(x)', session_id: sid}});
  check(after.isError && /410/.test(textOf(after)), `an ended session: ${textOf(after)}`);

  // Progress: the output as notifications while the code runs.
  const progress = [];
  const t0 = Date.now();
  const slow = await client.callTool({name: 'run_python', arguments: {
    code: 'import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.7)\n'}},
  undefined, {onprogress: (p) => progress.push({...p, t: Date.now() - t0})});
  const done = Date.now() - t0;
  check(!slow.isError && textOf(slow) === '0\n1\n2\n', `streamed run: ${textOf(slow)}`);
  const said = progress.map((p) => p.message).join('');
  check(said === '0\n1\n2\n' && progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress),
    `progress notifications carry the output in order: ${JSON.stringify(progress)}`);
  check(progress.length > 0 && progress[0].t < done - 1000,
    `the first came ${progress.length ? progress[0].t : '-'} ms in, the result at ${done} ms`);

  // Regression (review F4): a streamed run's call_client waited for an
  // answer no agent can give (120 s); now it is refused at once.
  const t1 = Date.now();
  const asks = await client.callTool({name: 'run_python', arguments: {
    code: "try:\n    call_client('x')\nexcept RuntimeError as e:\n    print('refused:', e)\n"}},
  undefined, {onprogress: () => {}});
  check(textOf(asks).startsWith('refused: interpd: an MCP agent cannot answer') &&
    Date.now() - t1 < 20000, `a call from a streamed run: ${textOf(asks)} (${Date.now() - t1} ms)`);

  // Errors are tool results, not protocol errors.
  const err = await client.callTool({name: 'run_python', arguments: {code: '1/0'}});
  check(err.isError === true && textOf(err).includes('ZeroDivisionError'),
    `a raising code is an error result: ${textOf(err)}`);
  const pkg = await client.callTool({name: 'install_packages',
    arguments: {packages: ['surely-not-allowlisted==1.0']}});
  check(pkg.isError === true, `a refused install is an error result: ${textOf(pkg)}`);
  // An unknown tool, or wrong arguments, are protocol errors.
  for (const bad of [{name: 'rm_rf', arguments: {}},
    {name: 'run_python', arguments: {code: 1}},
    {name: 'run_python', arguments: {code: 'x', extra: true}}]) {
    let threw = null;
    try {
      await client.callTool(bad);
    } catch (e) {
      threw = e;
    }
    check(threw && threw.code === -32602, `${JSON.stringify(bad)}: ${threw && threw.message}`);
  }
  await client.ping();
  check(true, 'ping');

  // Another user's session id is not ours.
  const other = await connect('agent-2');
  const res = await fetch(`${base}/mcp`, {method: 'POST', headers: {
    Authorization: `Bearer ${key}`, 'X-User-Id': 'agent-2',
    'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    'Mcp-Session-Id': transport.sessionId}, body: JSON.stringify(
    {jsonrpc: '2.0', id: 9, method: 'tools/list'})});
  check(res.status === 404, `another user's session: ${res.status}`);
  await other.transport.terminateSession();
  await other.client.close();

  // Regression (review F3): another tenant opening sessions by the
  // thousand evicted everyone's; now it evicts only its own.
  const init = {jsonrpc: '2.0', id: 1, method: 'initialize',
    params: {protocolVersion: '2025-06-18', capabilities: {},
      clientInfo: {name: 'flood', version: '1'}}};
  for (let i = 0; i < 1100; i++) {
    const r = await fetch(`${base}/mcp`, {method: 'POST', headers: {
      Authorization: `Bearer ${otherKey}`, 'X-User-Id': 'flood',
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream'},
    body: JSON.stringify(init)});
    await r.text();
  }
  const still = await fetch(`${base}/mcp`, {method: 'POST', headers: {
    Authorization: `Bearer ${key}`, 'X-User-Id': 'agent-1',
    'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    'Mcp-Session-Id': transport.sessionId}, body: JSON.stringify({jsonrpc: '2.0', id: 11, method: 'ping'})});
  check(still.status === 200, `our session after another tenant's 1100 initializes: ${still.status}`);

  // Ending the session: later requests on it are 404.
  const mcpSid = transport.sessionId;
  await transport.terminateSession();
  const gone = await fetch(`${base}/mcp`, {method: 'POST', headers: {
    Authorization: `Bearer ${key}`, 'X-User-Id': 'agent-1',
    'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    'Mcp-Session-Id': mcpSid}, body: JSON.stringify({jsonrpc: '2.0', id: 10, method: 'ping'})});
  check(gone.status === 404, `an ended session: ${gone.status}`);
  await client.close();
}

try {
  await main();
} catch (e) {
  check(false, `${e.name}: ${e.message}`);
}
files.close();
process.exitCode = failed ? 1 : 0;

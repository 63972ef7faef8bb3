// interpd's execution stream read by a real EventSource: the npm package
// `eventsource` (pinned in package.json; a WHATWG EventSource).
//
//   node eventsource_check.mjs URL KEY
//
// URL is POST /v1/executions of a running interpd, KEY a key it accepts.
// tests/clients/test_sse_clients.py (ctest clients/sse) starts the server
// and runs this.  Prints ok/FAIL lines and exits non-zero on any failure.
//
// EventSource only GETs; its `fetch` option (README: "Specify `fetch`
// implementation") lets us turn its request into the POST of an
// execution.  The body has no "stream": the Accept: text/event-stream
// header EventSource sends is what asks for a stream.  Each handler closes
// the source at the result: EventSource reconnects when a stream ends, and
// here a reconnect would be a second POST, a second run.
import {EventSource} from 'eventsource';

const [url, key] = process.argv.slice(2);
const TIMEOUT_MS = 60000;
let failed = 0;

function check(ok, what) {
  if (!ok) failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} eventsource: ${what}`);
  return ok;
}

// One execution of code (extra: more fields of the body), read to its
// result; onCall(call, executionId), when given, answers each call event.
// Resolves with what was seen; rejects on an error event (the source is
// closed first, so it does not retry) or after TIMEOUT_MS.
function run(code, user, extra = {}, onCall = null) {
  return new Promise((resolve, reject) => {
    const seen = {fetches: 0, xid: null, events: [], unnamed: 0};
    const es = new EventSource(url, {
      fetch: async (input, init) => {
        seen.fetches++;
        const res = await fetch(input, {
          ...init,
          method: 'POST',
          headers: {
            ...init.headers,
            Authorization: `Bearer ${key}`,
            'X-User-Id': user,
            'Content-Type': 'application/json',
          },
          body: JSON.stringify({code, ...extra}),
        });
        seen.xid = res.headers.get('x-execution-id');
        return res;
      },
    });
    const timer = setTimeout(() => {
      es.close();
      reject(new Error(`no result within ${TIMEOUT_MS} ms`));
    }, TIMEOUT_MS);
    for (const kind of ['stdout', 'stderr', 'display', 'call', 'result']) {
      es.addEventListener(kind, (ev) => {
        seen.events.push({
          kind,
          id: ev.lastEventId,
          data: ev.data,
          t: performance.now(),
        });
        if (kind === 'call' && onCall) {
          onCall(JSON.parse(ev.data), seen.xid).catch((e) => {
            check(false, `answering a call: ${e.message}`);
          });
        }
        if (kind === 'result') {
          es.close();
          clearTimeout(timer);
          resolve(seen);
        }
      });
    }
    // interpd names every event: an unnamed one ("message") is a bug.
    es.addEventListener('message', () => seen.unnamed++);
    es.addEventListener('error', (ev) => {
      es.close();
      clearTimeout(timer);
      reject(new Error(`error event: code ${ev.code}, ${ev.message}`));
    });
  });
}

function joined(seen, kind) {
  return seen.events
    .filter((e) => e.kind === kind)
    .map((e) => JSON.parse(e.data))
    .join('');
}

// What every stream must give: ids 1, 2, 3... across all kinds, the
// result last, one request, no unnamed event, the result's execution_id
// the X-Execution-Id header's, and the chunks joined the result's text.
function checkCommon(seen, what) {
  const ids = seen.events.map((e) => e.id);
  check(
    ids.every((id, i) => id === String(i + 1)),
    `${what}: lastEventId counts up from 1: ${JSON.stringify(ids)}`,
  );
  check(seen.fetches === 1, `${what}: one request (fetches: ${seen.fetches})`);
  check(seen.unnamed === 0, `${what}: unnamed events: ${seen.unnamed}`);
  const res = JSON.parse(seen.events[seen.events.length - 1].data);
  check(
    res.execution_id === seen.xid,
    `${what}: result execution_id ${res.execution_id}, X-Execution-Id ${seen.xid}`,
  );
  for (const kind of ['stdout', 'stderr']) {
    const got = joined(seen, kind);
    check(
      got === res[kind],
      `${what}: ${kind} events joined ${JSON.stringify(got)}, ` +
        `the result's ${JSON.stringify(res[kind])}`,
    );
  }
  return res;
}

// Output as it comes, stderr too, and a quiet spell of over 5 s in the
// middle, so a `: keep-alive` comment goes through the parser as well.
async function checkStream() {
  const seen = await run(
    'import sys, time\n' +
      "print('first', flush=True)\n" +
      "sys.stderr.write('warn\\n')\n" +
      'time.sleep(6.5)\n' +
      "print('second')\n",
    'u-sse-node',
  );
  const res = checkCommon(seen, 'stream');
  check(
    res.success === true && res.stdout === 'first\nsecond\n',
    `stream: success ${res.success}, stdout ${JSON.stringify(res.stdout)}`,
  );
  check(
    seen.events.some((e) => e.kind === 'stderr'),
    'stream: a stderr event',
  );
  const first = seen.events.find((e) => e.kind === 'stdout');
  const last = seen.events[seen.events.length - 1];
  const gap = first ? (last.t - first.t) / 1000 : 0;
  check(
    gap >= 5,
    `stream: the result came ${gap.toFixed(2)} s after the first stdout ` +
      'event (>= 5: it was dispatched before the sleep ended)',
  );
}

async function checkRaise() {
  const seen = await run(
    "print('before')\nraise ValueError('boom')\n",
    'u-sse-node',
  );
  const res = checkCommon(seen, 'raise');
  const err = joined(seen, 'stderr');
  check(err.includes('ValueError: boom'), `raise: stderr ${JSON.stringify(err)}`);
  check(res.success === false, `raise: success ${res.success}`);
}

// A call from the code, answered by this client with fetch: the code
// gets the answer; a display event comes as the bundle is shown.
async function checkCalls() {
  const answers = [];
  const seen = await run(
    "r = llm_query('hi', n=2)\nprint(r)\ndisplay({'a': 1})\n",
    'u-sse-node',
    {functions: ['llm_query']},
    async (call, xid) => {
      const res = await fetch(`${url}/${xid}/calls/${call.call_id}`, {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${key}`,
          'X-User-Id': 'u-sse-node',
          'Content-Type': 'application/json',
        },
        body: JSON.stringify({
          result: {echo: call.args[0], n: call.kwargs.n, name: call.name},
        }),
      });
      answers.push(res.status);
    },
  );
  const res = checkCommon(seen, 'calls');
  check(
    res.success === true &&
      res.stdout === "{'echo': 'hi', 'n': 2, 'name': 'llm_query'}\n",
    `calls: success ${res.success}, stdout ${JSON.stringify(res.stdout)}`,
  );
  check(
    answers.length === 1 && answers[0] === 204,
    `calls: the answer's status ${JSON.stringify(answers)}`,
  );
  const kinds = seen.events.map((e) => e.kind).join(',');
  check(
    kinds === 'call,stdout,display,result',
    `calls: the events, in order: ${kinds}`,
  );
}

if (!url || !key) {
  console.error('usage: node eventsource_check.mjs URL KEY');
  process.exit(2);
}
for (const step of [checkStream, checkRaise, checkCalls]) {
  try {
    await step();
  } catch (e) {
    check(false, `${step.name}: ${e.message}`);
  }
}
process.exitCode = failed ? 1 : 0;

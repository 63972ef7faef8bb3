// The web console (/console) and a cross-origin page, driven in Debian's
// Chromium by playwright-core (ctest clients/console, started by
// tests/clients/test_console.py, which passes a JSON of its setup as argv[2]:
// base, tokens, key, user, the CORS pages' URLs and a screenshot folder).
// Every wait is for a condition in the page, never a fixed time.  Exits 1
// on the first failed check, naming it.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";

const cfg = JSON.parse(process.argv[2]);
const WAIT = 60000;
let failures = 0;
let step = "start";

function check(ok, what, detail) {
  if (ok) {
    console.log(`ok   ${what}`);
    return;
  }
  failures++;
  console.log(`FAIL ${what}${detail !== undefined ? `: ${JSON.stringify(detail)}` : ""}`);
}

async function setCode(page, code) {
  await page.evaluate((c) => {
    const v = window.interpdConsole.view;
    v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: c } });
  }, code);
}

// Click Run and wait until the run is over (an outcome other than running).
async function runCode(page, code) {
  await setCode(page, code);
  await page.click("#run");
  await page.waitForFunction(() => {
    const s = document.querySelector("#run-status");
    return s.dataset.outcome && s.dataset.outcome !== "running";
  }, null, { timeout: WAIT });
  return page.evaluate(() => ({
    outcome: document.querySelector("#run-status").dataset.outcome,
    status: document.querySelector("#run-status").textContent,
    output: document.querySelector("#output").innerText,
  }));
}

async function connect(page, { token, key, user }) {
  await page.fill("#token", token || "");
  await page.fill("#api-key", key || "");
  await page.fill("#user-id", user || "");
  await page.click("#connect");
}

async function shot(page, name) {
  if (!cfg.shots) return;
  fs.mkdirSync(cfg.shots, { recursive: true });
  await page.screenshot({ path: path.join(cfg.shots, name), fullPage: true });
}

async function consoleChecks(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  const page = await context.newPage();
  // CSP violations in the page itself (not in frames), recorded from before
  // any script of the page runs.
  await page.addInitScript(() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (e) => {
      window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));

  step = "load";
  const resp = await page.goto(`${cfg.base}/console`);
  check(resp.status() === 200, "GET /console is 200", resp.status());
  const csp = resp.headers()["content-security-policy"] || "";
  check(/default-src 'none'/.test(csp) && /script-src 'self'(;|$)/.test(csp) && !/unsafe-inline|unsafe-eval/.test(csp),
    "the page has a strict Content-Security-Policy", csp);
  await page.waitForSelector(".cm-editor .cm-content", { timeout: WAIT });
  // CodeMirror's styles come through the nonce: its editor is a flex box
  // and a Python keyword is coloured unlike plain text.
  const look = await page.evaluate(() => {
    const ed = document.querySelector(".cm-editor");
    const kw = [...document.querySelectorAll(".cm-content span")].find((s) => s.textContent === "import");
    const line = document.querySelector(".cm-line");
    return {
      display: getComputedStyle(ed).display,
      keyword: kw ? getComputedStyle(kw).color : null,
      plain: line ? getComputedStyle(line).color : null,
    };
  });
  check(look.display === "flex", "CodeMirror's styles apply under the CSP", look);
  check(look.keyword && look.keyword !== look.plain, "Python is highlighted (a keyword has its own colour)", look);

  step = "typing";
  await setCode(page, "");
  await page.click(".cm-content");
  await page.keyboard.type("answer = 6 * 7");
  const typed = await page.evaluate(() => window.interpdConsole.view.state.doc.toString());
  check(typed === "answer = 6 * 7", "the editor takes typing", typed);

  step = "connect";
  await connect(page, { token: cfg.token });
  await page.waitForFunction(() => /connected/.test(document.querySelector("#who").textContent));

  step = "upload";
  await page.setInputFiles("#file-input", { name: "sales.csv", mimeType: "text/csv", buffer: Buffer.from(cfg.csv) });
  // And one by drag and drop, as a person would.
  await page.evaluate(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(["dropped bytes\n"], "notes.txt", { type: "text/plain" }));
    document.querySelector("#drop").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await page.waitForFunction(() => {
    const items = [...document.querySelectorAll("#uploads li")];
    return items.length === 2 && items.every((li) => li.classList.contains("done"));
  }, null, { timeout: WAIT });
  const bars = await page.evaluate(() => [...document.querySelectorAll("#uploads progress")].map((p) => p.value));
  check(bars.every((v) => v === 100), "both uploads show full progress", bars);
  await page.waitForFunction(() => {
    const names = [...document.querySelectorAll("#files td.name")].map((td) => td.textContent);
    return names.includes("sales.csv") && names.includes("notes.txt");
  }, null, { timeout: WAIT });
  check(true, "the uploaded (input) and dropped files are listed");

  step = "download";
  const row = page.locator("#files tr.file", { hasText: "sales.csv" });
  const [dl] = await Promise.all([page.waitForEvent("download"), row.locator("button.download").click()]);
  const got = fs.readFileSync(await dl.path(), "utf8");
  check(got === cfg.csv && dl.suggestedFilename() === "sales.csv", "a file downloads with its bytes and name", dl.suggestedFilename());

  step = "delete";
  await page.locator("#files tr.file", { hasText: "notes.txt" }).locator("button.delete").click();
  await page.waitForFunction(() => ![...document.querySelectorAll("#files td.name")].some((td) => td.textContent === "notes.txt"));
  const listed = await fetchJson(page, "/v1/files");
  check(listed.files.length === 1 && listed.files[0].filename === "sales.csv", "a deleted file is gone from the store", listed.files.map((f) => f.filename));

  step = "stream, call, chart, table";
  // The code prints, then waits on a call the test answers by hand: the
  // first line must be on the page while the run is still going.
  await page.fill("#functions", "hold");
  await setCode(page, [
    "import matplotlib.pyplot as plt",
    "df = load_file('sales.csv')",
    "print('rows', len(df), flush=True)",
    "got = hold('ready?', n=1)",
    "print('answer', got['ok'])",
    "df.plot(x='month', y='sales')",
    "plt.title('sales')",
    "display(df.head(2))",
  ].join("\n"));
  await page.click("#run");
  await page.waitForFunction(() => /rows 3/.test(document.querySelector("#output").innerText), null, { timeout: WAIT });
  const during = await page.evaluate(() => document.querySelector("#run-status").dataset.outcome);
  check(during === "running", "the first streamed line shows before the run ends", during);
  await page.waitForSelector(".call", { timeout: WAIT });
  const callText = await page.textContent(".call code");
  check(callText === 'hold("ready?", n=1)', "the call shows its name and arguments", callText);
  await shot(page, "console-call.png");
  await page.fill(".call textarea", '{"ok": 42}');
  await page.click(".call button.call-return");
  await page.waitForFunction(() => document.querySelector("#run-status").dataset.outcome !== "running", null, { timeout: WAIT });
  const res = await page.evaluate(() => ({
    outcome: document.querySelector("#run-status").dataset.outcome,
    output: document.querySelector("#output").innerText,
    answered: document.querySelector(".call").classList.contains("answered"),
  }));
  check(res.outcome === "success" && /answer 42/.test(res.output), "the hand-made answer reaches the code", res);
  check(res.answered, "the call is marked answered");
  const chart = await page.waitForFunction(() => {
    const img = document.querySelector(".generated img.chart");
    return img && img.complete && img.naturalWidth > 100 ? { w: img.naturalWidth, h: img.naturalHeight } : null;
  }, null, { timeout: WAIT });
  check(true, `the chart renders (${JSON.stringify(await chart.jsonValue())})`);
  const table = await page.evaluate(() => {
    const f = document.querySelector(".display iframe.html-display");
    return f ? { sandbox: f.getAttribute("sandbox"), html: /<table/.test(f.srcdoc) } : null;
  });
  check(table && table.sandbox === "" && table.html, "the DataFrame shows as an HTML table in a sandboxed frame", table);
  const frameRows = await page.frameLocator("iframe.html-display").locator("tbody tr").count();
  check(frameRows === 2, "the table's frame renders its rows", frameRows);
  await shot(page, "console-run.png");

  step = "error";
  const err = await runCode(page, "x = 1\n1 / 0\n");
  check(err.outcome === "failure" && /ZeroDivisionError/.test(err.output) && /line 2/.test(err.output),
    "a traceback shows, with the user's line number", err);

  step = "raised answer";
  await setCode(page, "try:\n    hold()\nexcept KeyError as e:\n    print('raised', e)\n");
  await page.click("#run");
  await page.waitForSelector(".call", { timeout: WAIT });
  await page.fill(".call input.call-error-type", "KeyError");
  await page.fill(".call input.call-error-message", "nope");
  await page.click(".call button.call-raise");
  await page.waitForFunction(() => document.querySelector("#run-status").dataset.outcome !== "running", null, { timeout: WAIT });
  const raised = await page.evaluate(() => document.querySelector("#output").innerText);
  check(/raised 'nope'/.test(raised), "an error answer is raised in the code", raised);
  await page.fill("#functions", "");

  step = "cancel";
  await setCode(page, "import time\nprint('started', flush=True)\ntime.sleep(120)\n");
  const t0 = Date.now();
  await page.click("#run");
  await page.waitForFunction(() => /started/.test(document.querySelector("#output").innerText), null, { timeout: WAIT });
  await page.click("#cancel");
  await page.waitForFunction(() => document.querySelector("#run-status").dataset.outcome !== "running", null, { timeout: WAIT });
  const cancelled = await page.evaluate(() => ({
    outcome: document.querySelector("#run-status").dataset.outcome,
    status: document.querySelector("#run-status").textContent,
  }));
  check(cancelled.outcome === "cancelled" && Date.now() - t0 < 60000, "Cancel stops a long run", cancelled);

  step = "session";
  await page.click("#session-new");
  await page.waitForFunction(() => /^session /.test(document.querySelector("#session-id").textContent));
  await runCode(page, "kept = 41\n");
  const second = await runCode(page, "kept += 1\nprint('kept', kept)\n");
  check(/kept 42/.test(second.output), "a variable persists across two runs in a session", second);
  await page.waitForFunction(() => [...document.querySelectorAll("#variables tr.variable")].some(
    (tr) => tr.cells[0].textContent === "kept" && tr.cells[2].textContent === "42"));
  check(true, "the session's variables are listed (kept = 42)");
  await shot(page, "console-session.png");
  await page.click("#session-end");
  const after = await runCode(page, "print('kept' in globals())\n");
  check(/False/.test(after.output), "after End, runs start fresh", after);

  step = "html isolation";
  await page.evaluate(() => {
    window.__pwned = false;
    document.title = "interpd console";
  });
  await runCode(page, [
    "class Evil:",
    "    def _repr_html_(self):",
    "        return ('<b id=\"bold\">bold</b><script>parent.__pwned = true; parent.document.title = \"pwned\";</script>'",
    "                '<img src=\"x\" onerror=\"parent.__pwned = true\">')",
    "    def __repr__(self):",
    "        return '<img src=x onerror=\"window.__pwned = true\">'",
    "display(Evil())",
    "print('<script>window.__pwned = true</script>')",
  ].join("\n"));
  const iso = await page.evaluate(() => ({
    pwned: window.__pwned,
    title: document.title,
    inPage: !!document.querySelector("#output #bold, #output script, #output img[src='x']"),
    frames: document.querySelectorAll("#output iframe.html-display").length,
  }));
  const boldInFrame = await page.frameLocator("iframe.html-display").locator("#bold").count();
  check(!iso.pwned && iso.title === "interpd console" && !iso.inPage && iso.frames === 1 && boldInFrame === 1,
    "an HTML display runs no script in the page; its markup stays in the sandboxed frame", { ...iso, boldInFrame });

  const violations = await page.evaluate(() => window.__violations);
  check(violations.length === 0, "no CSP violation in the page", violations);
  check(pageErrors.length === 0, "no script error in the page", pageErrors);

  step = "operator";
  await connect(page, { key: cfg.key, user: cfg.user });
  await page.waitForFunction(() => [...document.querySelectorAll("#files td.name")].some((td) => td.textContent === "sales.csv"),
    null, { timeout: WAIT });
  check(true, "an operator's API key and user id see the same user's files");

  step = "no executions";
  await connect(page, { token: cfg.filesOnlyToken });
  await page.waitForFunction(() => [...document.querySelectorAll("#files td.name")].some((td) => td.textContent === "sales.csv"),
    null, { timeout: WAIT });
  const refused = await runCode(page, "print('must not run')\n");
  check(refused.outcome === "refused" && /403 forbidden/.test(refused.output) && /executions/.test(refused.output) &&
    !/must not run/.test(refused.output), "a token without executions cannot run code", refused);
  await page.click("#session-new");
  await page.waitForFunction(() => !document.querySelector("#session-error").hidden);
  const sessionError = await page.textContent("#session-error");
  check(/403/.test(sessionError), "nor open a session", sessionError);
  await context.close();
}

// GET url with the full token, from inside the page.
function fetchJson(page, url) {
  return page.evaluate(async ([u, token]) => {
    const r = await fetch(u, { headers: { Authorization: `Bearer ${token}` } });
    return r.json();
  }, [url, cfg.token]);
}

// A page on another origin with only a token: allowed, everything works;
// from an origin not allowed, the browser refuses to read the answers.
async function corsChecks(browser) {
  const context = await browser.newContext();
  const page = await context.newPage();
  step = "cors allowed";
  await page.goto(cfg.corsAllowed);
  const ok = await page.waitForFunction(() => window.__cors, null, { timeout: WAIT });
  const r = await ok.jsonValue();
  check(r.error === undefined, "the cross-origin page ran without an error", r.error);
  check(r.progressEvents > 0 && r.uploadStatus === 201, "a multipart upload with progress events", r);
  check(r.listed === true, "lists the uploaded file");
  check(r.downloaded === r.sent, "downloads its bytes");
  check(r.deleteStatus === 204 && r.afterDelete === 404, "deletes it", r);
  check(/^exe_|^[A-Za-z0-9_-]{10,}$/.test(r.executionId || ""), "reads X-Execution-Id from the streamed answer", r.executionId);
  check(!!r.requestId, "reads X-Request-Id", r.requestId);
  const kinds = r.events.filter((e, i) => e !== r.events[i - 1]); // chunks of one stream: one kind
  check(JSON.stringify(kinds) === JSON.stringify(["stdout", "result"]) && r.stdout === "hi from a page\n",
    "reads the event stream", r);
  step = "cors denied";
  await page.goto(cfg.corsDenied);
  const denied = await (await page.waitForFunction(() => window.__cors, null, { timeout: WAIT })).jsonValue();
  // Node's own fetch (no CORS): the refused preflight sent nothing on.
  const store = await (await fetch(`${cfg.base}/v1/files`, { headers: { Authorization: `Bearer ${cfg.token}` } })).json();
  check(!!denied.error && denied.uploadStatus === undefined && !store.files.some((f) => f.filename === "page.csv"),
    "a page on an origin not allowed gets no answer, and its upload never happened", { denied, files: store.files.map((f) => f.filename) });
  await context.close();
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  await consoleChecks(browser);
  await corsChecks(browser);
} catch (e) {
  failures++;
  console.log(`FAIL at step "${step}": ${e.stack || e}`);
} finally {
  await browser.close();
}
console.log(failures ? `console_check: ${failures} failed` : "console_check: all passed");
process.exit(failures ? 1 : 0);

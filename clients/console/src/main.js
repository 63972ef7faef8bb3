// The interpd web console: one page over the REST API (docs/API.md, "The web
// console").  Served by interpd itself at /console under a strict
// Content-Security-Policy: no inline script, styles only from /console or
// carrying the page's nonce (CodeMirror's), connections only to interpd.
// Nothing the code or the service returns is ever parsed as HTML in this
// page: text goes in as text; an HTML display goes into a sandboxed iframe
// without scripts.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { python } from "@codemirror/lang-python";

const $ = (id) => document.getElementById(id);
const nonceMeta = document.querySelector('meta[name="style-nonce"]');

const st = {
  headers: null, // Authorization (+ X-User-Id) once connected
  cursor: null, // the next page of files
  unused: new Set(), // file ids not to give the code
  session: null,
  execution: null, // the running execution's id
  running: false,
};

// An element, its properties and children; never HTML from a string.
function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e[k] = v;
  }
  for (const kid of kids) if (kid != null) e.append(kid);
  return e;
}

class ApiError extends Error {
  constructor(status, body) {
    const err = body && body.error;
    super(err ? `${status} ${err.code}: ${err.message}` : `HTTP ${status}`);
    this.status = status;
    this.code = err ? err.code : null;
  }
}

function headers(extra = {}) {
  return { ...st.headers, ...extra };
}

async function api(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

function show(node, message) {
  node.textContent = message || "";
  node.hidden = !message;
}

function human(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1048576).toFixed(1)} MiB`;
}

// ---- connect ------------------------------------------------------------

$("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = $("token").value.trim();
  const key = $("api-key").value.trim();
  const user = $("user-id").value.trim();
  if (token) {
    st.headers = { Authorization: `Bearer ${token}` };
    $("who").textContent = "connected with a token";
  } else if (key && user) {
    st.headers = { Authorization: `Bearer ${key}`, "X-User-Id": user };
    $("who").textContent = `connected as ${user}`;
  } else {
    st.headers = null;
    $("who").textContent = "paste a token, or an API key and a user id";
    return;
  }
  $("api-key").value = "";
  $("token").value = "";
  setSession(null);
  refreshFiles(true);
});

// ---- files ----------------------------------------------------------------

async function refreshFiles(reset) {
  if (!st.headers) return;
  const tbody = $("files").tBodies[0];
  let q = "/v1/files?limit=50";
  if (!reset && st.cursor) q += `&cursor=${encodeURIComponent(st.cursor)}`;
  try {
    const page = await api("GET", q);
    if (reset) tbody.replaceChildren();
    for (const f of page.files) tbody.append(fileRow(f));
    st.cursor = page.next_cursor;
    $("files-more").hidden = !st.cursor;
    show($("files-error"), "");
  } catch (e) {
    if (reset) tbody.replaceChildren();
    show($("files-error"), `files: ${e.message}`);
  }
}

function fileRow(f) {
  const use = el("input", { type: "checkbox", checked: !st.unused.has(f.file_id) });
  use.addEventListener("change", () => {
    if (use.checked) st.unused.delete(f.file_id);
    else st.unused.add(f.file_id);
  });
  const row = el("tr", { class: "file" });
  row.dataset.fileId = f.file_id;
  row.append(
    el("td", {}, use),
    el("td", { class: "name", text: f.filename, title: f.file_id }),
    el("td", { text: f.file_type }),
    el("td", { class: "num", text: human(f.size) }),
    el("td", { class: "when", text: f.expires_at ? f.expires_at.slice(0, 16).replace("T", " ") : "never", title: f.expires_at || "" }),
    el("td", { class: "actions" },
      el("button", { type: "button", class: "download", text: "download", onclick: () => download(f) }),
      el("button", { type: "button", class: "delete", text: "delete", onclick: () => remove(f, row) })),
  );
  return row;
}

function usedFileIds() {
  return [...document.querySelectorAll("#files tr.file")]
    .map((r) => r.dataset.fileId)
    .filter((id) => !st.unused.has(id));
}

async function download(f) {
  try {
    const resp = await fetch(`/v1/files/${encodeURIComponent(f.file_id)}/content`, { headers: headers() });
    if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => null));
    const url = URL.createObjectURL(await resp.blob());
    const a = el("a", { href: url, download: f.filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) {
    show($("files-error"), `download: ${e.message}`);
  }
}

async function remove(f, row) {
  try {
    await api("DELETE", `/v1/files/${encodeURIComponent(f.file_id)}`);
    row.remove();
    st.unused.delete(f.file_id);
  } catch (e) {
    show($("files-error"), `delete: ${e.message}`);
  }
}

// Multipart with XMLHttpRequest: fetch has no upload progress.
function upload(file) {
  const bar = el("progress", { max: 100, value: 0 });
  const note = el("span", { class: "note", text: "0%" });
  const item = el("li", { class: "upload" }, el("span", { text: file.name }), bar, note);
  $("uploads").append(item);
  const form = new FormData();
  form.append("file", file, file.name);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "/v1/files");
  for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
  xhr.upload.addEventListener("progress", (ev) => {
    if (!ev.lengthComputable) return;
    bar.value = Math.round((100 * ev.loaded) / ev.total);
    note.textContent = `${bar.value}%`;
  });
  xhr.addEventListener("load", () => {
    let body = null;
    try {
      body = JSON.parse(xhr.responseText);
    } catch {
      body = null;
    }
    if (xhr.status === 201) {
      bar.value = 100;
      note.textContent = "uploaded";
      item.classList.add("done");
      refreshFiles(true);
    } else {
      note.textContent = new ApiError(xhr.status, body).message;
      item.classList.add("failed");
    }
  });
  xhr.addEventListener("error", () => {
    note.textContent = "the connection failed";
    item.classList.add("failed");
  });
  xhr.send(form);
}

function uploadAll(files) {
  if (!st.headers) {
    $("who").textContent = "connect first";
    return;
  }
  for (const f of files) upload(f);
}

const drop = $("drop");
drop.addEventListener("dragover", (ev) => {
  ev.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (ev) => {
  ev.preventDefault();
  drop.classList.remove("over");
  uploadAll(ev.dataTransfer.files);
});
$("file-input").addEventListener("change", (ev) => {
  uploadAll(ev.target.files);
  ev.target.value = "";
});
$("files-more").addEventListener("click", () => refreshFiles(false));

// ---- sessions -------------------------------------------------------------

function setSession(id) {
  st.session = id;
  $("session-id").textContent = id ? `session ${id}` : "none: each run starts fresh";
  $("session-end").disabled = !id;
  $("variables").hidden = !id;
  $("variables").tBodies[0].replaceChildren();
  show($("session-error"), "");
}

$("session-new").addEventListener("click", async () => {
  if (!st.headers) return;
  try {
    const s = await api("POST", "/v1/sessions", {});
    setSession(s.session_id);
  } catch (e) {
    show($("session-error"), `session: ${e.message}`);
  }
});

$("session-end").addEventListener("click", async () => {
  const id = st.session;
  setSession(null);
  try {
    await api("DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
  } catch (e) {
    if (e.status !== 404 && e.status !== 410) show($("session-error"), `session: ${e.message}`);
  }
});

async function refreshVariables() {
  const id = st.session;
  if (!id) return;
  try {
    const v = await api("GET", `/v1/sessions/${encodeURIComponent(id)}/variables`);
    $("variables").tBodies[0].replaceChildren(
      ...v.variables.map((x) =>
        el("tr", { class: "variable" },
          el("td", { class: "name", text: x.name }),
          el("td", { text: x.type }),
          el("td", { class: "repr", text: x.repr }))),
    );
  } catch (e) {
    if (e.code === "session_expired" || e.status === 404) setSession(null);
    show($("session-error"), `variables: ${e.message}`);
  }
}

// ---- runs -----------------------------------------------------------------

const out = $("output");

function clearOutput() {
  out.replaceChildren();
  $("calls").replaceChildren();
  $("run-status").textContent = "";
}

// stdout and stderr in one <pre>, a span per stretch of one stream.
function appendStream(kind, text) {
  let pre = out.lastElementChild;
  if (!pre || !pre.classList.contains("stream")) {
    pre = el("pre", { class: "stream" });
    out.append(pre);
  }
  const last = pre.lastElementChild;
  if (last && last.classList.contains(kind)) last.append(text);
  else pre.append(el("span", { class: kind, text }));
}

function base64Of(text) {
  const bytes = new TextEncoder().encode(text);
  let s = "";
  for (let i = 0; i < bytes.length; i += 32768)
    s += String.fromCharCode(...bytes.subarray(i, i + 32768));
  return btoa(s);
}

// An HTML display: a sandboxed iframe (no scripts, no same origin) whose
// document also inherits this page's CSP.  Its height is guessed from its
// rows; the frame can be resized.
function htmlFrame(html) {
  const rows = (html.match(/<tr/gi) || []).length;
  const frame = el("iframe", { class: "html-display", title: "HTML display" });
  frame.setAttribute("sandbox", "");
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.height = String(Math.min(420, 40 + 26 * Math.max(rows, 2)));
  frame.srcdoc = `<!doctype html><meta charset="utf-8"><link rel="stylesheet" href="/console/frame.css">${html}`;
  return frame;
}

function renderDisplay(bundle) {
  const box = el("div", { class: "display" });
  const img = ["image/png", "image/jpeg", "image/gif"].find((t) => typeof bundle[t] === "string");
  if (img) {
    box.append(el("img", { src: `data:${img};base64,${bundle[img]}`, alt: bundle["text/plain"] || "image" }));
  } else if (typeof bundle["image/svg+xml"] === "string") {
    box.append(el("img", { src: `data:image/svg+xml;base64,${base64Of(bundle["image/svg+xml"])}`, alt: "SVG image" }));
  } else if (typeof bundle["text/html"] === "string") {
    box.append(htmlFrame(bundle["text/html"]));
  } else {
    box.append(el("pre", { text: String(bundle["text/plain"] ?? "") }));
  }
  out.append(box);
}

function renderResult(r, displaysSeen) {
  if (r.error) {
    const err = el("div", { class: "error-result" },
      el("strong", { text: `${r.error.type}: ` }), el("span", { text: r.error.message || "" }));
    if (r.error.traceback) err.append(el("pre", { class: "traceback", text: r.error.traceback }));
    out.append(err);
  }
  if (!displaysSeen) for (const d of r.display || []) renderDisplay(d);
  for (const g of r.generated_files || []) {
    const box = el("div", { class: "generated" });
    if (g.data_base64 && /^image\/(png|jpeg|gif)$/.test(g.mime_type))
      box.append(el("img", { class: "chart", src: `data:${g.mime_type};base64,${g.data_base64}`, alt: g.filename }));
    if (g.file_id) box.append(el("button", { type: "button", class: "download", text: `download ${g.filename}`, onclick: () => download(g) }));
    else box.append(el("span", { class: "note", text: `${g.filename} (not stored)` }));
    out.append(box);
  }
  const parts = [];
  if (r.cancelled) parts.push("cancelled");
  else if (r.timed_out) parts.push("timed out");
  else parts.push(r.success ? "done" : `failed (exit ${r.exit_code})`);
  if (typeof r.execution_time === "number") parts.push(`${r.execution_time.toFixed(3)} s`);
  if (r.stdout_truncated || r.stderr_truncated) parts.push("output truncated");
  $("run-status").textContent = parts.join(" · ");
  $("run-status").dataset.outcome = r.cancelled ? "cancelled" : r.success ? "success" : "failure";
}

// A call from the code, answered by hand: a JSON result, or an error the
// code sees raised.
function renderCall(c) {
  const args = [...(c.args || []).map((a) => JSON.stringify(a)),
    ...Object.entries(c.kwargs || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`)];
  const result = el("textarea", { class: "call-result", rows: 2, value: "null", spellcheck: false });
  const etype = el("input", { class: "call-error-type", type: "text", value: "ValueError" });
  const emsg = el("input", { class: "call-error-message", type: "text", placeholder: "message" });
  const note = el("span", { class: "note" });
  const card = el("div", { class: "call" },
    el("code", { text: `${c.name}(${args.join(", ")})` }), result);
  const buttons = [];
  const answer = async (payload) => {
    buttons.forEach((b) => (b.disabled = true));
    try {
      await api("POST", `/v1/executions/${encodeURIComponent(st.execution)}/calls/${encodeURIComponent(c.call_id)}`, payload);
      note.textContent = "answered";
      card.classList.add("answered");
    } catch (e) {
      note.textContent = e.message;
      if (e.status !== 409 && e.status !== 410) buttons.forEach((b) => (b.disabled = false));
    }
  };
  buttons.push(el("button", { type: "button", class: "call-return", text: "Return", onclick: () => {
    let value;
    try {
      value = JSON.parse(result.value);
    } catch {
      note.textContent = "the result is not JSON";
      return;
    }
    answer({ result: value });
  } }));
  buttons.push(el("button", { type: "button", class: "call-raise", text: "Raise", onclick: () =>
    answer({ error: { type: etype.value || "Exception", message: emsg.value } }) }));
  card.append(el("div", {}, buttons[0], " or raise ", etype, emsg, buttons[1], note));
  $("calls").append(card);
}

// Server-Sent Events from a fetch body (EventSource cannot POST or send
// an Authorization header).
async function* sse(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let event = "message";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (data.length) yield { event, data: data.join("\n") };
        event = "message";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? "" : line.slice(colon + 1);
      if (v.startsWith(" ")) v = v.slice(1);
      if (field === "event") event = v;
      else if (field === "data") data.push(v);
    }
  }
}

function setRunning(on) {
  st.running = on;
  $("run").disabled = on;
  $("cancel").disabled = !on;
  document.body.classList.toggle("running", on);
}

async function run() {
  if (st.running) return;
  if (!st.headers) {
    $("who").textContent = "connect first";
    return;
  }
  const body = { code: view.state.doc.toString(), stream: true };
  const files = usedFileIds();
  if (files.length) body.files = files;
  if (st.session) body.session_id = st.session;
  const fns = $("functions").value.split(/[\s,]+/).filter(Boolean);
  if (fns.length) body.functions = fns;
  const timeout = Number($("timeout").value);
  if (timeout > 0) body.timeout = timeout;
  clearOutput();
  setRunning(true);
  $("run-status").textContent = "running";
  $("run-status").dataset.outcome = "running";
  let displays = false;
  let result = false;
  try {
    const resp = await fetch("/v1/executions", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
    });
    if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => null));
    st.execution = resp.headers.get("X-Execution-Id");
    for await (const ev of sse(resp.body)) {
      const data = JSON.parse(ev.data);
      if (ev.event === "stdout" || ev.event === "stderr") appendStream(ev.event, data);
      else if (ev.event === "display") {
        displays = true;
        renderDisplay(data);
      } else if (ev.event === "install") appendStream("note", `install ${data.package}: ${data.status}\n`);
      else if (ev.event === "call") renderCall(data);
      else if (ev.event === "result") {
        result = true;
        renderResult(data, displays);
      }
    }
    if (!result) throw new Error("the stream ended without a result");
  } catch (e) {
    out.append(el("div", { class: "error-result request-error", text: e.message }));
    $("run-status").textContent = "not run";
    $("run-status").dataset.outcome = "refused";
    if (e.code === "session_expired") setSession(null);
  } finally {
    st.execution = null;
    setRunning(false);
    for (const b of document.querySelectorAll("#calls button")) b.disabled = true;
    refreshFiles(true);
    refreshVariables();
  }
}

$("run").addEventListener("click", run);
$("cancel").addEventListener("click", async () => {
  if (!st.execution) return;
  $("cancel").disabled = true;
  try {
    await api("DELETE", `/v1/executions/${encodeURIComponent(st.execution)}`);
  } catch (e) {
    out.append(el("div", { class: "error-result", text: `cancel: ${e.message}` }));
  }
});

const view = new EditorView({
  doc: "import pandas as pd\n\nprint('hello from interpd')\n",
  parent: $("editor"),
  extensions: [
    keymap.of([{ key: "Mod-Enter", run: () => (run(), true) }]),
    basicSetup,
    python(),
    EditorView.cspNonce.of(nonceMeta ? nonceMeta.content : ""),
  ],
});
// For the browser test and for a person's devtools: the editor's view.
window.interpdConsole = { view };

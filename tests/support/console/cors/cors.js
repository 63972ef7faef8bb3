// What a web app's page does with interpd from its own origin, holding only
// a scoped token: upload (multipart, with progress), list, download,
// delete, run code and read the event stream, and read the exposed
// headers.  The query string names interpd's base URL and the token; the
// outcome goes to window.__cors for console_check.mjs.
const q = new URLSearchParams(location.search);
const base = q.get("base");
const auth = { Authorization: `Bearer ${q.get("token")}` };
const sent = `month,sales\njan,1\nfrom ${location.origin}\n`;

function upload() {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    form.append("file", new Blob([sent], { type: "text/csv" }), "page.csv");
    const xhr = new XMLHttpRequest();
    let progressEvents = 0;
    xhr.open("POST", `${base}/v1/files`);
    xhr.setRequestHeader("Authorization", auth.Authorization);
    xhr.upload.onprogress = () => progressEvents++;
    xhr.onload = () => resolve({ status: xhr.status, body: JSON.parse(xhr.responseText), progressEvents });
    xhr.onerror = () => reject(new Error("upload: the request failed (fetch refused by CORS?)"));
    xhr.send(form);
  });
}

async function streamRun() {
  const resp = await fetch(`${base}/v1/executions`, {
    method: "POST",
    headers: { ...auth, "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({ code: "print('hi from a page')" }),
  });
  const text = await resp.text();
  const events = [];
  let stdout = "";
  for (const block of text.split("\n\n")) {
    const ev = /^event: (.*)$/m.exec(block);
    const data = /^data: (.*)$/m.exec(block);
    if (!ev || !data) continue;
    events.push(ev[1]);
    if (ev[1] === "stdout") stdout += JSON.parse(data[1]);
  }
  return {
    executionId: resp.headers.get("X-Execution-Id"),
    requestId: resp.headers.get("X-Request-Id"),
    events,
    stdout,
  };
}

(async () => {
  const r = { sent };
  try {
    const up = await upload();
    r.uploadStatus = up.status;
    r.progressEvents = up.progressEvents;
    const id = up.body.file_id;
    const list = await (await fetch(`${base}/v1/files`, { headers: auth })).json();
    r.listed = list.files.some((f) => f.file_id === id);
    r.downloaded = await (await fetch(`${base}/v1/files/${id}/content`, { headers: auth })).text();
    r.deleteStatus = (await fetch(`${base}/v1/files/${id}`, { method: "DELETE", headers: auth })).status;
    r.afterDelete = (await fetch(`${base}/v1/files/${id}`, { headers: auth })).status;
    Object.assign(r, await streamRun());
  } catch (e) {
    r.error = `${e.name}: ${e.message}`;
  }
  window.__cors = r;
})();

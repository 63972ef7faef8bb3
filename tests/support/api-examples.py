#!/usr/bin/python3
"""Run every example of docs/API.md against the real server (ctest:
integration/api_examples).

The scheme, which docs/API.md states for its readers under "Examples":

- A fenced block whose info string is `sh` is an example.  It runs with
  `bash -e -o pipefail`, in a scratch directory holding `sales.csv` (a,b /
  1,2) and `report.pdf`, against a server this script starts (INTERPD_BIN serve on
  127.0.0.1, SQLite and local blobs in a temporary data dir, with
  --fetch-allow 127.0.0.1/32 so URL ingest and callbacks can reach this
  script's own HTTP server).  Each block starts in a fresh directory.  It sees these variables:
    BASE        the server's base URL
    KEY         a key of the tenant "docs" (not admin)
    ADMIN_KEY   the admin key the server wrote to DATA_DIR/admin.key
    DATA_DIR    the server's --data-dir (for the `interpd` commands)
    FILE_ID     the file_id of a sales.csv uploaded for user u42 just
                before the block (only when the block mentions $FILE_ID)
    EXECUTION_ID  the id of an asynchronous execution of user u42 submitted
                just before the block (only when it mentions $EXECUTION_ID)
    FILE_URL    an http URL answering sales.csv
    CALLBACK_URL  an http URL that records the callbacks it receives
  and `interpd` on PATH.  `curl` is wrapped to record the response headers
  of its last call; the block fails when it exits non-zero or when that last
  response's status is not the expected one.  `# ` lines after a block's
  last command show its output: the real output must be exactly that.
- A `json` block right after an `sh` block (blank lines between are fine)
  is that example's response.  The block's output must be one JSON
  document of the same shape: the same keys in every object (both ways,
  recursively; the first element of an array stands for every element) and
  the same kind of value (string, number, boolean, object, array; a
  documented null accepts anything, and any value may really be null).
  Values are not compared: ids, times and sizes change.  Its info string may
  say the expected status, e.g. `json status=404`; without it (and without
  a response block) the expected status is any 2xx.
- Every reply the interpd server gives in an sh block (each curl call
  writes a --trace, so replies that are piped, saved or discarded count
  too) must be what docs/openapi.json says: its status one of the
  operation's responses, its Content-Type one of that response's media
  types, a JSON body valid against the response schema (the keywords the
  document uses; a keyword the validator does not know fails the run), and
  no property in the reply that the schema does not name (UNDOCUMENTED_OK
  lists the exceptions, with reasons), so the document cannot fall behind
  the server.  A streamed reply (text/event-stream) must be well-formed
  Server-Sent Events: ids 1, 2, ..., one JSON data line per event, only
  the kinds STREAM_KINDS names (with their data's kind), and last a
  `result` whose data is valid against the same response's
  application/json schema (a stream's result is the synchronous answer).
- A `message` a response block shows (at any depth) must be the real
  reply's, word for word (`...` at its end stands for any rest): the
  shape check above compares no values, and a message quoted from an old
  version of the server is a wrong promise.
- Every `example` and `examples` in docs/openapi.json must validate
  against the schema it illustrates, as a reply must (also alone, without
  a server: `api-examples.py --document-only`, ctest unit/openapi_examples).
- Every callback the examples cause (CALLBACK_URL records them) must be
  what the `callbacks` of POST /v1/executions in docs/openapi.json say:
  each required header parameter present and valid against its schema, no
  X-Interpd-* header it does not name, its Content-Type, and a body valid
  against the requestBody's schema.
- After the examples, every entry of the server's data dir must be named
  in the data-dir row of docs/DEPLOYMENT.md's option table.
- Any other `json` block must parse as JSON.
- A `python` block is run with /usr/bin/python3.  A block that defines
  verify_interpd_signature(secret, header, body) must accept the callback
  the examples caused (secret from `interpd keys list`) and refuse it with
  one byte of the body changed.
- An `ini` block is a config file: `interpd keys list --config FILE
  --data-dir DIR` must accept it (every name and value is checked).
- A block right after `<!-- not-run: REASON -->` is not run; the reason is
  printed and must not be empty.  Fenced blocks of other languages are not
  examples (they show formats, not commands).
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "API.md")
OPENAPI = os.path.join(ROOT, "docs", "openapi.json")
SALES = b"a,b\n1,2\n"
PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
       b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n"
       b"%%EOF\n")
BLOCK_TIMEOUT = 120

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


# ---- the document -----------------------------------------------------------

class Block:
    def __init__(self, lang, info, text, line, not_run):
        self.lang, self.info, self.text = lang, info, text
        self.line, self.not_run = line, not_run
        self.response = None  # the json block that follows an sh block

    def where(self):
        return "docs/API.md:%d" % self.line


def parse_blocks(text):
    """The fenced blocks of text, with their not-run markers, and each sh
    block's response block."""
    lines = text.split("\n")
    blocks, i, marker = [], 0, None
    last_nonblank = None  # the previous non-blank thing: a Block or a line
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)```(.*)$", line)
        if not m:
            mm = re.match(r"^<!--\s*not-run:(.*?)-->\s*$", line.strip())
            if mm:
                marker = mm.group(1).strip() or ""
                last_nonblank = "marker"
            elif line.strip():
                marker = None
                last_nonblank = line
            i += 1
            continue
        info = m.group(2).strip()
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(m.group(1)):])
            i += 1
        i += 1
        lang = info.split()[0] if info else ""
        b = Block(lang, info, "\n".join(body) + "\n", start, marker)
        if (lang == "json" and isinstance(last_nonblank, Block) and
                last_nonblank.lang == "sh" and
                last_nonblank.response is None):
            last_nonblank.response = b
        else:
            blocks.append(b)
        marker = None
        last_nonblank = b
    return blocks


# ---- shapes -----------------------------------------------------------------

def kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def same_shape(doc, real, path, out):
    if doc is None or real is None:
        return
    if kind(doc) != kind(real):
        out.append("%s: documented %s, got %s" % (path or "$", kind(doc),
                                                  kind(real)))
        return
    if isinstance(doc, dict):
        for k in sorted(set(doc) - set(real)):
            out.append("%s.%s: documented, not in the response" % (path, k))
        for k in sorted(set(real) - set(doc)):
            out.append("%s.%s: in the response, not documented" % (path, k))
        for k in sorted(set(doc) & set(real)):
            same_shape(doc[k], real[k], "%s.%s" % (path, k), out)
    elif isinstance(doc, list) and doc and real:
        for n, r in enumerate(real):
            same_shape(doc[0], r, "%s[%d]" % (path, n), out)


def same_messages(doc, real, path, out):
    """A `message` the response block shows is the server's words: the
    real one must be the same text (`...` in the block stands for any
    rest)."""
    if isinstance(doc, dict) and isinstance(real, dict):
        for k in sorted(set(doc) & set(real)):
            d, r = doc[k], real[k]
            if (k == "message" and isinstance(d, str) and
                    isinstance(r, str)):
                head = d[:-3] if d.endswith("...") else None
                if (r != d if head is None else not r.startswith(head)):
                    out.append("%s.message: documented %s, the server says "
                               "%s" % (path, json.dumps(d), json.dumps(r)))
            else:
                same_messages(d, r, "%s.%s" % (path, k), out)
    elif isinstance(doc, list) and isinstance(real, list):
        for n, (d, r) in enumerate(zip(doc, real)):
            same_messages(d, r, "%s[%d]" % (path, n), out)


# ---- docs/openapi.json: every real reply against its response schema -------

# Keywords that only annotate a schema: they assert nothing about a value.
# `format` asserts only date-time (the API's timestamps: RFC 3339, UTC,
# whole seconds); its other values annotate.
ANNOTATIONS = {"description", "example", "examples", "default", "title",
               "contentMediaType", "contentEncoding", "format"}
# Keywords the validator below checks.  A schema with any other keyword
# fails the test (teach the validator first), so the document cannot use
# one that would silently check nothing.
ASSERTIONS = {"$ref", "type", "properties", "required", "items",
              "additionalProperties", "enum", "const", "oneOf", "anyOf",
              "allOf", "not", "minimum", "maximum", "exclusiveMinimum",
              "exclusiveMaximum", "minLength", "maxLength", "pattern",
              "minItems", "maxItems"}
TYPES = {"null", "boolean", "integer", "number", "string", "array",
         "object"}
DATE_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                       r"[0-9]{2}Z$")

# Properties a reply may carry although its schema does not name them,
# each with the reason.  Keys are (schema pointer, property name).  Every
# other property missing from the schema is a failure, so the document
# cannot silently fall behind the server; keep this empty unless a field
# legitimately varies (a map keyed by data is better described with
# additionalProperties in the document itself).
UNDOCUMENTED_OK = {}


class OpenAPI:
    """docs/openapi.json: the operation and response schema of a reply,
    and a validator for the keywords the document uses."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = json.load(f)
        self.ops = []  # (regex of the path, path template, path item)
        for tmpl, item in self.doc["paths"].items():
            rx = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(tmpl))
            self.ops.append((re.compile("^" + rx + "$"), tmpl, item))
        self.unknown = []
        self._walk_keywords(self.doc.get("components", {}).get("schemas", {}),
                            "#/components/schemas", True)
        self._walk_keywords(self.doc["paths"], "#/paths", False)
        self._walk_keywords(self.doc.get("components", {}).get("responses",
                                                               {}),
                            "#/components/responses", False)

    def _walk_keywords(self, node, where, is_map_of_schemas):
        """Record keywords the validator does not know, anywhere a schema
        appears."""
        if is_map_of_schemas:
            for k, v in node.items():
                self._check_schema_keywords(v, "%s/%s" % (where, k))
            return
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "schema":
                    self._check_schema_keywords(v, where + "/schema")
                else:
                    self._walk_keywords(v, "%s/%s" % (where, k), False)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                self._walk_keywords(v, "%s/%d" % (where, i), False)

    def _check_schema_keywords(self, s, where):
        if isinstance(s, bool):
            return
        for k, v in s.items():
            if k not in ASSERTIONS and k not in ANNOTATIONS:
                self.unknown.append("%s: %s" % (where, k))
            if k == "type":
                for t in v if isinstance(v, list) else [v]:
                    if t not in TYPES:
                        self.unknown.append("%s: type %s" % (where, t))
            if k == "properties":
                for name, sub in v.items():
                    self._check_schema_keywords(sub, "%s/properties/%s"
                                                % (where, name))
            elif k in ("items", "not") or (k == "additionalProperties" and
                                           isinstance(v, dict)):
                self._check_schema_keywords(v, "%s/%s" % (where, k))
            elif k in ("oneOf", "anyOf", "allOf"):
                for i, sub in enumerate(v):
                    self._check_schema_keywords(sub, "%s/%s/%d"
                                                % (where, k, i))

    def resolve(self, ref):
        node = self.doc
        for part in ref.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def response(self, method, path, status):
        """(operation name, response object or None, its location in the
        document, or why there is none)."""
        path = path.split("?", 1)[0]
        for rx, tmpl, item in self.ops:
            if not rx.match(path):
                continue
            verb = "get" if method == "head" else method
            op = item.get(verb)
            name = "%s %s" % (method.upper(), tmpl)
            if op is None and status == 405:
                # A path's answer to a method it lacks belongs to no
                # operation; the document describes it once.
                loc = "#/components/responses/MethodNotAllowed"
                return name, self.resolve(loc), loc
            if op is None:
                return name, None, "the document has no such operation"
            resp = op.get("responses", {}).get(str(status))
            if resp is None:
                return name, None, ("status %d is not one of its documented "
                                    "responses (%s)" % (status, ", ".join(
                                        op.get("responses", {}))))
            loc = "#/paths/%s/%s/responses/%d" % (
                tmpl.replace("~", "~0").replace("/", "~1"), verb, status)
            while "$ref" in resp:
                loc = resp["$ref"]
                resp = self.resolve(loc)
            return name, resp, loc
        name = "%s %s" % (method.upper(), path)
        if status == 404:  # info.description: an unknown path is 404
            loc = "#/components/responses/NotFound"
            return name, self.resolve(loc), loc
        return name, None, "no such path"

    # -- the document's own examples ---------------------------------------

    def example_problems(self):
        """Every `example` and `examples` of the document against the
        schema it illustrates: a schema's own (`examples` a list), and a
        media type's, parameter's or header's (`examples` a map of Example
        Objects).  An example must pass exactly as a real reply must."""
        out = []
        comps = self.doc.get("components", {})
        for name, s in comps.get("schemas", {}).items():
            self._schema_examples(s, "#/components/schemas/" + name, out)
        for key, node in self.doc.items():
            if key != "components":
                self._doc_examples(node, "#/" + key, out)
        for key, node in comps.items():
            if key != "schemas":
                self._doc_examples(node, "#/components/" + key, out)
        return out

    def _check_example(self, schema, loc, value, where, out):
        try:
            errs = self.validate(schema, loc, value)
        except (KeyError, ValueError) as e:
            errs = ["the schema cannot be applied: %r" % (e,)]
        out += ["%s: %s" % (where, e) for e in errs]

    def _schema_examples(self, s, loc, out):
        if not isinstance(s, dict):
            return
        if "example" in s:
            self._check_example(s, loc, s["example"], loc + "/example", out)
        if isinstance(s.get("examples"), list):
            for i, ex in enumerate(s["examples"]):
                self._check_example(s, loc, ex, "%s/examples/%d" % (loc, i),
                                    out)
        for name, sub in s.get("properties", {}).items():
            self._schema_examples(sub, "%s/properties/%s" % (loc, name), out)
        for kw in ("items", "not", "additionalProperties"):
            if isinstance(s.get(kw), dict):
                self._schema_examples(s[kw], "%s/%s" % (loc, kw), out)
        for kw in ("oneOf", "anyOf", "allOf"):
            for i, sub in enumerate(s.get(kw, [])):
                self._schema_examples(sub, "%s/%s/%d" % (loc, kw, i), out)

    def _doc_examples(self, node, loc, out):
        if isinstance(node, list):
            for i, v in enumerate(node):
                self._doc_examples(v, "%s/%d" % (loc, i), out)
            return
        if not isinstance(node, dict):
            return
        schema = node.get("schema")
        if schema is not None:
            sloc = loc + "/schema"
            self._schema_examples(schema, sloc, out)
            if "example" in node:
                self._check_example(schema, sloc, node["example"],
                                    loc + "/example", out)
            for name, ex in (node.get("examples") or {}).items():
                if "$ref" in ex:
                    ex = self.resolve(ex["$ref"])
                if "value" in ex:
                    self._check_example(schema, sloc, ex["value"],
                                        "%s/examples/%s" % (loc, name), out)
        for k, v in node.items():
            if k not in ("schema", "example", "examples"):
                self._doc_examples(v, "%s/%s" % (loc, k.replace("~", "~0")
                                                 .replace("/", "~1")), out)

    # -- the validator ------------------------------------------------------

    def validate(self, schema, loc, value):
        """The problems of value against schema (at loc in the document),
        as strings."""
        errs = []
        self._instance(schema, loc, value, "$", errs)
        return errs

    def _instance(self, schema, loc, v, path, errs):
        """v at path against schema (at loc), then the properties of v no
        subschema evaluated: undocumented."""
        evaluated = self._eval(schema, loc, v, path, errs)
        if isinstance(schema, dict) and "$ref" in schema:
            loc = schema["$ref"]  # name the schema that lacks it
        if isinstance(v, dict):
            for k in sorted(set(v) - evaluated):
                if (loc, k) not in UNDOCUMENTED_OK:
                    errs.append("%s.%s: in the reply, not in the schema (%s)"
                                % (path, k, loc))

    def _eval(self, s, loc, v, path, errs):
        """Apply schema s to v; the names of v's properties s evaluated."""
        ev = set()
        if s is True or s == {}:
            return set(v) if isinstance(v, dict) else ev
        if s is False:
            errs.append("%s: no value is allowed here (%s)" % (path, loc))
            return ev
        if "$ref" in s:
            ev |= self._eval(self.resolve(s["$ref"]), s["$ref"], v, path,
                             errs)
        self._eval_simple(s, loc, v, path, errs)
        if isinstance(v, dict):
            ev |= self._eval_object(s, loc, v, path, errs)
        if isinstance(v, list) and "items" in s:
            for i, item in enumerate(v):
                self._instance(s["items"], loc + "/items", item,
                               "%s[%d]" % (path, i), errs)
        for i, sub in enumerate(s.get("allOf", [])):
            ev |= self._eval(sub, "%s/allOf/%d" % (loc, i), v, path, errs)
        for kw in ("oneOf", "anyOf"):
            if kw in s:
                ev |= self._eval_choice(kw, s[kw], loc, v, path, errs)
        if "not" in s:
            sub_errs = []
            self._eval(s["not"], loc + "/not", v, path, sub_errs)
            if not sub_errs:
                errs.append("%s: matches what %s/not excludes" % (path, loc))
        return ev

    def _eval_choice(self, kw, subs, loc, v, path, errs):
        ok, tried, ev_all = [], [], set()
        for i, sub in enumerate(subs):
            sub_errs = []
            ev = self._eval(sub, "%s/%s/%d" % (loc, kw, i), v, path, sub_errs)
            ev_all |= ev
            if sub_errs:
                tried.append((i, sub_errs))
            else:
                ok.append((i, ev))
        if ok and (kw == "anyOf" or len(ok) == 1):
            return set().union(*(ev for _, ev in ok))
        if ok:
            errs.append("%s: matches %s branches %s of %s/oneOf, not exactly "
                        "one" % (path, len(ok), [i for i, _ in ok], loc))
        else:
            why = "; ".join("branch %d: %s" % (i, "; ".join(e[:3]))
                            for i, e in tried)
            errs.append("%s: matches no branch of %s/%s (%s)"
                        % (path, loc, kw, why))
        return ev_all

    def _eval_simple(self, s, loc, v, path, errs):
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(type_is(t, v) for t in types):
                errs.append("%s: a %s, the schema says %s (%s)"
                            % (path, kind(v), "|".join(types), loc))
                return
        if "const" in s and not same_value(s["const"], v):
            errs.append("%s: %s, the schema says const %s (%s)"
                        % (path, json.dumps(v), json.dumps(s["const"]), loc))
        if "enum" in s and not any(same_value(e, v) for e in s["enum"]):
            errs.append("%s: %s is not one of %s (%s)"
                        % (path, json.dumps(v), json.dumps(s["enum"]), loc))
        if isinstance(v, str):
            self._eval_string(s, loc, v, path, errs)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            self._eval_number(s, loc, v, path, errs)
        if isinstance(v, list):
            if len(v) < s.get("minItems", 0):
                errs.append("%s: %d items, minItems %d (%s)"
                            % (path, len(v), s["minItems"], loc))
            if "maxItems" in s and len(v) > s["maxItems"]:
                errs.append("%s: %d items, maxItems %d (%s)"
                            % (path, len(v), s["maxItems"], loc))

    @staticmethod
    def _eval_string(s, loc, v, path, errs):
        if len(v) < s.get("minLength", 0):
            errs.append("%s: shorter than minLength %d (%s)"
                        % (path, s["minLength"], loc))
        if "maxLength" in s and len(v) > s["maxLength"]:
            errs.append("%s: longer than maxLength %d (%s)"
                        % (path, s["maxLength"], loc))
        if "pattern" in s and not re.search(s["pattern"], v):
            errs.append("%s: %s does not match %s (%s)"
                        % (path, json.dumps(v), s["pattern"], loc))
        if s.get("format") == "date-time" and not DATE_TIME.match(v):
            errs.append("%s: %s is not an RFC 3339 UTC time in whole "
                        "seconds (%s)" % (path, json.dumps(v), loc))

    @staticmethod
    def _eval_number(s, loc, v, path, errs):
        for kw, bad in (("minimum", lambda b: v < b),
                        ("maximum", lambda b: v > b),
                        ("exclusiveMinimum", lambda b: v <= b),
                        ("exclusiveMaximum", lambda b: v >= b)):
            if kw in s and bad(s[kw]):
                errs.append("%s: %s is outside %s %s (%s)"
                            % (path, v, kw, s[kw], loc))

    def _eval_object(self, s, loc, v, path, errs):
        ev = set()
        for k in s.get("required", []):
            if k not in v:
                errs.append("%s.%s: required by the schema, not in the reply "
                            "(%s)" % (path, k, loc))
        props = s.get("properties", {})
        for k, sub in props.items():
            if k in v:
                ev.add(k)
                self._instance(sub, "%s/properties/%s" % (loc, k), v[k],
                               "%s.%s" % (path, k), errs)
        extra = s.get("additionalProperties")
        if extra is None:
            return ev
        for k in sorted(set(v) - set(props)):
            if extra is False:
                errs.append("%s.%s: not allowed (%s has additionalProperties "
                            "false)" % (path, k, loc))
            elif isinstance(extra, dict):
                self._instance(extra, loc + "/additionalProperties", v[k],
                               "%s.%s" % (path, k), errs)
            ev.add(k)
        return ev


def type_is(t, v):
    checks = {
        "null": lambda: v is None,
        "boolean": lambda: isinstance(v, bool),
        # The server writes whole numbers and reals apart (jansson), and
        # clients in typed languages care: 1.0 is no integer here.
        "integer": lambda: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda: (isinstance(v, (int, float)) and
                           not isinstance(v, bool)),
        "string": lambda: isinstance(v, str),
        "array": lambda: isinstance(v, list),
        "object": lambda: isinstance(v, dict),
    }
    if t not in checks:
        raise ValueError("unknown type %r in docs/openapi.json" % t)
    return checks[t]()


def same_value(a, b):
    """JSON equality: true is not 1."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# ---- this script's HTTP server: FILE_URL and CALLBACK_URL ---------------------

class Receiver(http.server.BaseHTTPRequestHandler):
    callbacks = []
    lock = threading.Lock()

    def do_GET(self):
        if self.path != "/attachments/123":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(len(SALES)))
        self.end_headers()
        self.wfile.write(SALES)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        with Receiver.lock:
            Receiver.callbacks.append((dict(self.headers.items()), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


# ---- the interpd server -------------------------------------------------------

def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("INTERPD_")}


class Server:
    def __init__(self, binary, data_dir, log_path, extra):
        r, w = os.pipe()
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir",
             data_dir, "--ready-fd", str(w)] + extra,
            stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(w,),
            env=clean_env())
        os.close(w)
        port = b""
        deadline = time.time() + 30
        while time.time() < deadline:
            chunk = os.read(r, 64)
            if not chunk:
                break
            port += chunk
            if b"\n" in port:
                break
        os.close(r)
        if not port.strip().isdigit():
            self.stop()
            raise RuntimeError("interpd did not report its port (see %s)"
                               % log_path)
        self.base = "http://127.0.0.1:%d" % int(port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def call(method, url, key, body=None, ctype=None, user="u42"):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", "Bearer " + key)
    req.add_header("X-User-Id", user)
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


# ---- running the blocks -------------------------------------------------------

def fixtures(b, env, base, key):
    """env with a fresh $FILE_ID / $EXECUTION_ID when the block uses them."""
    benv = dict(env)
    if "$FILE_ID" in b.text or "${FILE_ID}" in b.text:
        benv["FILE_ID"] = call(
            "POST", base + "/v1/files?filename=sales.csv", key, SALES,
            "application/octet-stream")["file_id"]
    if "$EXECUTION_ID" in b.text or "${EXECUTION_ID}" in b.text:
        benv["EXECUTION_ID"] = call(
            "POST", base + "/v1/executions", key,
            json.dumps({"code": "print(6*7)", "async": True}).encode(),
            "application/json")["execution_id"]
    return benv


# Each curl call also writes a --trace of its own (named by the time, so
# they sort in call order), from which every reply is read back whole:
# whatever the example does with the body (-o, -OJ, a pipe), its JSON is
# checked against docs/openapi.json.
PRELUDE = r'''
curl() {
  command curl -D "$IPD_EXAMPLE_HEADERS" \
    --trace "$IPD_EXAMPLE_TRACES/$(date +%s%N).$BASHPID.$RANDOM" "$@"
}
'''


def trace_sections(path):
    """The sections of a curl --trace file: [(kind, bytes)], kind as curl
    names it ("Send header", "Recv data", ...)."""
    sections = []
    with open(path, encoding="latin-1") as f:
        for line in f:
            if line[:3] in ("=> ", "<= ", "== "):
                sections.append((line[3:].split(",")[0].strip(),
                                 bytearray()))
                continue
            m = re.match(r"^[0-9a-f]+: ", line)
            if m and sections:
                hexpart = line[m.end():m.end() + 48]
                sections[-1][1].extend(bytes.fromhex(hexpart.replace(" ",
                                                                     "")))
    return sections


def dechunk(body):
    out, at = bytearray(), 0
    while at < len(body):
        end = body.index(b"\r\n", at)
        n = int(body[at:end].split(b";")[0], 16)
        if n == 0:
            break
        out += body[end + 2:end + 2 + n]
        at = end + 2 + n + 2
    return bytes(out)


class Exchange:
    """One HTTP request and its final reply, read from a curl trace."""

    def __init__(self, request_head):
        line = bytes(request_head).split(b"\r\n", 1)[0].decode("latin-1")
        self.method, self.target = line.split(" ")[:2]
        self.host = ""
        for h in bytes(request_head).split(b"\r\n")[1:]:
            if h.lower().startswith(b"host:"):
                self.host = h[5:].strip().decode("latin-1")
        self.head = bytearray()
        self.body = bytearray()
        self.status, self.headers = None, {}

    def finish(self):
        """Parse the reply head: its last status line (after any 1xx) and
        the headers that follow it."""
        lines = bytes(self.head).decode("latin-1").split("\r\n")
        starts = [i for i, ln in enumerate(lines) if ln.startswith("HTTP/")]
        if not starts:
            return
        self.status = int(lines[starts[-1]].split(" ")[1])
        for ln in lines[starts[-1] + 1:]:
            if ":" in ln:
                k, val = ln.split(":", 1)
                self.headers[k.strip().lower()] = val.strip()
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.body = dechunk(bytes(self.body))


def read_exchanges(trace_dir):
    """The exchanges of every curl call of a block, in call order."""
    out = []
    for name in sorted(os.listdir(trace_dir),
                       key=lambda n: [int(x) for x in n.split(".")]):
        cur = None
        for kind_, data in trace_sections(os.path.join(trace_dir, name)):
            if kind_ == "Send header":
                cur = Exchange(data)
                out.append(cur)
            elif cur is not None and kind_ == "Recv header":
                cur.head += data
            elif cur is not None and kind_ == "Recv data":
                cur.body += data
    for x in out:
        x.finish()
    return out


def media_types_match(documented, real):
    real = real.split(";")[0].strip().lower()
    for d in documented:
        d = d.lower()
        if d in ("*/*", real) or (d.endswith("/*") and
                                   real.startswith(d[:-1])):
            return True
    return False


def check_exchange(api, x):
    """The problems of one reply against docs/openapi.json."""
    name, resp, loc = api.response(x.method.lower(), x.target, x.status)
    if resp is None:
        return name, ["%s answered %s: %s" % (name, x.status, loc)]
    content = resp.get("content")
    if not content:
        return name, ([] if not x.body else
                      ["%s %d: a body of %d bytes where the document has "
                       "none" % (name, x.status, len(x.body))])
    ctype = x.headers.get("content-type", "")
    if not media_types_match(content, ctype):
        return name, ["%s %d: Content-Type %r, the document has %s"
                      % (name, x.status, ctype, ", ".join(content))]
    if x.method == "HEAD":
        return name, []
    if ctype.split(";")[0].strip().lower() == "text/event-stream":
        return name, check_event_stream(api, name, x, content, loc)
    if "application/json" not in content:
        return name, []
    schema = content["application/json"].get("schema")
    try:
        value = json.loads(bytes(x.body))
    except ValueError as e:
        return name, ["%s %d: the reply is not JSON: %s" % (name, x.status, e)]
    try:
        return name, ["%s %d: %s" % (name, x.status, e)
                      for e in api.validate(
                          schema, loc + "/content/application~1json/schema",
                          value)]
    except (KeyError, ValueError) as e:
        return name, ["%s %d: the schema cannot be applied: %r"
                      % (name, x.status, e)]


# The event kinds a stream may carry before its last, `result`, each with
# the JSON kind of its data.  A kind the server adds fails the check until
# docs/openapi.json (the text/event-stream of POST /v1/executions) and this
# list describe it.
STREAM_KINDS = {"stdout": "string", "stderr": "string", "install": "object",
                "file": "object", "display": "object", "call": "object"}


def parse_event_stream(text):
    """The events of a Server-Sent Events body: [(id, kind, [data lines])],
    comments (`: ...`) left out, and the problems of its framing."""
    events, problems = [], []
    blocks = text.split("\n\n")
    if blocks and blocks[-1] == "":
        blocks.pop()
    else:
        problems.append("the stream does not end with a blank line")
    for blk in blocks:
        fields = [ln for ln in blk.split("\n") if not ln.startswith(":")]
        if not fields:
            continue
        ev = {"id": None, "event": None, "data": []}
        for ln in fields:
            k, sep, v = ln.partition(": ")
            if not sep or k not in ev:
                problems.append("not an SSE field line: %r" % ln[:80])
            elif k == "data":
                ev["data"].append(v)
            elif ev[k] is not None:
                problems.append("two %s lines in one event" % k)
            else:
                ev[k] = v
        events.append((ev["id"], ev["event"], ev["data"]))
    return events, problems


def check_event_stream(api, name, x, content, loc):
    """A text/event-stream reply (its response at loc): ids 1, 2, ... on
    every event, one JSON data line each, the kinds of STREAM_KINDS with
    their data's kind, and last a `result` whose data is what the
    response's application/json schema (the synchronous answer) allows."""
    where = "%s %d (text/event-stream)" % (name, x.status)
    events, problems = parse_event_stream(bytes(x.body).decode("utf-8"))
    errs = ["%s: %s" % (where, p) for p in problems]
    if not events or events[-1][1] != "result":
        return errs + ["%s: the last event is not `result`" % where]
    schema = content.get("application/json", {}).get("schema")
    for n, (eid, ev_kind, data) in enumerate(events, 1):
        at = "%s: event %d (%s)" % (where, n, ev_kind)
        if eid != str(n):
            errs.append("%s: id %r, want %d" % (at, eid, n))
        if len(data) != 1:
            errs.append("%s: %d data lines, want 1" % (at, len(data)))
            continue
        try:
            value = json.loads(data[0])
        except ValueError as e:
            errs.append("%s: the data is not JSON: %s" % (at, e))
            continue
        if ev_kind == "result" and n != len(events):
            errs.append("%s: an event after the result" % at)
        elif ev_kind == "result" and schema is None:
            errs.append("%s: the response has no application/json schema "
                        "to check the result against" % at)
        elif ev_kind == "result":
            errs += ["%s: %s" % (at, e) for e in api.validate(
                schema, loc + "/content/application~1json/schema", value)]
        elif ev_kind not in STREAM_KINDS:
            errs.append("%s: a kind docs/openapi.json does not describe "
                        "(api-examples.py STREAM_KINDS)" % at)
        elif kind(value) != STREAM_KINDS[ev_kind]:
            errs.append("%s: its data is a %s, not a %s"
                        % (at, kind(value), STREAM_KINDS[ev_kind]))
    return errs


def check_replies(b, api, trace_dir, base):
    """Every reply of the interpd server in the block against its
    operation's response schema; failures name the block."""
    host = base.split("://", 1)[1]
    checked, problems = [], []
    for x in read_exchanges(trace_dir):
        if x.host != host or x.status is None:
            continue
        name, errs = check_exchange(api, x)
        checked.append("%s %s" % (name, x.status))
        problems += errs
    if problems:
        fail("%s: replies that docs/openapi.json does not describe:\n  %s"
             % (b.where(), "\n  ".join(problems)))
    return checked


def last_status(path):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("latin-1")
    except FileNotFoundError:
        return None
    codes = re.findall(r"^HTTP/[0-9.]+ ([0-9]{3})", text, re.M)
    return int(codes[-1]) if codes else None


def trailing_comment(text):
    """The output an sh block shows in `# ` lines after its last command,
    or None."""
    lines = text.rstrip("\n").split("\n")
    shown = []
    while lines and lines[-1].startswith("# "):
        shown.insert(0, lines.pop()[2:])
    return "\n".join(shown) if shown and lines else None


def run_sh(b, env, inputs, api):
    # A fresh directory each: `curl -OJ` refuses to overwrite a file.
    work = tempfile.mkdtemp(dir=os.path.dirname(inputs))
    for name in os.listdir(inputs):
        shutil.copy(os.path.join(inputs, name), work)
    traces = tempfile.mkdtemp(dir=os.path.dirname(inputs))
    hdr = os.path.join(work, ".headers")
    env = dict(env, IPD_EXAMPLE_HEADERS=hdr, IPD_EXAMPLE_TRACES=traces)
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                            PRELUDE + b.text], cwd=work, env=env,
                           capture_output=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail("%s: the example ran over %d s" % (b.where(), BLOCK_TIMEOUT))
        return
    n_failed = len(failures)
    checked = check_replies(b, api, traces, env["BASE"])
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        fail("%s: the example exited %d\n--- stdout\n%s--- stderr\n%s" % (
            b.where(), p.returncode, out, p.stderr.decode("utf-8", "replace")))
        return
    shown = judge_sh(b, out, last_status(hdr))
    if shown and len(failures) == n_failed:
        print("ok   %s (sh%s; %d %s as docs/openapi.json says: %s)" % (
            b.where(), shown, len(checked),
            "reply" if len(checked) == 1 else "replies",
            ", ".join(checked) or "-"), flush=True)


def judge_sh(b, out, status):
    """The block's last status and output against docs/API.md; what was
    checked (for the ok line), or None after a failure."""
    want = None
    if b.response:
        m = re.search(r"\bstatus=([0-9]{3})\b", b.response.info)
        want = int(m.group(1)) if m else None
    if status is not None:
        ok = status == want if want else 200 <= status < 300
        if not ok:
            fail("%s: status %d, documented %s\n%s" % (
                b.where(), status, want or "2xx", out))
            return None
    elif want:
        fail("%s: documented status %d but the example made no HTTP call"
             % (b.where(), want))
        return None
    said = ", status %d" % status if status else ""
    if not b.response:
        want_out = trailing_comment(b.text)
        if want_out is not None and out.rstrip("\n") != want_out:
            fail("%s: the output differs from the comment that shows it:\n"
                 "--- documented\n%s\n--- real\n%s" % (b.where(), want_out,
                                                         out))
            return None
        return said + (", output as shown" if want_out is not None else "")
    try:
        doc = json.loads(b.response.text)
    except ValueError as e:
        fail("%s: the response block is not JSON: %s" % (b.response.where(),
                                                         e))
        return None
    try:
        real = json.loads(out)
    except ValueError as e:
        fail("%s: the output is not one JSON document (%s):\n%s" % (
            b.where(), e, out))
        return None
    problems = []
    same_shape(doc, real, "$", problems)
    same_messages(doc, real, "$", problems)
    if problems:
        fail("%s: the response differs from docs/API.md:%d:\n  %s\n"
             "real response: %s" % (b.where(), b.response.line,
                                    "\n  ".join(problems), out.strip()))
        return None
    return said + ", shape of line %d" % b.response.line


def check_callbacks(api):
    """Every callback this script's receiver got against the `callbacks`
    of POST /v1/executions: its headers (the required header parameters,
    each against its schema), its Content-Type and its body against the
    requestBody's schema."""
    op = api.doc["paths"]["/v1/executions"]["post"]
    posts = [(name, expr, item["post"])
             for name, cb in op.get("callbacks", {}).items()
             for expr, item in cb.items() if "post" in item]
    got = list(Receiver.callbacks)
    if not got:
        fail("no callback arrived from the examples, so none was checked "
             "against docs/openapi.json")
        return
    if not posts:
        fail("%d callbacks arrived, but docs/openapi.json's createExecution "
             "describes none (callbacks)" % len(got))
        return
    name, expr, post = posts[0]
    loc = "#/paths/~1v1~1executions/post/callbacks/%s/%s/post" % (
        name, expr.replace("~", "~0").replace("/", "~1"))
    content = post.get("requestBody", {}).get("content", {})
    params = [api.resolve(p["$ref"]) if "$ref" in p else p
              for p in post.get("parameters", [])]
    for i, (headers, body) in enumerate(got):
        h = {k.lower(): v for k, v in headers.items()}
        errs = []
        for p in params:
            if p.get("in") != "header":
                continue
            v = h.get(p["name"].lower())
            if v is None:
                if p.get("required"):
                    errs.append("no %s header" % p["name"])
                continue
            errs += ["header %s: %s" % (p["name"], e) for e in
                     api.validate(p.get("schema", {}), loc, v)]
        documented = {p["name"].lower() for p in params
                      if p.get("in") == "header"}
        for k in sorted(k for k in h if k.startswith("x-interpd-")):
            if k not in documented:
                errs.append("header %s is not in the document" % k)
        if not media_types_match(content, h.get("content-type", "")):
            errs.append("Content-Type %r, the document has %s"
                        % (h.get("content-type"), ", ".join(content)))
        elif "application/json" in content:
            try:
                errs += api.validate(content["application/json"]["schema"],
                                     loc + "/requestBody", json.loads(body))
            except ValueError as e:
                errs.append("the body is not JSON: %s" % e)
        if errs:
            fail("callback %d of %d against %s:\n  %s"
                 % (i + 1, len(got), loc, "\n  ".join(errs)))
    print("ok   %d callbacks as docs/openapi.json's %s says" % (len(got), loc),
          flush=True)


def check_data_dir(data):
    """What the server keeps in its data dir, after every example ran,
    against the data-dir row of docs/DEPLOYMENT.md's option table: each
    entry must be named there (`meta.db-wal` as `meta.db` with `-wal`)."""
    with open(os.path.join(ROOT, "docs", "DEPLOYMENT.md"),
              encoding="utf-8") as f:
        row = [ln for ln in f.read().split("\n")
               if ln.startswith("| `data-dir` |")]
    if len(row) != 1:
        fail("docs/DEPLOYMENT.md has %d data-dir rows in its option table, "
             "not 1" % len(row))
        return
    named = {n.rstrip("/") for n in re.findall(r"`([^`]+)`", row[0])}
    extra = []
    for entry in sorted(os.listdir(data)):
        base, _, suffix = entry.partition("-")
        if entry in named or (suffix and base in named and
                              "-" + suffix in named):
            continue
        extra.append(entry)
    if extra:
        fail("the data dir holds %s, which docs/DEPLOYMENT.md's data-dir row "
             "does not name" % ", ".join(extra))
    else:
        print("ok   the data dir holds only what docs/DEPLOYMENT.md names: %s"
              % ", ".join(sorted(os.listdir(data))), flush=True)


def run_python(b, ctx):
    defines_verify = re.search(r"^def verify_interpd_signature\(", b.text,
                               re.M)
    script = b.text
    if defines_verify:
        deadline = time.time() + 60
        while time.time() < deadline and not Receiver.callbacks:
            time.sleep(0.2)
        if not Receiver.callbacks:
            fail("%s: no callback arrived to check the verifier with"
                 % b.where())
            return
        headers, body = Receiver.callbacks[0]
        sig = {k.lower(): v for k, v in headers.items()}.get(
            "x-interpd-signature", "")
        script += ("\nimport sys\n"
                   "secret, body, sig = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]\n"
                   "assert verify_interpd_signature(secret, sig, body), "
                   "'the verifier refused a real callback'\n"
                   "assert not verify_interpd_signature(secret, sig, "
                   "body[:-1] + bytes([body[-1] ^ 1])), "
                   "'the verifier accepted a changed body'\n")
        args = [ctx["secret"], body.hex(), sig]
    else:
        args = []
    p = subprocess.run(["/usr/bin/python3", "-c", script] + args,
                       cwd=ctx["work"], capture_output=True,
                       timeout=BLOCK_TIMEOUT)
    if p.returncode:
        fail("%s: python exited %d\n%s" % (
            b.where(), p.returncode, p.stderr.decode("utf-8", "replace")))
        return
    print("ok   %s (python%s)" % (b.where(), ", the verifier checked against "
                                  "a real callback" if defines_verify else ""),
          flush=True)


def run_ini(b, ctx):
    scratch = tempfile.mkdtemp(dir=ctx["tmp"])
    path = os.path.join(scratch, "example.conf")
    with open(path, "w") as f:
        f.write(b.text)
    p = subprocess.run([ctx["bin"], "keys", "list", "--config", path,
                        "--data-dir", ctx["data_dir"]], capture_output=True,
                       env=clean_env(), timeout=BLOCK_TIMEOUT)
    if p.returncode:
        fail("%s: interpd refused the config file (exit %d):\n%s" % (
            b.where(), p.returncode, p.stderr.decode("utf-8", "replace")))
        return
    print("ok   %s (ini, accepted by interpd --config)" % b.where(),
          flush=True)


def check_document(api):
    """The document alone: the keywords it uses are ones the validator
    checks, and every example in it validates against its schema."""
    if api.unknown:
        print("api_examples: docs/openapi.json uses schema keywords this "
              "script does not check (teach OpenAPI._eval first):\n  " +
              "\n  ".join(api.unknown), file=sys.stderr)
        return False
    bad = api.example_problems()
    for p in bad:
        fail("docs/openapi.json example %s" % p)
    if not bad:
        print("ok   every example of docs/openapi.json validates against "
              "its schema", flush=True)
    return not bad


def main():
    if sys.argv[1:] == ["--document-only"]:
        return 0 if check_document(OpenAPI(OPENAPI)) else 1
    binary = os.environ.get("INTERPD_BIN")
    if not binary or not os.access(binary, os.X_OK):
        print("api_examples: INTERPD_BIN is not set to the interpd binary "
              "(ctest sets it)", file=sys.stderr)
        return 1
    with open(DOC, encoding="utf-8") as f:
        blocks = parse_blocks(f.read())
    api = OpenAPI(OPENAPI)
    if not check_document(api) and api.unknown:
        return 1
    tmp = tempfile.mkdtemp(prefix="ipd-api-examples-")
    # The sandbox user must reach the data dir inside (as with any data dir).
    os.chmod(tmp, 0o711)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    own = "http://127.0.0.1:%d" % httpd.server_address[1]
    data = os.path.join(tmp, "data")
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    with open(os.path.join(work, "sales.csv"), "wb") as f:
        f.write(SALES)
    with open(os.path.join(work, "report.pdf"), "wb") as f:
        f.write(PDF)
    server = None
    try:
        server = Server(binary, data, os.path.join(tmp, "interpd.log"),
                        ["--fetch-allow", "127.0.0.1/32"])
        with open(os.path.join(data, "admin.key")) as f:
            admin_key = f.read().strip()
        created = json.loads(subprocess.run(
            [binary, "keys", "create", "--tenant", "docs", "--data-dir",
             data], capture_output=True, check=True, env=clean_env()).stdout)
        key = created["key"]
        keys = json.loads(subprocess.run(
            [binary, "keys", "list", "--data-dir", data],
            capture_output=True, check=True, env=clean_env()).stdout)
        secret = [k["secret"] for k in keys if k["key_id"] ==
                  created["key_id"]][0]
        env = dict(clean_env(), BASE=server.base, KEY=key,
                   ADMIN_KEY=admin_key, DATA_DIR=data,
                   FILE_URL=own + "/attachments/123",
                   CALLBACK_URL=own + "/callback",
                   PATH=os.path.dirname(os.path.abspath(binary)) + ":" +
                   os.environ.get("PATH", "/usr/bin:/bin"))
        ctx = {"work": work, "tmp": tmp, "secret": secret, "bin": binary,
               "data_dir": data}
        counts = {"run": 0, "not run": 0}
        for b in blocks:
            if b.lang not in ("sh", "python", "ini", "json"):
                continue
            if b.not_run is not None:
                if not b.not_run:
                    fail("%s: not-run marker without a reason" % b.where())
                else:
                    print("skip %s (%s): not run: %s" % (b.where(), b.lang,
                                                         b.not_run),
                          flush=True)
                counts["not run"] += 1
                continue
            if b.lang == "json":
                try:
                    json.loads(b.text)
                except ValueError as e:
                    fail("%s: not JSON: %s" % (b.where(), e))
                continue
            counts["run"] += 1
            if b.lang == "sh":
                try:
                    benv = fixtures(b, env, server.base, key)
                except (OSError, ValueError, KeyError) as e:
                    fail("%s: preparing $FILE_ID / $EXECUTION_ID: %s"
                         % (b.where(), e))
                    continue
                run_sh(b, benv, work, api)
            elif b.lang == "python":
                run_python(b, ctx)
            else:
                run_ini(b, ctx)
        if counts["run"] == 0:
            fail("no example found in docs/API.md")
        check_callbacks(api)
        check_data_dir(data)
        print("%d examples run, %d not run, %d failures" % (
            counts["run"], counts["not run"], len(failures)))
    finally:
        if server:
            server.stop()
        httpd.shutdown()
        if failures and server:
            with open(os.path.join(tmp, "interpd.log"), "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-40:]
            print("---- interpd log, last lines\n" + "\n".join(tail))
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A Discord bot that runs its users' Python on interpd.

    export DISCORD_TOKEN=... INTERPD_API_KEY=ipd_...
    INTERPD_URL=http://127.0.0.1:8080 /usr/bin/python3 examples/discord_bot.py

Needs discord.py 2.x (Debian's ``python3-discord``) and the project's client
``interpd_client`` (``pip install clients/python``; without it installed the
copy in this repository's ``clients/python`` is used).  In the Discord
developer portal, turn on the bot's "Message Content Intent": without it
the bot sees no message text.

What it does, in any channel it can read and in direct messages:

- **Files.** Every attachment of a message is stored in its author's interpd
  files by URL (interpd fetches it from Discord's CDN: ``POST /v1/files``
  with ``{"url"}``); the reply names each file.  The user's code reads them
  with ``load_file("sales.csv")`` or through ``FILES``.  Each interpd user is
  one Discord user: ``X-User-Id`` is the author's id.
- **Code.** A message with a fenced block of Python (opened with
  ```` ```python ```` or ```` ```py ````) runs that code (several blocks
  run together, in order).
  ``!run CODE`` runs the rest of the message, fenced in any language or
  not (`` !run `print(1)` `` too).  Attachments of the same message are
  stored first, so the code can read them.
- **Sessions.** Each user's code runs in one interpd session of theirs,
  created at their first run, so variables, imports and files written to
  the working directory persist from one message to the next.  A session
  that ended (idle for 20 minutes, a timeout, ``!forget``: interpd answers
  ``410 session_expired``, or ``404`` once it is long gone) is replaced by a
  new one on the next run, which then starts afresh.  When interpd will not
  give a new session (its per-user, per-tenant or per-node bound: ``429``),
  a live session of the user's (one a restarted bot left) is used, or else
  the code runs without one and the reply says so.  A bot serving many
  users at once should have a key whose policy has ``tenant-sessions =
  100%`` and enough ``--max-sessions`` (docs/API.md, "Sessions").  Every
  run gets all the user's files (the newest 100).  A user's runs go one
  at a time, in the order sent.
- **Output.** The reply (``⏳ running…``) is sent at once, then edited as
  stdout and stderr come (the two in the order written, with displayed
  values' text), at most once per ``BOT_EDIT_INTERVAL`` seconds (default
  1; the final edit, with ``✅`` or ``❌`` and the error, is always made,
  also after that interval).  A reply holds at most Discord's 2,000
  characters (UTF-16 units): beyond them it keeps the output's tail and
  says how much was cut.  A traceback shows with the user's line numbers.
- **Charts.** Images the code shows (``plt.show()``, ``display(img)``, a
  figure as the last expression) and files it writes (``plt.savefig``,
  ``df.to_csv``, a figure left open) come back as attachments of the
  reply (ten per message; more follow in further messages; one over
  Discord's upload limit, the guild's or 8 MiB, is named instead).  By
  default they are not kept in the user's interpd files
  (``store_outputs: false``); ``BOT_STORE_OUTPUTS=1`` keeps them.
- **Commands.** ``!files`` lists the user's files; ``!forget`` deletes all
  of them and ends the user's sessions; ``!help`` says all this briefly.

Configuration, from the environment:

=====================  ====================================================
``DISCORD_TOKEN``      the bot's token (required)
``INTERPD_URL``        the service, default ``http://127.0.0.1:8080``
``INTERPD_API_KEY``    the bot's tenant key (required)
``BOT_EDIT_INTERVAL``  seconds between edits of a streamed reply, default 1
``BOT_RUN_TIMEOUT``    a run's timeout in seconds, default the policy's
``BOT_STORE_OUTPUTS``  ``1``: keep generated files in the user's files
``BOT_PREFIX``         the commands' prefix, default ``!``
=====================  ====================================================

The Discord side is the class InterpdBot, whose async handlers take
discord.py objects (a Message with ``author``, ``channel``, ``content`` and
``attachments``; the channel's ``send``; the sent Message's ``edit``), and
make_client, which wires InterpdBot.on_message into a discord.Client.
tests/clients/test_discord_bot.py (ctest ``clients/discord``) drives the
handlers against a real interpd with Discord's objects faked.
"""
import asyncio
import base64
import io
import logging
import os
import re
import sys
import time

import discord

try:
    import interpd_client
except ImportError:  # run from the repository: its own copy of the client
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "clients", "python"))
    import interpd_client

from interpd_client import (DisplayEvent, InterpdError, NotFound,
                            OutputEvent, SessionExpired, TooManyRequests,
                            Unavailable)

log = logging.getLogger("discord_bot")

MESSAGE_LIMIT = 2000         # Discord's characters per message
FILES_PER_MESSAGE = 10       # Discord's attachments per message
DEFAULT_FILESIZE_LIMIT = 8 * 1024 * 1024  # a DM's; a guild says its own
MAX_RUN_FILES = 100          # interpd's files per execution
DEFAULT_EDIT_INTERVAL = 1.0

RUNNING = "\u23f3 running\u2026"
QUEUED = "\u23f3 waiting for your previous run\u2026"

# A fenced block of Python: ```python, ```py or ```python3 (any case).
PY_FENCE = re.compile(r"```(?:python3?|py)[ \t]*\n(.*?)```", re.S | re.I)
# Any fenced block (for !run): an optional language word on the first line.
ANY_FENCE = re.compile(r"```(?:[A-Za-z0-9_+-]*[ \t]*\n)?(.*?)```", re.S)


# ---- text -------------------------------------------------------------------

def units(text):
    """Discord's length of ``text``: UTF-16 code units (a character
    outside the BMP, most emoji, counts twice)."""
    return len(text.encode("utf-16-le")) // 2


def tail_fitting(text, room):
    """The longest tail of ``text`` that is at most ``room`` units."""
    if room <= 0:
        return ""
    t = text[-room:]
    n, i = units(t), 0
    while n > room:
        n -= 2 if ord(t[i]) > 0xFFFF else 1
        i += 1
    return t[i:]


def head_fitting(text, room):
    """The longest head of ``text`` that is at most ``room`` units."""
    t = text[:max(room, 0)]
    n = units(t)
    while n > room:
        n -= 2 if ord(t[-1]) > 0xFFFF else 1
        t = t[:-1]
    return t


def render(output, status, limit=MESSAGE_LIMIT):
    """A reply: ``output`` in a code block (its tail when it does not fit,
    saying how much was cut), then the ``status`` lines (at most half the
    limit when there is output); at most ``limit`` units."""
    if not output:
        return head_fitting(status, limit)
    status = head_fitting(status, limit // 2)
    # A ``` in the output would close the block: a zero-width space splits
    # it.
    body = output.replace("```", "`\u200b``").rstrip("\n")
    head, foot = "```\n", "\n```\n" + status
    room = limit - units(head) - units(foot)
    if units(body) <= room:
        return head + body + foot
    total = len(body)
    note = "\u2026 output truncated: the last %d of %d characters\n" % (
        total, total)  # its longest form: the counts only get shorter
    kept = tail_fitting(body, room - units(note))
    nl = kept.find("\n", 0, 200)
    if nl >= 0:  # begin at a line's start when one is near
        kept = kept[nl + 1:]
    note = "\u2026 output truncated: the last %d of %d characters\n" % (
        len(kept), total)
    return head + note + kept + foot


def human_size(n):
    n = n or 0
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return ("%d %s" % (n, unit) if unit == "B"
                    else "%.1f %s" % (n, unit))
        n /= 1024.0
    return "%d B" % n


def plain(name):
    """A filename safe inside an inline code span."""
    return str(name).replace("`", "'")


def extract_code(content, prefix="!"):
    """The code a message asks to run, or None: the rest of a ``!run``
    message (its first fenced block, or the text itself, inline backticks
    dropped), else every ```python block of the message, joined."""
    text = (content or "").strip()
    first = text.split(None, 1)
    if first and first[0].lower() == prefix + "run":
        rest = text[len(first[0]):].strip()
        m = ANY_FENCE.search(rest)
        if m:
            return m.group(1)
        if len(rest) >= 2 and rest[0] == "`" and rest[-1] == "`":
            rest = rest.strip("`")
        return rest or None
    blocks = PY_FENCE.findall(text)
    return "\n".join(blocks) if blocks else None


# ---- one streamed reply -----------------------------------------------------

class LiveReply:
    """One Discord message shown while a run goes on: sent first, then
    edited as the output grows, at most once every ``interval`` seconds
    (counted from the send and each edit, the final edit too), with the
    final edit always made.  update() may be called as often as output
    comes: the text waiting is replaced, and the next edit shows the
    newest."""

    def __init__(self, channel, reference, interval,
                 clock=time.monotonic):
        self.channel = channel
        self.reference = reference
        self.interval = interval
        self.clock = clock
        self.message = None   # the discord Message sent
        self._last = 0.0      # when it was last sent or edited
        self._shown = None    # the content Discord has
        self._pending = None  # the content to show next
        self._wake = asyncio.Event()
        self._editing = False
        self._closing = False
        self._task = None

    async def open(self, content):
        self.message = await self.channel.send(
            content, reference=self.reference, mention_author=False)
        self._last = self.clock()
        self._shown = content
        self._task = asyncio.ensure_future(self._pump())

    def update(self, content):
        """Show ``content`` (a string, or a callable giving it, called
        only when the edit is made) at the next edit."""
        self._pending = content
        self._wake.set()

    async def _pump(self):
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            delay = self._last + self.interval - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            content = self._pending
            if callable(content):
                content = content()
            if self._closing or content is None or content == self._shown:
                continue
            self._editing = True
            try:
                await self._edit(content=content)
            finally:
                self._editing = False

    async def _edit(self, **fields):
        try:
            await self.message.edit(**fields)
            self._shown = fields.get("content", self._shown)
        except discord.HTTPException as e:
            # Discord refused this edit (the message deleted, a hiccup):
            # the run goes on and the next edit tries again.
            log.warning("editing reply %s: %s",
                        getattr(self.message, "id", "?"), e)
        finally:
            self._last = self.clock()

    async def close(self, content, files=()):
        """The final edit: ``content`` and the first ten ``files``, made
        once ``interval`` has passed since the last edit; the other files
        follow in messages of their own."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            if not self._editing:
                task.cancel()  # asleep or waiting: no edit in flight
            self._wake.set()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # the final edit is made all the same
                log.exception("editing reply %s",
                              getattr(self.message, "id", "?"))
        delay = self._last + self.interval - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        files = list(files)
        fields = {"content": content}
        if files:
            fields["attachments"] = files[:FILES_PER_MESSAGE]
        await self._edit(**fields)
        for i in range(FILES_PER_MESSAGE, len(files), FILES_PER_MESSAGE):
            try:
                await self.channel.send(
                    files=files[i:i + FILES_PER_MESSAGE],
                    reference=self.reference, mention_author=False)
            except discord.HTTPException as e:
                log.warning("sending files: %s", e)


# ---- the bot ----------------------------------------------------------------

class _User:
    """What the bot keeps of one Discord user: their session and the lock
    that runs their messages one at a time."""

    def __init__(self):
        self.session_id = None
        self.lock = asyncio.Lock()


class _Run:
    """What one run has shown: the output text so far, the attachments to
    send and the notes for the status line."""

    def __init__(self):
        self.chunks = []    # stdout, stderr and displays' text, in order
        self.files = []     # (filename, bytes)
        self.notes = []     # extra lines under the status
        self.started = False
        self.displays = 0

    @property
    def output(self):
        return "".join(self.chunks)


_END = object()


class InterpdBot:
    """The bot's handlers on one interpd_client.Client (with the bot's
    tenant key; each user gets ``client.for_user(author.id)``).

    Args:
        client: an interpd_client.Client.
        edit_interval: the shortest time between two edits of a reply.
        run_timeout: a run's ``timeout`` (None: the policy's default).
        store_outputs: keep generated files in the user's files.
        prefix: the commands' prefix.
    """

    def __init__(self, client, edit_interval=DEFAULT_EDIT_INTERVAL,
                 run_timeout=None, store_outputs=False, prefix="!"):
        self.client = client
        self.edit_interval = edit_interval
        self.run_timeout = run_timeout
        self.store_outputs = store_outputs
        self.prefix = prefix
        self._users = {}

    def _user(self, author):
        key = str(author.id)
        if key not in self._users:
            self._users[key] = _User()
        return key, self._users[key]

    def session_of(self, author):
        """The session id the bot keeps for ``author`` (None: none yet)."""
        return self._user(author)[1].session_id

    def user_client(self, author):
        return self.client.for_user(author.id)

    # ---- dispatch -----------------------------------------------------------

    async def on_message(self, message):
        """Everything a message asks: its attachments stored, then a
        command, or its code run.  Messages of bots are ignored."""
        if getattr(message.author, "bot", False):
            return
        if message.attachments:
            await self.ingest(message)
        words = (message.content or "").strip().split(None, 1)
        command = words[0].lower() if words else ""
        if command == self.prefix + "files":
            await self.list_files(message)
        elif command == self.prefix + "forget":
            await self.forget(message)
        elif command == self.prefix + "help":
            await self.help(message)
        else:
            code = extract_code(message.content, self.prefix)
            if code is not None:
                await self.run_code(message, code)

    async def _reply(self, message, content, **kw):
        return await message.channel.send(content, reference=message,
                                          mention_author=False, **kw)

    # ---- files --------------------------------------------------------------

    async def ingest(self, message):
        """Store each attachment of ``message`` in its author's files (URL
        ingest); one reply naming what was stored and what was not.
        Returns the File objects stored."""
        ucl = self.user_client(message.author)
        stored, lines = [], []
        for a in message.attachments:
            try:
                f = await asyncio.to_thread(ucl.upload_url, a.url,
                                            filename=a.filename)
            except InterpdError as e:
                lines.append("\u26a0\ufe0f `%s` was not stored: %s" % (
                    plain(a.filename), e.message or e))
                continue
            stored.append(f)
            lines.append("\U0001f4e5 `%s` stored (%s, %s): `load_file(%r)`"
                         % (plain(f.filename), human_size(f.size),
                            f.file_type, f.filename))
        await self._reply(message, render("", "\n".join(lines)))
        return stored

    def _file_lines(self, files):
        lines = []
        for f in files:
            lines.append("`%s` \u2014 %s, %s, expires %s" % (
                plain(f.filename), human_size(f.size), f.file_type,
                f.expires_at or "never"))
        return lines

    async def list_files(self, message):
        """``!files``: the author's files, newest first."""
        ucl = self.user_client(message.author)
        try:
            files = await asyncio.to_thread(lambda: list(ucl.iter_files()))
        except InterpdError as e:
            await self._reply(message, "\u26a0\ufe0f interpd: %s" % e)
            return
        if not files:
            await self._reply(message, "You have no files. Attach one to "
                              "a message to store it.")
            return
        text = "\U0001f4c1 Your files (%d):" % len(files)
        lines = self._file_lines(files)
        for i, line in enumerate(lines):
            more = "\n\u2026 and %d more" % (len(lines) - i)
            if units(text + "\n" + line + more) > MESSAGE_LIMIT:
                text += more
                break
            text += "\n" + line
        await self._reply(message, text)

    def _forget_all(self, ucl):
        """Delete every file and live session of the user: (files deleted,
        sessions ended)."""
        deleted = 0
        while True:
            # The first page again and again: a cursor would skip files
            # while the ones before it go.
            before = deleted
            for f in ucl.list_files(limit=100):
                try:
                    ucl.delete_file(f.file_id)
                    deleted += 1
                except NotFound:
                    pass  # expired or deleted meanwhile
            if deleted == before:
                break
        ended = 0
        for s in ucl.list_sessions():
            try:
                ucl.delete_session(s.session_id)
                ended += 1
            except (NotFound, SessionExpired):
                pass
        return deleted, ended

    async def forget(self, message):
        """``!forget``: delete all the author's files and end their
        sessions (after a run of theirs in progress)."""
        _, user = self._user(message.author)
        ucl = self.user_client(message.author)
        async with user.lock:
            user.session_id = None
            try:
                deleted, ended = await asyncio.to_thread(self._forget_all,
                                                         ucl)
            except InterpdError as e:
                await self._reply(message, "\u26a0\ufe0f interpd: %s" % e)
                return
        await self._reply(message, "\U0001f5d1\ufe0f Deleted %d file%s%s." % (
            deleted, "" if deleted == 1 else "s",
            " and ended your session" if ended else ""))

    async def help(self, message):
        p = self.prefix
        await self._reply(message, "\n".join([
            "Send Python in a \\`\\`\\`python block, or `%srun CODE`: it "
            "runs in your own session (variables persist) and the output "
            "streams here." % p,
            "Attach files to store them; your code reads them with "
            "`load_file('name.csv')`. Charts come back as attachments.",
            "`%sfiles` lists your files, `%sforget` deletes them all and "
            "ends your session." % (p, p)]))

    # ---- runs ---------------------------------------------------------------

    def _run_file_ids(self, ucl):
        ids = []
        for f in ucl.iter_files():
            ids.append(f.file_id)
            if len(ids) == MAX_RUN_FILES:
                break
        return ids

    def _session(self, ucl, user, run):
        """The user's session id: the one kept, else a new one, else (at
        a bound) a live one of theirs, else None (the run goes without,
        with a note)."""
        if user.session_id:
            return user.session_id
        try:
            user.session_id = ucl.create_session().session_id
        except (TooManyRequests, Unavailable) as e:
            live = ucl.list_sessions()
            if live:
                user.session_id = live[0].session_id
            else:
                run.notes.append("\u26a0\ufe0f no session (%s): this run's "
                                 "variables will not be kept" % e.message)
        return user.session_id

    async def _events(self, ucl, code, file_ids, session_id):
        """The run's events, read by a thread (a stream must be read
        promptly or interpd treats its client as gone), then the
        ExecutionResult as the last item."""
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()

        def read():
            try:
                with ucl.stream(code, files=file_ids, session=session_id,
                                timeout=self.run_timeout,
                                store_outputs=self.store_outputs) as s:
                    for ev in s:
                        loop.call_soon_threadsafe(queue.put_nowait, ev)
                    return s.result
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        done = loop.run_in_executor(None, read)
        while True:
            ev = await queue.get()
            if ev is _END:
                break
            yield ev
        yield await done

    def _on_event(self, ev, run):
        if isinstance(ev, OutputEvent):
            run.chunks.append(ev.text)
        elif isinstance(ev, DisplayEvent):
            bundle = ev.bundle
            png = bundle.get("image/png")
            if isinstance(png, str):
                run.displays += 1
                run.files.append(("display_%d.png" % run.displays,
                                  base64.b64decode(png)))
            else:
                text = bundle.get("text/plain")
                if isinstance(text, str):
                    run.chunks.append(text + "\n")

    async def _stream(self, reply, ucl, code, file_ids, session_id, run):
        result = None
        async for item in self._events(ucl, code, file_ids, session_id):
            if isinstance(item, interpd_client.Event):
                run.started = True
                self._on_event(item, run)
                # rendered when the edit is made: at most once per interval
                reply.update(lambda: render(run.output, RUNNING))
            else:
                result = item
        return result

    async def _generated(self, ucl, result, run):
        """The result's generated files as (name, bytes) in ``run.files``
        (a stored one without inline bytes is downloaded); what cannot be
        sent gets a note."""
        for g in result.generated_files or []:
            data = g.data
            if data is None and g.stored and g.file_id:
                try:
                    data = await asyncio.to_thread(ucl.download, g.file_id)
                except InterpdError as e:
                    data = None
                    log.warning("downloading %s: %s", g.file_id, e)
            if data is None:
                run.notes.append("\u26a0\ufe0f `%s` not sent: %s" % (
                    plain(g.filename), g.message or "no bytes came back"))
                continue
            run.files.append((g.filename, data))

    def _status(self, result, run):
        secs = result.execution_time or 0.0
        if result.success:
            line = "\u2705 done in %.2f s" % secs
        elif result.cancelled:
            line = "\u23f9\ufe0f cancelled after %.2f s" % secs
        else:
            err = result.error or {}
            line = "\u274c %s: %s (%.2f s)" % (
                err.get("type") or "Error",
                (err.get("message") or "").strip(), secs)
        if result.stdout_truncated or result.stderr_truncated:
            line += " \u2014 interpd cut the output at its limit"
        if result.session_ended:
            line += ("\n\u26a0\ufe0f your session ended (%s): the next run "
                     "starts a new one" % (result.session_end_reason or
                                           "see the error"))
        return "\n".join([line] + run.notes)

    def _attachments(self, message, run):
        guild = getattr(message, "guild", None)
        limit = getattr(guild, "filesize_limit", None) or \
            DEFAULT_FILESIZE_LIMIT
        out = []
        for name, data in run.files:
            if len(data) > limit:
                run.notes.append("\u26a0\ufe0f `%s` (%s) is over Discord's "
                                 "%s limit" % (plain(name),
                                               human_size(len(data)),
                                               human_size(limit)))
                continue
            out.append(discord.File(io.BytesIO(data), filename=name))
        return out

    async def run_code(self, message, code):
        """Run ``code`` in the author's session, streaming its output into
        one reply (edited at most once per ``edit_interval``), its charts
        and files attached to the final edit."""
        _, user = self._user(message.author)
        ucl = self.user_client(message.author)
        reply = LiveReply(message.channel, message, self.edit_interval)
        await reply.open(QUEUED if user.lock.locked() else RUNNING)
        run = _Run()
        async with user.lock:
            reply.update(RUNNING)
            try:
                result = await self._attempt(reply, ucl, code, user, run)
                if result.session_ended:
                    user.session_id = None
                tb = (result.error or {}).get("traceback")
                if tb and tb.strip() not in run.output:
                    run.chunks.append(tb)  # not streamed as stderr: show it
                await self._generated(ucl, result, run)
                files = self._attachments(message, run)
                status = self._status(result, run)
            except InterpdError as e:
                files = []
                status = "\n".join(["\u274c interpd: %s" % e] + run.notes)
            except Exception as e:  # the reply must still end
                log.exception("run for %s", message.author.id)
                files = []
                status = "\u274c the bot failed: %s" % type(e).__name__
        await reply.close(render(run.output, status), files)

    async def _attempt(self, reply, ucl, code, user, run):
        """The run, once more in a new session when the kept one has ended
        (410) or is unknown (404: long ended, or a file just deleted, so
        the files are listed again)."""
        for attempt in (1, 2):
            file_ids = await asyncio.to_thread(self._run_file_ids, ucl)
            session_id = await asyncio.to_thread(self._session, ucl, user,
                                                 run)
            try:
                return await self._stream(reply, ucl, code, file_ids,
                                          session_id, run)
            except (SessionExpired, NotFound) as e:
                if run.started or attempt == 2:
                    raise
                log.info("user %s: session %s: %s; a new one", ucl.user_id,
                         session_id, e)
                user.session_id = None


# ---- Discord ----------------------------------------------------------------

def make_client(bot, intents=None):
    """A discord.Client whose messages go to ``bot.on_message`` (its own
    messages left out).  The intents need ``message_content``."""
    if intents is None:
        intents = discord.Intents.default()
        intents.message_content = True
    client = discord.Client(intents=intents)

    @client.event
    async def on_message(message):
        if client.user is not None and message.author == client.user:
            return
        try:
            await bot.on_message(message)
        except Exception:
            log.exception("message %s", getattr(message, "id", "?"))

    return client


class Config:
    """The bot's settings, from the environment (see the module's
    docstring)."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.discord_token = env.get("DISCORD_TOKEN", "")
        self.url = env.get("INTERPD_URL") or "http://127.0.0.1:8080"
        self.api_key = env.get("INTERPD_API_KEY", "")
        self.edit_interval = float(env.get("BOT_EDIT_INTERVAL") or
                                   DEFAULT_EDIT_INTERVAL)
        timeout = env.get("BOT_RUN_TIMEOUT")
        self.run_timeout = int(timeout) if timeout else None
        self.store_outputs = env.get("BOT_STORE_OUTPUTS", "0") not in (
            "", "0", "false", "no")
        self.prefix = env.get("BOT_PREFIX") or "!"

    def missing(self):
        """The required variables that are not set."""
        return [name for name, v in (("DISCORD_TOKEN", self.discord_token),
                                     ("INTERPD_API_KEY", self.api_key))
                if not v]


def main(env=None):
    cfg = Config(env)
    missing = cfg.missing()
    if missing:
        raise SystemExit("discord_bot: set %s (see the docstring of %s)" % (
            " and ".join(missing), __file__))
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: "
                               "%(message)s")
    ipd = interpd_client.Client(cfg.url, api_key=cfg.api_key)
    bot = InterpdBot(ipd, edit_interval=cfg.edit_interval,
                     run_timeout=cfg.run_timeout,
                     store_outputs=cfg.store_outputs, prefix=cfg.prefix)
    make_client(bot).run(cfg.discord_token, log_handler=None)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""examples/discord_bot.py's handlers against a real interpd (ctest:
clients/discord).

Discord cannot be reached here, so its side is faked at discord.py's
object level: a Message with an author, a channel and attachments, whose
channel's ``send`` returns a sent message whose ``edit`` records each call
(with the time it came); the files the bot attaches are real
``discord.File`` objects, and make_client's real ``discord.Client`` is
checked to pass messages on.  Everything else is real: interpd serve on
127.0.0.1:0 (clients/python/tests/interpd_fixture.py; cold executions,
``--fetch-allow 127.0.0.1/32`` so URL ingest may fetch from the local web
server below, room for a session per test), a tenant key, the project's
interpd_client, and a local http.server standing in for Discord's CDN (the
attachments' ``url``).

Each test uses a Discord user of its own.  Nothing sleeps to synchronise:
the handlers are awaited to their end (the code under test sleeps to space
its edits).  Never skips: without discord.py (Debian's python3-discord) or
$INTERPD_BIN the test fails.
"""
import asyncio
import http.server
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "tests"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import discord  # noqa: E402  (python3-discord: a missing one fails here)
import interpd_client as ic  # noqa: E402
from interpd_fixture import Server, interpd_binary  # noqa: E402

BOT_PATH = os.path.join(ROOT, "examples", "discord_bot.py")
CSV = b"month,units,revenue\n1,10,100.0\n2,12,130.5\n3,9,95.25\n"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
INTERVAL = 0.5   # the bot's edit interval in these tests
EPS = 0.02       # asyncio may wake a timer a clock tick early

bot_module = None
server = None
web = None
TMP = None
KEY = None
LOOP = None
BOT = None


def load_bot():
    spec = importlib.util.spec_from_file_location("discord_bot", BOT_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CDN(http.server.BaseHTTPRequestHandler):
    """Discord's CDN, as far as URL ingest sees it: /attachments/.../NAME
    answers the bytes of FILES[NAME], anything else 404."""

    FILES = {"sales.csv": CSV, "notes.txt": b"remember the milk\n"}
    paths = []

    def do_GET(self):
        CDN.paths.append(self.path)
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        body = CDN.FILES.get(name)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def setUpModule():
    global bot_module, server, web, TMP, KEY, LOOP, BOT
    binary = interpd_binary()
    bot_module = load_bot()
    TMP = tempfile.mkdtemp(prefix="ipd-discord-")
    os.chmod(TMP, 0o711)  # the sandbox's user walks to the data dir
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CDN)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    server = Server(binary, TMP, [
        "--exec-mode", "cold", "--exec-slots", "2",
        "--fetch-allow", "127.0.0.1/32",
        # one session per test user: the tenant's share (half) is 8
        "--max-sessions", "16", "--sessions-memory", "0"])
    KEY = server.cli("keys", "create", "--tenant", "discord")["key"]
    LOOP = asyncio.new_event_loop()
    BOT = bot_module.InterpdBot(ic.Client(server.base, api_key=KEY),
                                edit_interval=INTERVAL)


def tearDownModule():
    if LOOP:
        LOOP.close()
    if web:
        web.shutdown()
    why = server.stop_failure() if server else None
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)
    if why:
        raise RuntimeError(why)


def run(coro):
    return LOOP.run_until_complete(coro)


def cdn_url(name):
    return "http://127.0.0.1:%d/attachments/1234/5678/%s?ex=6f&is=6e&hm=ab" % (
        web.server_address[1], name)


# ---- Discord, faked at discord.py's object level ----------------------------

class FakeAuthor:
    def __init__(self, id, bot=False):
        self.id = id
        self.bot = bot
        self.name = "user%d" % id


class FakeAttachment:
    def __init__(self, filename):
        self.filename = filename
        self.url = cdn_url(filename)
        self.size = len(CDN.FILES.get(filename, b""))


class SentMessage:
    """A message the bot sent: its content now, and every edit as
    (monotonic time, fields)."""

    def __init__(self, channel, content, fields):
        self.channel = channel
        self.id = len(channel.sent) + 1
        self.content = content
        self.sent_content = content
        self.fields = fields
        self.sent_at = time.monotonic()
        self.edits = []

    async def edit(self, **fields):
        self.edits.append((time.monotonic(), fields))
        if "content" in fields:
            self.content = fields["content"]
        return self

    def attachments(self):
        """The discord.File objects of its final edit."""
        return self.edits[-1][1].get("attachments", []) if self.edits else []


class FakeChannel:
    def __init__(self):
        self.sent = []

    async def send(self, content=None, **fields):
        m = SentMessage(self, content, fields)
        self.sent.append(m)
        return m


class FakeMessage:
    def __init__(self, author, content="", attachments=()):
        self.author = author
        self.content = content
        self.attachments = list(attachments)
        self.channel = FakeChannel()
        self.guild = None


def user_client(author):
    return ic.Client(server.base, api_key=KEY, user_id=author.id)


def py(code):
    return "```python\n" + code + "\n```"


class BotTest(unittest.TestCase):
    """Each test its own Discord user (ids from 1000 up)."""

    next_id = 1000

    def setUp(self):
        BotTest.next_id += 1
        self.author = FakeAuthor(BotTest.next_id)

    def tearDown(self):
        # End the user's session, so the tenant's share stays free.
        for s in user_client(self.author).list_sessions():
            s.delete()

    def send(self, content="", attachments=()):
        msg = FakeMessage(self.author, content,
                          [FakeAttachment(a) for a in attachments])
        run(BOT.on_message(msg))
        return msg

    def run_reply(self, content):
        """Send ``content`` (code), check it got one streamed reply with a
        final edit within the limit; the reply."""
        msg = self.send(content)
        self.assertEqual(len(msg.channel.sent), 1,
                         [m.content for m in msg.channel.sent])
        reply = msg.channel.sent[0]
        self.assertIs(reply.fields.get("reference"), msg)
        self.assertTrue(reply.edits, "the reply was never edited")
        for _, fields in reply.edits:
            self.assertLessEqual(bot_module.units(fields["content"]),
                                 bot_module.MESSAGE_LIMIT)
        return reply


class TestFiles(BotTest):

    def test_csv_ingested_by_url_and_read_by_code(self):
        CDN.paths.clear()
        msg = self.send(py("df = load_file('sales.csv')\n"
                           "print('units', df['units'].sum())\n"
                           "print('rows', len(df))"),
                        attachments=["sales.csv"])
        # interpd fetched it from the "CDN", as the attachment's URL says
        self.assertEqual(len(CDN.paths), 1)
        self.assertTrue(CDN.paths[0].startswith(
            "/attachments/1234/5678/sales.csv?"), CDN.paths)
        files = list(user_client(self.author).iter_files())
        self.assertEqual([(f.filename, f.size, f.source) for f in files],
                         [("sales.csv", len(CSV), "url")])
        # two replies: what was stored, then the run
        self.assertEqual(len(msg.channel.sent), 2)
        stored, reply = msg.channel.sent
        self.assertIn("`sales.csv` stored", stored.content)
        self.assertIn("load_file('sales.csv')", stored.content)
        self.assertIn("units 31\nrows 3\n", reply.content)
        self.assertIn("\u2705 done", reply.content)

    def test_attachment_that_cannot_be_fetched(self):
        msg = self.send("", attachments=["missing.csv"])
        self.assertEqual(len(msg.channel.sent), 1)
        text = msg.channel.sent[0].content
        self.assertIn("`missing.csv` was not stored", text)
        self.assertEqual(list(user_client(self.author).iter_files()), [])

    def test_files_lists_and_forget_empties(self):
        self.send("", attachments=["sales.csv", "notes.txt"])
        self.assertEqual(len(list(user_client(self.author).iter_files())), 2)
        msg = self.send("!files")
        text = msg.channel.sent[0].content
        self.assertIn("Your files (2)", text)
        self.assertIn("`sales.csv` \u2014 %d B, csv" % len(CSV), text)
        self.assertIn("`notes.txt`", text)
        # a session to end
        self.run_reply("!run x = 1")
        self.assertIsNotNone(BOT.session_of(self.author))
        msg = self.send("!forget")
        self.assertEqual(msg.channel.sent[0].content,
                         "\U0001f5d1\ufe0f Deleted 2 files and ended your "
                         "session.")
        c = user_client(self.author)
        self.assertEqual(list(c.iter_files()), [])
        self.assertEqual(c.list_sessions(), [])
        self.assertIsNone(BOT.session_of(self.author))
        msg = self.send("!files")
        self.assertIn("You have no files", msg.channel.sent[0].content)
        # and a run after it starts afresh
        reply = self.run_reply("!run print('x' in globals())")
        self.assertIn("False\n", reply.content)


class TestRuns(BotTest):

    def test_output_streams_into_rate_limited_edits(self):
        reply = self.run_reply(py(
            "import time\n"
            "for i in range(20):\n"
            "    print('line', i, flush=True)\n"
            "    time.sleep(0.1)"))
        times = [reply.sent_at] + [t for t, _ in reply.edits]
        contents = [f["content"] for _, f in reply.edits]
        # at most one edit per interval, counted from the send, the final
        # edit included
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertGreaterEqual(min(gaps), INTERVAL - EPS, gaps)
        # streamed: edits while it ran, each showing more lines in order
        self.assertGreaterEqual(len(contents), 3, contents)
        self.assertLessEqual(len(contents),
                             (times[-1] - times[0]) / INTERVAL + 2, gaps)
        # each edit shows a prefix of the output (a line may be cut where
        # print's pieces came apart), growing
        full = "".join("line %d\n" % i for i in range(20)).rstrip("\n")
        seen = []
        for c in contents:
            m = re.match(r"```\n(.*)\n```\n[^`]*$", c, re.S)
            self.assertTrue(m, c)
            body = m.group(1)
            self.assertTrue(full.startswith(body), c)
            seen.append(len(body))
        self.assertEqual(seen, sorted(seen))
        self.assertLess(seen[0], len(full),
                        "the first edit came after the run")
        self.assertEqual(seen[-1], len(full))
        self.assertIn("\u23f3 running", contents[0])
        self.assertIn("\u2705 done", contents[-1])
        self.assertNotIn("\u23f3", contents[-1])

    def test_chart_comes_back_as_an_attachment(self):
        reply = self.run_reply(py(
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 4, 2])\n"
            "plt.title('sales')\n"
            "plt.savefig('chart.png')\n"
            "plt.figure()\n"
            "plt.bar(['a', 'b'], [3, 5])\n"
            "plt.show()\n"
            "print('drawn')"))
        files = reply.attachments()
        self.assertEqual(sorted(f.filename for f in files),
                         ["chart.png", "display_1.png"])
        for f in files:
            self.assertIsInstance(f, discord.File)
            data = f.fp.read()
            self.assertTrue(data.startswith(PNG_MAGIC), f.filename)
            self.assertGreater(len(data), 1000)
        self.assertIn("drawn\n", reply.content)
        self.assertIn("\u2705 done", reply.content)
        # not kept in the user's files (store_outputs false by default)
        self.assertEqual(list(user_client(self.author).iter_files()), [])

    def test_variable_persists_across_messages(self):
        self.run_reply("!run x = 41")
        first = BOT.session_of(self.author)
        self.assertTrue(first.startswith("sess_"), first)
        reply = self.run_reply("!run ```py\nprint(x + 1)\nx * 2\n```")
        self.assertIn("42\n82\n", reply.content)
        self.assertEqual(BOT.session_of(self.author), first)
        self.assertEqual([s.session_id for s in
                          user_client(self.author).list_sessions()], [first])

    def test_ended_session_is_replaced(self):
        self.run_reply("!run x = 41")
        first = BOT.session_of(self.author)
        c = user_client(self.author)
        c.delete_session(first)  # behind the bot's back: 410 from now on
        with self.assertRaises(ic.SessionExpired):
            c.get_session(first)
        reply = self.run_reply("!run `print('fresh', 'x' in globals())`")
        self.assertIn("fresh False\n", reply.content)
        self.assertIn("\u2705 done", reply.content)
        second = BOT.session_of(self.author)
        self.assertTrue(second.startswith("sess_"))
        self.assertNotEqual(second, first)
        # and it is kept: x set now persists
        self.run_reply("!run x = 5")
        self.assertIn("6\n", self.run_reply("!run print(x + 1)").content)
        self.assertEqual(BOT.session_of(self.author), second)

    def test_runs_of_a_user_go_one_at_a_time(self):
        first = FakeMessage(self.author, "!run import time\n"
                            "time.sleep(1)\ny = 1\nprint('first')")
        second = FakeMessage(self.author, "!run print(y + 1)")

        async def both():
            # Tasks start in order: the first holds the user's turn before
            # the second starts.
            await asyncio.gather(BOT.on_message(first),
                                 BOT.on_message(second))
        run(both())
        one, two = first.channel.sent[0], second.channel.sent[0]
        self.assertEqual(one.fields, {"reference": first,
                                      "mention_author": False})
        self.assertIn("first\n```\n\u2705 done", one.content)
        self.assertEqual(two.sent_content, bot_module.QUEUED)
        self.assertEqual(one.sent_content, bot_module.RUNNING)
        self.assertIn("2\n```\n\u2705 done", two.content)

    def test_live_session_adopted_at_the_bound(self):
        # The user holds --sessions-per-user (3) sessions already (a bot
        # restarted, say): no new one, so the newest live one is used.
        c = user_client(self.author)
        held = [c.create_session().session_id for _ in range(3)]
        with self.assertRaises(ic.TooManyRequests):
            c.create_session()
        reply = self.run_reply("!run z = 3\nprint(z * 14)")
        self.assertIn("42\n```\n\u2705 done", reply.content)
        newest = c.list_sessions()[0].session_id
        self.assertIn(newest, held)
        self.assertEqual(BOT.session_of(self.author), newest)
        self.assertEqual(len(c.list_sessions()), 3)

    def test_error_shows_its_traceback(self):
        reply = self.run_reply(py("print('before')\nx = 1\n1 / 0"))
        text = reply.content
        self.assertIn("before\n", text)
        self.assertIn("Traceback (most recent call last)", text)
        self.assertIn('File "<code>", line 3', text)
        self.assertIn("ZeroDivisionError: division by zero\n```", text)
        self.assertRegex(text, "\n\u274c ZeroDivisionError: division by "
                         "zero \\([0-9.]+ s\\)$")

    def test_long_output_keeps_its_tail(self):
        reply = self.run_reply(py(
            "for i in range(3000):\n    print('row', i)"))
        text = reply.content
        self.assertLessEqual(len(text), 2000)
        self.assertGreater(len(text), 1800)
        self.assertIn("row 2999\n```\n\u2705 done", text)
        self.assertNotIn("row 0\n", text)
        self.assertIn("output truncated: the last", text)
        full = "".join("row %d\n" % i for i in range(3000)).rstrip("\n")
        self.assertIn("of %d characters" % len(full), text)
        # what is shown is a tail of the output, from a line's start
        body = text.split("characters\n", 1)[1].split("\n```\n")[0]
        self.assertTrue(full.endswith(body))
        self.assertTrue(body.startswith("row "))

    def test_render_counts_utf16_units(self):
        out = "\U0001f600" * 3000  # two units each
        text = bot_module.render(out, "\u2705 done")
        self.assertLessEqual(bot_module.units(text), 2000)
        self.assertGreater(bot_module.units(text), 1900)
        self.assertIn("output truncated", text)
        self.assertNotIn("```", bot_module.render("a```b", "s")[4:-6])


class TestDiscordSide(BotTest):

    def test_bot_authors_are_ignored(self):
        msg = FakeMessage(FakeAuthor(42, bot=True), "!run print(1)",
                          [FakeAttachment("sales.csv")])
        run(BOT.on_message(msg))
        self.assertEqual(msg.channel.sent, [])

    def test_make_client_passes_messages_on(self):
        client = bot_module.make_client(BOT)
        self.assertIsInstance(client, discord.Client)
        self.assertTrue(client.intents.message_content)
        msg = FakeMessage(self.author, "!run print(6 * 7)")
        run(client.on_message(msg))
        self.assertEqual(len(msg.channel.sent), 1)
        self.assertIn("42\n", msg.channel.sent[0].content)
        run(client.close())

    def test_config_from_environment(self):
        cfg = bot_module.Config({})
        self.assertEqual((cfg.url, cfg.edit_interval, cfg.run_timeout,
                          cfg.store_outputs, cfg.prefix),
                         ("http://127.0.0.1:8080", 1.0, None, False, "!"))
        self.assertEqual(cfg.missing(), ["DISCORD_TOKEN", "INTERPD_API_KEY"])
        with self.assertRaises(SystemExit):
            bot_module.main({})
        cfg = bot_module.Config({"DISCORD_TOKEN": "t", "INTERPD_API_KEY": "k",
                                 "INTERPD_URL": server.base,
                                 "BOT_EDIT_INTERVAL": "2.5",
                                 "BOT_RUN_TIMEOUT": "30",
                                 "BOT_STORE_OUTPUTS": "1"})
        self.assertEqual((cfg.url, cfg.edit_interval, cfg.run_timeout,
                          cfg.store_outputs, cfg.missing()),
                         (server.base, 2.5, 30, True, []))

    def test_code_in_a_message(self):
        x = bot_module.extract_code
        self.assertEqual(x("look:\n```python\nprint(1)\n```\nand\n"
                           "```py\nprint(2)\n```"), "print(1)\n\nprint(2)\n")
        self.assertEqual(x("!run print(1)"), "print(1)")
        self.assertEqual(x("!RUN `print(1)`"), "print(1)")
        self.assertEqual(x("!run\n```\nx = 1\n```"), "x = 1\n")
        self.assertEqual(x("!run ```js\nx = 1\n```"), "x = 1\n")
        self.assertIsNone(x("!run"))
        self.assertIsNone(x("hello ```\nprint(1)\n```"))  # not Python
        self.assertIsNone(x("!runner print(1)"))

    def test_help(self):
        msg = self.send("!help")
        self.assertIn("!files", msg.channel.sent[0].content)


if __name__ == "__main__":
    unittest.main(verbosity=2)

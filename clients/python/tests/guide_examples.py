"""The seed bot's own guide, run through interpd_compat.

Every snippet of docs/CODE_INTERPRETER_GUIDE.md (Coder-Vippro/
ChatGPT-Discord-Bot at ee9d114) that calls the module's functions, copied
verbatim except for the import line (``from src.utils.code_interpreter
import ...`` became ``from interpd_compat import ...``).  The snippets run
one after another in one namespace, as in a Python session, with top-level
``await``; what they print is captured, and the variables they leave
(``result``, ``files``, ...) are shown after them.

``run_examples`` returns the entries; ``write_transcript`` writes them as
Markdown (clients/python/COMPAT-TRANSCRIPT.md).  test_compat.py runs them
against a real interpd and checks their outcomes.
"""
import ast
import contextlib
import io
import os
import pprint

SEED = "Coder-Vippro/ChatGPT-Discord-Bot"
SEED_COMMIT = "ee9d114"
GUIDE = "docs/CODE_INTERPRETER_GUIDE.md"

SALES_CSV = b"month,units,revenue\n1,10,100.0\n2,12,130.5\n3,9,95.25\n"

# What the guide's snippets take for granted: a db handler (ignored by
# interpd_compat), data.csv in the working directory, csv_bytes; and the
# names the migration section leaves to the reader.
PREAMBLE = '''\
class BotDatabase:          # the bot's db_handler; interpd_compat ignores it
    pass

db = BotDatabase()
with open('data.csv', 'rb') as f:
    csv_bytes = f.read()
'''

EXAMPLES = [
    {"title": "1. Code Execution", "show": ["result"], "code": '''\
from interpd_compat import execute_code

result = await execute_code(
    code="print('Hello, world!')",
    user_id=123456789
)
'''},
    {"title": "2. File Upload & Management", "show": ["result", "file_id",
                                                      "files"], "code": '''\
from interpd_compat import upload_file, list_user_files

# Upload a CSV file
with open('data.csv', 'rb') as f:
    result = await upload_file(
        user_id=123456789,
        file_data=f.read(),
        filename='data.csv',
        file_type='csv',
        db_handler=db
    )

file_id = result['file_id']

# List user's files
files = await list_user_files(user_id=123456789, db_handler=db)
'''},
    {"title": "3. Code with File Access", "show": ["result"], "code": '''\
# Upload a CSV file first
result = await upload_file(user_id=123, file_data=csv_bytes, filename='sales.csv')
file_id = result['file_id']

# Execute code that uses the file
code = """
# load_file() is automatically available
df = load_file('""" + file_id + """')
print(df.head())
print(f"Total rows: {len(df)}")
"""

result = await execute_code(
    code=code,
    user_id=123,
    user_files=[file_id],
    db_handler=db
)
'''},
    {"title": "4. Package Installation", "show": ["result"],
     "note": "`sns.load_dataset('tips')` downloads the data set from "
             "GitHub. interpd's standard policy gives the code no network, "
             "so this example fails here with a network error (the seed "
             "ran code with the bot's own network access). Both packages "
             "are on interpd's allowlist and already installed, so they "
             "are listed in `installed_packages`.", "code": '''\
result = await execute_code(
    code="""
import seaborn as sns
import matplotlib.pyplot as plt

tips = sns.load_dataset('tips')
plt.figure(figsize=(10, 6))
sns.scatterplot(data=tips, x='total_bill', y='tip')
plt.savefig('plot.png')
print('Plot saved!')
""",
    user_id=123,
    install_packages=['seaborn', 'matplotlib']
)
'''},
    {"title": "5. Data Analysis (verbatim: 'file_id_here')", "show":
     ["result"],
     "note": "As written, with the guide's placeholder id: no such file, "
             "so it is left out of the run (the seed logged and skipped it "
             "too) and `load_file` fails inside the code.", "code": '''\
# The load_file() helper automatically detects file types
code = """
# Load CSV
df = load_file('file_id_here')

# Basic analysis
print(f"Shape: {df.shape}")
print(f"Columns: {df.columns.tolist()}")
print(df.describe())

# Correlation analysis
import seaborn as sns
import matplotlib.pyplot as plt

plt.figure(figsize=(12, 8))
sns.heatmap(df.corr(), annot=True, cmap='coolwarm')
plt.savefig('correlation.png')
"""

result = await execute_code(code=code, user_id=123, user_files=['file_id_here'])

# Visualizations are returned in result['generated_files']
for file in result.get('generated_files', []):
    print(f"Generated: {file['filename']}")
    # file['data'] contains the image bytes
'''},
    {"title": "5. Data Analysis (placeholder filled in)", "show": ["result"],
     "note": "The same snippet with `'file_id_here'` replaced by the id of "
             "sales.csv uploaded in example 3 (the only change).",
     "fill": "file_id_here", "code": None},
    {"title": "File Expiration: Automatic Cleanup", "show": [], "code": '''\
from interpd_compat import cleanup_expired_files

# Run cleanup (should be scheduled periodically)
deleted_count = await cleanup_expired_files(db_handler=db)
print(f"Cleaned up {deleted_count} expired files")
'''},
    {"title": "File Expiration: Manual File Deletion", "show": ["success"],
     "note": "The guide's id is a placeholder: no such file, so False, as "
             "in the seed.", "code": '''\
from interpd_compat import delete_user_file

success = await delete_user_file(
    file_id='user_123_1234567890_abc123',
    user_id=123,
    db_handler=db
)
'''},
    {"title": "Status Check", "show": ["status"], "code": '''\
from interpd_compat import get_interpreter_status

status = await get_interpreter_status(db_handler=db)
'''},
    {"title": "Integration Example", "show": [], "code": '''\
from interpd_compat import (
    execute_code,
    upload_file,
    list_user_files,
    cleanup_expired_files
)

async def handle_user_request(user_id: int, code: str, files: list, db):
    """Handle a code execution request from a user."""
    
    # Upload any files the user provided
    uploaded_files = []
    for file_data, filename in files:
        result = await upload_file(
            user_id=user_id,
            file_data=file_data,
            filename=filename,
            db_handler=db
        )
        if result['success']:
            uploaded_files.append(result['file_id'])
    
    # Execute the code with file access
    result = await execute_code(
        code=code,
        user_id=user_id,
        user_files=uploaded_files,
        install_packages=['pandas', 'matplotlib'],
        timeout=60,
        db_handler=db
    )
    
    # Check for errors
    if not result['success']:
        return f"❌ Error: {result['error']}"
    
    # Format output
    response = f"✅ Execution completed in {result['execution_time']:.2f}s\\n\\n"
    
    if result['output']:
        response += f"**Output:**\\n```\\n{result['output']}\\n```\\n"
    
    # Handle generated images
    for file in result.get('generated_files', []):
        if file['type'] == 'image':
            response += f"\\n📊 Generated: {file['filename']}\\n"
            # file['data'] contains image bytes - save or send to Discord
    
    return response

# Periodic cleanup (run every hour)
async def scheduled_cleanup(db):
    """Clean up expired files."""
    deleted = await cleanup_expired_files(db_handler=db)
    if deleted > 0:
        logging.info(f"Cleaned up {deleted} expired files")
'''},
    {"title": "Integration Example: calling it", "show": ["reply"],
     "note": "Not in the guide: a call of the guide's `handle_user_request` "
             "and `scheduled_cleanup` with a user's CSV (the code finds it "
             "by name: interpd's `load_file` takes an id or a filename).",
     "code": '''\
import logging
reply = await handle_user_request(
    user_id=987654321,
    code="""
import matplotlib.pyplot as plt
df = load_file('sales.csv')
print(df.revenue.sum())
df.plot(x='month', y='revenue')
plt.savefig('revenue.png')
""",
    files=[(csv_bytes, 'sales.csv')],
    db=db,
)
print(reply)
await scheduled_cleanup(db)
'''},
    {"title": "Troubleshooting: Performance Issues", "show": [], "code": '''\
status = await get_interpreter_status(db_handler=db)
print(f"Total files: {status['total_user_files']}")
print(f"Total size: {status['total_file_size_mb']} MB")

# Force cleanup
deleted = await cleanup_expired_files(db_handler=db)
print(f"Cleaned up: {deleted} files")
'''},
    {"title": "Migration: Update function calls (New)", "show": ["result"],
     "note": "`code` and `user_id` are the reader's; here "
             "`code = \"print(2 + 2)\"`, `user_id = 42`.",
     "setup": "code = \"print(2 + 2)\"\nuser_id = 42\n", "code": '''\
result = await execute_code(
    code=code,
    user_id=user_id,
    db_handler=db
)
'''},
    {"title": "Migration: Handle file uploads (New)", "show": ["result"],
     "note": "`name` is the reader's (`name = \"notes.txt\"`); `bytes` is "
             "left as the guide wrote it, so `file_data` is the type "
             "`bytes`, not data: both modules answer an error dict (the "
             "seed's message was \"object of type 'type' has no len()\").",
     "setup": "name = \"notes.txt\"\n", "code": '''\
result = await upload_file(
    user_id=user_id,
    file_data=bytes,
    filename=name,
    db_handler=db
)
'''},
]

NOT_RUN = [
    ("Troubleshooting: Packages Won't Install / Files Not Found",
     "call `get_package_manager()` and `get_file_manager()`, the seed "
     "module's internal classes (its venv and its Mongo collection), which "
     "interpd_compat does not provide: interpd keeps both."),
    ("Migration: Schedule cleanup", "a discord.py `@tasks.loop` in a running "
     "bot; its body is `cleanup_expired_files(db_handler=db)`, run above."),
]


def _plain(v):
    """Values as shown in the transcript: bytes and long lists
    abbreviated."""
    if isinstance(v, (bytes, bytearray)):
        head = bytes(v[:16])
        return "<%d bytes: %r%s>" % (len(v), head, "..." if len(v) > 16
                                     else "")
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        if len(v) > 12:  # the status's 100-odd package names
            return [_plain(x) for x in v[:10]] + [
                "... %d more" % (len(v) - 10)]
        return [_plain(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    return v


def show(value):
    return pprint.pformat(_plain(value), width=100, sort_dicts=False)


async def _run_one(src, ns):
    code = compile(src, "<guide>", "exec",
                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = eval(code, ns)  # the guide's snippet, verbatim
        if value is not None:
            await value
    return out.getvalue()


async def run_examples(workdir):
    """Run every example in ``workdir`` (data.csv is written there);
    returns ``[{title, code, note, stdout, shown: {name: value}}]``.  The
    namespace of the run is in each entry's ``ns``."""
    old = os.getcwd()
    os.chdir(workdir)
    try:
        with open("data.csv", "wb") as f:
            f.write(SALES_CSV)
        ns = {"__name__": "guide"}
        await _run_one(PREAMBLE, ns)
        entries = []
        last = None
        for ex in EXAMPLES:
            src = ex["code"]
            if src is None:  # the previous snippet, its placeholder filled
                src = last.replace(ex["fill"], ns["sales_csv_id"])
            if ex.get("setup"):
                await _run_one(ex["setup"], ns)
            stdout = await _run_one(src, ns)
            if ex["title"].startswith("3."):
                ns["sales_csv_id"] = ns["file_id"]
            entries.append({"title": ex["title"], "code": src,
                            "setup": ex.get("setup"),
                            "note": ex.get("note"), "stdout": stdout,
                            "shown": {k: ns.get(k) for k in ex["show"]},
                            "ns": ns})
            last = src
        return entries
    finally:
        os.chdir(old)


def write_transcript(path, entries, header):
    """The Markdown transcript of ``entries``; ``header`` comes first."""
    lines = [header.rstrip(), ""]
    for e in entries:
        lines += ["## " + e["title"], ""]
        if e["note"]:
            lines += [e["note"], ""]
        if e["setup"]:
            lines += ["Set first:", "", "```python", e["setup"].rstrip(),
                      "```", ""]
        lines += ["````python", e["code"].rstrip(), "````", ""]
        if e["stdout"]:
            lines += ["Printed:", "", "````", e["stdout"].rstrip(), "````",
                      ""]
        for name, value in e["shown"].items():
            lines += ["`%s`:" % name, "", "````python", show(value),
                      "````", ""]
    lines += ["## Not run", ""]
    for title, why in NOT_RUN:
        lines += ["- %s: %s" % (title, why)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")

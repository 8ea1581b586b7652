"""README.md's code runs as written, and the docs match the code.

Every ```python block of README.md runs, in order, in one fresh Python
process (``sys.executable``) against a real ``gostore-master`` started here
with ``--enable_offload`` (the SSD snippet needs it). The only change made to
the snippets is the master's address: ``127.0.0.1:50051`` becomes the
address of that master. Each block runs under README.md's own file name and
line numbers, so a traceback points at the README line that failed.

Output is checked through the README itself: a line
``print(...)  # -> text`` promises that the print writes ``text``; the
process' stdout must be exactly those promises, in order. Every block must
make at least one such promise or an ``assert``.

The ```sh blocks are checked without running them: ``make`` targets exist
in the Makefile, ``gostore-master`` flags in flagtable.go, ``pip install``
extras in pyproject.toml, anything else on PATH or in the tree.

The docs/ pages are checked against the code they describe: the master flags
against flagtable.go, the environment variables against the sources that read
them, relative links against the tree (docs/python-api.md against the package:
tests/test_docs.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from typing import List, Tuple

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
DOC_PAGES = ("python-api.md", "ssd-tier.md", "operations.md", "master-flags.md")
README_MASTER = "127.0.0.1:50051"  # the address the snippets name
EXPECT = re.compile(r"^\s*print\(.*#\s*->\s*(.*?)\s*$")
RUN_TIMEOUT = 240

# The child: exec each block in one namespace, compiled as README.md at its
# own line numbers, so tracebacks quote the README.
RUNNER = textwrap.dedent(
    """
    import json, sys
    path, blocks_file = sys.argv[1], sys.argv[2]
    with open(blocks_file) as f:
        blocks = json.load(f)
    ns = {"__name__": "__main__"}
    for line, code in blocks:
        exec(compile("\\n" * (line - 1) + code, path, "exec"), ns)
        sys.stdout.flush()
    """
)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def all_fenced_blocks(text: str) -> List[Tuple[int, str, str]]:
    """``(first line number, language, code)`` of every fenced block, in order."""
    out: List[Tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        assert j < len(lines), f"line {i + 1}: unclosed code fence"
        out.append((start + 1, m.group(1), textwrap.dedent("\n".join(lines[start:j]) + "\n")))
        i = j + 1
    return out


def fenced_blocks(text: str, lang: str) -> List[Tuple[int, str]]:
    """``(first line number, code)`` of every ```lang block, in order."""
    return [(line, code) for line, lg, code in all_fenced_blocks(text) if lg == lang]


def python_blocks() -> List[Tuple[int, str]]:
    blocks = fenced_blocks(_read(README), "python")
    assert blocks, "README.md has no ```python blocks"
    return blocks


def expected_output(blocks: List[Tuple[int, str]]) -> List[str]:
    return [m.group(1) for _, code in blocks for m in map(EXPECT.match, code.splitlines()) if m]


# ---------------------------------------------------------------------------
# the Python snippets


def test_readme_blocks_check_their_results():
    """Each snippet shows what it produces: a ``print(...)  # -> text`` or
    an assert. A snippet that checks nothing could print garbage unseen."""
    for line, code in python_blocks():
        assert expected_output([(line, code)]) or re.search(r"^\s*assert ", code, re.M), (
            f"README.md:{line}: the block neither prints an expected value "
            f"(print(...)  # -> value) nor asserts anything"
        )


def test_readme_python_runs(master_factory, tmp_path):
    """All ```python blocks, in order, in one process, against a master."""
    blocks = python_blocks()
    assert any(README_MASTER in code for _, code in blocks), (
        f"no README snippet names the master {README_MASTER}: the snippets "
        "would not talk to the master this test starts"
    )
    master = master_factory(enable_offload=True)
    blocks = [(line, code.replace(README_MASTER, master.addr)) for line, code in blocks]
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(blocks))
    runner = tmp_path / "run_readme.py"
    runner.write_text(RUNNER)
    scratch = tmp_path / "tmp"  # the snippets' tempfile.mkdtemp() lands here
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    env.pop("GOSTORE_TRANSPORT", None)
    env.pop("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", None)
    try:
        proc = subprocess.run(
            [sys.executable, str(runner), README, str(blocks_file)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=RUN_TIMEOUT, cwd=str(tmp_path), env=env,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the README snippets did not finish within {RUN_TIMEOUT}s; "
                    f"stdout:\n{e.stdout}\nstderr:\n{(e.stderr or '')[-6000:]}", pytrace=False)
    report = (f"stdout:\n{proc.stdout}\nstderr (tail):\n{proc.stderr[-6000:]}\n"
              f"master log (tail):\n{master.log()[-2000:]}")
    assert proc.returncode == 0, f"the README snippets failed (exit {proc.returncode})\n{report}"
    want = expected_output(blocks)
    got = proc.stdout.splitlines()
    assert got == want, (
        "the README snippets printed something other than their `# -> ...` comments say\n"
        f"expected: {want}\nprinted:  {got}\n{report}"
    )


# ---------------------------------------------------------------------------
# the shell snippets


def _make_targets() -> set:
    text = _read(os.path.join(ROOT, "Makefile"))
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


def _flag_table() -> str:
    return _read(os.path.join(ROOT, "gostore", "master", "server", "flagtable.go"))


def _master_flags() -> set:
    """Every flag the master accepts."""
    flags = set(re.findall(r'(?:\{name: |mc\(|gflag\(|glog\()"([a-z0-9_]+)"', _flag_table()))
    assert len(flags) > 130, f"{len(flags)} flags found in flagtable.go"
    return flags


def _acting_flags() -> set:
    """The flags that take effect: those with a help text (--help lists them)."""
    flags = set(re.findall(r'\{name: "([a-z0-9_]+)"[^{}]*?help:', _flag_table()))
    assert flags, "no flags with help found in flagtable.go"
    return flags


def _extras() -> set:
    text = _read(os.path.join(ROOT, "pyproject.toml"))
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        m = re.search(r"^\[project\.optional-dependencies\]\n((?:[^\[].*\n?)*)", text, re.M)
        return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", m.group(1), re.M)) if m else set()
    return set(tomllib.loads(text)["project"].get("optional-dependencies", {}))


def _check_command(where: str, words: List[str]) -> None:
    cmd, args = words[0], words[1:]
    where = f"{where}: {' '.join(words)}"
    if cmd == "make":
        missing = [a for a in args if not a.startswith("-") and a not in _make_targets()]
        assert not missing, f"{where}: no Makefile target {missing}"
    elif cmd == "gostore-master":
        flags = _master_flags()
        for a in args:
            name = a.lstrip("-").split("=", 1)[0]
            assert a.startswith("--") and name in flags, f"{where}: gostore-master has no flag {a}"
    elif cmd in ("pip", "pip3"):
        assert args[:1] == ["install"], where
        for a in args[1:]:
            m = re.fullmatch(r"(?:\.|gostore)\[([a-z0-9_,-]+)\]", a)
            if m:
                missing = set(m.group(1).split(",")) - _extras()
                assert not missing, f"{where}: pyproject.toml has no extra {missing}"
            else:
                assert a == "." or a.startswith("-"), f"{where}: what is {a!r}?"
    elif cmd in ("python", "python3"):
        for s in [a for a in args if a.endswith(".py")]:
            assert os.path.exists(os.path.join(ROOT, s)), f"{where}: {s} does not exist"
    else:
        assert shutil.which(cmd) or os.path.exists(os.path.join(ROOT, cmd)), (
            f"{where}: {cmd} is neither on PATH nor in the tree"
        )


def _pages() -> List[Tuple[str, str]]:
    """(name relative to the root, text) of README.md and the docs pages."""
    return [("README.md", _read(README))] + [(f"docs/{n}", _doc(n)) for n in DOC_PAGES]


def test_shell_commands_exist():
    """The commands of the ```sh blocks of README.md and docs/ exist."""
    assert fenced_blocks(_read(README), "sh"), "README.md has no ```sh blocks"
    for name, text in _pages():
        for line, code in fenced_blocks(text, "sh"):
            for k, cmd in enumerate(code.splitlines()):
                cmd = cmd.split("#", 1)[0].strip()
                if cmd:
                    _check_command(f"{name}:{line + k}", shlex.split(cmd))


def test_docs_python_blocks_compile():
    """The ```python examples of docs/ that do not run here (they name hosts
    of an example cluster) are at least valid Python."""
    for name, text in _pages()[1:]:
        for line, code in fenced_blocks(text, "python"):
            compile("\n" * (line - 1) + code, name, "exec")


# ---------------------------------------------------------------------------
# pages whose recipes run as written: shell and Python, in page order

# Each page, and what is rewritten before a block runs: the example
# cluster's hosts become this one, /etc/gostore a scratch directory, and
# the master's addresses those of the master the page's last recipe
# started (or, before one, a master this test starts).
RUN_PAGES = ("docs/security.md", "docs/operations.md")
EXAMPLE_HOSTS = ("10.0.0.1", "10.0.0.2")
EXAMPLE_RPC = ("10.0.0.1:50051", README_MASTER)
EXAMPLE_HTTP = ("10.0.0.1:9003", "127.0.0.1:9003")

# Runs before each ```sh block (bash -e -o pipefail): gostore-master
# starts the packaged master in the background on free ports (the page's
# --rpc_port/--metrics_port are overridden), waits for its "listening"
# line and records its addresses in $DOCRUN/master.addr; the test stops
# every master it started.
SH_PRELUDE = textwrap.dedent(
    """
    gostore-master() {
        local out="$DOCRUN/master.$RANDOM.out" i
        "$GOSTORE_MASTER_BIN" "$@" --rpc_port=0 --metrics_port=0 >"$out" 2>>"$DOCRUN/master.log" &
        echo $! >>"$DOCRUN/master.pids"
        for i in $(seq 1 300); do
            if grep -q '^gostore-master listening' "$out"; then
                sed -n 's/.* rpc=\\([^ ]*\\) http=\\([^ ]*\\).*/\\1 \\2/p' "$out" >"$DOCRUN/master.addr"
                return 0
            fi
            kill -0 $! 2>/dev/null || { echo "gostore-master exited:" >&2; tail -5 "$DOCRUN/master.log" >&2; return 1; }
            sleep 0.05
        done
        echo "gostore-master did not start within 15 s" >&2
        return 1
    }
    """
)


def _builds(code: str) -> bool:
    """A shell block that builds or installs (``make ...``, ``pip install``)
    is checked by test_shell_commands_exist, not run here."""
    return any(re.match(r"\s*(make|pip3?)\s", ln) for ln in code.splitlines())


def _rewrite(code: str, scratch: str, rpc: str, http: str) -> str:
    code = code.replace("/etc/gostore", os.path.join(scratch, "etc", "gostore"))
    for a in EXAMPLE_RPC:
        code = code.replace(a, rpc)
    for a in EXAMPLE_HTTP:
        code = code.replace(a, http)
    for h in EXAMPLE_HOSTS:
        code = code.replace(h, "127.0.0.1")
    return code


@pytest.mark.parametrize("page", RUN_PAGES)
def test_doc_recipes_run(page, master_factory, tmp_path):
    """Every ```sh and ```python block of the page, in order: shell blocks
    in bash, each Python block as a whole program in a fresh process (it
    must assert what it shows), against real masters."""
    for tool in ("bash", "openssl", "curl"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed here")
    from conftest import master_binary

    text = _read(os.path.join(ROOT, page))
    blocks = [(line, lang, code) for line, lang, code in all_fenced_blocks(text)
              if lang == "python" or (lang == "sh" and not _builds(code))]
    assert blocks, f"{page} has no ```sh or ```python blocks"
    for line, lang, code in blocks:
        if lang == "python":
            assert re.search(r"^\s*assert ", code, re.M) or expected_output([(line, code)]), (
                f"{page}:{line}: the block asserts nothing: a whole program shows its result with an assert"
            )
    run = tmp_path / "run"
    run.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), TMPDIR=str(tmp_path), DOCRUN=str(run),
               GOSTORE_MASTER_BIN=master_binary(),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for k in ("GOSTORE_TRANSPORT", "GOSTORE_AUTH_SECRET_FILE", "GOSTORE_ALLOW_INSECURE"):
        env.pop(k, None)
    first = master_factory()
    rpc, http = first.addr, first.http_addr
    try:
        for line, lang, code in blocks:
            code = _rewrite(code, str(tmp_path), rpc, http)
            where = f"{page}:{line} ({lang})"
            if lang == "sh":
                args = ["bash", "-e", "-o", "pipefail", "-c", SH_PRELUDE + code]
            else:
                prog = tmp_path / f"block_{line}.py"
                prog.write_text("\n" * (line - 1) + code)  # tracebacks give the page's line numbers
                args = [sys.executable, str(prog)]
            try:
                proc = subprocess.run(args, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                                      timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired as e:
                pytest.fail(f"{where} did not finish within {RUN_TIMEOUT}s:\n{e.stderr}", pytrace=False)
            log = (run / "master.log").read_text()[-2000:] if (run / "master.log").exists() else ""
            assert proc.returncode == 0, (
                f"{where} failed as written (exit {proc.returncode}):\n--- block as run:\n{code}"
                f"--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-4000:]}\n--- masters' log:\n{log}")
            if (run / "master.addr").exists():
                rpc, http = (run / "master.addr").read_text().split()
    finally:
        pids = (run / "master.pids").read_text().split() if (run / "master.pids").exists() else []
        for pid in pids:
            try:
                os.kill(int(pid), 15)
            except (ProcessLookupError, ValueError):
                pass


# ---------------------------------------------------------------------------
# links and the docs pages against the code


def _doc(name: str) -> str:
    path = os.path.join(DOCS, name)
    assert os.path.exists(path), f"docs/{name} is missing"
    return _read(path)


def test_readme_links_and_paths_exist():
    """Relative links of README.md and docs/ point at files of the tree; the
    README names no file users cannot see and every file path it names in
    backticks exists."""
    text = _read(README)
    assert "shared/" not in text, "README.md points into shared/, which users never see"
    for name in DOC_PAGES:
        assert f"(docs/{name})" in text, f"README.md does not link docs/{name}"
    pages = [(README, text)] + [(os.path.join(DOCS, n), _doc(n)) for n in DOC_PAGES]
    for path, body in pages:
        base = os.path.dirname(path)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", body):
            if re.match(r"[a-z]+://", target):
                continue
            assert os.path.exists(os.path.normpath(os.path.join(base, target))), (
                f"{os.path.relpath(path, ROOT)} links {target}, which does not exist"
            )
        assert "shared/docs" not in body, f"{os.path.relpath(path, ROOT)} points into shared/"
    for p in re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|md|sh))`", text):
        assert os.path.exists(os.path.join(ROOT, p)), f"README.md names {p}, which does not exist"


def test_docs_master_flags_match_flag_table():
    flags, acting = _master_flags(), _acting_flags()
    text = _doc("operations.md")
    documented = set(re.findall(r"`--([a-z0-9_]+)", text))
    missing = acting - documented
    assert not missing, f"flags that act missing from docs/operations.md: {missing}"
    unknown = documented - flags - {"name", "noname"}  # `--name=value`: the form
    assert not unknown, f"docs/operations.md documents flags flagtable.go lacks: {unknown}"
    rows = set(re.findall(r"^\| `--([a-z0-9_]+)` \|", _doc("master-flags.md"), re.M))
    assert rows == flags, f"docs/master-flags.md's tables lack {flags - rows}, or name {rows - flags}"


def _env_names(prefix: str) -> set:
    names = set()
    for top in ("python/gostore", "bindings", "gostore"):
        for d, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith("_test.go") or not f.endswith((".go", ".py")):
                    continue
                names |= set(re.findall(rf"\b({prefix}[A-Z0-9_]*[A-Z0-9])\b", _read(os.path.join(d, f))))
    return names


def test_docs_environment_variables():
    """Every GOSTORE_* and MOONCAKE_* variable the package reads is documented."""
    ops = _doc("operations.md")
    ssd = _doc("ssd-tier.md")
    missing = {n for n in _env_names("GOSTORE_") if n not in ops}
    assert not missing, f"GOSTORE_ variables missing from docs/operations.md: {sorted(missing)}"
    missing = {n for n in _env_names("MOONCAKE_") if n not in ssd and n not in ops}
    assert not missing, f"MOONCAKE_ variables missing from docs/: {sorted(missing)}"

"""docs/python-api.md describes the package as it is.

Read from the package itself, so a name added to the code and not to the
page fails here, saying what is missing and where:

- every name of ``gostore.__all__`` is named on the page;
- every public method and attribute of each class of ``__all__``
  (``MooncakeDistributedStore`` first) is named on the page, in backticks;
- every signature the page gives in backticks (`` `put_from(key,
  buffer_ptr, size, config=None)` ``) or in a ```text block has the
  parameters of the code: names, order, defaults (callables that take
  ``*args``/``**kwargs`` are compared where the code lists their
  parameters: ``setup``);
- ``setup``'s keyword options (``_SETUP_EXTRA_KWARGS``) each have a row in
  the options table;
- the error table has one row per ``gostore.ErrorCode`` member with its
  number, no row for a code that does not exist, and a code said to be
  "not returned by this build" is not used by the library's sources;
- no sentence that says something is missing ("not provided", "no store
  method returns...") names an export, method or option the package has.
"""

from __future__ import annotations

import ast
import enum
import inspect
import os
import re
from typing import Dict, Iterator, List, Optional, Tuple

import gostore
from gostore import ErrorCode
from gostore.store import distributed_store as store_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = "docs/python-api.md"


def _page() -> str:
    with open(os.path.join(ROOT, PAGE), encoding="utf-8") as f:
        return f.read()


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _named(text: str, name: str) -> bool:
    """``name`` in backticks: `name`, `name(...)`, `obj.name`, `name` with a
    space after (``\\`upsert_tensor\\`, ...``)."""
    return re.search(r"`(?:[\w.]*\.)?" + re.escape(name) + r"(?:`|\(| |\[)", text) is not None


def _classes() -> List[Tuple[str, type]]:
    return [(n, getattr(gostore, n)) for n in gostore.__all__ if inspect.isclass(getattr(gostore, n))]


def _own_public(cls: type) -> List[str]:
    """The public names a class of the package defines (itself or through
    a base of the package), and an enum's members."""
    names = set()
    for k in dir(cls):
        if k.startswith("_"):
            continue
        if any(k in vars(b) for b in cls.__mro__ if b.__module__.startswith("gostore")):
            names.add(k)
    if issubclass(cls, enum.Enum):
        names |= set(cls.__members__)
    return sorted(names)


def test_every_exported_name_is_documented():
    text = _page()
    missing = [n for n in gostore.__all__ if not _named(text, n)]
    assert not missing, (
        f"{PAGE} does not name these exports of gostore.__all__ (in backticks): {missing}. "
        "Describe each where its topic is (and in the list of names at the top)."
    )


def test_every_public_method_and_attribute_is_documented():
    text = _page()
    missing = {}
    for name, cls in _classes():
        gone = [k for k in _own_public(cls) if not _named(text, k)]
        if gone:
            missing[name] = gone
    assert not missing, (
        f"{PAGE} does not name these public methods/attributes (in backticks, e.g. a table row "
        "`name(args)`): " + "; ".join(f"{c}: {', '.join(v)}" for c, v in missing.items())
    )


# ---------------------------------------------------------------------------
# signatures


def _split_params(args: str) -> List[str]:
    """Top-level comma split: ``a, b=[1, 2], c="x,y"``."""
    out, depth, cur, quote = [], 0, "", ""
    for ch in args:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _value(text: str):
    """A default as the page writes it: a literal, simple arithmetic
    (``256 * 1024``) or a size with a unit (``8 MiB``)."""
    m = re.fullmatch(r"(\d+) ?(KiB|MiB|GiB)", text)
    if m:
        return int(m.group(1)) * _UNITS[m.group(2)]

    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Pow, ast.LShift)):
            a, b = ev(node.left), ev(node.right)
            return {ast.Mult: a * b, ast.Add: a + b, ast.Pow: a ** b, ast.LShift: a << b}[type(node.op)]
        if isinstance(node, (ast.List, ast.Tuple)):
            return type(node.elts)(ev(e) for e in node.elts) if isinstance(node, ast.List) else tuple(
                ev(e) for e in node.elts)
        raise ValueError(text)

    return ev(ast.parse(text, mode="eval").body)


def _doc_params(args: str) -> List[Tuple[str, Optional[str]]]:
    out = []
    for p in _split_params(args):
        if p in ("*", "/"):
            continue
        name, eq, default = p.partition("=")
        out.append((name.strip(), default.strip() if eq else None))
    return out


def _code_params(sig: inspect.Signature) -> List[Tuple[str, object]]:
    out = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append((prefix + p.name, p.default))
    return out


_ANY = object()  # a default the Python side does not know (Go applies it)


def _signatures() -> Dict[str, List[Tuple[str, inspect.Signature]]]:
    """Every callable of the package by the name the page would use: the
    classes and functions of ``__all__`` and the methods of its classes."""
    found: Dict[str, List[Tuple[str, inspect.Signature]]] = {}

    def add(name: str, owner: str, fn) -> None:
        try:
            found.setdefault(name, []).append((owner, inspect.signature(fn)))
        except (TypeError, ValueError):
            pass

    for name in gostore.__all__:
        obj = getattr(gostore, name)
        if inspect.isclass(obj):
            if issubclass(obj, enum.Enum):
                continue  # TaskStatus(7) is a lookup, not a signature
            add(name, "gostore", obj)
            for k in _own_public(obj):
                raw = inspect.getattr_static(obj, k)
                if isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
                    add(k, name, getattr(obj, k))
        elif callable(obj):
            add(name, "gostore", obj)
    # setup(*args, **kwargs) takes Mooncake's thirteen parameters, in
    # _SETUP_NAMES' order; the first seven are required, Go gives the others
    # their defaults (not compared here).
    mooncake_setup = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in store_mod._SETUP_NAMES[:7]]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=_ANY)
           for n in store_mod._SETUP_NAMES[7:]]
        + [inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD)])
    found.setdefault("setup", []).append(("MooncakeDistributedStore", mooncake_setup))
    return found


def _documented_calls(text: str) -> Iterator[Tuple[int, str, str]]:
    """(line, name, args) of each `name(args)` in backticks and of each
    ```text block that is one call."""
    for m in re.finditer(r"`(?:\w+\.)*(\w+)\(([^`]*)\)`", text):
        yield _line(text, m.start()), m.group(1), m.group(2)
    for m in re.finditer(r"```text\n(\w+)\((.*?)\)\n```", text, re.S):
        yield _line(text, m.start()) + 1, m.group(1), " ".join(m.group(2).split())


def _mismatch(doc: List[Tuple[str, Optional[str]]], code: List[Tuple[str, object]]) -> Optional[str]:
    if [n for n, _ in doc] != [n for n, _ in code]:
        return f"parameters ({', '.join(n for n, _ in code)})"
    for (name, text), (_, default) in zip(doc, code):
        if name.startswith("*"):
            continue
        if (text is None) != (default is inspect.Parameter.empty):
            return f"{name} " + ("has no default" if text is not None else f"defaults to {default!r}")
        if text is not None and default is not _ANY:
            try:
                value = _value(text)
            except (ValueError, SyntaxError):
                return f"{name}'s default {text} is not a value"
            if value != default:
                return f"{name} defaults to {default!r}, not {text}"
    return None


def _free(sig: inspect.Signature) -> bool:
    """Takes only ``*args``/``**kwargs`` (``ReplicateConfig(**fields)``,
    ``EmbeddedMaster(**flags)``): the page shows calls of it by example."""
    return all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()
               if p.name not in ("self", "cls"))


def test_documented_signatures_match_the_code():
    text = _page()
    sigs = _signatures()
    wrong = []
    for line, name, args in _documented_calls(text):
        if name not in sigs or "..." in args:
            continue
        candidates = [c for c in sigs[name] if not _free(c[1])]
        if name == "setup":  # the Mooncake form; setup(config) is the dict form
            candidates = [c for c in candidates if "local_hostname" in c[1].parameters]
            if args in ("config", "config=config"):
                continue
        if not candidates:
            continue
        doc = _doc_params(args)
        whys = [(owner, _mismatch(doc, _code_params(sig))) for owner, sig in candidates]
        if all(why is not None for _, why in whys):
            wrong.append(f"{PAGE}:{line}: `{name}({args})` -- the code's "
                         + " / ".join(f"{owner}.{name}: {why}" for owner, why in whys))
    assert not wrong, "signatures on the page differ from the code:\n" + "\n".join(wrong)


def test_setup_options_have_rows():
    text = _page()
    rows = {n for cell in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \|", text, re.M) for n in re.findall(r"`(\w+)`", cell)}
    missing = [k for k in store_mod._SETUP_EXTRA_KWARGS if k not in rows]
    assert not missing, (
        f"{PAGE}: setup() accepts the keyword options {missing} "
        "(gostore/store/distributed_store.py _SETUP_EXTRA_KWARGS) "
        "that the options table under 'setup arguments' has no row for"
    )


# ---------------------------------------------------------------------------
# error codes


def _error_rows(text: str) -> Dict[str, Tuple[int, str, int]]:
    """name -> (number, when, line) of the error table's rows."""
    start = text.index("## Error codes")
    end = text.index("\n## ", start + 1)
    rows = {}
    for m in re.finditer(r"^\| `([A-Z_]+)` \| (-?\d+) \| (.*) \|$", text[start:end], re.M):
        rows[m.group(1)] = (int(m.group(2)), m.group(3), _line(text, start + m.start()))
    return rows


def _sources(top: str, suffix: str) -> Iterator[Tuple[str, str]]:
    for d, _dirs, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if f.endswith(suffix) and not f.endswith("_test.go"):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, ROOT), fh.read()


def _go_name(code: ErrorCode) -> str:
    """wire's constant for a code (codes.go: ErrObjectNotFound = -704)."""
    with open(os.path.join(ROOT, "gostore", "wire", "codes.go"), encoding="utf-8") as f:
        m = re.search(r"^\s*(Err\w+)\s+Code = " + str(int(code)) + r"$", f.read(), re.M)
    assert m, f"gostore/wire/codes.go has no constant for {code.name} ({int(code)})"
    return m.group(1)


def test_error_table_matches_errorcode():
    text = _page()
    rows = _error_rows(text)
    missing = [f"{c.name} | {int(c)}" for c in ErrorCode if c.name not in rows]
    assert not missing, f"{PAGE}'s error table lacks the rows {missing} (gostore.ErrorCode has them)"
    wrong = [f"{PAGE}:{line}: {n} is {v} there, {int(ErrorCode[n])} in gostore.ErrorCode"
             for n, (v, _, line) in rows.items() if n in ErrorCode.__members__ and int(ErrorCode[n]) != v]
    unknown = [f"{PAGE}:{line}: {n}" for n, (_, _, line) in rows.items() if n not in ErrorCode.__members__]
    assert not wrong and not unknown, (
        "the error table disagrees with gostore.ErrorCode:\n" + "\n".join(wrong + [u + " is no member" for u in unknown]))


def test_codes_said_unused_are_unused():
    """A row that says "not returned by this build" is checked against the
    sources: neither Go (but wire/codes.go, which lists them all) nor the
    Python package (but errors.py) may use the code."""
    text = _page()
    sources = [s for s in _sources("gostore", ".go") if not s[0].endswith(os.path.join("wire", "codes.go"))]
    sources += list(_sources("bindings", ".go"))
    sources += [s for s in _sources("python/gostore", ".py") if not s[0].endswith("errors.py")]
    used = []
    for name, (_, when, line) in _error_rows(text).items():
        if "not returned by this build" not in when:
            continue
        code = ErrorCode[name]
        go = re.compile(r"\bwire\." + _go_name(code) + r"\b|\b" + _go_name(code) + r"\b")
        py = re.compile(r"\bErrorCode\." + name + r"\b")
        for path, body in sources:
            if (path.endswith(".go") and go.search(body)) or (path.endswith(".py") and py.search(body)):
                used.append(f"{PAGE}:{line}: {name} is 'not returned by this build', yet {path} uses it")
    assert not used, "\n".join(used)


# Phrases that say something of the package is missing.
_ABSENT = re.compile(r"not provided|not exported|not available|no store method|returned by no method|"
                     r"does not exist here|not in this build", re.I)


def test_no_sentence_calls_a_present_name_absent():
    """A sentence saying something is missing ("not provided", "no store
    method returns...") names no export, method or setup option the
    package has."""
    text = _page()
    present = set(gostore.__all__) | set(_own_public(gostore.MooncakeDistributedStore))
    present |= set(store_mod._SETUP_NAMES) | set(store_mod._SETUP_EXTRA_KWARGS)
    wrong = []
    for m in re.finditer(r"[^.|]*(?:\.(?=\w)[^.|]*)*[.|]", text):
        sentence = " ".join(m.group(0).split())
        if not _ABSENT.search(sentence):
            continue
        named = set(re.findall(r"`(?:[\w.]*\.)?(\w+)", sentence)) & present
        if named:
            wrong.append(f"{PAGE}:{_line(text, m.start())}: says {sorted(named)} are missing, "
                         f"yet the package has them: {sentence[:200]}")
    assert not wrong, "\n".join(wrong)

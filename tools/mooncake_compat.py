#!/usr/bin/env python3
"""Print the Mooncake compatibility table (docs/mooncake-compat.md): every
public method of Mooncake's ``MooncakeDistributedStore`` and every name its
``mooncake.store`` module exports, against gostore's.

The wheel and gostore do not share an interpreter here (the wheel wants its
own virtualenv), so the wheel's side is read by a child process of the
wheel's Python:

    python tools/mooncake_compat.py --wheel-python /path/to/venv/bin/python \\
        > docs/mooncake-compat.md

A method's parameters are compared by name, order and default (the wheel's
come from its pybind11 signatures). Behaviour is not compared here: the
tests pin it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

# Runs under the wheel's Python: its methods' pybind11 signature lines and
# its module's names.
_WHEEL_DUMP = r"""
import json, mooncake.store as s
cls = s.MooncakeDistributedStore
out = {"methods": {}, "module": sorted(n for n in dir(s) if not n.startswith("__"))}
for name in sorted(n for n in dir(cls) if not n.startswith("_")):
    doc = getattr(cls, name).__doc__ or ""
    out["methods"][name] = [l for l in doc.splitlines() if l.strip().startswith(name + "(")
                            or l.strip()[:3].rstrip(".").isdigit() and name + "(" in l]
print(json.dumps(out))
"""

def _top_level_split(text: str) -> List[str]:
    """Split on the commas outside brackets ("a: tuple[int, int], b: int")."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[(" and 1 or (-1 if ch in "])" else 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def wheel_params(sig_line: str) -> List[Tuple[str, Optional[str]]]:
    """(name, default or None) of one pybind11 signature line, without self."""
    inner = sig_line[sig_line.index("(") + 1: sig_line.rindex(") ->") if ") ->" in sig_line else sig_line.rindex(")")]
    params = []
    for part in _top_level_split(inner):
        name, _, rest = part.strip().partition(":")
        default = rest.split(" = ", 1)[1].strip() if " = " in rest else None
        if name != "self":
            params.append((name.strip(), default))
    return params


def _same_names(theirs: List[str], mine: List[str]) -> bool:
    """pybind11's argN are positional-only: any name of ours matches."""
    return len(theirs) == len(mine) and all(
        t == m or re.fullmatch(r"arg\d+", t) for t, m in zip(theirs, mine))


def our_params(fn: Any) -> Optional[List[Tuple[str, Optional[str]]]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return None  # takes anything: compared by the tests
        out.append((p.name, None if p.default is p.empty else repr(p.default)))
    return out


def verdict(wheel_lines: List[str], ours: Any) -> Tuple[str, str]:
    if ours is None:
        return "missing", ""
    mine = our_params(ours)
    if mine is None:
        return "same", "takes the wheel's overloads (checked by the tests)"
    best = ""
    for line in wheel_lines or [""]:
        if not line:
            continue
        theirs = wheel_params(line.split(". ", 1)[-1] if line[:1].isdigit() else line)
        if _same_names([n for n, _ in theirs], [n for n, _ in mine]):
            required_theirs = [i for i, (_, d) in enumerate(theirs) if d is None]
            required_mine = [i for i, (_, d) in enumerate(mine) if d is None]
            if required_theirs == required_mine:
                return "same", ""
            best = "same names, other defaults"
        elif (len(mine) > len(theirs) and _same_names([n for n, _ in theirs], [n for n, _ in mine[:len(theirs)]])
              and all(d is not None for _, d in mine[len(theirs):])):
            return "same", "plus optional " + ", ".join(f"`{n}`" for n, _ in mine[len(theirs):])
        elif not best:
            best = ("parameters differ: wheel (" + ", ".join(n for n, _ in theirs) + "), ours ("
                    + ", ".join(n for n, _ in mine) + ")")
    return ("differs", best) if best else ("same", "")


# What the comparison of names cannot tell.
_NOTES = {
    "load_tensor_from_safetensor": "the wheel's `file_name` has no default after `key=None`, which Python "
                                   "cannot declare; ours defaults it to `\"\"`",
    "MooncakeDistributedNoFRegister": "both calls fail (-1) with a logged reason: no NVMe-oF transport here",
    "_get_pyclient_from_wrapper": "a C++ client handle for Mooncake's C++ EngramStore; ours is Python",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel-python", required=True, help="a Python that imports mooncake.store")
    args = ap.parse_args()
    dump = subprocess.run([args.wheel_python, "-c", _WHEEL_DUMP], check=True, capture_output=True, text=True)
    wheel: Dict[str, Any] = json.loads(dump.stdout.strip().splitlines()[-1])

    import gostore
    from gostore import MooncakeDistributedStore as Ours

    rows = []
    counts = {"same": 0, "differs": 0, "missing": 0}
    for name, lines in wheel["methods"].items():
        v, note = verdict(lines, getattr(Ours, name, None))
        note = "; ".join(x for x in (note, _NOTES.get(name, "")) if x)
        counts[v] += 1
        rows.append(f"| `{name}` | {v} | {note} |")
    extra = sorted(n for n in dir(Ours) if not n.startswith("_") and n not in wheel["methods"])
    mod_rows = []
    mod_counts = {"exported": 0, "missing": 0}
    for name in wheel["module"]:
        v = "exported" if hasattr(gostore, name) else "missing"
        mod_counts[v] += 1
        mod_rows.append(f"| `{name}` | {v} | {_NOTES.get(name, '')} |")

    print("# Compatibility with Mooncake 0.3.13\n")
    print("Generated by `tools/mooncake_compat.py` against `mooncake-transfer-engine-non-cuda==0.3.13.post1`.")
    print("It compares names, parameter order and defaults; behaviour is pinned by the tests")
    print("(`tests/test_sessions.py`, `tests/test_zero_copy.py`, ...). Run it again after any API change.\n")
    print(f"## `MooncakeDistributedStore` methods\n")
    print(f"{len(wheel['methods'])} public methods in the wheel: {counts['same']} same, "
          f"{counts['differs']} differ, {counts['missing']} missing here.\n")
    print("| method | here | note |\n|---|---|---|")
    print("\n".join(rows))
    if extra:
        print(f"\nOnly in gostore: {', '.join('`' + n + '`' for n in extra)}.\n")
    print("## `mooncake.store` module names\n")
    print(f"{len(wheel['module'])} names: {mod_counts['exported']} exported by `gostore`, "
          f"{mod_counts['missing']} missing.\n")
    print("Names with one underscore are helpers Mooncake's own Python modules call (its")
    print("structured-object store reads tensor headers through them).\n")
    print("| name | here | note |\n|---|---|---|")
    print("\n".join(mod_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``gostore-master`` console script: exec the packaged master binary."""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .master import master_binary_path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Replace this process with ``bin/gostore-master`` and the same arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = master_binary_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(
            f"gostore-master: the master binary is missing at {path!r}; reinstall "
            "gostore with `pip install .` (needs the Go toolchain)\n"
        )
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path] + args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

"""Old path of :mod:`gostore.tools.demo`, kept because the Makefile's
``make run`` runs ``python -m gostore.demo`` and bench/bench.py imports
``storage_main`` from it.

Imported, this name is the very module object of the new path, not a copy.
Run with ``-m``, it runs that module's ``main``.
"""

import sys

from .tools import demo as _demo

if __name__ == "__main__":
    sys.exit(_demo.main())
sys.modules[__name__] = _demo

"""Run one test body in a fresh client process, so that a crash of the native
library (a Go panic aborts the whole process) fails that test instead of
killing the pytest run.

    python tests/isolated.py MODULE FUNCTION MASTER_ADDR PREFIX

imports ``MODULE`` (a tests/ module name), sets up a store against
``MASTER_ADDR`` (16 MiB segment) and calls ``FUNCTION(store, PREFIX)``. Exit
status 0 means the body passed; an assertion prints its traceback and exits 1.
The ``run_isolated`` fixture of conftest.py drives it.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback


def main() -> int:
    module, func, master, prefix = sys.argv[1:5]
    try:  # a crash is an expected outcome here: no core dump
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    fn = getattr(importlib.import_module(module), func)
    from gostore import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master)
    if rc != 0:
        print(f"isolated: setup against {master} returned {rc}", flush=True)
        return 3
    try:
        fn(store, prefix)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        return 1
    finally:
        store.close()
    print("isolated: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

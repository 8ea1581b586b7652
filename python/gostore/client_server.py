"""Old path of :mod:`gostore.standalone.server` (``gostore-client``), kept
because ``python -m gostore.client_server`` is how tests/conftest.py,
bench/bench.py and scripts written before the package had subpackages start
the server.

Imported, this name is the very module object of the new path, not a copy:
reading or setting its attributes reads or sets the real ones. Run with
``-m``, it runs that module's ``main``.
"""

import sys

from .standalone import server as _server

if __name__ == "__main__":
    sys.exit(_server.main())
sys.modules[__name__] = _server

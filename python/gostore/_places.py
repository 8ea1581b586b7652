"""Old path of :mod:`gostore.standalone.places`, kept because
docs/standalone.md names ``gostore._places.IDLE_S`` as a setting.

This name is the very module object of the new path, not a copy: setting
``IDLE_S`` here sets the value the standalone client reads.
"""

import sys

from .standalone import places as _places

sys.modules[__name__] = _places

"""Run the unit tests against python/gostore of this checkout, no native lib."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

"""Real-project tests. They share tests/' harness modules (needs, reapi_server): that directory is
put on sys.path here, whichever way pytest was started."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

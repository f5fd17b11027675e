"""Every ``sys.version_info`` gate of the package, in one place."""

from __future__ import annotations

import sys

PY311 = sys.version_info >= (3, 11)
PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
PY314 = sys.version_info >= (3, 14)

__all__ = ["PY311", "PY312", "PY313", "PY314"]

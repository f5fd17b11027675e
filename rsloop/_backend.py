"""Backend choice: ``RSLOOP_BACKEND=auto|uring|poll|asyncio`` and the native import.

``auto`` means io_uring where it works, else the native portable driver, else stdlib
asyncio. If the native module cannot be imported at all, rsloop still imports and hands
out stdlib loops; the reason is kept for :func:`rsloop.backend` and shown in debug mode.
"""

from __future__ import annotations

import os
import sys
import warnings

CHOICES = ("auto", "uring", "poll", "asyncio")

try:
    from . import _rsloop  # noqa: F401

    NATIVE_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    _rsloop = None  # type: ignore[assignment]
    NATIVE_ERROR = f"native module unavailable: {exc}"


def requested() -> str:
    """The backend named by ``RSLOOP_BACKEND`` (default ``auto``)."""
    value = os.environ.get("RSLOOP_BACKEND", "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"RSLOOP_BACKEND={value!r} is not one of {', '.join(CHOICES)}")
    return value


def _debug_enabled() -> bool:
    return bool(sys.flags.dev_mode) or (
        not sys.flags.ignore_environment and bool(os.environ.get("PYTHONASYNCIODEBUG"))
    )


def warn_fallback(reason: str) -> None:
    """The fallback is never silent in debug mode."""
    if _debug_enabled():
        warnings.warn(
            f"rsloop: using the stdlib asyncio loop: {reason}", RuntimeWarning, stacklevel=3
        )

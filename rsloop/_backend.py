"""Backend choice: ``RSLOOP_BACKEND=auto|uring|poll|asyncio`` and the native import.

``auto`` means io_uring where it works, else the native portable driver, else stdlib
asyncio. If the native module cannot be imported at all, rsloop still imports and hands
out stdlib loops; the reason is kept for :func:`rsloop.backend` and shown in debug mode.

``auto`` never hands out a loop that can do less than asyncio's own on the platform: on
Windows, where the native loop has no socket transports, pipes or subprocesses yet
(only fd watchers on sockets), it gives the stdlib Proactor loop (with the reason, which
``python -m rsloop`` prints).
``RSLOOP_BACKEND=poll`` still asks for the native loop there.

A native module built with the ``portable`` cargo feature (``nox -s portable``) runs, on
Linux, the code macOS and the BSDs run in place of each Linux-only mechanism: it has no
io_uring, so ``auto`` gives ``poll``, and :data:`PORTABLE` makes the Python package follow
(children are watched as there, ``rsloop/_unix.py``). docs/platforms.md has the table.
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

# Whether the native core runs the macOS/BSD code paths: always off Linux; on Linux in a
# build with the ``portable`` feature. (No native module: nothing of it runs.)
PORTABLE: bool = bool(_rsloop is not None and _rsloop.BUILD_PORTABLE)


def requested() -> str:
    """The backend named by ``RSLOOP_BACKEND`` (default ``auto``)."""
    value = os.environ.get("RSLOOP_BACKEND", "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"RSLOOP_BACKEND={value!r} is not one of {', '.join(CHOICES)}")
    return value


def _platform() -> str:
    """``sys.platform``; a function so that tests can simulate another platform."""
    return sys.platform


# Platforms where the native loop lacks what asyncio's loop has, and what it lacks.
_PLATFORM_GAPS = {
    "win32": (
        "on Windows rsloop's native loop has no socket transports, sock_* methods, pipes, "
        "subprocesses or signal handlers yet (they raise NotImplementedError; of what needs "
        "sockets it has add_reader/add_writer only); asyncio's Proactor loop has them"
    ),
}


def platform_gap(platform: str | None = None) -> str | None:
    """What the native loop cannot do on ``platform`` (default: this one) that asyncio's
    loop can, or ``None`` where it does everything asyncio's does."""
    return _PLATFORM_GAPS.get(_platform() if platform is None else platform)


def select(choice: str | None = None) -> tuple[str, str | None]:
    """The loop :func:`rsloop.new_event_loop` makes for ``choice`` (default: the
    ``RSLOOP_BACKEND`` setting): ``("native", None)`` for rsloop's ``Loop`` (which picks
    uring or poll itself), or ``("asyncio", reason)`` for the stdlib fallback. Raises
    ``RuntimeError`` when a native backend was named but the native module is missing."""
    choice = requested() if choice is None else choice
    if choice == "asyncio":
        return "asyncio", "RSLOOP_BACKEND=asyncio"
    if NATIVE_ERROR is not None:
        if choice != "auto":
            raise RuntimeError(f"rsloop: RSLOOP_BACKEND={choice} but the {NATIVE_ERROR}")
        return "asyncio", NATIVE_ERROR
    if choice == "auto":
        gap = platform_gap()
        if gap is not None:
            return "asyncio", f"{gap} (RSLOOP_BACKEND=poll forces the native loop)"
    return "native", None


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

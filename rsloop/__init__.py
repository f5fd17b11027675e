"""rsloop: a drop-in asyncio event loop with a Rust core (io_uring, mio).

import rsloop
rsloop.run(main())
asyncio.run(main(), loop_factory=rsloop.new_event_loop)      # Python >= 3.12
asyncio.set_event_loop_policy(rsloop.EventLoopPolicy())
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _backend
from ._profile import profile, start_profile, stop_profile
from ._runner import new_event_loop, run

__version__ = "0.1.0"

# Fast streams (rsloop/_streams.py); asyncio's own where the native module is missing.
_STREAM_NAMES = (
    "StreamReader",
    "StreamWriter",
    "open_connection",
    "start_server",
    "open_unix_connection",
    "start_unix_server",
)

__all__ = (
    "Loop",
    "EventLoopPolicy",
    "BackendInfo",
    "backend",
    "malloc_tuning",
    "new_event_loop",
    "run",
    "profile",
    "start_profile",
    "stop_profile",
    *_STREAM_NAMES,
    "__version__",
)


class BackendInfo(NamedTuple):
    """Which backend a loop runs on (``uring``, ``poll`` or ``asyncio``) and, when it is
    not the one that was preferred, why."""

    name: str
    reason: str | None


def backend(loop: Any = None) -> BackendInfo:
    """The backend of ``loop``; by default of the running loop, or else of the loop
    :func:`new_event_loop` would make now."""
    if loop is None:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
    if loop is None:
        loop = new_event_loop()
        try:
            return BackendInfo(loop.backend, loop.backend_reason)  # type: ignore[attr-defined]
        finally:
            loop.close()
    name = getattr(loop, "backend", None)
    if name is None:
        return BackendInfo("asyncio", f"{type(loop).__name__} is not an rsloop loop")
    return BackendInfo(name, getattr(loop, "backend_reason", None))


def malloc_tuning() -> str:
    """What rsloop did to glibc's malloc thresholds when it made its first native loop
    (``mmap_threshold=... trim_threshold=...``), or ``off: <why>``; see
    ``RSLOOP_TUNE_MALLOC`` in docs/compatibility.md."""
    from . import _malloc

    return _malloc.status()


def __getattr__(name: str) -> Any:
    if name == "Loop":
        if _backend.NATIVE_ERROR is not None:
            from ._fallback import FallbackLoop

            return FallbackLoop
        from ._loop import Loop

        return Loop
    if name in _STREAM_NAMES:
        if _backend.NATIVE_ERROR is not None:
            import asyncio

            return getattr(asyncio, name)
        from . import _streams

        return getattr(_streams, name)
    if name == "testing":  # rsloop.testing.VirtualClock after a plain `import rsloop`
        import importlib

        return importlib.import_module(".testing", __name__)
    if name == "EventLoopPolicy":
        from ._policy import EventLoopPolicy

        return EventLoopPolicy
    raise AttributeError(f"module 'rsloop' has no attribute {name!r}")

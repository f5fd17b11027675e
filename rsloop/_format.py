"""Python helpers the native core calls on slow paths only.

Formatting handles, debug-mode checks and stack capture run once per error, per debug
call or per ``repr()``; keeping them in Python keeps their output identical to asyncio's.
"""

from __future__ import annotations

import sys
from asyncio import coroutines, format_helpers

from ._compat import PY313, iscoroutinefunction


def _source(callback, args, handle) -> str:
    # 3.13+ shows a callback's arguments only in debug mode.
    if PY313:
        return format_helpers._format_callback_source(callback, args, debug=handle._debug)  # type: ignore[call-arg]
    return format_helpers._format_callback_source(callback, args)


def handle_repr(handle) -> str:
    """``repr()`` of a native Handle/TimerHandle, in asyncio's words."""
    info = [type(handle).__name__]
    cancelled = handle._cancelled
    if cancelled:
        info.append("cancelled")
    callback = handle._callback
    if callback is not None:
        info.append(_source(callback, handle._args, handle))
    tb = handle._source_traceback
    if tb:
        frame = tb[-1]
        info.append(f"created at {frame[0]}:{frame[1]}")
    when = getattr(handle, "_when", None)
    if when is not None:
        info.insert(2 if cancelled else 1, f"when={when}")
    return "<{}>".format(" ".join(info))


def callback_source(handle) -> str:
    return _source(handle._callback, handle._args, handle)


def check_callback(callback, method: str) -> None:
    """``BaseEventLoop._check_callback`` (debug mode)."""
    if coroutines.iscoroutine(callback) or iscoroutinefunction(callback):
        raise TypeError(f"coroutines cannot be used with {method}()")
    if not callable(callback):
        raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")


def extract_stack():
    """The creation stack a debug-mode handle keeps, minus the scheduling call itself."""
    # frames: extract_stack <- native call_soon/call_at <- caller; the native frame does not
    # show, so skip just this helper's frame.
    return format_helpers.extract_stack(sys._getframe(1))

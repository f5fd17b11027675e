"""Every ``sys.version_info`` gate of the package, and the asyncio names that moved.

Python 3.14 deprecates (for removal in 3.16) the event loop policy system and
``asyncio.iscoroutinefunction``: reading ``asyncio.DefaultEventLoopPolicy`` or
``asyncio.AbstractEventLoopPolicy`` warns, as do ``asyncio.get_event_loop_policy`` /
``set_event_loop_policy`` and ``asyncio.coroutines.iscoroutinefunction``. rsloop reaches
those classes and that check only through the names below, which read the private
spellings 3.14 keeps (``_DefaultEventLoopPolicy``, ``_iscoroutinefunction``) where they
exist and the old ones, which do not warn there, elsewhere.
"""

from __future__ import annotations

import sys
from asyncio import coroutines
from typing import Any, Callable

PY311 = sys.version_info >= (3, 11)
PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
PY314 = sys.version_info >= (3, 14)

__all__ = ["PY311", "PY312", "PY313", "PY314", "default_policy_class", "iscoroutinefunction"]

# ``asyncio.iscoroutinefunction`` without 3.14's DeprecationWarning: the private check
# asyncio's own loops call there; before 3.14 the public one (which did not warn).
iscoroutinefunction: Callable[[Any], bool] = (
    getattr(coroutines, "_iscoroutinefunction", None) or coroutines.iscoroutinefunction
)


def default_policy_class() -> type:
    """The class ``asyncio.DefaultEventLoopPolicy`` names on this platform, read from the
    module that defines it (``asyncio.unix_events`` / ``asyncio.windows_events``), never
    through the ``asyncio`` attribute that warns on 3.14."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        from asyncio import windows_events as platform_events  # type: ignore[attr-defined]
    else:
        from asyncio import unix_events as platform_events
    cls = getattr(platform_events, "_DefaultEventLoopPolicy", None)  # 3.14+
    if cls is None:
        cls = platform_events.DefaultEventLoopPolicy  # 3.10-3.13
    return cls

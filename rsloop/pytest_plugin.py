"""pytest plugin: run a pytest-asyncio test suite on rsloop, or on rsloop and asyncio side
by side. Loaded through the ``pytest11`` entry point, so there is nothing to import; it
does nothing until asked::

    pytest --rsloop=rsloop      # every asyncio test on rsloop
    pytest --rsloop=both        # each asyncio test twice: [rsloop] and [asyncio]

or in the ini file (``[tool.pytest.ini_options]`` / ``pytest.ini``)::

    rsloop = both

It answers pytest-asyncio's ``pytest_asyncio_loop_factories`` hook (pytest-asyncio 1.4 or
newer), so ``@pytest.mark.asyncio(loop_factories=["asyncio"])`` can still pin a test to
one of the two loops.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

_MODES = ("off", "rsloop", "both")
_HELP = (
    "run pytest-asyncio tests on rsloop: 'rsloop' (rsloop only), 'both' (rsloop and "
    "stdlib asyncio, each test parametrized [rsloop]/[asyncio]) or 'off' (default)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rsloop")
    group.addoption("--rsloop", dest="rsloop_mode", default=None, metavar="MODE", help=_HELP)
    parser.addini("rsloop", help=_HELP, default="off")


def _stdlib_loop() -> asyncio.AbstractEventLoop:
    # Not asyncio.new_event_loop(): with rsloop's policy installed that would be rsloop.
    if sys.platform == "win32":  # pragma: no cover
        return asyncio.ProactorEventLoop()
    return asyncio.SelectorEventLoop()


class _LoopFactories:
    def __init__(self, mode: str) -> None:
        import rsloop

        factories: dict[str, Any] = {"rsloop": rsloop.new_event_loop}
        if mode == "both":
            factories["asyncio"] = _stdlib_loop
        self.factories = factories

    def pytest_asyncio_loop_factories(self, config, item):
        return self.factories


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("rsloop_mode") or config.getini("rsloop") or "off"
    mode = str(mode).strip().lower()
    if mode not in _MODES:
        raise pytest.UsageError(f"--rsloop / ini rsloop: expected one of {_MODES}, got {mode!r}")
    if mode == "off":
        return
    if not hasattr(config.hook, "pytest_asyncio_loop_factories"):
        raise pytest.UsageError(
            "--rsloop needs pytest-asyncio 1.4 or newer (its pytest_asyncio_loop_factories "
            "hook); install or upgrade pytest-asyncio"
        )
    config.pluginmanager.register(_LoopFactories(mode), "rsloop-loop-factories")

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

Virtual time (docs/virtual-time.md): ``@pytest.mark.rsloop(virtual_time=True)`` runs a
pytest-asyncio test on a loop driven by an :class:`rsloop.testing.VirtualClock`
(``autojump=0``; ``@pytest.mark.rsloop(virtual_time=True, autojump=None)`` for a clock
that moves only by ``advance``), and the ``rsloop_clock`` fixture is that test's clock
(using the fixture is enough to get virtual time). It needs pytest-asyncio's default
function-scoped loop and no option: without ``--rsloop`` such a test runs on rsloop alone
(the other tests keep pytest-asyncio's loop); with ``--rsloop=both`` on rsloop and on the
stdlib loop. With AnyIO, make the backend's loop from the fixture::

    @pytest.fixture
    def anyio_backend(rsloop_clock):
        return "asyncio", {"loop_factory": rsloop_clock.loop_factory}
"""

from __future__ import annotations

import asyncio
import inspect
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


# ----- virtual time -----

_MARKER = (
    "rsloop(virtual_time=False, autojump=0.0, start=None): run this test's loop on an "
    "rsloop.testing.VirtualClock (see the rsloop_clock fixture)"
)
_CLOCK = pytest.StashKey[Any]()
# The test being set up, run or torn down: pytest-asyncio makes a function-scoped loop
# while setting the test up, and the factory below gives it that test's clock.
_current: list[Any] = [None]


def _virtual_kwargs(item: Any) -> dict | None:
    """The clock arguments of a test that runs under virtual time, else None."""
    marker = item.get_closest_marker("rsloop")
    kwargs: dict = dict(marker.kwargs) if marker is not None else {}
    wants = bool(kwargs.pop("virtual_time", False))
    if "rsloop_clock" in getattr(item, "fixturenames", ()):
        wants = True
    if not wants:
        return None
    unknown = set(kwargs) - {"autojump", "start"}
    if unknown or (marker is not None and marker.args):
        raise pytest.UsageError(
            f"{item.nodeid}: pytest.mark.rsloop takes virtual_time=, autojump= and start= "
            f"keywords only, got {sorted(unknown) or list(marker.args)}"  # type: ignore[union-attr]
        )
    return kwargs


def _clock_for(item: Any):
    clock = item.stash.get(_CLOCK, None)
    if clock is None:
        from rsloop.testing import VirtualClock

        clock = VirtualClock(**(_virtual_kwargs(item) or {}))
        item.stash[_CLOCK] = clock
    return clock


@pytest.fixture
def rsloop_clock(request: pytest.FixtureRequest):
    """This test's :class:`rsloop.testing.VirtualClock` (``autojump=0`` unless
    ``pytest.mark.rsloop(autojump=...)`` says otherwise)."""
    return _clock_for(request.node)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _current[0] = item


# pytest-asyncio's fixture that holds the loop factory a test's runner is made with: the
# parameter its pytest_asyncio_loop_factories hook sets, None when no plugin answers.
_FACTORY_FIXTURE = "_asyncio_loop_factory"
_MODE = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Without --rsloop nothing answers pytest-asyncio's hook (so that the other tests keep
    its loop untouched), and a pytest-asyncio test asking for virtual time is given its
    factory here, as the hook would give it: rsloop on that test's clock."""
    if metafunc.config.stash.get(_MODE, "off") != "off":
        return  # _LoopFactories answers the hook
    definition = metafunc.definition
    if (
        definition.get_closest_marker("asyncio") is None  # (auto mode: added by then)
        or not inspect.iscoroutinefunction(metafunc.function)
        or _virtual_kwargs(definition) is None
    ):
        return
    if not hasattr(metafunc.config.hook, "pytest_asyncio_loop_factories"):
        raise pytest.UsageError(
            f"{definition.nodeid}: virtual time in a pytest-asyncio test needs "
            "pytest-asyncio 1.4 or newer"
        )
    if _FACTORY_FIXTURE in metafunc.fixturenames:
        raise pytest.UsageError(
            f"{definition.nodeid}: virtual time (pytest.mark.rsloop(virtual_time=True) or "
            "the rsloop_clock fixture): another plugin's pytest_asyncio_loop_factories "
            "chooses this test's loop; run with --rsloop=rsloop or --rsloop=both"
        )
    metafunc.fixturenames.append(_FACTORY_FIXTURE)
    hidden = getattr(pytest, "HIDDEN_PARAM", None)  # pytest 8.4+
    metafunc.parametrize(
        _FACTORY_FIXTURE,
        [_virtual_rsloop],
        ids=[hidden] if hidden is not None else ["rsloop"],
        indirect=True,
        scope="function",
    )


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any):
    yield
    _current[0] = None


def _clock_of_current_test():
    item = _current[0]
    if item is None:
        raise RuntimeError(
            "rsloop: a virtual-time loop is made while a test is set up; use pytest-asyncio's "
            "function loop scope for virtual-time tests"
        )
    return _clock_for(item)


def _virtual_rsloop():
    import rsloop

    return rsloop.new_event_loop(clock=_clock_of_current_test())


def _virtual_stdlib():
    from rsloop._fallback import FallbackLoop

    return FallbackLoop("pytest --rsloop=both: stdlib asyncio", clock=_clock_of_current_test())


class _LoopFactories:
    def __init__(self, mode: str) -> None:
        import rsloop

        factories: dict[str, Any] = {"rsloop": rsloop.new_event_loop}
        virtual: dict[str, Any] = {"rsloop": _virtual_rsloop}
        if mode == "both":
            factories["asyncio"] = _stdlib_loop
            virtual["asyncio"] = _virtual_stdlib
        self.factories = factories
        self.virtual = virtual

    def pytest_asyncio_loop_factories(self, config, item):
        if _virtual_kwargs(item) is not None:
            return self.virtual
        return self.factories


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    mode = config.getoption("rsloop_mode") or config.getini("rsloop") or "off"
    mode = str(mode).strip().lower()
    if mode not in _MODES:
        raise pytest.UsageError(f"--rsloop / ini rsloop: expected one of {_MODES}, got {mode!r}")
    config.stash[_MODE] = mode
    if mode == "off":
        return
    if not hasattr(config.hook, "pytest_asyncio_loop_factories"):
        raise pytest.UsageError(
            "--rsloop needs pytest-asyncio 1.4 or newer (its pytest_asyncio_loop_factories "
            "hook); install or upgrade pytest-asyncio"
        )
    config.pluginmanager.register(_LoopFactories(mode), "rsloop-loop-factories")

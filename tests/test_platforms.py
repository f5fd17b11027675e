"""What ``auto`` hands out per platform (simulated through rsloop's platform probe), and
that the package stays quiet under newer Pythons' deprecations."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings

import pytest

import rsloop
from rsloop import __main__ as rsloop_main
from rsloop import _backend
from rsloop._fallback import FallbackLoop, stdlib_loop_class

native = pytest.mark.skipif(_backend.NATIVE_ERROR is not None, reason="native module missing")


@pytest.fixture
def on_platform(monkeypatch):
    """Make rsloop's backend selection see another ``sys.platform``."""

    def simulate(name: str) -> None:
        monkeypatch.setattr(_backend, "_platform", lambda: name)

    monkeypatch.delenv("RSLOOP_BACKEND", raising=False)
    return simulate


def _close(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()


def _new_loop_noting_fallback_warning() -> asyncio.AbstractEventLoop:
    """rsloop.new_event_loop(); in debug mode a fallback also warns, naming its reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = rsloop.new_event_loop()
    fallback = [w for w in caught if "using the stdlib asyncio loop" in str(w.message)]
    if _backend._debug_enabled():
        assert len(fallback) == 1 and fallback[0].category is RuntimeWarning, caught
        assert "Windows" in str(fallback[0].message)
    else:
        assert not caught, [str(w.message) for w in caught]
    return loop


def test_auto_on_windows_gives_the_stdlib_loop_and_says_why(on_platform):
    on_platform("win32")
    assert _backend.select("auto")[0] == "asyncio"
    loop = _new_loop_noting_fallback_warning()
    try:
        assert isinstance(loop, FallbackLoop)
        info = rsloop.backend(loop)
        assert info.name == "asyncio"
        assert "Windows" in info.reason and "NotImplementedError" in info.reason
        assert "RSLOOP_BACKEND=poll" in info.reason
    finally:
        _close(loop)


def test_the_windows_fallback_is_the_proactor_loop(monkeypatch):
    # asyncio.ProactorEventLoop exists on Windows only; stand one in to see it chosen.
    proactor = type("ProactorEventLoop", (asyncio.SelectorEventLoop,), {})
    monkeypatch.setattr(asyncio, "ProactorEventLoop", proactor, raising=False)
    assert stdlib_loop_class("win32") is proactor
    assert stdlib_loop_class("linux") is asyncio.SelectorEventLoop
    assert stdlib_loop_class("darwin") is asyncio.SelectorEventLoop


@native
@pytest.mark.parametrize("platform", ["linux", "darwin", "freebsd14"])
def test_auto_elsewhere_gives_the_native_loop(on_platform, platform):
    on_platform(platform)
    assert _backend.select("auto") == ("native", None)
    loop = rsloop.new_event_loop()
    try:
        assert not isinstance(loop, FallbackLoop)
        assert rsloop.backend(loop).name in ("uring", "poll")
    finally:
        _close(loop)


@native
def test_poll_named_on_windows_still_gives_the_native_loop(on_platform, monkeypatch):
    on_platform("win32")
    monkeypatch.setenv("RSLOOP_BACKEND", "poll")
    loop = rsloop.new_event_loop()
    try:
        assert rsloop.backend(loop) == ("poll", None)
    finally:
        _close(loop)


@native
def test_python_m_rsloop_prints_the_windows_reason(on_platform, capsys):
    on_platform("win32")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "rsloop: using the stdlib", RuntimeWarning)
        rsloop_main.main()
    out = capsys.readouterr().out
    assert f"platform: {_backend.platform_gap('win32')}" in out
    assert "RSLOOP_BACKEND=auto: new loops run on asyncio (on Windows" in out


@native
def test_python_m_rsloop_on_linux_prints_no_platform_gap(on_platform, capsys):
    on_platform("linux")
    rsloop_main.main()
    out = capsys.readouterr().out
    assert "platform:" not in out
    assert "new loops run on asyncio" not in out


# Python 3.14's deprecations, simulated on this interpreter before rsloop is imported: the
# policy classes are reachable on ``asyncio`` only through a module __getattr__ that warns
# (their classes stay under private names), the policy accessors and
# ``iscoroutinefunction`` warn, as CPython 3.14's Lib/asyncio does.
SIMULATE_314 = """
import asyncio, sys, warnings
from asyncio import coroutines, events, unix_events

events.get_event_loop_policy()  # the default policy exists before the simulation starts

def _deprecated(name):
    warnings.warn(f"{name!r} is deprecated and slated for removal in Python 3.16",
                  DeprecationWarning, stacklevel=3)

def _warns(name, func):
    def wrapper(*args, **kwargs):
        _deprecated(name)
        return func(*args, **kwargs)
    return wrapper

_moved = {
    "DefaultEventLoopPolicy": unix_events._UnixDefaultEventLoopPolicy,
    "AbstractEventLoopPolicy": events.AbstractEventLoopPolicy,
}
unix_events._DefaultEventLoopPolicy = unix_events._UnixDefaultEventLoopPolicy
events._AbstractEventLoopPolicy = events.AbstractEventLoopPolicy
events._BaseDefaultEventLoopPolicy = events.BaseDefaultEventLoopPolicy
del unix_events.DefaultEventLoopPolicy
for _name in _moved:
    delattr(asyncio, _name)

def _getattr(name):
    if name in _moved:
        _deprecated(f"asyncio.{name}")
        return _moved[name]
    raise AttributeError(f"module 'asyncio' has no attribute {name!r}")

asyncio.__getattr__ = _getattr
for _name in ("get_event_loop_policy", "set_event_loop_policy"):
    setattr(asyncio, _name, _warns(f"asyncio.{_name}", getattr(asyncio, _name)))
coroutines._iscoroutinefunction = coroutines.iscoroutinefunction
coroutines.iscoroutinefunction = _warns("asyncio.iscoroutinefunction",
                                        coroutines.iscoroutinefunction)
asyncio.iscoroutinefunction = coroutines.iscoroutinefunction
"""

# The deprecations are live, simulated or real: each of these raises under -W error.
LIVE_314 = """
import asyncio, sys, warnings
from asyncio import coroutines, events
for _probe in (lambda: asyncio.DefaultEventLoopPolicy, lambda: asyncio.AbstractEventLoopPolicy,
               lambda: coroutines.iscoroutinefunction(print), asyncio.get_event_loop_policy):
    try:
        _probe()
    except DeprecationWarning:
        pass
    else:
        raise SystemExit("simulation inactive")
"""

# Whether this interpreter has 3.14's deprecations itself (3.14+: the policy classes are
# gone from the module's namespace): then they are run for real, not simulated.
REAL_314 = "DefaultEventLoopPolicy" not in vars(asyncio)
PRELUDE_314 = LIVE_314 if REAL_314 else SIMULATE_314 + LIVE_314

USE_RSLOOP = """
import asyncio, signal, sys, warnings
import rsloop
from asyncio import events
from rsloop import pytest_plugin

async def main():
    loop = asyncio.get_running_loop()
    loop.call_soon(print, "call_soon")
    fut = loop.create_future()
    loop.call_later(0.001, fut.set_result, "timer")
    await fut
    await asyncio.create_task(asyncio.sleep(0))
    if getattr(loop, "backend", "asyncio") != "asyncio":
        # (the stdlib loop's own check is 3.12's here, which the simulation makes warn)
        loop.add_signal_handler(signal.SIGUSR1, print)
        loop.remove_signal_handler(signal.SIGUSR1)
    return type(loop).__name__

print(rsloop.run(main()))
print(rsloop.run(main(), debug=True))
loop = rsloop.new_event_loop()
print(loop.run_until_complete(main()))
loop.close()
if sys.version_info >= (3, 12):
    print(asyncio.run(main(), loop_factory=rsloop.new_event_loop))
policy = rsloop.EventLoopPolicy()
assert isinstance(policy, events._AbstractEventLoopPolicy)
loop = policy.new_event_loop()
print(loop.run_until_complete(main()))
loop.close()
for make in pytest_plugin._LoopFactories("both").factories.values():
    loop = make()
    print(loop.run_until_complete(main()))
    loop.close()
print("quiet")
"""


@native
def test_rsloop_is_quiet_under_python_314_deprecations():
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", PRELUDE_314 + USE_RSLOOP],
        capture_output=True,
        text=True,
        timeout=60,
        # Debug mode comes from rsloop.run(debug=True) only: a stdlib loop in debug mode
        # would run this interpreter's own (3.12's) check, which the simulation makes warn.
        env={
            k: v for k, v in os.environ.items() if k not in ("RSLOOP_BACKEND", "PYTHONASYNCIODEBUG")
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "quiet"
    # asyncio's default loop class: Proactor where asyncio has it (Windows)
    stdlib = getattr(asyncio, "ProactorEventLoop", asyncio.SelectorEventLoop).__name__
    assert "Loop" in proc.stdout and stdlib in proc.stdout


def test_the_314_simulation_catches_a_deprecated_read():
    # The old rsloop._policy (a subclass of asyncio.DefaultEventLoopPolicy) under the
    # same deprecations (3.14's own where this is 3.14+): it must fail, or the test above
    # proves nothing.
    old = "import asyncio\nclass P(asyncio.DefaultEventLoopPolicy): pass\n"
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", PRELUDE_314 + old],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "DeprecationWarning: 'asyncio.DefaultEventLoopPolicy' is deprecated" in proc.stderr


@native
def test_methods_needing_fds_follow_the_build():
    """Where the native loop runs nothing on fds beyond the watchers (Windows), every loop
    method that needs more raises NotImplementedError naming itself; the fd watchers work
    on POSIX and on Windows (sockets there), and raise the same where a build has none."""
    from rsloop import _loop, _rsloop

    assert _rsloop.BUILD_FDS == (os.name == "posix")
    assert _rsloop.BUILD_FD_WATCHERS == (os.name in ("posix", "nt"))
    loop = _loop.Loop(backend="poll")
    try:
        for names, built in (
            (_loop._NEEDS_FDS, _rsloop.BUILD_FDS),
            (_loop._NEEDS_WATCHERS, _rsloop.BUILD_FD_WATCHERS),
        ):
            for name in names:
                method = getattr(loop, name)
                if built:
                    assert not getattr(method, "_not_implemented", False), name
                    continue
                with pytest.raises(NotImplementedError, match=rf"Loop\.{name}\(\) is not"):
                    method()
    finally:
        loop.close()

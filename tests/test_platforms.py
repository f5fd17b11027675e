"""What ``auto`` hands out per platform (simulated through rsloop's platform probe), and
that the package stays quiet under newer Pythons' deprecations."""

from __future__ import annotations

import asyncio

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


def test_auto_on_windows_gives_the_stdlib_loop_and_says_why(on_platform):
    on_platform("win32")
    assert _backend.select("auto")[0] == "asyncio"
    loop = rsloop.new_event_loop()
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

"""Backend choice: RSLOOP_BACKEND, the io_uring fallback (forced with a real seccomp filter,
as a container's default profile does), the pure-asyncio fallback when the native module
cannot be imported, and fork safety."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rsloop
from rsloop import _backend

native = pytest.mark.skipif(_backend.NATIVE_ERROR is not None, reason="native module missing")
linux_uring = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64") or _backend.PORTABLE,
    reason="io_uring seccomp test needs Linux x86_64/aarch64 and io_uring built in (the "
    "portable build has none)",
)


def run_py(code: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("RSLOOP_BACKEND", None) if env is None or "RSLOOP_BACKEND" not in env else None
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


# Installs a seccomp filter that makes io_uring_setup (syscall 425 on x86_64 and aarch64)
# fail with the given errno, exactly as Docker's default profile (EPERM) or an old kernel
# (ENOSYS) would, then imports rsloop.
SECCOMP_PRELUDE = """
import ctypes, errno as E
libc = ctypes.CDLL(None, use_errno=True)
class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
def refuse_io_uring(code):
    prog = (Filter * 4)(
        Filter(0x20, 0, 0, 0),                      # ld  [nr]
        Filter(0x15, 0, 1, 425),                    # jeq io_uring_setup
        Filter(0x06, 0, 0, 0x00050000 | code),      # ret ERRNO(code)
        Filter(0x06, 0, 0, 0x7FFF0000),             # ret ALLOW
    )
    fprog = Prog(4, prog)
    assert libc.prctl(38, 1, 0, 0, 0) == 0          # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()
"""


@native
@pytest.mark.parametrize("choice", ["poll", "uring"])
def test_env_var_selects_native_backend(choice):
    proc = run_py(
        """
        import rsloop
        loop = rsloop.new_event_loop()
        print(loop.backend, rsloop.backend(loop).name)
        loop.close()
        """,
        env={"RSLOOP_BACKEND": choice},
    )
    if choice == "uring" and proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip("io_uring unavailable on this machine")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [choice, choice]


def test_env_var_asyncio_gives_stdlib_loop():
    proc = run_py(
        """
        import asyncio, rsloop
        loop = rsloop.new_event_loop()
        # asyncio's default loop class: Proactor where asyncio has it (Windows)
        stdlib = getattr(asyncio, "ProactorEventLoop", asyncio.SelectorEventLoop)
        print(isinstance(loop, stdlib), rsloop.backend(loop))
        loop.close()
        """,
        env={"RSLOOP_BACKEND": "asyncio"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("True BackendInfo(name='asyncio'")
    assert "RSLOOP_BACKEND=asyncio" in proc.stdout


def test_bad_env_var_is_a_value_error(monkeypatch):
    monkeypatch.setenv("RSLOOP_BACKEND", "bogus")
    with pytest.raises(ValueError, match="RSLOOP_BACKEND='bogus'"):
        rsloop.new_event_loop()


@native
@linux_uring
@pytest.mark.parametrize("errname", ["EPERM", "ENOSYS", "ENOMEM"])
def test_io_uring_refused_falls_back_to_poll(errname):
    proc = run_py(
        SECCOMP_PRELUDE
        + f"""
refuse_io_uring(E.{errname})
import asyncio, rsloop
info = rsloop.backend()
async def main():
    await asyncio.sleep(0.001)
    return asyncio.get_running_loop().backend
print(info.name, rsloop.run(main()))
print(info.reason)
"""
    )
    assert proc.returncode == 0, proc.stderr
    first, reason = proc.stdout.splitlines()[:2]
    assert first == "poll poll"
    assert errname in reason and "io_uring" in reason


@native
@linux_uring
def test_io_uring_refused_and_forced_raises_oserror():
    proc = run_py(
        SECCOMP_PRELUDE
        + """
refuse_io_uring(E.EPERM)
import rsloop
try:
    rsloop.new_event_loop()
except OSError as exc:
    print("OSError", "EPERM" in str(exc))
""",
        env={"RSLOOP_BACKEND": "uring"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["OSError", "True"]


def test_missing_native_module_falls_back_to_stdlib():
    # Make `rsloop._rsloop` unimportable, as on a platform without a wheel.
    proc = run_py(
        """
        import sys, warnings
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "rsloop._rsloop":
                    raise ImportError("blocked for the test")
        sys.meta_path.insert(0, Block())
        import asyncio, rsloop
        async def main():
            return type(asyncio.get_running_loop()).__name__
        print(rsloop.run(main()))
        print(rsloop.backend())
        print(rsloop.Loop.__name__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "FallbackLoop"
    assert lines[1].startswith("BackendInfo(name='asyncio'")
    assert "native module unavailable" in lines[1]
    assert lines[2] == "FallbackLoop"


def test_missing_native_module_warns_in_debug_mode():
    proc = run_py(
        """
        import sys, warnings
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "rsloop._rsloop":
                    raise ImportError("blocked for the test")
        sys.meta_path.insert(0, Block())
        import rsloop
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rsloop.new_event_loop().close()
        print([str(w.message) for w in caught])
        """,
        env={"PYTHONASYNCIODEBUG": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "using the stdlib asyncio loop" in proc.stdout


@native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("choice", ["uring", "poll"])
def test_forked_child_gets_its_own_driver(choice):
    proc = run_py(
        """
        import asyncio, os, socket, rsloop
        loop = rsloop.new_event_loop()
        a, b = socket.socketpair()
        got = []
        loop.add_reader(a, lambda: got.append(a.recv(10)))
        b.send(b"parent")
        loop.run_until_complete(asyncio.sleep(0.02))
        assert got == [b"parent"], got
        pid = os.fork()
        if pid == 0:
            # The child must never submit to the parent's ring / epoll set.
            c, d = socket.socketpair()
            seen = []
            loop.add_reader(c, lambda: seen.append(c.recv(10)))
            d.send(b"child")
            loop.run_until_complete(asyncio.sleep(0.02))
            os._exit(0 if seen == [b"child"] else 3)
        _, status = os.waitpid(pid, 0)
        b.send(b"again")
        loop.run_until_complete(asyncio.sleep(0.02))
        print(os.waitstatus_to_exitcode(status), got)
        loop.close()
        """,
        env={"RSLOOP_BACKEND": choice},
    )
    if proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 [b'parent', b'again']"


@native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("choice", ["uring", "poll"])
def test_forked_child_keeps_inherited_watchers(choice):
    proc = run_py(
        """
        import asyncio, os, socket, rsloop
        loop = rsloop.new_event_loop()
        a, b = socket.socketpair()
        got = []
        loop.add_reader(a, lambda: got.append(a.recv(10)))
        loop.run_until_complete(asyncio.sleep(0.01))
        pid = os.fork()
        if pid == 0:
            b.send(b"child")
            loop.run_until_complete(asyncio.sleep(0.05))
            os._exit(0 if got == [b"child"] else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        loop.close()
        """,
        env={"RSLOOP_BACKEND": choice},
    )
    if proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


@native
def test_python_m_rsloop_reports_backends():
    proc = subprocess.run(
        [sys.executable, "-m", "rsloop"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"rsloop {rsloop.__version__}\n")
    here = os.path.dirname(os.path.realpath(rsloop.__file__))
    assert out.splitlines()[1].startswith(f"rsloop package from {here}")
    assert "backend poll: works" in out
    assert "backend asyncio: works" in out
    assert "RSLOOP_BACKEND=auto: new loops run on " in out


class _Dist:
    def __init__(self, root, version="9.8.7"):
        self.root, self.version = root, version

    def locate_file(self, path):
        return os.path.join(self.root, path)


@pytest.mark.parametrize(
    ("installed", "expect"),
    [
        (None, "(no rsloop-uring distribution installed: a source tree on sys.path?)"),
        ("here", ", installed as rsloop-uring 9.8.7"),
        ("elsewhere", ", not from the installed rsloop-uring 9.8.7 (at /elsewhere/rsloop): "),
    ],
)
def test_python_m_rsloop_names_the_package_and_where_it_came_from(monkeypatch, installed, expect):
    from importlib import metadata

    from rsloop import __main__ as rsloop_main

    here = os.path.dirname(os.path.realpath(rsloop.__file__))

    def distribution(name):
        assert name == "rsloop-uring"  # pyproject.toml's [project] name
        if installed is None:
            raise metadata.PackageNotFoundError(name)
        return _Dist(os.path.dirname(here) if installed == "here" else "/elsewhere")

    monkeypatch.setattr(metadata, "distribution", distribution)
    origin = rsloop_main._origin()
    assert origin.startswith(f"rsloop package from {here}")
    # (as the platform spells the path: Z:\\elsewhere\\rsloop under Wine)
    assert expect.replace("/elsewhere/rsloop", os.path.realpath("/elsewhere/rsloop")) in origin


def test_the_distribution_name_is_pyprojects():
    from rsloop import __main__ as rsloop_main

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if not pyproject.exists():  # the suite run against an installed wheel, elsewhere
        pytest.skip("no pyproject.toml beside tests/")
    assert f'\nname = "{rsloop_main.DISTRIBUTION}"\n' in pyproject.read_text()


@native
@linux_uring
def test_python_m_rsloop_says_why_io_uring_is_refused():
    proc = run_py(
        SECCOMP_PRELUDE
        + """
refuse_io_uring(E.EPERM)
import runpy, sys
sys.argv = ["rsloop"]
try:
    runpy.run_module("rsloop", run_name="__main__")
except SystemExit as exc:
    print("exit", exc.code)
"""
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    uring = next(line for line in lines if line.startswith("backend uring: "))
    assert "EPERM" in uring
    assert "backend poll: works" in lines
    assert any(
        line.startswith("RSLOOP_BACKEND=auto: new loops run on poll (") and "EPERM" in line
        for line in lines
    ), lines
    assert lines[-1] == "exit 0"

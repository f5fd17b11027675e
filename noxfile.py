"""Developer and CI sessions. ``nox -l`` lists them.

Interpreters 3.10-3.13 are found on PATH; on machines where pyenv provides them, the
pyenv versions are made visible to nox automatically.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
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


def _expose_pyenv_versions() -> None:
    """Let `python3.X` resolve through pyenv shims for every installed 3.10-3.13."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for v in PYTHONS:
        paths = sorted(glob.glob(os.path.join(root, "versions", f"{v}.*", "bin", f"python{v}")))
        if paths:
            found.append(Path(paths[-1]).parent.parent.name)
    if found and "PYENV_VERSION" not in os.environ:
        os.environ["PYENV_VERSION"] = ":".join(found)


_expose_pyenv_versions()


def _libpython_dir(session: nox.Session) -> str:
    return session.run(
        "python",
        "-c",
        "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))",
        silent=True,
    ).strip()


def _build(session: nox.Session, release: bool = False) -> None:
    session.install("maturin>=1.9,<2")
    args = ["maturin", "develop", "--quiet"]
    if release:
        args.append("--release")
    session.run(*args)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Build the extension and run the test suite on every backend (+ asyncio itself)."""
    _build(session)
    session.install(*TEST_DEPS)
    _pytest(session, "tests", *session.posargs)
    # Once more in asyncio debug mode, as uvloop does.
    _pytest(session, "tests", "-x", env={"PYTHONASYNCIODEBUG": "1"})
    # The other io_uring paths: the transport and lifetime (loops moved between threads)
    # tests on uring with the opt-in multishot receive, and with sends inside write().
    transports = ["tests/test_transports.py", "tests/test_streams.py"]
    multishot = {"RSLOOP_URING_RECV": "multishot", "RSLOOP_TEST_BACKENDS": "uring"}
    _pytest(session, *transports, "tests/test_servers.py", "tests/test_lifetimes.py", env=multishot)
    _pytest(session, *transports, env={"RSLOOP_URING_SEND": "0", "RSLOOP_TEST_BACKENDS": "uring"})
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


@nox.session(python=False)
def cross(session: nox.Session) -> None:
    """`cargo check` for macOS (x86_64, aarch64) and Windows: the kqueue/IOCP paths compile."""
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


@nox.session(python=PYTHONS)
def package(session: nox.Session) -> None:
    """Release wheel (and, on 3.11, the sdist built as pip would): installed in this fresh
    venv and imported from outside the source tree."""
    session.install("maturin>=1.9,<2")
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("maturin", "build", "--release", "-q", "-i", "python", "-o", str(dist))
    session.install("--force-reinstall", "--no-deps", *glob.glob(str(dist / "rsloop-*.whl")))
    with session.chdir(dist):
        session.run("python", "-c", _SMOKE)
    if session.python == "3.11":
        session.run("maturin", "sdist", "-o", str(dist / "sdist"))
        (sdist,) = glob.glob(str(dist / "sdist" / "rsloop-*.tar.gz"))
        session.run(
            "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist / "from-sdist"), sdist
        )
        wheel = glob.glob(str(dist / "from-sdist" / "rsloop-*.whl"))
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
        echo = ["--quick", "--no-syscalls", "--loops", "asyncio,uvloop,rsloop"]
        http = ["--quick", "--servers", "uvicorn-uvloop,uvicorn-rsloop,granian-uvloop"]
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

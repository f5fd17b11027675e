"""``python -m rsloop``: what this machine can run, and why not.

Prints rsloop's version, where the package was imported from and which installed
distribution (``rsloop-uring``) provided it, the Python and platform, then for each
backend whether a loop
can be made and run on it here, or the reason it cannot (for example
``io_uring_setup: EPERM`` under a container's default seccomp profile), and which one
``RSLOOP_BACKEND`` / ``auto`` picks. Exit status 0 when at least one native backend works.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys

from . import __version__, _backend

# The name this project is installed under (pyproject.toml's [project] name): the older,
# unrelated project on PyPI owns the name "rsloop".
DISTRIBUTION = "rsloop-uring"


def _origin() -> str:
    """Where ``import rsloop`` found this package, and the distribution that installed it
    there, if one did (not so for a source tree on ``sys.path``)."""
    from importlib import metadata

    here = os.path.dirname(os.path.realpath(__file__))
    where = f"rsloop package from {here}"
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"{where} (no {DISTRIBUTION} distribution installed: a source tree on sys.path?)"
    owned = os.path.realpath(str(dist.locate_file("rsloop/__init__.py")))
    if os.path.dirname(owned) != here:
        return (
            f"{where}, not from the installed {DISTRIBUTION} {dist.version} "
            f"(at {os.path.dirname(owned)}): a source tree on sys.path shadows it"
        )
    return f"{where}, installed as {DISTRIBUTION} {dist.version}"


def _probe(kind: str) -> tuple[bool, str]:
    """Make a loop of backend ``kind``, run one round trip through it, close it."""
    from ._loop import Loop

    try:
        loop = Loop(backend=kind)  # type: ignore[abstract]
    except OSError as exc:
        return False, str(exc)
    try:
        got = loop.run_until_complete(asyncio.sleep(0, result="ok"))
        actual = loop.backend  # type: ignore[attr-defined]
        if actual != kind:
            return False, f"fell back to {actual}: {loop.backend_reason}"  # type: ignore[attr-defined]
        return got == "ok", "works"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        loop.close()


def main() -> int:
    print(f"rsloop {__version__}")
    print(_origin())
    print(f"Python {platform.python_version()} ({sys.executable})")
    print(f"{platform.system()} {platform.release()} {platform.machine()}")
    if _backend.NATIVE_ERROR is not None:
        print(f"native core: missing ({_backend.NATIVE_ERROR})")
        print("backend asyncio: works (stdlib loop, the pure-Python fallback)")
        return 1
    from . import _rsloop

    print(f"native core: {_rsloop.__file__}")
    built = ["poll (mio)"] + (["uring (io_uring)"] if _rsloop.BUILD_URING else [])
    print(f"native core: built with {', '.join(built)}")
    if not _rsloop.BUILD_FDS:
        watched = "add_reader/add_writer on sockets, " if _rsloop.BUILD_FD_WATCHERS else ""
        print(
            f"native core: no socket I/O (mio over IOCP runs {watched}timers and callbacks; "
            "sock_*, transports, pipes, subprocesses and signals raise NotImplementedError)"
        )
    elif _rsloop.BUILD_PORTABLE:
        print(
            "native core: portable build (the macOS/BSD code paths: no io_uring, mio's "
            "selector and waker, children waited for by a thread each, sends without "
            "MSG_NOSIGNAL)"
        )
    ok_any = False
    for kind in ("uring", "poll"):
        ok, why = _probe(kind)
        ok_any |= ok
        print(f"backend {kind}: {why}")
    print("backend asyncio: works (stdlib loop, the pure-Python fallback)")
    gap = _backend.platform_gap()
    if gap is not None:
        print(f"platform: {gap}")
    requested = os.environ.get("RSLOOP_BACKEND", "auto")
    from . import backend, new_event_loop

    loop = new_event_loop()
    try:
        info = backend(loop)
    finally:
        loop.close()
    reason = f" ({info.reason})" if info.reason else ""
    print(f"RSLOOP_BACKEND={requested}: new loops run on {info.name}{reason}")
    return 0 if ok_any else 1


if __name__ == "__main__":
    sys.exit(main())

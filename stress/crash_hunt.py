"""The bounded hunt for issue 29's crash: many runs of the states it was seen in, in
parallel, under CPU pressure, with faulthandler on and core dumps kept.

    python stress/crash_hunt.py --config runners --backend poll --runs 40 --parallel 10
    python stress/crash_hunt.py --config idle_gc --backend uring --runs 20 --parallel 4

Configurations:

* ``runners``: CPython's ``test.test_asyncio.test_runners`` in a conformance child
  (``tests/conformance/run_cpython.py --child``) with SIGINT ignored, as a background
  job without job control inherits it (the harness would take the default back; this
  launcher keeps it ignored). ``RunTests.test_asyncio_run_without_uncancel`` then waits
  in ``await asyncio.Event().wait()`` with the loop idle in the kernel until the
  per-test timeout (``--idle``), when faulthandler dumps the stack and exits with 1:
  that is the expected end of a run.
* ``conformance``: the whole harness (``run_cpython.py --backend B -j 2``) with SIGINT
  ignored in it and in every module child, ``--idle`` as the per-test timeout; a run is
  good when no module child crashed (test_runners' interrupt tests hang by design).
* ``idle_gc``: ``stress/idle_gc.py``: a loop idle in an ``Event().wait()`` while two
  threads make cyclic garbage whose finalizers post to it, schedule on it, cancel its
  handles and close other loops. Expected end: exit 0.
* ``suite``: the pytest suite's loop-heavy modules (``--pytest-args``), expected exit 0.

``--busy N`` starts N ``nice -n 19`` busy loops for the duration (default: one per
CPU). Each run's cwd is its own directory under ``--out``, where a crashing run leaves
its core (``ulimit -c unlimited`` is set for the children; the kernel's
``core_pattern`` must be a relative name such as ``core`` for the file to land there).
Prints one line per run and the tally; exit status 1 if any run ended other than
expected (a signal, an unexpected exit status, or no faulthandler timeout in a
``runners`` run).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import importlib.util
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "conformance" / "run_cpython.py"


def conformance_child(argv: list[str]) -> int:
    """Run run_cpython.py (a module child, or the whole harness) with SIGINT left ignored,
    in the harness's children too (they are launched through this file)."""
    if "--child" in argv and os.environ.get("RSLOOP_HUNT_CWD"):
        os.chdir(os.environ["RSLOOP_HUNT_CWD"])  # where a core lands, kept
    spec = importlib.util.spec_from_file_location("run_cpython", RUNNER)
    assert spec is not None and spec.loader is not None
    rc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rc)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    shim = types.SimpleNamespace(**{k: getattr(signal, k) for k in dir(signal) if k[0] != "_"})
    shim.getsignal = lambda _sig: None  # main()'s "launched with SIGINT ignored" undo
    rc.signal = shim
    rc.__file__ = str(Path(__file__).resolve())  # run_module launches children through it
    return rc.main(argv)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def command(args, run_dir: Path) -> list[str]:
    py = [sys.executable, "-X", "faulthandler"]
    if args.config == "runners":
        return py + [
            str(Path(__file__).resolve()),
            "--conformance-child",
            "--child",
            "test_runners",
            "--backend",
            args.backend,
            "--out",
            str(run_dir / "results.jsonl"),
            "--test-timeout",
            str(args.idle),
        ]
    if args.config == "conformance":
        return py + [str(Path(__file__).resolve()), "--conformance-child", "--backend",
                     args.backend, "-v", "--test-timeout", str(args.idle), "-j", "2"]  # fmt: skip
    if args.config == "idle_gc":
        return py + [
            str(ROOT / "stress" / "idle_gc.py"),
            "--backend",
            args.backend,
            "--seconds",
            str(args.idle),
            "--seed",
            str(run_dir.name.rsplit("-", 1)[-1]),
        ]
    return py + ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *args.pytest_args.split()]


def one_run(args, i: int) -> tuple[int, str, str]:
    run_dir = Path(args.out) / f"{args.config}-{args.backend}-{i}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = dict(os.environ, RSLOOP_BACKEND=args.backend, PYTHONFAULTHANDLER="1")
    env["RSLOOP_HUNT_CWD"] = str(run_dir)
    if args.config == "suite":
        env["RSLOOP_TEST_BACKENDS"] = args.backend
    t0 = time.monotonic()
    with open(run_dir / "log.txt", "w") as log:
        proc = subprocess.run(
            command(args, run_dir),
            cwd=run_dir if args.config != "suite" else ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_limits,
            timeout=3600 if args.config == "conformance" else args.idle * 4 + 300,
        )
    secs = time.monotonic() - t0
    text = (run_dir / "log.txt").read_text(errors="replace")
    rc = proc.returncode
    if rc < 0:
        verdict = f"SIGNAL {signal.Signals(-rc).name}"
    elif args.config == "runners":
        verdict = "ok (idle until the timeout)" if rc == 1 and "Timeout (" in text else f"rc={rc}"
    elif args.config == "conformance":
        # With SIGINT ignored, test_runners' interrupt tests hang (and fail) by design:
        # what counts is that no module child died of anything but a per-test timeout.
        crashed = [ln.strip() for ln in text.splitlines() if "crashed (rc=" in ln]
        verdict = f"CRASH {crashed[:3]}" if crashed else f"ok (harness rc={rc})"
    else:
        verdict = "ok" if rc == 0 else f"rc={rc}"
    cores = [p.name for p in run_dir.iterdir() if p.name.startswith("core")]
    if cores:
        verdict += f" core={cores}"
    if verdict.startswith("ok") and not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return i, verdict, f"{secs:.1f}s"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--conformance-child":
        return conformance_child(argv[1:])
    if "--child" in argv:  # a module child the harness launched through this file
        return conformance_child(argv)
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--config", choices=["runners", "conformance", "idle_gc", "suite"], required=True
    )
    p.add_argument("--backend", choices=["uring", "poll"], required=True)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--idle", type=float, default=30.0, help="seconds idle per run")
    p.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default="/tmp/rsloop-crash-hunt")
    p.add_argument("--keep", action="store_true", help="keep the directories of good runs")
    p.add_argument("--pytest-args", default="tests/test_callbacks.py tests/test_timers.py")
    args = p.parse_args(argv)
    busy = [
        subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while 1: pass"])
        for _ in range(args.busy)
    ]
    tally: collections.Counter[str] = collections.Counter()
    try:
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            for i, verdict, secs in pool.map(lambda i: one_run(args, i), range(args.runs)):
                print(f"{args.config} {args.backend} run {i}: {verdict} ({secs})", flush=True)
                tally[verdict.split(" core=")[0]] += 1
    finally:
        for b in busy:
            b.kill()
            b.wait()
    print(f"{args.config} {args.backend}: {args.runs} runs: {dict(tally)}")
    bad = sum(n for v, n in tally.items() if not v.startswith("ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run third-party test suites on stdlib asyncio (the control) and on rsloop's drivers,
and hold the outcome to tests/upstream/expected.toml.

    python tests/upstream/run.py --work DIR [--subset] [--lib aiohttp] [--loop uring]
                                 [--write-docs docs/compatibility.md]

DIR/sdist holds the sdists the ``upstream`` nox session downloaded (and installed the
packages from), and websockets' tagged source from Debian (saved there under the same
``NAME-VERSION.tar.gz`` name); they are unpacked into DIR/src. Each suite runs once per
loop in a fresh ``python -P -m pytest`` with tests/upstream/rsloop_upstream_plugin.py
loaded, niced.

Strict: the run fails if a test fails (or errors) on a loop where expected.toml does not
list it, if a listed test passes there (remove the entry), if a test that passes on
asyncio is skipped on rsloop, or, in the full run, if an entry matches no test at all.
Entries marked ``flaky = true`` may go either way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suites import SUITES  # noqa: E402

LOOPS = ("asyncio", "uring", "poll")
PASSING = ("passed", "xfailed")
FAILING = ("failed", "error", "xpassed")
START, END = "<!-- upstream-table:start -->", "<!-- upstream-table:end -->"


def unpack(work: Path, lib: str) -> Path:
    version = SUITES[lib]["version"]
    dest = work / "src" / f"{lib}-{version}"
    if not dest.exists():
        (tarball,) = (work / "sdist").glob(f"{lib}-{version}.tar.gz")
        with tarfile.open(tarball) as tf:
            tf.extractall(work / "src", filter="data")
        if not (dest / "tests").is_dir():
            raise SystemExit(f"{tarball.name} has no tests/ directory")
    # The suite's ``patches`` (suites.py), once: a text to be replaced must be there.
    for name, old, new in SUITES[lib].get("patches", []):
        path = dest / name
        text = path.read_text()
        if new in text:
            continue
        if old not in text:
            raise SystemExit(f"{lib} {version}: {name} no longer has the text patched: {old!r}")
        path.write_text(text.replace(old, new, 1))
    return dest


def run_suite(work: Path, lib: str, loop: str, subset: bool, timeout: float, reuse: bool) -> dict:
    src = unpack(work, lib)
    spec = SUITES[lib]
    out = work / "results" / f"{lib}-{loop}{'-subset' if subset else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if reuse and out.exists():
        print(f"  {lib} {spec['version']} on {loop}: results of the last run ({out})")
        return json.loads(out.read_text())
    out.unlink(missing_ok=True)
    env = dict(os.environ)
    env.pop("PYTHONASYNCIODEBUG", None)
    env["RSLOOP_UPSTREAM_LOOP"] = loop
    env["RSLOOP_UPSTREAM_RESULTS"] = str(out)
    # A suite run from its own source tree (``pythonpath``, websockets) imports the
    # package from there, ahead of any installed copy.
    own = str(src / spec["pythonpath"]) if spec.get("pythonpath") else None
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [own, str(HERE), env.get("PYTHONPATH")]))
    if loop == "asyncio":
        env.pop("RSLOOP_BACKEND", None)
    else:
        env["RSLOOP_BACKEND"] = loop
    targets = [*spec["subset"], *spec.get("subset_args", [])] if subset else ["tests"]
    # -P: the unpacked source tree must not shadow the package installed from the sdist.
    cmd = ["nice", "-n", "10", sys.executable, "-P", "-m", "pytest", "-p", "rsloop_upstream_plugin",
           "-q", "--no-header", "-rN", "--timeout", "120", *spec["args"], *targets]  # fmt: skip
    t0 = time.monotonic()
    log = work / "results" / f"{lib}-{loop}{'-subset' if subset else ''}.log"
    with open(log, "w") as f:
        proc = subprocess.run(
            cmd, cwd=src, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
        )
    elapsed = time.monotonic() - t0
    tail = log.read_text(errors="replace").strip().splitlines()[-1:]
    print(f"  {lib} {spec['version']} on {loop}: exit {proc.returncode}, {elapsed:.0f} s, "
          f"{tail[0] if tail else ''}  [{log}]", flush=True)  # fmt: skip
    if not out.exists():
        raise SystemExit(
            f"{lib} on {loop}: pytest wrote no results (exit {proc.returncode}); see {log}"
        )
    data = json.loads(out.read_text())
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{lib} on {loop}: pytest exit {proc.returncode} (not a test failure); see {log}"
        )
    if loop != "asyncio" and not data["loops_made"].get("rsloop"):
        raise SystemExit(f"{lib} on {loop}: no rsloop loop was made; see {log}")
    data["seconds"] = elapsed
    return data


def matches(nodeid: str, pattern: str) -> bool:
    """``*`` is the only wildcard: node ids are full of ``[`` and ``]``."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), nodeid) is not None


def load_expected(path: Path) -> list[dict]:
    entries = tomllib.loads(path.read_text()).get("difference", [])
    for e in entries:
        missing = {"library", "test", "loops", "reason"} - e.keys()
        if missing:
            raise SystemExit(f"{path}: entry {e} lacks {sorted(missing)}")
        if e["library"] not in SUITES or set(e["loops"]) - set(LOOPS):
            raise SystemExit(f"{path}: entry {e} names an unknown library or loop")
    return entries


def judge(lib: str, results: dict[str, dict], expected: list[dict], subset: bool) -> list[str]:
    """The problems of one library's runs: [] when every loop did what expected.toml says."""
    problems = []
    control = results.get("asyncio", {}).get("tests", {})
    mine = [e for e in expected if e["library"] == lib]
    for loop, data in results.items():
        tests = data["tests"]
        entries = [e for e in mine if loop in e["loops"]]

        def listed(nodeid: str, entries: list[dict] = entries) -> dict | None:
            return next((e for e in entries if matches(nodeid, e["test"])), None)

        for nodeid, outcome in sorted(tests.items()):
            bad = outcome in FAILING or (
                loop != "asyncio" and outcome == "skipped" and control.get(nodeid) in PASSING
            )
            e = listed(nodeid)
            if bad and e is None:
                problems.append(f"{lib} on {loop}: unexpected {outcome}: {nodeid}")
        for e in entries:
            hits = {n: o for n, o in tests.items() if matches(n, e["test"])}
            if not hits:
                if not subset:
                    problems.append(
                        f"{lib} on {loop}: expected.toml entry matches no test: {e['test']}"
                    )
                continue
            if e.get("flaky"):
                continue
            if all(o in PASSING for o in hits.values()):
                problems.append(f"{lib} on {loop}: expected to fail but passed (remove the entry "
                                f"or its loop): {e['test']}")  # fmt: skip
    return problems


def differences(results: dict[str, dict]) -> list[str]:
    control = results.get("asyncio", {}).get("tests", {})
    diffs = set()
    for loop, data in results.items():
        if loop == "asyncio":
            continue
        for nodeid, outcome in data["tests"].items():
            want = control.get(nodeid)
            if want is not None and (want in PASSING) != (outcome in PASSING):
                diffs.add(nodeid)
    return sorted(diffs)


def table(all_results: dict[str, dict[str, dict]], loops: list[str]) -> str:
    head = ["library", "version", "tests"] + [
        "passed on asyncio" if lp == "asyncio" else f"passed on rsloop {lp}" for lp in loops
    ]
    rows = ["| " + " | ".join(head + ["differences"]) + " |", "|" + "---|" * (len(head) + 1)]
    notes = []
    for lib, results in all_results.items():
        ran = {n for d in results.values() for n, o in d["tests"].items() if o != "skipped"}
        cells = [lib, SUITES[lib]["version"], f"{len(ran):,}"]
        for lp in loops:
            d = results.get(lp)
            cells.append(f"{sum(o in PASSING for o in d['tests'].values()):,}" if d else "-")
        diffs = differences(results)
        cells.append(str(len(diffs)))
        rows.append("| " + " | ".join(cells) + " |")
        for n in diffs:
            per = ", ".join(
                f"{lp} {results[lp]['tests'].get(n, '-')}" for lp in loops if lp in results
            )
            notes.append(f"- {lib} `{n}`: {per}")
    return "\n".join(rows + ([""] + notes if notes else []))


def write_docs(path: Path, text: str, cmd: str) -> None:
    doc = path.read_text()
    if START not in doc or END not in doc:
        raise SystemExit(f"{path} has no {START} ... {END} block")
    block = f"{START}\n\nFrom `{cmd}` (Python {sys.version.split()[0]}):\n\n{text}\n\n{END}"
    before, rest = doc.split(START, 1)
    after = rest.split(END, 1)[1]
    path.write_text(before + block + after)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--subset", action="store_true", help="the loop-heavy test files only")
    ap.add_argument("--lib", action="append", choices=sorted(SUITES))
    ap.add_argument("--loop", action="append", choices=LOOPS)
    ap.add_argument("--expected", type=Path, default=HERE / "expected.toml")
    ap.add_argument("--write-docs", type=Path, help="put the table into this markdown file")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per suite run")
    ap.add_argument("--reuse", action="store_true", help="judge the last run's results again")
    args = ap.parse_args()
    libs = args.lib or list(SUITES)
    loops = args.loop or list(LOOPS)
    timeout = args.timeout or (900 if args.subset else 3600)
    expected = load_expected(args.expected)
    mode = "subset" if args.subset else "full"
    print(f"upstream suites ({mode}): {', '.join(libs)} on {', '.join(loops)}", flush=True)
    all_results: dict[str, dict[str, dict]] = {}
    problems: list[str] = []
    t0 = time.monotonic()
    for lib in libs:
        all_results[lib] = {
            lp: run_suite(args.work, lib, lp, args.subset, timeout, args.reuse) for lp in loops
        }
        problems += judge(lib, all_results[lib], expected, args.subset)
    text = table(all_results, loops)
    print()
    print(text)
    print(f"\n{mode} run: {time.monotonic() - t0:.0f} s")
    if args.write_docs:
        if args.subset or set(loops) != set(LOOPS):
            raise SystemExit("--write-docs takes a full run on every loop")
        cmd = "bash scripts/nox -s upstream"
        if set(libs) != set(SUITES):
            cmd += " -- " + " ".join(f"--lib {lib}" for lib in libs)
            text += "\n\nNot in this run: " + ", ".join(sorted(set(SUITES) - set(libs))) + "."
        write_docs(args.write_docs, text, cmd)
    if problems:
        print("\nNot as tests/upstream/expected.toml says:")
        for p in problems:
            print("  " + p)
        return 1
    print("\nevery difference is the one tests/upstream/expected.toml lists")
    return 0


if __name__ == "__main__":
    sys.exit(main())

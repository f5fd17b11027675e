#!/usr/bin/env python3
"""What the test runs ran, per backend, and whether a uring or poll case was skipped
without a reason on the allow-list.

    python .ci/tally.py DIR        # DIR = RSLOOP_TALLY_DIR of the pytest runs

Each pytest run of ``nox -s tests`` (with RSLOOP_TALLY_DIR set) leaves one JSON file in
DIR (tests/conftest.py writes it). This prints passed / failed / skipped per backend for
every run and in total, then checks every skip of a uring or poll case, and of a case
that names no backend, against .ci/skips-allowed.json. A backend being unavailable is not
on that list: on a machine without io_uring, RSLOOP_EXPECT_NO_URING=1 is the one way to
accept the uring skips. Exit status 1 on a failure, an unlisted skip, or no test at all.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
from pathlib import Path

BACKENDS = ("uring", "poll", "fallback", "asyncio", "-")
CHECKED = ("uring", "poll", "-")
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed")
ALLOW = Path(__file__).with_name("skips-allowed.json")


def load_allowed(expect_no_uring: bool) -> list[dict]:
    entries = json.loads(ALLOW.read_text())["allowed"]
    for entry in entries:
        if not entry.get("why"):
            raise SystemExit(f"{ALLOW}: entry without a reason: {entry}")
        entry["_re"] = re.compile(entry["reason"])
    if expect_no_uring:
        entries.append(
            {
                "_re": re.compile(r"\bunavailable\b|io_uring"),
                "backends": ["uring"],
                "why": "RSLOOP_EXPECT_NO_URING=1: this machine is declared to have no io_uring",
            }
        )
    return entries


def allowed_by(backend: str, reason: str, entries: list[dict]) -> dict | None:
    for entry in entries:
        if "backends" in entry and backend not in entry["backends"]:
            continue
        if entry["_re"].search(reason or ""):
            return entry
    return None


def label(run: dict) -> str:
    env = " ".join(f"{k}={v}" for k, v in sorted(run["env"].items()))
    args = " ".join(a for a in run["args"] if a.startswith("tests/"))
    return f"py{run['python']:<8} {args or 'tests'}" + (f"  [{env}]" if env else "")


def row(name: str, counts: collections.Counter) -> str:
    cells = "".join(f"{counts[o]:>9}" for o in OUTCOMES)
    return f"  {name:<9}{cells}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = sorted(Path(argv[1]).glob("*.json"))
    if not files:
        print(f"tally: no pytest run left a record in {argv[1]}", file=sys.stderr)
        return 1
    expect_no_uring = os.environ.get("RSLOOP_EXPECT_NO_URING") == "1"
    entries = load_allowed(expect_no_uring)
    total: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    bad_skips: list[str] = []
    failures: list[str] = []
    used: collections.Counter = collections.Counter()
    header = "  " + " " * 9 + "".join(f"{o:>9}" for o in OUTCOMES)
    for path in files:
        run = json.loads(path.read_text())
        per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for nodeid, test in run["tests"].items():
            backend, outcome = test["backend"], test["outcome"] or "failed"
            per[backend][outcome] += 1
            total[backend][outcome] += 1
            if outcome in ("failed", "xpassed"):
                failures.append(f"{nodeid} ({outcome}, py{run['python']})")
            if outcome == "skipped" and backend in CHECKED:
                entry = allowed_by(backend, test["reason"], entries)
                if entry is None:
                    bad_skips.append(f"{nodeid}: {test['reason']}  (py{run['python']})")
                else:
                    used[entry["why"]] += 1
        if run.get("exitstatus", 0) != 0:
            failures.append(f"pytest exit status {run['exitstatus']}: {label(run)}")
        print(f"\n{label(run)}")
        print(header)
        for b in BACKENDS:
            if per[b]:
                print(row(b, per[b]))
    print(f"\n=== all {len(files)} pytest runs, per backend ('-': cases that name no backend) ===")
    print(header)
    for b in BACKENDS:
        print(row(b, total[b]))
    if used:
        print("\nskips on uring/poll accepted by .ci/skips-allowed.json:")
        for why, n in used.most_common():
            print(f"  {n:>5}  {why}")
    passed = sum(c["passed"] for c in total.values())
    failed = sum(c["failed"] + c["xpassed"] for c in total.values())
    skipped = sum(c["skipped"] for c in total.values())
    status = 0
    if bad_skips:
        print(f"\n{len(bad_skips)} skips NOT on {ALLOW.name}:", file=sys.stderr)
        for line in bad_skips:
            print(f"  {line}", file=sys.stderr)
        status = 1
    if failures:
        print(f"\n{len(failures)} failures:", file=sys.stderr)
        for line in failures[:50]:
            print(f"  {line}", file=sys.stderr)
        status = 1
    for b in ("uring", "poll"):
        if total[b]["passed"] == 0 and not (b == "uring" and expect_no_uring):
            print(f"\nno {b} case passed at all", file=sys.stderr)
            status = 1
    if passed == 0:
        print("\nno test ran", file=sys.stderr)
        status = 1
    verdict = "ok" if status == 0 else "FAILED"
    print(
        f"\ntests: {passed} passed, {failed} failed, {skipped} skipped "
        f"({len(bad_skips)} not allowed): {verdict}"
    )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))

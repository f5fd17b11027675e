"""8 threads post 1,000,000 call_soon_threadsafe callbacks in total to one rsloop loop:
every one must run exactly once, and each thread's in the order it posted them.

    python stress/threadsafe.py --backend uring
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

from _proc import open_fds, rss_mib  # stress/ is the script's own directory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="uring", choices=["uring", "poll"])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--total", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1, help="a fresh loop per round")
    p.add_argument(
        "--warmup-rounds",
        type=int,
        default=2,
        help="rounds that fill the allocator's pools before RSS growth is measured",
    )
    p.add_argument(
        "--rss-growth-mib",
        type=float,
        default=12.0,
        help="most RSS may grow from the end of the warm-up rounds to the end of the last "
        "(pymalloc keeps partly used arenas: a few MiB of noise)",
    )
    args = p.parse_args(argv)
    os.environ["RSLOOP_BACKEND"] = args.backend
    import rsloop

    fds = [open_fds()]
    rss = [rss_mib()]
    blocks = [sys.getallocatedblocks()]
    reports = []
    for _ in range(args.rounds):
        reports.append(one_round(args, rsloop))
        gc.collect()
        fds.append(open_fds())
        rss.append(rss_mib())
        blocks.append(sys.getallocatedblocks())
    warm = min(args.warmup_rounds, args.rounds)
    growth = round(rss[-1] - rss[warm], 2)
    report = {
        "backend": args.backend,
        "threads": args.threads,
        "rounds": reports,
        "fds": fds,
        "rss_mib": [round(r, 2) for r in rss],
        "rss_growth_mib": growth if args.rounds > warm else None,
        # Python's own allocated blocks: exact where RSS is allocator noise.
        "allocated_blocks": blocks,
    }
    print(json.dumps(report))
    checks = {
        "every post ran once, in its thread's order": all(r["ok"] for r in reports),
        "fds back to the start's after each loop closed": all(f <= fds[0] for f in fds),
        f"Python blocks after round {warm} to round {args.rounds} grew < 1000": (
            args.rounds <= warm or blocks[-1] - blocks[warm] < 1000
        ),
        f"RSS growth from round {warm} to round {args.rounds} <= {args.rss_growth_mib} MiB": (
            args.rounds <= warm or growth <= args.rss_growth_mib
        ),
    }
    for name, good in checks.items():
        print(f"{'ok  ' if good else 'FAIL'} {name}")
    ok = all(checks.values())
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def one_round(args, rsloop) -> dict:
    per_thread = args.total // args.threads
    total = per_thread * args.threads
    next_seq = [0] * args.threads
    errors: list[str] = []
    loop = rsloop.new_event_loop()
    done = loop.create_future()
    ran = 0

    def callback(thread: int, seq: int) -> None:
        nonlocal ran
        if seq != next_seq[thread]:
            if len(errors) < 20:
                errors.append(f"thread {thread}: got {seq}, expected {next_seq[thread]}")
        next_seq[thread] = seq + 1
        ran += 1
        if ran == total and not done.done():
            done.set_result(None)

    def producer(thread: int) -> None:
        post = loop.call_soon_threadsafe
        for seq in range(per_thread):
            post(callback, thread, seq)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(args.threads)]
    t0 = time.perf_counter()

    async def run():
        for t in threads:
            t.start()
        await done
        # Anything posted twice would run after the last expected one: give it a turn.
        for _ in range(3):
            await asyncio.sleep(0)

    import asyncio

    try:
        loop.run_until_complete(asyncio.wait_for(run(), 600))
    finally:
        for t in threads:
            t.join()
        loop.close()
    elapsed = time.perf_counter() - t0
    ok = ran == total and not errors and all(n == per_thread for n in next_seq)
    return {
        "posted": total,
        "ran": ran,
        "per_thread_last": next_seq,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "ok": ok,
    }


if __name__ == "__main__":
    sys.exit(main())

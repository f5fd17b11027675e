"""8 threads post 1,000,000 call_soon_threadsafe callbacks in total to one rsloop loop:
every one must run exactly once, and each thread's in the order it posted them.

    python stress/threadsafe.py --backend uring
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="uring", choices=["uring", "poll"])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--total", type=int, default=1_000_000)
    args = p.parse_args(argv)
    os.environ["RSLOOP_BACKEND"] = args.backend
    import rsloop

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
    report = {
        "backend": args.backend,
        "threads": args.threads,
        "posted": total,
        "ran": ran,
        "per_thread_last": next_seq,
        "errors": errors,
        "seconds": round(elapsed, 2),
    }
    print(json.dumps(report))
    ok = ran == total and not errors and all(n == per_thread for n in next_seq)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

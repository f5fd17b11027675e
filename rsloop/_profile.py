"""``rsloop.profile(path)``: a flame graph of where a loop's thread spends its time.

A sampling profiler in pure Python (no dependency, no build feature): a helper thread
reads the loop thread's Python stack every ``interval`` seconds
(``sys._current_frames()``) and counts the stacks. Samples whose innermost frame is the
loop's native run loop (``Loop.run_forever`` calling into Rust) are split, with the
loop's own counters (``loop.stats()['wait_seconds']``), into *kernel wait* (idle: the
loop had nothing to run) and *loop work* (rsloop's native dispatch: I/O completions,
timers, handing callbacks to Python). Everything above is your callbacks' Python code.

The file written depends on ``path``'s suffix: ``.svg`` gives a self-contained flame
graph (open it in a browser), anything else the "folded stacks" text that flamegraph.pl,
inferno and speedscope read (``frame;frame;frame count`` per line).

The sampler needs the GIL for each sample, so a callback that holds the GIL for long is
sampled when it lets go: the picture is right in proportion for the usual short
callbacks, coarse for long CPU-bound ones. Overhead at the default 1 ms interval is a few
per cent.
"""

from __future__ import annotations

import contextlib
import html
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["profile", "start_profile", "stop_profile"]

WAIT = "[kernel wait: nothing to run]"
WORK = "[rsloop native: completions, timers, dispatch]"
_NATIVE_FILE = os.path.join("rsloop", "_loop.py")


def _frame_label(frame) -> str:
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name)
    filename = code.co_filename
    parts = filename.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{name} ({short}:{frame.f_lineno})"


class _Profiler:
    def __init__(self, path: str | os.PathLike, interval: float, loop: Any) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.path = os.fspath(path)
        self.interval = interval
        self.loop = loop
        self.thread_id = threading.get_ident()
        self.samples: Counter[tuple[str, ...]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rsloop-profile", daemon=True)
        self._wait0 = self._wait_seconds()
        self._t0 = time.perf_counter()

    def _wait_seconds(self) -> float | None:
        stats = getattr(self.loop, "stats", None)
        if stats is None:
            return None
        try:
            return float(stats()["wait_seconds"])
        except Exception:  # noqa: BLE001 - a loop without the counter
            return None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        me = self.thread_id
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(me)
            if frame is None:
                continue
            stack = []
            while frame is not None:
                stack.append(frame)
                frame = frame.f_back
            stack.reverse()
            labels = [_frame_label(f) for f in stack]
            innermost = stack[-1].f_code
            if innermost.co_name == "run_forever" and innermost.co_filename.endswith(_NATIVE_FILE):
                labels.append("\0native")  # split into wait / work at the end
            self.samples[tuple(labels)] += 1

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        elapsed = time.perf_counter() - self._t0
        wait1 = self._wait_seconds()
        folded = self._split_native(elapsed, wait1)
        if self.path.endswith(".svg"):
            text = _svg(folded, title=self._title(elapsed, wait1))
        else:
            text = "".join(f"{';'.join(stack)} {n}\n" for stack, n in sorted(folded.items()))
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(text)
        return self.path

    def _split_native(self, elapsed: float, wait1: float | None) -> Counter[tuple[str, ...]]:
        total = sum(self.samples.values())
        native = {s: n for s, n in self.samples.items() if s and s[-1] == "\0native"}
        n_native = sum(native.values())
        if wait1 is not None and self._wait0 is not None and total and elapsed > 0:
            wait_share = min(1.0, max(0.0, (wait1 - self._wait0) / elapsed))
            n_wait = min(n_native, round(wait_share * total))
        else:
            n_wait = None
        out: Counter[tuple[str, ...]] = Counter()
        left_wait = n_wait
        for stack, n in self.samples.items():
            if stack and stack[-1] == "\0native":
                base = stack[:-1]
                if left_wait is None:
                    out[base + ("[rsloop native run loop: wait and work]",)] += n
                    continue
                w = min(n, left_wait)
                left_wait -= w
                if w:
                    out[base + (WAIT,)] += w
                if n - w:
                    out[base + (WORK,)] += n - w
            else:
                out[stack] += n
        return out

    def _title(self, elapsed: float, wait1: float | None) -> str:
        total = sum(self.samples.values())
        parts = [f"{total} samples over {elapsed:.2f} s (every {self.interval * 1e3:g} ms)"]
        if wait1 is not None and self._wait0 is not None:
            parts.append(f"kernel wait {wait1 - self._wait0:.3f} s (loop.stats())")
        return "rsloop profile: " + ", ".join(parts)


_active: _Profiler | None = None


def start_profile(path: str | os.PathLike, *, interval: float = 0.001, loop: Any = None) -> None:
    """Start sampling the calling thread (the one that runs, or will run, the loop)."""
    global _active
    if _active is not None:
        raise RuntimeError("rsloop: a profile is already running; stop_profile() first")
    if loop is None:
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
    _active = _Profiler(path, interval, loop)
    _active.start()


def stop_profile() -> str:
    """Stop the running profile, write its file and return the path."""
    global _active
    if _active is None:
        raise RuntimeError("rsloop: no profile is running")
    prof, _active = _active, None
    return prof.stop()


@contextlib.contextmanager
def profile(
    path: str | os.PathLike, *, interval: float = 0.001, loop: Any = None
) -> Iterator[None]:
    """Profile the block: ``with rsloop.profile("out.svg"): loop.run_until_complete(main())``.

    Inside a coroutine, pass nothing: the running loop is found. The flame graph (``.svg``)
    or folded stacks (any other suffix) are written when the block ends.
    """
    start_profile(path, interval=interval, loop=loop)
    try:
        yield
    finally:
        stop_profile()


# ----- a small self-contained SVG flame graph -----

_ROW = 17
_WIDTH = 1200


def _svg(folded: Counter[tuple[str, ...]], title: str) -> str:
    total = sum(folded.values())
    tree: dict = {"n": 0, "kids": {}}
    for stack, n in folded.items():
        node = tree
        node["n"] += n
        for label in stack:
            node = node["kids"].setdefault(label, {"n": 0, "kids": {}})
            node["n"] += n
    depth = max((len(s) for s in folded), default=0)
    height = (depth + 3) * _ROW
    rects: list[str] = []

    def color(label: str) -> str:
        if label == WAIT:
            return "#9ecae1"
        if label == WORK:
            return "#fd8d3c"
        h = sum(map(ord, label)) % 40
        return f"hsl({20 + h},80%,{60 + h % 15}%)"

    def walk(node: dict, x: float, level: int) -> None:
        for label, kid in sorted(node["kids"].items()):
            w = _WIDTH * kid["n"] / total if total else 0
            if w >= 0.5:
                y = height - (level + 2) * _ROW
                pct = 100 * kid["n"] / total
                tip = html.escape(f"{label}: {kid['n']} samples ({pct:.1f}%)")
                text = html.escape(
                    label if len(label) * 6.5 < w else label[: max(0, int(w / 6.5) - 2)] + ".."
                )
                rects.append(
                    f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                    f'height="{_ROW - 1}" fill="{color(label)}" rx="2"/>'
                    + (f'<text x="{x + 3:.1f}" y="{y + 12}">{text}</text>' if w > 25 else "")
                    + "</g>"
                )
                walk(kid, x, level + 1)
            x += w

    walk(tree, 0.0, 0)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'font-family="monospace" font-size="11">'
        f'<rect width="100%" height="100%" fill="#fff"/>'
        f'<text x="4" y="14" font-size="13">{html.escape(title)}</text>'
        + "".join(rects)
        + "</svg>\n"
    )

"""Differential property tests: generated programs of loop operations must leave the
same observable trace on stdlib asyncio and on every rsloop backend.

A *program* is a tree of steps drawn by Hypothesis. :class:`Run` interprets it on one
loop and returns the trace: a list of tuples naming what ran, in what order, and what it
saw (context variable values, future states, exception-handler calls). Traces never
contain times, reprs or task names.

Determinism without a fake clock
--------------------------------
rsloop's native loop reads the monotonic clock itself, so timers are made race-free by
construction instead:

* Positive deadlines lie on a coarse grid of *slots* ``base + k * SLOT`` where ``base`` is
  ``loop.time()`` read once at program start. ``call_at`` deadlines are the exact float
  ``base + k * SLOT`` (equal deadlines are bit-identical, so asyncio's heap order for ties
  is exercised). ``call_later``/``sleep`` with a positive delay land on a slot reserved for
  that one timer (a slot already taken is bumped to the next free one, deterministically).
* Zero and negative delays and ``call_at`` of a past slot are due at the next iteration.
* All work caused by one slot must finish in the first ``VALID_FRACTION`` of it. Every
  recorded event checks that; a run that misses it (a loaded machine) is *invalid* and
  the comparison is retried, so a failure is always a genuine difference.

Callbacks posted from other threads are recorded in a per-thread sub-trace: only the
order within one thread is comparable.

What a program can do (steps nest up to two levels inside callbacks and tasks, at most
MAX_STEPS in all): call_soon; call_soon with an explicit Context whose callback reads and
writes a ContextVar (plain callbacks and tasks record the value they see too); set the
ContextVar; call_soon_threadsafe from the loop thread; call_later with 0, negative or
slot-sized delays; call_at on a shared base (past, present and future slots, equal
floats); call_at(nan / inf / -inf); cancel an earlier handle (pending, queued or already
run); raise in a callback (the exception handler call is traced); raise SystemExit out of
run_forever and call loop.stop(), both followed by run_forever again; futures
(create_future, add_done_callback, set_result, set_exception, cancel); tasks whose
coroutine awaits futures, sleep(0), sleep(delay) and runs nested steps, then returns or
raises; gather(return_exceptions=True); threads posting with call_soon_threadsafe. The
trace ends with the final state of every future and handle.

The timer-heap property pushes >100 timers on a few equal deadlines and cancels most of
them, crossing asyncio's compaction threshold, in phases one iteration apart.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import itertools
import math
import sys
import threading

import pytest
from conftest import _selected_backends, make_loop
from hypothesis import currently_in_test_context, given, reject
from hypothesis import strategies as st

SLOT = 0.025  # seconds between two distinct positive deadlines
VALID_FRACTION = 0.35  # recorded work must happen within this share of its slot
END_FRACTION = 0.65  # the end check runs here, away from any deadline
MAX_SLOT = 6  # timeline <= (MAX_SLOT + 1) * SLOT
MAX_STEPS = 30
RETRIES = 4
EPSILON = 1e-9  # of a slot: float rounding of a deadline read back from loop.time()
WATCHDOG = 5.0  # seconds: a run this long is stuck (the timeline is < 0.2 s)

NATIVE = ("uring", "poll")
CANDIDATES = tuple(k for k in ("uring", "poll", "fallback") if k in _selected_backends())

cv: contextvars.ContextVar[str] = contextvars.ContextVar("rsloop_prop_cv", default="-")


def _state(fut) -> tuple:
    """A future's observable state, without reprs."""
    if not fut.done():
        return ("pending",)
    if fut.cancelled():
        return ("cancelled",)
    exc = fut.exception()
    if exc is not None:
        return ("exc", type(exc).__name__)
    return ("ok", _summary(fut.result()))


def _summary(value):
    if isinstance(value, BaseException):
        return type(value).__name__
    if isinstance(value, (list, tuple)):
        return tuple(_summary(v) for v in value)
    if value is None or isinstance(value, (int, str)):
        return value
    return type(value).__name__


class Run:
    """Interprets one program on one loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, program: tuple) -> None:
        self.loop = loop
        self.program = program
        self.trace: list[tuple] = []
        self.sub: dict[int, list] = {}
        self.handles: list = []  # (label, handle) for every call_soon/later/at
        self.futs: list = []  # futures, tasks and gather futures, in creation order
        self.tasks: list = []
        self.ctxs = [contextvars.Context(), contextvars.Context()]
        self.slots: dict[int, str] = {}  # reserved future slot -> "at" | "later"
        self.max_slot = 0
        self.valid = True
        self.ended = False
        self.threads: list[threading.Thread] = []
        self.expected_posts = 0
        self.received_posts = 0
        self.base = 0.0
        self.late: list = []
        self.end_polls = 0
        self.virtual = False  # the loop runs on a virtual clock

    # ----- bookkeeping -----

    def epoch(self) -> int:
        """The current slot; marks the run invalid if we are late in it."""
        # (+ EPSILON: on a virtual clock a callback runs at its deadline's exact float,
        # which divides to a hair below its slot number.)
        pos = (self.loop.time() - self.base) / SLOT + EPSILON
        k = math.floor(pos)
        if pos - k > VALID_FRACTION:
            self.valid = False
        return k

    def rec(self, *item) -> None:
        if self.ended:
            return
        self.epoch()
        self.trace.append(item)

    def reserve(self, slot: int, kind: str) -> int | None:
        """Reserve a future slot for a timer; returns the slot used or None (no room).
        ``at`` slots may be shared by any number of call_at timers (equal deadlines);
        a ``later`` slot holds a single timer."""
        while slot <= MAX_SLOT:
            taken = self.slots.get(slot)
            if taken is None or (kind == "at" and taken == "at"):
                self.slots[slot] = kind
                self.max_slot = max(self.max_slot, slot)
                return slot
            slot += 1
        return None

    def later_delay(self, kind) -> float | None:
        if kind == "zero":
            return 0
        if kind == "neg":
            return -1.0
        if kind == "neg_small":
            return -0.5
        k = self.epoch()
        slot = self.reserve(k + kind, "later")
        if slot is None:
            return None
        return (slot - k) * SLOT

    def on_exception(self, _loop, context) -> None:
        exc = context.get("exception")
        item = (
            "handler",
            " ".join(context.get("message", "").split()[:3]),
            type(exc).__name__ if exc is not None else None,
        )
        if self.ended:
            self.late.append(item)
        else:
            self.rec(*item)

    # ----- callbacks -----

    def cb(self, label, body) -> None:
        self.rec("cb", label, cv.get())
        self.exec_steps(body)

    def ctx_cb(self, label, body) -> None:
        self.rec("ctx", label, cv.get())
        cv.set(f"c{label}")
        self.exec_steps(body)

    def fut_done(self, label, raises, fut) -> None:
        self.rec("fcb", label, _state(fut))
        if raises:
            raise RuntimeError(label)

    def task_done(self, label, task) -> None:
        self.rec("tdone", label, _state(task))

    def gather_done(self, label, fut) -> None:
        self.rec("gdone", label, _state(fut))

    def posted(self, tid, i) -> None:
        self.sub[tid].append(i)
        self.received_posts += 1

    def poster(self, tid, n) -> None:
        for i in range(n):
            try:
                self.loop.call_soon_threadsafe(self.posted, tid, i)
            except RuntimeError:  # closed: the run ended without us (the trace says so)
                return

    async def coro(self, label, actions, fails, limit):
        # Only futures created before this task may be awaited (gather likewise only
        # takes earlier ones): no await cycles, which would make cancel() recurse forever.
        self.rec("task", label, "start", cv.get())
        for i, action in enumerate(actions):
            kind = action[0]
            try:
                if kind == "sleep0":
                    await asyncio.sleep(0)
                elif kind == "sleep":
                    delay = self.later_delay(action[1])
                    if delay is None:
                        self.rec("task", label, "skip", i)
                        continue
                    await asyncio.sleep(delay)
                elif kind == "await":
                    if not limit:
                        continue
                    result = await self.futs[action[1] % limit]
                    self.rec("task", label, "got", i, _summary(result))
                elif kind == "do":
                    self.exec_steps(action[1])
            except Exception as exc:  # noqa: BLE001 - recorded
                self.rec("task", label, "exc", i, type(exc).__name__)
            self.rec("task", label, "step", i, cv.get())
        if fails:
            raise ValueError(label)
        return label

    # ----- steps -----

    def exec_steps(self, steps) -> None:
        if self.ended:
            # Ran after the end check stopped the loop (in its last iteration, or in the
            # clean-up): nothing more is recorded, so start nothing (no threads either).
            return
        for step in steps:
            self.do(step)

    def do(self, step) -> None:
        loop = self.loop
        op = step[0]
        if op == "soon":
            _, label, body = step
            self.handles.append((label, loop.call_soon(self.cb, label, body)))
        elif op == "soon_ctx":
            _, label, ci, body = step
            h = loop.call_soon(self.ctx_cb, label, body, context=self.ctxs[ci])
            self.handles.append((label, h))
        elif op == "threadsafe":
            _, label, body = step
            self.handles.append((label, loop.call_soon_threadsafe(self.cb, label, body)))
        elif op == "later":
            _, label, kind, body = step
            delay = self.later_delay(kind)
            if delay is None:
                self.rec("skip", label)
                return
            self.handles.append((label, loop.call_later(delay, self.cb, label, body)))
        elif op == "at":
            _, label, slot, body = step
            if slot > self.epoch():
                slot = self.reserve(slot, "at")
                if slot is None:
                    self.rec("skip", label)
                    return
            when = self.base + slot * SLOT
            self.handles.append((label, loop.call_at(when, self.cb, label, body)))
        elif op == "at_special":
            # Deadlines asyncio accepts and orders with `<` alone: a NaN one compares
            # false both ways, so it can hold other timers below it in the heap.
            _, label, when, body = step
            h = loop.call_at(float(when), self.cb, label, body)
            self.handles.append((label, h))
        elif op == "cancel":
            if self.handles:
                label, h = self.handles[step[1] % len(self.handles)]
                before = h.cancelled()
                h.cancel()
                self.rec("cancel", label, before, h.cancelled())
        elif op == "raise":
            raise ZeroDivisionError("step")
        elif op == "exit":
            raise SystemExit(7)
        elif op == "stop":
            loop.stop()
        elif op == "cv_set":
            cv.set(f"v{step[1]}")
        elif op == "future":
            self.futs.append(loop.create_future())
        elif op == "fut_cb":
            if self.futs:
                _, fi, label, raises = step
                fut = self.futs[fi % len(self.futs)]
                fut.add_done_callback(functools.partial(self.fut_done, label, raises))
        elif op in ("fut_set", "fut_exc"):
            if self.futs:
                fut = self.futs[step[1] % len(self.futs)]
                try:
                    if op == "fut_set":
                        fut.set_result(step[2])
                    else:
                        fut.set_exception(KeyError(step[1]))
                    self.rec(op, step[1] % len(self.futs))
                except (asyncio.InvalidStateError, RuntimeError) as exc:
                    self.rec(op, step[1] % len(self.futs), type(exc).__name__)
        elif op == "fut_cancel":
            if self.futs:
                fut = self.futs[step[1] % len(self.futs)]
                self.rec("fut_cancel", step[1] % len(self.futs), fut.cancel())
        elif op == "task":
            _, label, actions, fails = step
            task = loop.create_task(self.coro(label, actions, fails, len(self.futs)))
            task.add_done_callback(functools.partial(self.task_done, label))
            self.tasks.append(task)
            self.futs.append(task)
        elif op == "gather":
            if self.futs:
                _, label, idxs = step
                children = [self.futs[i % len(self.futs)] for i in idxs]
                g = asyncio.gather(*children, return_exceptions=True)
                g.add_done_callback(functools.partial(self.gather_done, label))
                self.futs.append(g)
        elif op == "thread":
            tid = len(self.threads)
            self.sub[tid] = []
            self.expected_posts += step[1]
            t = threading.Thread(target=self.poster, args=(tid, step[1]), daemon=True)
            self.threads.append(t)
            t.start()
            if self.virtual:
                # Virtual time does not wait for plain threads (only for executor jobs):
                # the poster's posts are all queued before the program goes on.
                t.join(WATCHDOG)
        else:  # pragma: no cover - generator and interpreter out of sync
            raise AssertionError(f"unknown step {step!r}")

    # ----- driving -----

    def start(self) -> None:
        self.base = self.loop.time()
        # Two futures from the start, so future steps always have something to act on.
        self.futs = [self.loop.create_future(), self.loop.create_future()]
        self.loop.call_at(self.base + END_FRACTION * SLOT, self.end_check)
        self.exec_steps(self.program)

    def end_check(self, polling: bool = False) -> None:
        pos = (self.loop.time() - self.base) / SLOT
        if not polling and pos - math.floor(pos) < END_FRACTION - 0.05:
            # So late that it ran in a later slot: timers due by now may not have run yet.
            self.valid = False
        if math.floor(pos) < self.max_slot:
            when = self.base + (self.max_slot + END_FRACTION) * SLOT
            self.loop.call_at(when, self.end_check)
            return
        if self.received_posts < self.expected_posts and self.end_polls < 400:
            # Posts from other threads still in flight (a slow thread start).
            self.end_polls += 1
            self.loop.call_later(0.005, self.end_check, True)
            return
        # Recorded at END_FRACTION of a slot on purpose: no validity check.
        self.trace.append(
            (
                "final",
                tuple(_state(f) for f in self.futs),
                tuple(h.cancelled() for _, h in self.handles),
                self.received_posts == self.expected_posts,
            )
        )
        self.ended = True
        self.loop.stop()

    def watchdog(self) -> None:
        """The run took far longer than its timeline: say so in the trace and stop."""
        self.trace.append(("STUCK: watchdog woke the loop", self.max_slot))
        self.ended = True
        self.loop.stop()

    def execute(self) -> tuple[list, dict, bool]:
        loop = self.loop
        loop.set_exception_handler(self.on_exception)
        asyncio.set_event_loop(loop)
        dog = threading.Timer(WATCHDOG, loop.call_soon_threadsafe, (self.watchdog,))
        dog.daemon = True
        dog.start()
        try:
            loop.call_soon(self.start)
            while True:
                # A "stop" step ends run_forever after the current iteration and an "exit"
                # step raises SystemExit out of it: both resume where they left off.
                try:
                    loop.run_forever()
                except SystemExit:
                    if self.ended:  # the end check's stop() came first
                        break
                    self.rec("exit")
                    continue
                if self.ended:
                    break
                self.rec("restart")
            self.ended = True
            pending = [t for t in self.tasks if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for f in self.futs:
                if f.done() and not f.cancelled():
                    f.exception()  # retrieved: no "never retrieved" log at GC
        finally:
            dog.cancel()
            asyncio.set_event_loop(None)
            loop.close()
            for t in self.threads:
                t.join(5)
        return self.trace, self.sub, self.valid


def _give_up(what: str):
    """Every attempt was timing-invalid: drop the example (or skip outside Hypothesis)."""
    if currently_in_test_context():
        reject()
    pytest.skip(f"machine too loaded: {RETRIES} timing-invalid runs of {what}")


def run_program(kind: str, program) -> tuple[list, dict]:
    """Trace of ``program`` on a fresh loop of ``kind``, retried while timing-invalid."""
    for _ in range(RETRIES):
        trace, sub, valid = Run(make_loop(kind), program).execute()
        if valid:
            return trace, sub
    _give_up(kind)


def _concurrently(attempt, kinds):
    """``attempt(kind)`` for each kind, each on its own thread (the runs mostly sleep,
    so this halves the wall time). Exceptions, pytest.skip included, are re-raised."""
    results: dict = {}

    def work(kind):
        try:
            results[kind] = attempt(kind)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            results[kind] = exc

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in kinds[1:]]
    for t in threads:
        t.start()
    work(kinds[0])
    for k, t in zip(kinds[1:], threads, strict=True):
        t.join(2 * WATCHDOG)
        if t.is_alive():
            raise AssertionError(f"{k}: the loop is stuck even after a call_soon_threadsafe")
    for k in kinds:
        if isinstance(results[k], BaseException):
            raise results[k]
    return [results[k] for k in kinds]


def differential(kind: str, attempt):
    """Runs ``attempt`` (returning ``(observation, valid)``) on asyncio and on ``kind``
    until both runs are timing-valid; returns the two observations."""
    for _ in range(RETRIES):
        (ref, ref_ok), (got, got_ok) = _concurrently(attempt, ("asyncio", kind))
        if ref_ok and got_ok:
            return ref, got
    _give_up(f"asyncio vs {kind}")


def _program_attempt(program):
    def attempt(kind):
        trace, sub, valid = Run(make_loop(kind), program).execute()
        return (trace, sub), valid

    return attempt


def compare(kind: str, program) -> None:
    """Assert the traces on asyncio and on ``kind`` are equal (both timing-valid)."""
    (ref, ref_sub), (got, got_sub) = differential(kind, _program_attempt(program))
    if got != ref:
        raise AssertionError(f"{kind} trace differs from asyncio:\n{_diff(ref, got)}")
    assert got_sub == ref_sub, f"{kind} per-thread sub-traces differ: {got_sub} != {ref_sub}"


def _diff(ref: list, got: list) -> str:
    lines = []
    for i, (a, b) in enumerate(itertools.zip_longest(ref, got)):
        mark = "  " if a == b else "!!"
        lines.append(f"{mark} {i:3d} asyncio={a!r:50} rsloop={b!r}")
    return "\n".join(lines)


# ----- program generator -----

DELAYS = st.sampled_from(["zero", "neg", "neg_small", 1, 1, 2, 3])
IDX = st.integers(0, 3)


def _steps(depth: int):
    body = st.just(()) if depth == 0 else st.lists(_step(depth - 1), max_size=3).map(tuple)
    actions = st.lists(
        st.one_of(
            st.just(("sleep0",)),
            st.tuples(st.just("sleep"), DELAYS),
            st.tuples(st.just("await"), IDX),
            st.tuples(st.just("do"), body),
        ),
        max_size=3,
    ).map(tuple)
    schedule = st.one_of(
        st.tuples(st.just("soon"), st.just(0), body),
        st.tuples(st.just("soon_ctx"), st.just(0), st.integers(0, 1), body),
        st.tuples(st.just("threadsafe"), st.just(0), body),
        st.tuples(st.just("later"), st.just(0), DELAYS, body),
        st.tuples(st.just("at"), st.just(0), st.integers(0, 4), body),
        st.tuples(st.just("at_special"), st.just(0), st.sampled_from(SPECIAL_DEADLINES), body),
    )
    return st.one_of(
        schedule,
        schedule,
        st.tuples(st.just("cancel"), st.integers(0, 15)),
        st.just(("raise",)),
        st.just(("exit",)),
        st.just(("stop",)),
        st.tuples(st.just("cv_set"), st.integers(0, 3)),
        st.just(("future",)),
        st.tuples(st.just("fut_cb"), IDX, st.just(0), st.booleans()),
        st.tuples(st.just("fut_set"), IDX, st.integers(0, 3)),
        st.tuples(st.just("fut_exc"), IDX),
        st.tuples(st.just("fut_cancel"), IDX),
        st.tuples(st.just("task"), st.just(0), actions, st.booleans()),
        st.tuples(st.just("gather"), st.just(0), st.lists(IDX, min_size=1, max_size=3)),
        st.tuples(st.just("thread"), st.integers(1, 4)),
    )


# NaN deadlines: asyncio up to 3.12 runs such a timer at once, as rsloop does on every
# version; 3.13's selector loop raises ValueError out of run_forever when a NaN timer is
# next with nothing ready (a documented difference, docs/compatibility.md), so there is no
# reference trace to compare with.
SPECIAL_DEADLINES = ["nan", "-inf", "inf"] if sys.version_info < (3, 13) else ["-inf", "inf"]


def _step(depth: int):
    return st.deferred(lambda: _steps(depth))


_LABELLED = {
    "soon",
    "soon_ctx",
    "threadsafe",
    "later",
    "at",
    "at_special",
    "fut_cb",
    "task",
    "gather",
}


def _finish(program) -> tuple:
    """Keep at most MAX_STEPS steps (depth first) and give every labelled step a unique
    label in program order, so traces say exactly which step ran."""
    counter = itertools.count(1)
    budget = [MAX_STEPS]

    def walk_steps(steps):
        out = []
        for s in steps:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            out.append(walk(s))
        return tuple(out)

    def walk(s):
        s = list(s)
        if s[0] in _LABELLED:
            idx = 2 if s[0] == "fut_cb" else 1
            s[idx] = next(counter)
        if s[0] == "task":
            s[2] = tuple(("do", walk_steps(a[1])) if a[0] == "do" else a for a in s[2])
        elif s[0] in ("soon", "soon_ctx", "threadsafe", "later", "at", "at_special"):
            s[-1] = walk_steps(s[-1])
        return tuple(s)

    return walk_steps(program)


programs = st.lists(_step(2), min_size=2, max_size=12).map(_finish)


@pytest.fixture(autouse=True)
def _quick_gil_handoff():
    """Other threads (posters, the concurrently running loop) get the GIL within 0.5 ms
    instead of 5 ms, so a slot's work stays well inside VALID_FRACTION of it."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(old)


@pytest.mark.timeout(900)  # the "slow" profile runs 600 programs
@pytest.mark.parametrize("kind", CANDIDATES)
@given(program=programs)
def test_programs_match_asyncio(kind, program):
    compare(kind, program)


# ----- virtual time: the same programs, against asyncio with a patched clock -----


class PatchedClockLoop(asyncio.SelectorEventLoop):
    """stdlib asyncio on a virtual clock, the way asynctest's ClockedTestCase did it:
    ``time()`` returns a virtual value, and a ``select`` that would block instead polls
    and moves the clock to the earliest timer's deadline (its exact float). Nothing
    here knows about threads: the programs' posters are waited for by ``Run``."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.virtual_now = start
        selector = self._selector  # type: ignore[attr-defined]
        loop = self

        class JumpingSelector:
            def __getattr__(self, name):
                return getattr(selector, name)

            def select(self, timeout=None):
                events = selector.select(0)
                if events or timeout == 0 or loop._ready:  # type: ignore[attr-defined]
                    return events
                scheduled = loop._scheduled  # type: ignore[attr-defined]
                when = scheduled[0]._when if scheduled else math.inf
                if when == math.inf:
                    return selector.select(timeout)  # nothing will ever fall due
                loop.virtual_now = max(loop.virtual_now, when)
                return events

        self._selector = JumpingSelector()  # type: ignore[assignment]

    def time(self) -> float:
        return self.virtual_now


VIRTUAL_START = 1000.0


def make_virtual_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A loop of ``kind`` on a virtual clock starting at VIRTUAL_START (asyncio: patched)."""
    if kind == "asyncio":
        return PatchedClockLoop(VIRTUAL_START)
    from rsloop.testing import VirtualClock

    clock = VirtualClock(autojump=0.0, start=VIRTUAL_START)
    if kind == "fallback":
        from rsloop._fallback import FallbackLoop

        return FallbackLoop("test: forced fallback", clock=clock)
    make_loop(kind).close()  # skips (or fails in CI) where the backend is unavailable
    from rsloop._loop import Loop

    return Loop(backend=kind, clock=clock)  # type: ignore[abstract]


def run_virtual(kind: str, program) -> tuple[list, dict, bool]:
    run = Run(make_virtual_loop(kind), program)
    run.virtual = True
    return run.execute()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", CANDIDATES)
@given(program=programs)
def test_programs_match_asyncio_virtual_time(kind, program):
    """Under virtual time the traces match a patched-clock asyncio exactly, with no
    retries: the clock, not the machine, decides when each timer runs. "Late" is then
    a property of the program (a NaN deadline hides an earlier timer in the heap, which
    runs when the one above it does), so both runs must agree on it too."""
    ref, ref_sub, ref_valid = run_virtual("asyncio", program)
    got, got_sub, got_valid = run_virtual(kind, program)
    if got != ref:
        raise AssertionError(f"{kind} virtual-time trace differs from asyncio:\n{_diff(ref, got)}")
    assert got_sub == ref_sub
    assert got_valid == ref_valid
    if not any("at_special" in repr(step) for step in program):
        assert got_valid, "without NaN deadlines every callback runs on time"


# ----- timer heap: ties, lazy cancellation, compaction -----

# Past deadlines (due at the next iteration) and future ones that fire at the end, each a
# handful of distinct floats so many timers share each deadline.
PAST = (-0.3, -0.2, -0.1)
FUTURE = (0.02, 0.035)
HEAP_END = 0.05
HEAP_VALID = 0.012

heap_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(PAST + FUTURE)),
        st.tuples(st.just("bulk"), st.integers(20, 60), st.sampled_from(PAST + FUTURE)),
        st.tuples(st.just("cancel"), st.integers(0, 10_000)),
        st.tuples(st.just("cancel_many"), st.integers(0, 6), st.integers(2, 4)),
    ),
    max_size=8,
)
heap_programs = st.lists(heap_ops, min_size=1, max_size=5)


def heap_attempt(phases):
    """Each phase runs in its own iteration (a call_soon chain): it pushes timers with
    call_at and cancels some; the past ones fire at the next iteration in heap order (after
    the lazy-cancel pops, or the compaction, asyncio does at the start of an iteration);
    the future ones fire at the end, one group per deadline."""

    def attempt(kind):
        loop = make_loop(kind)
        # Firing order does not depend on debug mode, and debug mode's creation tracebacks
        # make a bulk phase too slow for the timeline (PYTHONASYNCIODEBUG=1 runs).
        loop.set_debug(False)
        trace: list = []
        timers: list = []
        valid = [True]
        counter = itertools.count()

        def phase(i):
            if loop.time() - base > HEAP_VALID:
                valid[0] = False
            trace.append(("phase", i))
            for op in phases[i]:
                if op[0] in ("push", "bulk"):
                    count, when = (1, op[1]) if op[0] == "push" else (op[1], op[2])
                    for _ in range(count):
                        n = next(counter)
                        timers.append(loop.call_at(base + when, trace.append, n))
                elif op[0] == "cancel" and timers:
                    timers[op[1] % len(timers)].cancel()
                elif op[0] == "cancel_many":
                    start, step = op[1], op[2]
                    for j in range(start, len(timers)):
                        if j % step != 0:
                            timers[j].cancel()
            if i + 1 < len(phases):
                loop.call_soon(phase, i + 1)

        base = loop.time()
        loop.call_soon(phase, 0)
        loop.call_at(base + HEAP_END, loop.stop)
        try:
            loop.run_forever()
        finally:
            loop.close()
        return trace, valid[0]

    return attempt


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", CANDIDATES)
@given(phases=heap_programs)
def test_timer_heap_matches_asyncio(kind, phases):
    ref, got = differential(kind, heap_attempt(phases))
    assert got == ref, f"{kind} timer firing order differs from asyncio:\n{_diff(ref, got)}"


def test_timer_heap_compaction_case(monkeypatch):
    """A fixed case past asyncio's compaction threshold (150 timers on 3 deadlines, two
    thirds cancelled in one iteration), with pushes and cancels after the compaction."""
    phases = [
        [("bulk", 60, 0.02), ("bulk", 60, 0.035), ("bulk", 30, -0.2), ("cancel_many", 0, 3)],
        [("bulk", 20, -0.1), ("push", 0.02), ("cancel", 7), ("bulk", 10, 0.035)],
        [("bulk", 40, -0.3), ("cancel_many", 100, 2), ("push", 0.02)],
    ]
    # asyncio really compacts here (heapq.heapify is only called for that).
    import asyncio.base_events as base_events

    compactions = []
    real = heapq.heapify

    class _Heapq:
        def __getattr__(self, name):
            return getattr(heapq, name)

        def heapify(self, heap):
            compactions.append(len(heap))
            real(heap)

    with monkeypatch.context() as m:
        m.setattr(base_events, "heapq", _Heapq())
        for _ in range(RETRIES):
            ref, ok = heap_attempt(phases)("asyncio")
            if ok:
                break
    assert compactions and len([x for x in ref if isinstance(x, int)]) > 50

    for kind in CANDIDATES:
        ref, got = differential(kind, heap_attempt(phases))
        assert got == ref, f"{kind}:\n{_diff(ref, got)}"


# ----- the interpreter is not vacuous -----


class _Entry:
    """A heap entry compared on its deadline alone, as asyncio.TimerHandle is."""

    def __init__(self, when, item):
        self.when, self.item = when, item

    def __lt__(self, other):
        return self.when < other.when


def _labels(trace, op="cb"):
    return [t[1] for t in trace if t[0] == op]


def test_interpreter_sees_order_and_ties():
    """The trace reflects scheduling order, heapq's order for equal deadlines (five
    call_at on one float fire as 0, 2, 4, 1, 3) and context copies."""
    a, _ = run_program("asyncio", (("soon", 1, ()), ("soon", 2, ())))
    b, _ = run_program("asyncio", (("soon", 2, ()), ("soon", 1, ())))
    assert _labels(a) == [1, 2] and _labels(b) == [2, 1] and a != b

    # Equal deadlines fire in heapq's order, which depends on the whole heap (here the
    # interpreter's end check sits in it too): model it with heapq itself.
    ties = tuple(("at", n, 1, ()) for n in range(5))
    t, _ = run_program("asyncio", ties)
    heap: list = []
    entries = [_Entry(END_FRACTION, "end")] + [_Entry(1.0, n) for n in range(5)]
    for e in entries:
        heapq.heappush(heap, e)
    assert heapq.heappop(heap).item == "end"
    heapq.heappush(heap, _Entry(1 + END_FRACTION, "end"))
    model = [heapq.heappop(heap).item for _ in range(5)]
    assert model != sorted(model)  # not FIFO
    assert _labels(t) == model

    ctx, _ = run_program(
        "asyncio",
        (
            ("cv_set", 1),
            ("soon", 1, ()),
            ("soon_ctx", 2, 0, (("soon", 3, ()),)),
            ("soon_ctx", 4, 0, ()),
        ),
    )
    assert ("cb", 1, "v1") in ctx and ("ctx", 2, "-") in ctx
    assert ("ctx", 4, "c2") in ctx and ("cb", 3, "c2") in ctx


class _FifoTiesLoop(asyncio.SelectorEventLoop):
    """A mutant loop: equal deadlines fire in FIFO order (what a naive heap does)."""

    _n = 0

    def call_at(self, when, callback, *args, context=None):
        self._n += 1
        return super().call_at(when + self._n * 1e-9, callback, *args, context=context)


class _NoContextLoop(asyncio.SelectorEventLoop):
    """A mutant loop: call_soon ignores an explicit context."""

    def call_soon(self, callback, *args, context=None):
        return super().call_soon(callback, *args)


@pytest.mark.parametrize(
    "mutant, program",
    [
        (_FifoTiesLoop, tuple(("at", n, 1, ()) for n in range(5))),
        (_NoContextLoop, (("soon_ctx", 1, 0, ()), ("soon_ctx", 2, 0, ()))),
    ],
)
def test_differential_check_catches_mutants(monkeypatch, mutant, program):
    real = make_loop
    monkeypatch.setitem(
        globals(), "make_loop", lambda kind: mutant() if kind == "mutant" else real(kind)
    )
    with pytest.raises(AssertionError, match="differs from asyncio"):
        compare("mutant", program)

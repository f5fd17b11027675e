"""The `fastcall` fuzz target's oracle: the native loop's and StreamWriter's
METH_FASTCALL methods (`rust/src/sys/fastcall.rs`, their parsing in `py/scheduling.rs`
and `py/streams/writer.rs`) called through the raw vectorcall protocol
(`_fuzzcall.vectorcall`, in the Rust target) with any positional count and any keyword
names, against a Python function with the method's signature called the same way.

A call whose keyword names are well formed (strings, each once: what Python code can
pass) is first made on the reference with each argument's slot number as its value; the
reference binds the slots to its parameters or raises TypeError. Then the native method
gets valid values for the parameters the slots bound to: it must raise TypeError exactly
when the reference did, and otherwise return what asyncio would (a handle holding the
callback, the extra arguments and the context; a task named as asked; a future; the
write reaching the transport). A call with names Python code cannot make (duplicates,
a non-string, bytes) must end in a result or a TypeError: never another exception, a
panic (PanicException) or a crash.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys

from _fuzzcall import vectorcall

import rsloop


class Str(str):
    pass


VOCAB: list = ["callback", "delay", "when", "context", "coro", "name", "data", "x",
               Str("context"), Str("callback"), 1, b"context", "eager_start", "args"]  # fmt: skip
LOOP = rsloop.new_event_loop()
CONTEXT = contextvars.copy_context()


def noop(*args):
    return None


async def nothing():
    return None


def call_soon(callback, *args, context=None):
    return {"callback": callback, "args": args, "context": context}


def call_later(delay, callback, *args, context=None):
    return {"delay": delay, "callback": callback, "args": args, "context": context}


def call_at(when, callback, *args, context=None):
    return {"when": when, "callback": callback, "args": args, "context": context}


if sys.version_info >= (3, 13):

    def create_task(coro, *, name=None, context=None, **kwargs):
        return {"coro": coro, "name": name, "context": context, "kwargs": kwargs}
else:

    def create_task(coro, *, name=None, context=None):
        return {"coro": coro, "name": name, "context": context, "kwargs": {}}


def create_future():
    return {}


def write(data):
    return {"data": data}


def drain():
    return {}


class Transport:
    def __init__(self) -> None:
        self.written: list = []

    def write(self, data) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return default


class Protocol:
    _paused = False

    async def _drain_helper(self):
        return None


TRANSPORT = Transport()
WRITER = rsloop.StreamWriter(TRANSPORT, Protocol(), None, LOOP)
METHODS = [
    (LOOP.call_soon, call_soon),
    (LOOP.call_soon_threadsafe, call_soon),
    (LOOP.call_later, call_later),
    (LOOP.call_at, call_at),
    (LOOP.create_task, create_task),
    (LOOP.create_future, create_future),
    (WRITER.write, write),
    (WRITER.drain, drain),
]


def valid(param: str, slot: int):
    """A value the method accepts for `param`."""
    if param == "callback":
        return noop
    if param in ("delay", "when"):
        return float(slot)
    if param == "context":
        return CONTEXT if slot % 2 else None
    if param == "coro":
        return nothing()
    if param == "name":
        return f"task{slot}"
    if param == "data":
        return b"d%d" % slot
    return ("extra", slot)


def run(data: bytes) -> None:
    b = list(data[:4]) + [0] * (4 - min(len(data), 4))
    native, reference = METHODS[b[0] % len(METHODS)]
    nargs = b[1] % 6
    names = [VOCAB[x % len(VOCAB)] for x in data[4 : 4 + b[2] % 6]]
    offset = bool(b[3] & 1)
    kwnames = tuple(names) if names else None
    total = nargs + len(names)
    well_formed = all(isinstance(n, str) for n in names) and len(set(names)) == len(names)

    try:
        binding = vectorcall(reference, list(range(total)), nargs, kwnames, offset)
    except TypeError:
        binding = None
    values: list = [("extra", i) for i in range(total)]
    if binding is not None:
        for param, slot in binding.items():
            if param in ("args", "kwargs"):
                continue
            if isinstance(slot, int):
                values[slot] = valid(param, slot)
            elif slot is not None:
                raise AssertionError((param, slot))
    try:
        result = vectorcall(native, values, nargs, kwnames, offset)
        error = None
    except Exception as exc:  # noqa: BLE001 - judged below
        result, error = None, exc
    try:
        judge(reference, binding, values, result, error, well_formed, (nargs, names))
    finally:
        if not isinstance(result, asyncio.Task):  # a task closes its coroutine
            for v in values:
                if asyncio.iscoroutine(v):
                    v.close()
        if result is not None and hasattr(result, "cancel"):
            result.cancel()
        # Let cancelled tasks finish and the ready queue empty.
        LOOP.call_soon(LOOP.stop)
        LOOP.run_forever()
        TRANSPORT.written.clear()


def judge(reference, binding, values, result, error, well_formed, shape) -> None:
    what = (reference.__name__, shape, binding, repr(error))
    if error is not None:
        assert type(error).__name__ != "PanicException", what
        assert isinstance(error, TypeError), what
    if not well_formed:
        return
    assert (binding is None) == (error is not None), what
    if binding is None:
        return
    name = reference.__name__
    args = tuple(values[s] for s in binding.get("args", ()))
    context = values[binding["context"]] if isinstance(binding.get("context"), int) else None
    if name in ("call_soon", "call_later", "call_at"):
        assert result._callback is noop, what
        assert (result._args or ()) == args, (what, result._args, args)
        if context is not None:
            assert result._context is context, what
        if name != "call_soon":
            if name == "call_at":
                assert result.when() == values[binding["when"]], what
            else:
                assert result.when() >= LOOP.time() + values[binding["delay"]] - 1, what
    elif name == "create_task":
        assert isinstance(result, asyncio.Task), what
        if isinstance(binding.get("name"), int):
            assert result.get_name() == values[binding["name"]], what
        if context is not None and sys.version_info >= (3, 12):  # get_context: 3.12+
            assert result.get_context() is context, what
    elif name == "create_future":
        assert isinstance(result, asyncio.Future) and not result.done(), what
    elif name == "write":
        assert result is None and TRANSPORT.written == [values[binding["data"]]], what
    elif name == "drain":
        assert result is not None, what

"""Attribute reads on a loop stay specialised by CPython's adaptive interpreter.

User code and asyncio's Python layers reach ``loop.call_soon``, ``loop.create_future``
and ``loop.time`` by attribute. CPython 3.12+ specialises such a read (for a method of an
instance whose attributes live in inline values: ``LOAD_ATTR_METHOD_WITH_VALUES``) unless
something defeats it: the instance's dict made a real dict (3.12 and 3.13: reading
``obj.__dict__``; 3.13 keeps no values inline for a subclass of a native type, and
specialises only while its dict does not exist: the loop keeps its state in slots),
or a name set on one instance, which joins the keys every instance of the class
shares. These tests read the adaptive bytecode after warming it up.
"""

from __future__ import annotations

import dis
import sys
from unittest import mock

import pytest
from conftest import is_rsloop_native, make_loop

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="adaptive bytecode as read here is 3.12+"
)


def _cb() -> None:
    pass


_LOOP_READS = {"call_soon", "time", "create_future", "call_later", "get_debug"}


def _make_probe():
    def probe(loop):
        for _ in range(20):
            loop.call_soon(_cb)
            loop.time()
            loop.create_future()
            loop.call_later(10, _cb).cancel()
            loop.get_debug()

    return probe


def _unspecialised(loop) -> list[str]:
    """The attribute reads on ``loop`` a fresh function leaves generic after a warm-up."""
    probe = _make_probe()
    for _ in range(10):
        probe(loop)
    reads = [
        (i.opname, i.argval)
        for i in dis.get_instructions(probe, adaptive=True)
        if i.opname.startswith("LOAD_ATTR") and i.argval in _LOOP_READS
    ]
    assert len(reads) == len(_LOOP_READS), reads
    return [name for opname, name in reads if opname == "LOAD_ATTR"]


def test_a_new_loops_attribute_reads_are_specialised(loop):
    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native loop")
    loop.run_until_complete(_noop())  # as after a run
    assert _unspecialised(loop) == []


async def _noop() -> None:
    return None


def test_reads_stay_specialised_after_patching_time(loop_kind):
    loop = make_loop(loop_kind)
    try:
        if not is_rsloop_native(loop):
            pytest.skip("rsloop's native loop")
        with mock.patch.object(loop, "time", return_value=1.0):
            assert loop.time() == 1.0
        assert loop.time() != 1.0
        # On 3.12 and 3.13 the patched loop itself is left generic: mock.patch reads
        # loop.__dict__, which makes the dict there (and 3.12's __class__ assignment,
        # which moves the loop to its time subclass and back, makes it too). From 3.14
        # the values stay inline behind a made dict, and the patched loop keeps it.
        if sys.version_info >= (3, 14):
            assert _unspecialised(loop) == []
        # Every other loop keeps it on every version: `time` never became an instance
        # attribute, so the keys instances share do not hold it.
        other = make_loop(loop_kind)
        try:
            assert _unspecialised(other) == []
        finally:
            other.close()
    finally:
        loop.close()


def test_time_set_on_the_loop_is_what_it_reads_and_drives_its_timers(loop_kind):
    loop = make_loop(loop_kind)
    try:
        if not is_rsloop_native(loop):
            pytest.skip("rsloop's native loop")
        cls = type(loop)
        loop.time = lambda: 1e12
        assert loop.time() == 1e12
        assert isinstance(loop, cls)
        fired = []
        loop.call_at(1e12 - 1, fired.append, 1)  # due on that clock only
        loop.call_at(1e12, fired.append, 2)  # due at exactly `now` (3.15's ulp rule)
        loop.run_until_complete(_noop())
        assert fired == [1, 2]
        del loop.time
        assert type(loop) is cls
        assert loop.time() < 1e11
        with pytest.raises(AttributeError):
            del loop.time  # not the instance's any more, as for any attribute
    finally:
        loop.close()


def test_nested_time_patches_restore_the_outer_one(loop):
    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native loop")
    with mock.patch.object(loop, "time", lambda: 100.0):
        with mock.patch.object(loop, "time", lambda: 200.0):
            assert loop.time() == 200.0
        assert loop.time() == 100.0
    assert loop.time() not in (100.0, 200.0)
    assert "_own_time_layer" not in type(loop).__dict__
    original = loop.time
    loop.time = lambda: 5.0
    loop.time = original  # pytest's monkeypatch undoes this way
    assert "_own_time_layer" not in type(loop).__dict__  # back on its class
    assert loop.time() != 5.0

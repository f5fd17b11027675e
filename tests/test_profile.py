"""rsloop.profile(): a sampling flame graph of the loop's thread."""

from __future__ import annotations

import asyncio
import hashlib
import time
import xml.etree.ElementTree as ET

import pytest
from conftest import is_rsloop_native

import rsloop
from rsloop import _profile


def crunch_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(b"x" * 4096).digest()


async def workload():
    for _ in range(20):
        crunch_for(0.005)  # CPU in a callback: must show up under this function
        await asyncio.sleep(0.002)  # idle: the loop waits in the kernel


def test_folded_stacks(loop, tmp_path):
    out = tmp_path / "profile.folded"

    async def main():
        with rsloop.profile(out, interval=0.0005):
            await workload()

    loop.run_until_complete(main())
    lines = out.read_text().splitlines()
    assert lines
    counts = {}
    for line in lines:
        stack, _, n = line.rpartition(" ")
        counts[stack] = int(n)
        assert int(n) > 0
    assert any("crunch_for" in stack for stack in counts), lines
    if is_rsloop_native(loop):
        labels = {stack.rsplit(";", 1)[-1] for stack in counts}
        assert _profile.WAIT in labels, labels


def test_svg(loop, tmp_path):
    out = tmp_path / "profile.svg"

    async def main():
        rsloop.start_profile(out, interval=0.0005)
        try:
            await workload()
        finally:
            assert rsloop.stop_profile() == str(out)

    loop.run_until_complete(main())
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    texts = "".join(root.itertext())
    assert "rsloop profile:" in texts
    assert "crunch_for" in texts
    assert root.findall(".//{http://www.w3.org/2000/svg}rect")


def test_misuse(tmp_path):
    with pytest.raises(ValueError, match="interval must be positive"):
        rsloop.start_profile(tmp_path / "x", interval=0)
    with pytest.raises(RuntimeError, match="no profile is running"):
        rsloop.stop_profile()
    rsloop.start_profile(tmp_path / "x")
    try:
        with pytest.raises(RuntimeError, match="already running"):
            rsloop.start_profile(tmp_path / "y")
    finally:
        rsloop.stop_profile()
    assert (tmp_path / "x").exists()

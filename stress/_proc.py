"""What a stress script reads of its own process: open fds and resident memory (Linux)."""

from __future__ import annotations

import os


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

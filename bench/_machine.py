"""What every benchmark table records about where it ran: the CPU model, the kernel and
the Python, in one line (``describe()``)."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers where Linux gives them
    (two parts of one name can differ in speed: "Intel(R) Xeon(R) Processor" says little)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields: dict[str, str] = {}
            for line in f:
                if not line.strip():
                    break  # the first CPU's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine() or "unknown CPU"
    name = fields.get("model name") or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def describe() -> str:
    """``CPU model, N CPUs, kernel, Python X.Y.Z``."""
    return (
        f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )

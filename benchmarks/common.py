"""Shared helpers for benchmarks: machine facts, medians, atomic JSON output."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from typing import Any

from testbed.plan import write_json_atomic
from testbed.results import results_root

BENCH_DIR = os.path.join(results_root(), "bench")


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, memory, kernel, Python, OVS and its datapath."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "datapath": "kernel" if os.path.isdir("/sys/module/openvswitch") else "user",
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = models[0] if models else platform.processor()
    except OSError:
        pass
    try:
        out = subprocess.run(["ovs-vsctl", "--version"], capture_output=True, text=True)
        info["ovs"] = out.stdout.splitlines()[0] if out.stdout else None
    except OSError:
        info["ovs"] = None
    return info


def summarize(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 3), "min": round(min(samples), 3),
            "max": round(max(samples), 3), "samples": [round(s, 3) for s in samples]}


def write(name: str, result: dict[str, Any]) -> str:
    """``results/bench/<name>.json``, atomically, stamped with time and machine."""
    result = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": machine_info(), **result}
    path = os.path.join(BENCH_DIR, f"{name}.json")
    write_json_atomic(path, result)
    return path

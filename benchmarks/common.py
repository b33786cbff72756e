"""Shared helpers: machine description, timing, peak memory, result files."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_of(pid: int) -> float:
    """Peak resident memory of another process so far (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def workers_cell(result: dict[str, Any]) -> str:
    """A table cell of the Dask workers' peak memory in a result (``–`` without a cluster)."""
    return ", ".join(f"{w:.0f}" for w in result.get("workers_mib", [])) or "–"


def run_isolated(module: str, *args: str) -> dict[str, Any]:
    """Run ``python -m module args`` in a fresh process (clean peak memory); it prints one JSON line."""
    proc = subprocess.run(
        [os.environ.get("PYTHON", "python"), "-m", module, *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def write(name: str, markdown: str, data: Any) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    header = f"_Machine: {machine()}. Date: {stamp()}._\n\n"
    (RESULTS / f"{name}.md").write_text(header + markdown + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2))
    print(header + markdown)

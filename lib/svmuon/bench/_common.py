"""Shared pieces of the benchmarks: timing, hardware description, and the JSON result file.

Every benchmark reports its measurements next to a named baseline measured in the same run, as ratios,
and records the hardware, the date and the library versions with them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued CUDA work so that a wall-clock timing covers it (no-op on CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1, device: Any = None) -> dict[str, float]:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones; seconds (median, min, all)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "times_s": times}


def hardware() -> dict[str, Any]:
    """What the numbers were measured on: CPU, threads, GPU, library versions, date (UTC)."""
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def default_output(name: str, device: str = "cpu") -> Path:
    """``benchmarks/results/<name>-<device>-<YYYYMMDD>.json`` under the current directory."""
    stamp = _dt.date.today().strftime("%Y%m%d")
    return Path("benchmarks") / "results" / f"{name}-{device}-{stamp}.json"


def write_result(path: str | Path, name: str, results: Any, **extra: Any) -> Path:
    """Write ``{"benchmark", "hardware", "results", ...extra}`` as indented JSON and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "hardware": hardware(), **extra, "results": results}
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    return path

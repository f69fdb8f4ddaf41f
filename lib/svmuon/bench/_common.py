"""Shared pieces of the benchmarks: timing, hardware description, and the JSON result file.

Every benchmark reports its measurements next to a named baseline measured in the same run, as ratios,
and records the hardware, the date and the library versions with them.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued CUDA work so that a wall-clock timing covers it (no-op on CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


#: the torch.Tensor methods that read a value back to the host (a synchronisation on an accelerator), as
#: ``tests/test_muon.py::count_host_syncs`` counts them
SYNC_METHODS = ("__bool__", "item", "tolist", "__float__", "__int__", "__index__", "numpy")


@contextlib.contextmanager
def host_syncs() -> Iterator[list[str]]:
    """Count host reads inside the block: yields a list that receives the name of every :data:`SYNC_METHODS` call
    made on a tensor (the methods are wrapped for the block's duration and restored after it, also on error).
    Not thread-safe; for measurements, not for production code."""
    calls: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def wrap(name: str, original: Callable) -> Callable:
        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            calls.append(name)
            return original(self, *args, **kwargs)
        return wrapper

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, wrap(name, original))
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


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
    """What the numbers were measured on: CPU, threads, GPU, library versions, date (UTC); the record of
    :func:`svmuon.experiments.runs.environment`, shared with the experiments."""
    from svmuon.experiments.runs import environment

    return environment()


def default_output(name: str, device: str = "cpu") -> Path:
    """``benchmarks/results/<name>-<device>-<YYYYMMDD>.json`` of the book's repository when run inside it,
    else under the working directory (never an installed copy's recorded results)."""
    from svmuon._paths import default_results_dir

    stamp = _dt.date.today().strftime("%Y%m%d")
    return default_results_dir("benchmarks") / f"{name}-{device}-{stamp}.json"


def output_path(parser: Any, given: Path | None, name: str, device: str = "cpu", *, smoke: bool = False,
                custom: Mapping[str, Any] | None = None) -> Path:
    """The results file of a run, checked before any compute (``parser.error``, exit 2, if it cannot be
    written): ``given`` (already checked by its ``type=``), else :func:`default_output`; a smoke run's default
    is ``<name>-smoke-<device>-<date>.json`` in the system's temporary folder, never among the recorded results;
    a custom run's (``custom``: the options that differ from the recorded command's, with their values,
    :func:`svmuon._cli.custom_options`) is ``<name>-custom-<device>-<date>-<id>.json`` beside them, ``<id>`` the
    ten letters :func:`svmuon._cli.custom_id` of that selection (two different custom runs never share a file;
    a rerun of the same one replaces its own), said on stdout. No chapter reads that name, nor takes it for a
    dated record (it does not end in the date), so a run of one section cannot replace the recorded file, nor
    become the newest one, which a chapter would then read."""
    from svmuon._cli import custom_id, custom_note
    from svmuon.experiments.runs import check_output

    if given is not None:
        return Path(given)
    if custom and not isinstance(custom, Mapping):
        raise TypeError("custom must map each custom option to its value (svmuon._cli.custom_options), got "
                        f"{type(custom).__name__}")
    path = default_output(f"{name}-smoke" if smoke else f"{name}-custom" if custom else name, device)
    if smoke:
        import tempfile

        path = Path(tempfile.gettempdir()) / "svmuon-smoke" / path.name
    elif custom:  # <name>-custom-<device>-<date>-<id>.json
        path = path.with_name(f"{path.stem}-{custom_id(custom)}{path.suffix}")
    path = check_output(parser, path)
    if custom and not smoke:
        custom_note(path, custom)
    return path


def parse_with_smoke(parser: Any, argv: list[str] | None, smoke: dict[str, Any]) -> Any:
    """``parser.parse_args(argv)``; with ``--smoke``, the options not given take the tiny values ``smoke``
    (parsed again, so every value passes its ``type=`` check)."""
    args = parser.parse_args(argv)
    if getattr(args, "smoke", False):
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args


def write_result(path: str | Path, name: str, results: Any, **extra: Any) -> Path:
    """Write ``{"benchmark", "hardware", "results", ...extra}`` as indented JSON and return the path: atomic
    and locked (:func:`svmuon.results.write`); a failed write keeps the results in a temporary file
    (:func:`svmuon.experiments.runs.save`)."""
    from svmuon.experiments.runs import save

    payload = {"benchmark": name, "hardware": hardware(), **extra, "results": results}
    return save(path, payload, indent=2, default=float)


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, *, warmup: bool = False) -> dict[str, list[float]]:
    """Wall-clock seconds of each ``fns[k]()``, ``rounds`` times, one call of each per round (so a change in the
    machine's load hits every function alike); ``warmup``: one untimed call of each first."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    if warmup:
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return times


def rotated(names: list[str] | tuple[str, ...], k: int) -> list[str]:
    """``names`` rotated by ``k`` (round ``k``'s order, so that no function always goes first; for a pair: swapped
    every other round)."""
    names = list(names)
    return names[k % len(names):] + names[:k % len(names)]


def paired(fns: dict[str, Callable[[], Any]], baseline: str, rounds: int, *, warmup: int = 1,
           device: Any = None) -> dict[str, dict[str, list[float]]]:
    """Wall-clock seconds of every ``fns[k]()`` timed in a pair with ``fns[baseline]()``: per other key,
    ``warmup`` untimed calls of both, then ``rounds`` rounds of one call of each, the order swapping from round to
    round. Returns per key ``{"times": [...], "baseline_times": [...]}`` (the baseline's times of that key's own
    pair); the baseline's entry pools its times over every pair (both lists).

    Pairs rather than one round through all of them: a step's time depends on what ran just before it, and in a
    round through several optimizers the baseline's step ran with colder caches than in training and slowed more
    than the others (the Stiefel benchmark's A/B of 2026-12-02; on four 64 × 64 matrices the orthogonal
    benchmark's too), so the ratios came out too small. Each ratio is then taken within its own pair, which also
    cancels the machine's drift between pairs."""
    if baseline not in fns:
        raise ValueError(f"baseline must be one of {sorted(fns)}, got {baseline!r}")
    out: dict[str, dict[str, list[float]]] = {}
    pooled: list[float] = []
    for key in [k for k in fns if k != baseline] or [baseline]:
        names = list(dict.fromkeys((baseline, key)))
        for _ in range(warmup):
            for name in names:
                fns[name]()
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in rotated(names, r):
                synchronize(device)
                t0 = time.perf_counter()
                fns[name]()
                synchronize(device)
                times[name].append(time.perf_counter() - t0)
        pooled += times[baseline]
        if key != baseline:
            out[key] = {"times": times[key], "baseline_times": times[baseline]}
    out[baseline] = {"times": pooled, "baseline_times": pooled}
    return {key: out[key] for key in fns}

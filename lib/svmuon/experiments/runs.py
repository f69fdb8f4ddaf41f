"""The plumbing the experiments and benchmarks share: data, evaluation, the epoch loop, tuning then seeds,
results I/O and the record of the environment.

* :func:`load_digits`: scikit-learn's 8×8 digits (alpaydin1998digits, pedregosa2011scikit), float32 in
  [0, 1], split 60/20/20 into train/validation/test, stratified by class; as vectors or as 8-row sequences;
  :func:`text_corpus`: characters of the Python standard library's own source files as tokens (offline).
* :func:`evaluate`, :func:`accuracy`: cross-entropy (nats) and accuracy on a split, without gradients.
* :func:`train_epoch`: one pass of minibatch cross-entropy training with any list of optimizers.
* :func:`tune`, :func:`tune_then_seeds`: pick a learning rate from a grid by a validation score, then rerun
  it over seeds.
* :func:`environment`: hardware, thread count, library versions and the date, for every results file.
* :func:`default_output`, :func:`check_output`, :func:`save`: where a run writes, the check of that path
  before any compute, and the atomic, locked write (:func:`svmuon.results.write`).

This module draws no random numbers of its own: a run built on it gives the numbers it gave before.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import os
import platform
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

__all__ = ["load_digits", "text_corpus", "evaluate", "accuracy", "train_epoch", "tune", "tune_then_seeds", "environment",
           "default_output", "check_output", "save"]

Split = tuple[torch.Tensor, torch.Tensor]


# ---------------------------------------------------------------------------------------------- data

def load_digits(split_seed: int = 0, *, sequences: bool = False) -> dict[str, Split]:
    """The digits as ``{"train" | "val" | "test": (X, y)}``: 1077 / 360 / 360 of the 1797, stratified.

    Args:
        split_seed: ``random_state`` of both ``train_test_split`` calls (test 20 %, then validation 25 % of
            the rest).
        sequences: ``X`` of shape ``(N, 8, 8)`` (8 rows of 8 pixels, for a recurrent network) instead of
            ``(N, 64)``.

    Returns:
        ``X`` float32 in [0, 1] (pixel / 16), ``y`` int64 class labels 0..9.
    """
    from sklearn.datasets import load_digits as _sklearn_digits
    from sklearn.model_selection import train_test_split

    X, y = _sklearn_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    if sequences:
        X = X.reshape(-1, 8, 8)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=split_seed)
    X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.25, stratify=y_tr, random_state=split_seed)
    pack = lambda a, b: (torch.from_numpy(a), torch.from_numpy(b).long())  # noqa: E731
    return {"train": pack(X_tr, y_tr), "val": pack(X_va, y_va), "test": pack(X_te, y_te)}


def text_corpus(chars: int = 400_000, *, recursive: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The first ``chars`` characters of the standard library's top-level ``*.py`` files (sorted by name; with
    ``recursive``, of every ``*.py`` below the standard library's folder, sorted by relative path, without
    ``site-packages``) as tokens: ``'\\n'`` -> 0, ``' '``..``'~'`` -> 1..95, anything else -> 96. Returns
    ``(tokens, description)``; the description names every file used (``names``, relative paths) and the
    SHA-256 of the text, so that a run can be matched to its data exactly."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(folder.rglob("*.py")) if recursive else sorted(folder.glob("*.py"))
    files = [f for f in files if not {"site-packages", "__pycache__"} & set(f.relative_to(folder).parts)]
    parts, total, used = [], 0, []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        used.append(f.relative_to(folder).as_posix())
        total += len(text)
        if total >= chars:
            break
    joined = "".join(parts)[:chars]
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    tokens = np.where(codes == 10, 0, np.where((codes >= 32) & (codes <= 126), codes - 31, 96))
    info = {"source": str(folder), "files": len(used), "first": used[0], "last": used[-1], "chars": int(len(tokens)),
            "python": platform.python_version(), "unknown_fraction": float((tokens == 96).mean()),
            "names": used, "sha256": hashlib.sha256(joined.encode("utf-8")).hexdigest()}
    return tokens, info


# ---------------------------------------------------------------------------------------- evaluation

def evaluate(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """``(mean cross-entropy in nats, accuracy)`` of ``model`` on ``(X, y)``, one forward pass, no gradients."""
    with torch.no_grad():
        logits = model(X)
        return float(torch.nn.functional.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def accuracy(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of the rows of ``X`` whose largest logit is at the label ``y``."""
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


# ---------------------------------------------------------------------------------------- epoch loop

def train_epoch(model: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer], X: torch.Tensor,
                y: torch.Tensor, batches: Iterable[torch.Tensor], *,
                after_step: Callable[[float], None] | None = None, step_times: list[float] | None = None) -> float:
    """One pass of cross-entropy training over ``batches`` (index tensors into ``X``, ``(N, ...)``, and ``y``,
    ``(N,)`` class labels).

    For each batch every optimizer's gradients are zeroed, one forward and backward pass is made, and every
    optimizer steps, in the given order; then ``after_step(loss)`` is called with the batch's loss (nats).
    ``step_times``: a list that receives the seconds of each ``optimizers[0].step()`` (the constrained
    optimizer whose cost an experiment reports).

    Returns:
        The summed loss, nats × examples (divide by the number of examples for the mean).
    """
    total = 0.0
    for idx in batches:
        for o in optimizers:
            o.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        loss.backward()
        for i, o in enumerate(optimizers):
            if i == 0 and step_times is not None:
                t0 = time.perf_counter()
                o.step()
                step_times.append(time.perf_counter() - t0)
            else:
                o.step()
        value = float(loss.detach())
        total += value * len(idx)
        if after_step is not None:
            after_step(value)
    return total


# ---------------------------------------------------------------------------------- tuning then seeds

def tune(grid: Sequence[float], run: Callable[[float], Any], *, score: Callable[[Any], Any],
         minimize: bool = False) -> tuple[float, list[Any]]:
    """Run ``run(lr)`` for every rate of ``grid`` in order; return ``(best rate, the results)``.

    The best result has the largest ``score(result)`` (the smallest with ``minimize``); the first of equal
    scores wins, so a grid in increasing order breaks ties towards the smaller rate.
    """
    results = [run(lr) for lr in grid]
    pick = min if minimize else max
    best = pick(range(len(results)), key=lambda i: score(results[i]))
    return grid[best], results


def tune_then_seeds(grid: Sequence[float], run: Callable[[float, int], Any], seeds: Sequence[int], *,
                    score: Callable[[Any], Any], minimize: bool = False,
                    tune_seed: int = 0) -> tuple[float, list[Any], list[Any]]:
    """Tune with ``run(lr, tune_seed)`` over ``grid`` (:func:`tune`), then run the picked rate for every seed.

    The tuning run of the picked rate serves as the final run of ``tune_seed`` (not repeated).

    Returns:
        ``(picked rate, tuning results in grid order, final results in seed order)``.
    """
    lr, tuning = tune(grid, lambda rate: run(rate, tune_seed), score=score, minimize=minimize)
    best = tuning[list(grid).index(lr)]
    return lr, tuning, [best if s == tune_seed else run(lr, s) for s in seeds]


# ------------------------------------------------------------------------------------------ environment

def environment(**override: Any) -> dict[str, Any]:
    """What a result was computed on: date (UTC, ISO 8601), platform, machine, CPU name, CPU count, torch
    threads, the versions of Python, torch, NumPy and svmuon, the vector instructions torch's CPU kernels use
    (``cpu_capability``, e.g. ``"AVX512"``) and whether the CPU has native bfloat16 arithmetic (``cpu_bf16``:
    the ``avx512_bf16`` or ``amx_bf16`` flag; ``None`` where the OS does not list flags), since a bf16 matmul is
    several times faster than float32 with it and much slower without, the GPU (name, CUDA) where there is one, and
    the system's load average over the last 1, 5 and 15 minutes where the OS reports it (``os.getloadavg``: other
    processes' demand for the CPUs, so a timing from a loaded machine says so); ``override`` replaces or adds
    fields (e.g. ``torch_threads`` of the run rather than of the caller)."""
    import svmuon

    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "svmuon": svmuon.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": _cpu_bf16(),
    }
    if hasattr(os, "getloadavg"):  # not on Windows
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return {**info, **override}


def _cpuinfo(*keys: str) -> str | None:
    """The value of the first /proc/cpuinfo line that starts with one of ``keys``; ``None`` where there is no
    such line or no /proc (macOS, Windows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(keys):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_bf16() -> bool | None:
    """Whether /proc/cpuinfo lists a native bfloat16 instruction set (x86: AVX512-BF16 or AMX-BF16; Arm: bf16)."""
    flags = _cpuinfo("flags", "Features")
    return None if flags is None else bool(set(flags.split()) & {"avx512_bf16", "amx_bf16", "bf16"})


def _cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


# ------------------------------------------------------------------------------------------ results I/O

def default_output(kind: str, filename: str) -> Path:
    """``<repo>/<kind>/results/<filename>`` inside the book's repository, else ``<kind>/results/<filename>``
    under the working directory (a run never writes into an installed copy's recorded results)."""
    from svmuon._paths import default_results_dir

    return default_results_dir(kind) / filename


def default_file(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str,
                 selection: tuple[str, ...]) -> Path:
    """The checked default results file of an experiment run without ``--output``:
    ``experiments/results/<name>.json``, the recorded run a chapter reads; or, when an option in ``selection``
    differs from its default (:func:`svmuon._cli.custom_options`), ``<name>-custom-<id>.json`` beside it, ``<id>``
    the ten letters :func:`svmuon._cli.custom_id` of the options that differ and their values, said on stdout:
    a run of one task or one seed does not replace the recorded file, and two different custom runs do not
    replace each other's (a rerun of the same one replaces its own)."""
    from svmuon._cli import custom_id, custom_note, custom_options

    custom = custom_options(parser, args, selection)
    filename = f"{name}-custom-{custom_id(custom)}.json" if custom else f"{name}.json"
    path = check_output(parser, default_output("experiments", filename))
    if custom:
        custom_note(path, custom)
    return path


def check_output(parser: argparse.ArgumentParser, path: Path, option: str = "--output", *,
                 folder: bool = False) -> Path:
    """``path`` if results can be written there, else ``parser.error`` (exit 2) naming ``option`` and the
    problem; called before any compute, for default paths (explicit ones are checked by their ``type=``)."""
    from svmuon._cli import output_problem

    problem = output_problem(path, folder=folder)
    if problem:
        parser.error(f"{option} (default {path}): {problem}")
    return path


def save(path: str | os.PathLike, payload: Any, **json_options: Any) -> Path:
    """Write ``payload`` with :func:`svmuon.results.write` (atomic, locked) and return the path.

    If the write fails (disk full, folder removed during the run), the results are written to a file in the
    system's temporary folder instead and the command stops with exit status 1 and a message saying where
    they are: hours of compute are not lost to a full disk.
    """
    from svmuon import results

    try:
        return results.write(path, payload, **json_options)
    except OSError as err:
        fd, spare = tempfile.mkstemp(prefix=f"{Path(path).stem}-", suffix=".json")
        os.close(fd)
        try:
            results.write(spare, payload, **json_options)
            where = f"the results were saved to {spare} instead"
        except OSError as err2:
            where = f"saving them to {spare} failed too ({err2.strerror or err2})"
        print(f"could not write {path}: {err.strerror or err}; {where}", file=sys.stderr)
        raise SystemExit(1) from err


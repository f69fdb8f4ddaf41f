"""The ``python -m svmuon.bench NAME`` / ``python -m svmuon.experiments NAME`` dispatcher.

NAME picks the module ``<package>.<NAME with '-' as '_'>`` (private modules excluded), which defines
``main(argv) -> int``; the remaining arguments go to it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import pkgutil
import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable, Mapping


def available(package: ModuleType) -> list[str]:
    """The command names ``package`` provides: its public modules, with '-' for '_', except the library
    modules it lists in ``_NOT_COMMANDS`` (e.g. ``svmuon.experiments.runs``)."""
    skip = set(getattr(package, "_NOT_COMMANDS", ()))
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(package.__path__)
                  if not m.name.startswith("_") and m.name not in skip)


def dispatch(package: ModuleType, kind: str, argv: list[str] | None = None) -> int:
    """Run ``<package>.<NAME>.main(rest)`` for ``argv = [NAME, *rest]``; 2 for a missing or unknown NAME."""
    argv = sys.argv[1:] if argv is None else argv
    names = available(package)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m {package.__name__} NAME [options]   (NAME --help for its options)")
        print(f"{kind}s:", ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0].replace("_", "-"), argv[1:]  # monte_carlo and monte-carlo both work
    if name not in names:
        print(f"unknown {kind} {name!r}; choose one of: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{package.__name__}.{name.replace('-', '_')}")
    return int(module.main(rest) or 0)


def describe(doc: str | None) -> str:
    """The first paragraph of a module docstring as plain text, for ``argparse`` descriptions."""
    first = (doc or "").strip().split("\n\n")[0]
    text = " ".join(first.split())
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")


# ---------------------------------------------------------------------------- argument types (checked up front)
# Each is an ``argparse`` ``type=``: a bad value stops the command at parsing, before any compute, with
# "argument --NAME: <what is wrong>" and exit status 2.

MAX_SEED = 2**62  # torch.Generator.manual_seed takes < 2**64; the experiments add offsets (seed + 1000)


def _int(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argument type: an integer in ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
seed = int_at_least(0, MAX_SEED)


def float_in(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """An argument type: a finite float in the interval from ``low`` to ``high`` (open ends as given)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or value < low or value > high or (low_open and value == low) or (
                high_open and value == high):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise argparse.ArgumentTypeError(f"must be a finite number in {interval}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


positive_float = float_in(0.0, low_open=True)
nonnegative_float = float_in(0.0)


def matrix_shapes(tall: bool = True) -> Callable[[str], list[tuple[int, int]]]:
    """An argument type: comma-separated shapes ``MxN`` (``256x64,1024x256``), m, n >= 1, m >= n if ``tall``."""

    def parse(text: str) -> list[tuple[int, int]]:
        shapes = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            m_n = re.fullmatch(r"(\d+)\s*[xX×]\s*(\d+)", part)
            if m_n is None:
                raise argparse.ArgumentTypeError(f"must be shapes MxN separated by commas (e.g. 256x64), got {part!r}")
            m, n = int(m_n[1]), int(m_n[2])
            if min(m, n) < 1:
                raise argparse.ArgumentTypeError(f"sizes must be >= 1, got {part!r}")
            if tall and m < n:
                raise argparse.ArgumentTypeError(f"shapes must be tall (m >= n), got {part!r}; write it {n}x{m}")
            shapes.append((m, n))
        if not shapes:
            raise argparse.ArgumentTypeError(f"must hold at least one shape MxN, got {text!r}")
        return shapes

    parse.__name__ = "shapes"
    return parse


def device(text: str) -> str:
    """An argument type: ``cpu`` or ``cuda`` (``cuda:N``), the latter only where torch sees a CUDA device."""
    import torch

    if text == "cpu":
        return text
    m = re.fullmatch(r"cuda(?::(\d+))?", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"must be 'cpu' or 'cuda', got {text!r}")
    if not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r} asked for, but torch sees no CUDA device here; use cpu")
    if m[1] is not None and int(m[1]) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: there are {torch.cuda.device_count()} CUDA devices")
    return text


def output_problem(path: Path, *, folder: bool = False) -> str | None:
    """Why results cannot be written at ``path`` (a file, or a folder if ``folder``), or ``None``.

    Checks, without creating anything: a file path that is a folder (or a folder path that is a file), a
    parent that is a file, and that the nearest existing folder accepts a new file (a probe file is created
    and removed there: read-only folders and filesystems, missing permissions) with some free space.
    """
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    if not folder and path.is_dir():
        return f"{path} is a folder; give the path of the results file (e.g. {path / 'results.json'})"
    if not folder and path.exists() and not os.access(path, os.W_OK):
        return f"{path} exists and cannot be written (permissions)"
    start = path if folder else path.parent
    existing = start
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"cannot write {path}: {existing} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".svmuon-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"cannot write in {existing}: {err.strerror or err}"
    if shutil.disk_usage(existing).free < 2**20:
        return f"cannot write in {existing}: less than 1 MiB of free disk space"
    return None


def output_file(text: str) -> str:
    """An argument type: a results file that can be written (see :func:`output_problem`); the text itself
    (so that ``vars(args)`` stays JSON)."""
    problem = output_problem(Path(text))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def output_folder(text: str) -> Path:
    """An argument type: a folder results can be written in (created later if missing)."""
    problem = output_problem(Path(text), folder=True)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def custom_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   selection: tuple[str, ...]) -> dict[str, object]:
    """The options among ``selection`` whose values differ from ``parser``'s defaults: ``{"--name": value}`` in
    the order of ``selection`` (iterating it gives the names). A run with any of them is *custom*, not the
    recorded one a chapter reads, and without ``--output`` it writes a ``-custom`` file named by
    :func:`custom_id` (:func:`custom_note`).

    ``selection`` (destinations) holds every option that changes *what* a run measures or records: sizes,
    sections, workloads, seeds, tolerances, sampled instances, training steps, learning-rate grids. It leaves
    out what says how long, how precisely or where it is measured (timed repeats and rounds, warm-up steps,
    threads, the device, which is in the file's name, a note, the output) and ``--smoke``, whose defaults
    ``parser`` already holds when a smoke run is parsed (:func:`svmuon.bench._common.parse_with_smoke`): a
    recorded command such as ``python -m svmuon.bench monte-carlo --repeats 7`` still writes the record."""
    def plain(value: object) -> object:
        return list(value) if isinstance(value, (list, tuple)) else value

    return {f"--{d.replace('_', '-')}": plain(getattr(args, d)) for d in selection
            if plain(getattr(args, d)) != plain(parser.get_default(d))}


#: how many letters :func:`custom_id` has
CUSTOM_ID_LENGTH = 10


def custom_id(options: Mapping[str, object]) -> str:
    """A short stable name of a custom selection (:func:`custom_options`): ten lowercase letters drawn from the
    SHA-256 of ``options`` (names and values) as sorted JSON. The same selection gets the same letters on every
    run and machine (a rerun replaces its own custom file), two different ones different letters (a collision
    has odds of about 26**-10). Letters only, so that the name never ends in eight digits, which
    :mod:`svmuon.results` would read as a date (and a chapter listing the dated files would then read it)."""
    if not options:
        raise ValueError("custom_id needs the custom options with their values, got none")
    text = json.dumps({str(k): v for k, v in options.items()}, sort_keys=True, default=str, separators=(",", ":"))
    number = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    letters = []
    for _ in range(CUSTOM_ID_LENGTH):
        number, digit = divmod(number, 26)
        letters.append(chr(ord("a") + digit))
    return "".join(letters)


def custom_note(path: Path, options: Iterable[str]) -> None:
    """Say (stdout, before any compute) where a custom run writes and why: a run with other ``options`` (their
    names) than the recorded command's must not replace the file a chapter reads, nor become the newest one."""
    print(f"{', '.join(options)} differ from the recorded run's: writing {path}, which the book does not read "
          "(--output chooses the file)", flush=True)


def refuse_repeats(parser: argparse.ArgumentParser, **options: list) -> None:
    """``parser.error`` (exit 2) if a list option holds a value twice (``--seeds 0 0`` would rerun a point)."""
    for name, values in options.items():
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            parser.error(f"argument --{name.replace('_', '-')}: holds {', '.join(map(str, repeated))} more than once")

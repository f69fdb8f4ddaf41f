"""Recorded results: the one reader the chapters use, and the one writer every experiment and benchmark uses.

Experiments write ``experiments/results/<name>.json`` (``python -m svmuon.experiments NAME``) and
benchmarks ``benchmarks/results/<name>-<device>-<YYYYMMDD>.json`` (``python -m svmuon.bench NAME``), in the
book's repository. :func:`read` finds such a file by kind and name (for a dated benchmark, the newest) and
returns its parsed JSON, with an error that names the file and says what is wrong with it (missing, empty,
not JSON, ``null``, or written by another tool); :func:`load` does the same for a file given by its path.
:func:`write` replaces a results file atomically (a temporary file in the same folder, flushed to disk,
then renamed over the old one, so that a reader or a crash sees the old file or the new one, never half of
one) while holding :func:`lock`, a lock file next to it, against a second writer.

Example::

    from svmuon import results
    record = results.read("experiments", "digits-training")
    bench = results.read("benchmarks", "msign-cpu")      # the newest msign-cpu-YYYYMMDD.json
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

__all__ = ["KINDS", "read", "path", "names", "load", "write", "lock", "ResultsFileError"]

KINDS = ("experiments", "benchmarks")
_FIELD = {"experiments": "experiment", "benchmarks": "benchmark"}  # the field naming the tool that wrote a file
_DATED = re.compile(r"^(?P<name>.+)-(?P<date>\d{8})$")


class ResultsFileError(ValueError):
    """A results file that exists but cannot be used: empty, not JSON, not a JSON object, or foreign."""


# --------------------------------------------------------------------------------------------- reading

def _check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be 'experiments' or 'benchmarks', got {kind!r}")
    return kind


def _folder(kind: str, root: str | os.PathLike | None) -> Path:
    """``<root>/<kind>/results``; root: the given one, else the book's repository (see :mod:`svmuon._paths`)."""
    from svmuon._paths import recorded_root

    return Path(root if root is not None else recorded_root()) / kind / "results"


def names(kind: str, *, root: str | os.PathLike | None = None) -> list[str]:
    """The names :func:`read` accepts for ``kind``, sorted: every file's stem, and for dated files
    (``msign-cpu-20261130``) also the name without the date (``msign-cpu``, meaning the newest).

    Args:
        kind: ``"experiments"`` or ``"benchmarks"``.
        root: the repository folder (default: the book's repository, found from the working directory or
            from this package's location).

    Raises:
        ValueError: a bad ``kind``.
        FileNotFoundError: no book repository is found (``root`` not given).
    """
    folder = _folder(_check_kind(kind), root)
    stems = {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()
    return sorted(stems | {m["name"] for m in map(_DATED.match, stems) if m})


def path(kind: str, name: str, *, root: str | os.PathLike | None = None) -> Path:
    """The file :func:`read` reads: ``<kind>/results/<name>.json`` if it exists, else the newest
    ``<name>-<YYYYMMDD>.json`` (by the date in its name).

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: a bad ``kind`` or a ``name`` holding a path separator.
        FileNotFoundError: no such result (the message lists the names there are).
    """
    folder = _folder(_check_kind(kind), root)
    if not isinstance(name, str):
        raise TypeError(f"name must be a string such as 'digits-training' or 'msign-cpu', got {type(name).__name__}")
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name must be a result's name such as 'digits-training' (no folder, no '.json'), "
                         f"got {name!r}")
    name = name.removesuffix(".json")
    exact = folder / f"{name}.json"
    if exact.is_file():
        return exact
    dated = sorted((m["date"], p) for p in folder.glob(f"{_glob_escape(name)}-*.json")
                   if (m := _DATED.match(p.stem)) and m["name"] == name)
    if dated:
        return dated[-1][1]
    have = names(kind, root=root)
    raise FileNotFoundError(f"no recorded {kind[:-1]} result {name!r} in {folder} "
                            f"(there are: {', '.join(have) if have else 'none'})")


def _glob_escape(text: str) -> str:
    """``text`` with glob's special characters ``*?[`` escaped (for names used in ``Path.glob``)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def load(file: str | os.PathLike, *, expect: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON object in ``file``, or an error naming the file and what is wrong with it.

    Args:
        file: path of a results file.
        expect: ``{field: prefix}``: the object's ``field`` must be a string that ``prefix`` starts with
            or the start of it up to a dash (``{"experiment": "fixed-entropy-digits"}`` accepts
            ``"experiment": "fixed-entropy"``, not ``"fixed"``).

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: ``file`` is a folder.
        ResultsFileError: (a ``ValueError``) the file is empty, not UTF-8 JSON, holds ``null`` or anything but a
            JSON object, or (with ``expect``) was written by another tool.
    """
    file = Path(file)
    if file.is_dir():
        raise IsADirectoryError(f"{file} is a folder, not a results file")
    raw = file.read_bytes()
    if not raw.strip():
        raise ResultsFileError(f"{file}: the file is empty (an interrupted write?); delete it or restore it "
                               "(git checkout) and rerun")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ResultsFileError(f"{file}: not a text (UTF-8) file: {err.reason} at byte {err.start}") from None
    except json.JSONDecodeError as err:
        raise ResultsFileError(f"{file}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                               "the file is damaged: delete it or restore it (git checkout) and rerun") from None
    if not isinstance(doc, dict):
        what = "null" if doc is None else f"a JSON {type(doc).__name__}"
        raise ResultsFileError(f"{file}: holds {what}, expected a JSON object (a results record)")
    for field, prefix in (expect or {}).items():
        value = doc.get(field)
        if not isinstance(value, str) or not (prefix == value or prefix.startswith(value + "-")):
            raise ResultsFileError(f"{file}: not a result of {prefix!r}: its {field!r} field is {value!r}")
    return doc


def read(kind: str, name: str, *, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """The recorded result ``name`` of ``kind`` as parsed JSON (a dict).

    Args:
        kind: ``"experiments"`` (files written by ``python -m svmuon.experiments``) or ``"benchmarks"``
            (``python -m svmuon.bench``).
        name: the file's name without ``.json``: ``"digits-training"``, ``"fixed-entropy-text"``; for a
            benchmark either with its date (``"msign-cpu-20261130"``) or without (``"msign-cpu"``: the newest).
        root: the repository folder (default: the book's repository; see :func:`path`).

    Returns:
        The JSON object of the file (see :func:`path` for which file).

    Raises:
        FileNotFoundError: no such result (the message lists the names there are).
        ResultsFileError: (a ``ValueError``) the file is empty, damaged, not a JSON object, or its
            ``"experiment"``/``"benchmark"`` field names another tool; the message names the file.
        TypeError: ``name`` is not a string.
        ValueError: a bad ``kind`` or ``name``.
    """
    file = path(kind, name, root=root)
    # path() accepts a trailing ".json"; the tool's field names the result without it
    return load(file, expect={_FIELD[kind]: name.removesuffix(".json")})


# --------------------------------------------------------------------------------------------- writing

# lock files held: (resolved path, thread) -> [fd, depth]; re-entrant per thread, and another thread of this
# process waits on flock like another process (flock locks belong to the open file, not to the process)
_held: dict[tuple[Path, int], list] = {}
_held_guard = threading.Lock()


def _lock_path(file: Path) -> Path:
    return file.with_name(file.name + ".lock")


@contextlib.contextmanager
def lock(file: str | os.PathLike, *, wait_message: bool = True) -> Iterator[Path]:
    """Hold an exclusive lock on the results file ``file`` (``fcntl.flock`` on ``<file>.lock`` beside it).

    A second process asking for the same lock waits until the first releases it (a line on stderr says so).
    Re-entrant within a thread (a :func:`write` inside ``with lock(file):`` does not wait for itself); another
    thread waits as another process does. The
    lock file is removed on release; one left by a killed process holds no lock and is reused. Missing
    parent folders are created.

    Raises:
        OSError: the folder cannot be created or written (the lock file cannot be created).
    """
    import fcntl

    target = _lock_path(Path(file).absolute())
    target.parent.mkdir(parents=True, exist_ok=True)
    key = (target.resolve(), threading.get_ident())
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield Path(file)
        finally:
            with _held_guard:
                _held[key][1] -= 1
        return
    while True:  # the file may be unlinked by its last holder between our open and our flock: retry then
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait_message:
                print(f"waiting for {file}: another run is writing it (lock {target.name})", file=sys.stderr,
                      flush=True)
                wait_message = False
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(target).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    with _held_guard:
        _held[key] = [fd, 1]
    try:
        yield Path(file)
    finally:
        with _held_guard:
            del _held[key]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)  # while still holding the lock: a waiter then finds a new inode and retries
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write(file: str | os.PathLike, payload: Any, *, indent: int | None = 1, default: Any = None) -> Path:
    """Write ``payload`` as strict JSON (RFC 8259) to ``file`` atomically, holding :func:`lock`; return the path.

    A NaN or infinite float (also one returned by ``default``) becomes ``null``, read back as ``None``: JSON has
    no such numbers, and strict parsers (JavaScript, jq) refuse the bare ``NaN`` that ``json.dumps`` writes.
    Files recorded before hold bare ``NaN`` only where no chapter reads it (``defect_end`` of unconstrained rows);
    :func:`load` reads both. The JSON text is built first (a payload that cannot be serialised never touches
    the disk), written to a temporary file in the same folder, flushed with ``fsync``, and renamed over
    ``file`` (``os.replace``, atomic on POSIX); the folder is then synced so that the rename survives a
    crash. On any failure the temporary file is removed and the previous ``file``, if any, is unchanged.
    Missing parent folders are created. The new file gets the old file's permissions (or the umask's).

    Args:
        file: the results file. payload: JSON-serialisable data. indent: as in ``json.dumps``.
        default: as in ``json.dumps`` (e.g. ``float`` for NumPy scalars).

    Raises:
        TypeError: ``payload`` is not serialisable (nothing is written).
        ValueError: ``payload`` holds a circular reference (nothing is written).
        OSError: the folder cannot be created or written, the disk is full (the old file is unchanged).
    """
    file = Path(file)
    text = json.dumps(payload, indent=indent, default=default)
    if "NaN" in text or "Infinity" in text:  # maybe only inside a string: then the same text again
        text = json.dumps(json.loads(text, parse_constant=lambda _: None), indent=indent, allow_nan=False)
    text += "\n"
    file.parent.mkdir(parents=True, exist_ok=True)
    with lock(file):
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                mode = file.stat().st_mode & 0o777 if file.exists() else 0o666 & ~_umask()
                os.fchmod(f.fileno(), mode)
                f.write(text)
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
            os.replace(tmp, file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # make the rename itself durable (not possible on every filesystem)
            dir_fd = os.open(file.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    return file

"""``svmuon.results``: the reader of recorded results (which file, clear errors) and the atomic, locked writer."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import time

import pytest

from svmuon import results


@pytest.fixture
def repo(tmp_path):
    """A repository with one experiment and three dated runs of one benchmark."""
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    exp, bench = tmp_path / "experiments" / "results", tmp_path / "benchmarks" / "results"
    exp.mkdir(parents=True)
    bench.mkdir(parents=True)
    (exp / "demo.json").write_text(json.dumps({"experiment": "demo", "runs": [1, 2]}))
    (exp / "demo-wide.json").write_text(json.dumps({"experiment": "demo", "runs": [3]}))
    for date in ("20261130", "20261201", "20250101"):
        (bench / f"msign-cpu-{date}.json").write_text(json.dumps({"benchmark": "msign", "date": date}))
    (bench / "msign-smoke-cpu-20261231.json").write_text(json.dumps({"benchmark": "msign", "smoke": True}))
    return tmp_path


def test_read_finds_the_file_and_the_newest_dated_one(repo):
    assert results.read("experiments", "demo", root=repo)["runs"] == [1, 2]
    assert results.read("experiments", "demo-wide", root=repo)["runs"] == [3]
    assert results.read("benchmarks", "msign-cpu", root=repo)["date"] == "20261201"  # by the date, not the name order
    assert results.read("benchmarks", "msign-cpu-20261130", root=repo)["date"] == "20261130"
    assert results.path("benchmarks", "msign-cpu", root=repo).name == "msign-cpu-20261201.json"
    assert "msign-cpu" in results.names("benchmarks", root=repo)
    assert "msign-smoke-cpu" in results.names("benchmarks", root=repo)  # a smoke run is never "msign-cpu"


def test_read_uses_the_repository_of_the_working_directory(repo, monkeypatch):
    monkeypatch.chdir(repo / "experiments")
    assert results.read("experiments", "demo")["runs"] == [1, 2]


def test_missing_result_lists_what_there_is(repo):
    with pytest.raises(FileNotFoundError, match="'nope'.*there are: demo, demo-wide"):
        results.read("experiments", "nope", root=repo)


@pytest.mark.parametrize(("content", "match"), [
    (b"", "empty"),
    (b"  \n", "empty"),
    (b'{"experiment": "demo", "runs": [1, 2', "not valid JSON .*line 1"),
    (b"null", "holds null, expected a JSON object"),
    (b"[1, 2]", "holds a JSON list"),
    (b"\xff\xfe\x00garbage", "not a text"),
    (b'{"experiment": "other"}', "not a result of 'demo'.*'other'"),
    (b'{"runs": []}', "not a result of 'demo'.*None"),
    (b'{"experiment": "de"}', "not a result of 'demo'"),  # a prefix must end at a dash
])
def test_a_damaged_or_foreign_file_is_named_with_what_is_wrong(repo, content, match):
    path = repo / "experiments" / "results" / "demo.json"
    path.write_bytes(content)
    with pytest.raises(results.ResultsFileError, match=match) as info:
        results.read("experiments", "demo", root=repo)
    assert str(path) in str(info.value) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(("kind", "name", "error"), [
    ("experiment", "demo", ValueError), ("experiments", "../demo", ValueError), ("experiments", "", ValueError),
    ("experiments", 3, TypeError),
])
def test_bad_kind_or_name(repo, kind, name, error):
    with pytest.raises(error):
        results.read(kind, name, root=repo)


def test_write_is_atomic_and_keeps_permissions(tmp_path):
    path = tmp_path / "sub" / "r.json"
    results.write(path, {"a": 1})
    os.chmod(path, 0o640)
    results.write(path, {"a": 2}, indent=None)
    assert json.loads(path.read_text()) == {"a": 2} and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json"]  # no temporary or lock file left


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    results.write(path, {"old": True})
    with pytest.raises(TypeError):
        results.write(path, {"bad": object()})  # not serialisable: nothing touches the disk
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        results.write(path, {"new": True})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert json.loads(path.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def _hold(path, seconds, ready):
    with results.lock(path):
        ready.set()
        time.sleep(seconds)
        results.write(path, {"writer": "first"})  # re-entrant: no wait for its own lock


def test_a_second_writer_waits_for_the_first(tmp_path, capfd):
    """Two processes: the second write starts while the first holds the lock, waits (and says so), and lands
    after it; the lock file is gone afterwards."""
    path = tmp_path / "r.json"
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    first = ctx.Process(target=_hold, args=(path, 1.0, ready))
    first.start()
    assert ready.wait(30)
    t0 = time.perf_counter()
    results.write(path, {"writer": "second"})
    waited = time.perf_counter() - t0
    first.join(30)
    assert first.exitcode == 0
    assert json.loads(path.read_text()) == {"writer": "second"}
    assert waited > 0.3  # it waited for the holder's sleep (1 s, minus the time to get here)
    assert "another run is writing it" in capfd.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_outside_any_repository_a_reader_sees_the_packages_repository(tmp_path, monkeypatch):
    """A notebook copied out of the book still reads the recorded results of the checkout svmuon is installed
    from (this one), while the repository of the working directory is searched first (test above)."""
    from pathlib import Path

    from svmuon._paths import recorded_root, repo_root

    monkeypatch.chdir(tmp_path)
    package_repo = Path(results.__file__).resolve().parents[2]
    assert recorded_root() == package_repo
    doc = results.read("experiments", "orthogonal-drift")
    assert doc == json.loads((package_repo / "experiments" / "results" / "orthogonal-drift.json").read_text())
    with pytest.raises(FileNotFoundError, match="_toc.yml"):
        repo_root()  # a writer's root: none here (runs write under the working directory instead)


def test_non_finite_floats_are_written_as_null_in_strict_json(tmp_path):
    import numpy as np

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    path = tmp_path / "r.json"
    payload = {"nan": float("nan"), "inf": [float("inf"), -float("inf"), 1.5], "np": np.float64("nan"),
               "np32": np.float32("inf"), "text": "NaN and Infinity stay text", float("inf"): 1}
    for indent in (1, None):
        results.write(path, payload, indent=indent, default=float)
        doc = json.loads(path.read_text(), parse_constant=refuse)  # the standard library's strict reading
        assert doc == {"nan": None, "inf": [None, None, 1.5], "np": None, "np32": None,
                       "text": "NaN and Infinity stay text", "Infinity": 1}
        assert results.load(path) == doc
    results.write(path, {"text": "NaN"})  # only a string matched: the same text as json.dumps
    assert path.read_text() == json.dumps({"text": "NaN"}, indent=1) + "\n"


def test_read_accepts_the_name_with_json_as_path_does():
    """path() strips a trailing ".json"; read() compared the tool's field with the name as given and called the file
    another tool's."""
    from svmuon import results

    name = results.names("experiments")[0]
    assert results.read("experiments", name + ".json") == results.read("experiments", name)


def test_lock_makes_another_thread_wait(tmp_path):
    """Re-entrant per thread, not per process: a second thread waits for the first (it entered at once and its
    release raised KeyError, the lock file already gone)."""
    import threading
    import time

    from svmuon import results

    f = tmp_path / "x.json"
    events, errors = [], []
    held = threading.Event()

    def first():
        with results.lock(f):
            held.set()
            time.sleep(0.3)
            events.append("first out")

    def second():
        held.wait()
        try:
            with results.lock(f, wait_message=False):
                events.append("second in")
                with results.lock(f):  # re-entrant in its own thread
                    pass
        except Exception as err:  # noqa: BLE001 (the test reports whatever it was)
            errors.append(err)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == [] and events == ["first out", "second in"]
    assert not (tmp_path / "x.json.lock").exists()

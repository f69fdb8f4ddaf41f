"""A run with other options than the recorded command's never replaces the file a chapter reads.

The book's chapters read the newest ``benchmarks/results/<name>-<device>-<date>.json`` and the recorded
``experiments/results/<name>.json``. A run of one section, one workload or one seed written there would replace a
full record of the same day, or become the newest one, and the next build would read it: measured once, the
Stiefel chapter then failed with a KeyError. Such a *custom* run writes ``<name>-custom…`` beside them instead (a
name no chapter reads, ignored by git) and says so; ``--output`` still writes anywhere. The compute is replaced by
stubs: these tests check where the file goes, before any work.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json

import pytest

from svmuon._cli import custom_options
from svmuon.bench import msign, stiefel
from svmuon.experiments import orthogonal_drift, stiefel_digits

STAMP = dt.date.today().strftime("%Y%m%d")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty book repository as the working directory (its results folders are the defaults)."""
    (tmp_path / "_toc.yml").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def stiefel_args(monkeypatch):
    """Stub the Stiefel benchmark's compute; the list receives the parsed arguments of each run."""
    seen: list[argparse.Namespace] = []

    def run(args, shapes):
        seen.append(args)
        return {"targets": stiefel._targets({}, args.workloads)}

    monkeypatch.setattr(stiefel, "run", run)
    return seen


def _files(folder):
    return sorted(p.name for p in folder.glob("*.json"))


def test_custom_options_name_what_differs_from_the_defaults():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    selection = ("sizes", "steps")
    assert custom_options(parser, parser.parse_args([]), selection) == []
    assert custom_options(parser, parser.parse_args(["--sizes", "1", "2", "--threads", "2"]), selection) == []
    assert custom_options(parser, parser.parse_args(["--sizes", "2", "--steps", "4"]), selection) == \
        ["--sizes", "--steps"]
    assert custom_options(parser, parser.parse_args(["--sizes", "2", "1"]), selection) == ["--sizes"]  # the order


def test_the_recorded_command_writes_the_recorded_name(repo, stiefel_args, capsys):
    assert stiefel.main([]) == 0
    assert _files(repo / "benchmarks" / "results") == [f"stiefel-cpu-{STAMP}.json"]
    assert "differ" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, custom", [
    (["--sections", "ratio"], ["--sections"]),
    (["--workloads", "digits"], ["--workloads"]),
    (["--optimizers", "stiefel"], ["--optimizers"]),
    (["--workloads", "text-wide", "--sections", "ratio"], ["--sections"]),
])
def test_a_custom_stiefel_run_keeps_the_recorded_file(repo, stiefel_args, capsys, argv, custom):
    folder = repo / "benchmarks" / "results"
    folder.mkdir(parents=True)
    name = "stiefel-wide" if "text-wide" in argv else "stiefel"
    recorded = folder / f"{name}-cpu-{STAMP}.json"
    recorded.write_text('{"benchmark": "stiefel", "results": {}}')
    assert stiefel.main(argv) == 0
    assert recorded.read_text() == '{"benchmark": "stiefel", "results": {}}'  # untouched
    assert _files(folder) == sorted([recorded.name, f"{name}-custom-cpu-{STAMP}.json"])
    out = capsys.readouterr().out
    assert f"{', '.join(custom)} differ from the recorded run's" in out and "does not read" in out


def test_the_wide_workload_alone_is_its_own_record_with_its_defaults(repo, stiefel_args):
    """``--workloads text-wide`` is the command the chapter prints for the record it reads."""
    assert stiefel.main(["--workloads", "text-wide"]) == 0
    args = stiefel_args[-1]
    assert {k: getattr(args, k) for k in stiefel.WIDE} == stiefel.WIDE
    assert _files(repo / "benchmarks" / "results") == [f"stiefel-wide-cpu-{STAMP}.json"]
    stiefel.main(["--workloads", "text-wide", "--steps", "40"])  # the chapter asserts WIDE's steps: custom
    assert stiefel_args[-1].steps == 40 and stiefel_args[-1].sections == stiefel.WIDE["sections"]
    assert _files(repo / "benchmarks" / "results") == sorted([f"stiefel-wide-cpu-{STAMP}.json",
                                                              f"stiefel-wide-custom-cpu-{STAMP}.json"])


def test_output_and_smoke_are_unchanged(repo, stiefel_args, tmp_path):
    target = tmp_path / "mine.json"
    assert stiefel.main(["--sections", "ratio", "--output", str(target)]) == 0
    assert json.loads(target.read_text())["settings"]["sections"] == ["ratio"]
    assert stiefel.main(["--smoke", "--sections", "gap"]) == 0  # the temporary folder, as before
    assert _files(repo / "benchmarks" / "results") == []


def test_a_custom_msign_run_is_named_custom(repo, monkeypatch, capsys):
    monkeypatch.setattr(msign, "bench_size", lambda *a, **k: {})
    monkeypatch.setattr(msign, "bench_muon", lambda *a, **k: {})
    monkeypatch.setattr(msign, "_print_table", lambda *a: None)
    assert msign.main(["--device", "cpu", "--sizes", "8", "--muon-sizes"]) == 0
    assert _files(repo / "benchmarks" / "results") == [f"msign-custom-cpu-{STAMP}.json"]
    assert "--sizes, --muon-sizes differ" in capsys.readouterr().out


def test_a_custom_experiment_run_keeps_the_recorded_file(repo, monkeypatch, capsys):
    monkeypatch.setattr(orthogonal_drift, "run_one", lambda *a, **k: {"checkpoints": [1], "error": {"4": [0.0]},
                                                                        "seconds": 0.0})
    folder = repo / "experiments" / "results"
    assert orthogonal_drift.main(["--steps", "1"]) == 0
    assert _files(folder) == ["orthogonal-drift-custom.json"]
    assert "--steps differ" in capsys.readouterr().out


def test_stiefel_digits_reads_the_seeds_as_given(repo, monkeypatch):
    """Its ``--seeds`` default is filled in after parsing: ``--seeds 0 1 2`` is the recorded run, ``--seeds 0`` not."""
    calls = []
    monkeypatch.setattr(stiefel_digits, "_run_task", lambda task, args, smoke: (calls.append(task), ([], [], {}))[1])
    monkeypatch.setattr(stiefel_digits, "environment", lambda **k: {})
    folder = repo / "experiments" / "results"
    assert stiefel_digits.main(["--seeds", "0", "1", "2"]) == 0
    assert _files(folder) == ["stiefel-digits.json"]
    assert stiefel_digits.main(["--seeds", "0", "--tasks", "digits"]) == 0
    assert _files(folder) == ["stiefel-digits-custom.json", "stiefel-digits.json"]
    assert calls == ["digits", "text", "digits"]

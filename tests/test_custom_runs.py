"""A run with other options than the recorded command's never replaces the file a chapter reads.

The book's chapters read the newest ``benchmarks/results/<name>-<device>-<date>.json`` and the recorded
``experiments/results/<name>.json``. A run of one section, one workload or one seed written there would replace a
full record of the same day, or become the newest one, and the next build would read it: measured once, the
Stiefel chapter then failed with a KeyError. Such a *custom* run writes ``<name>-custom-<device>-<date>-<id>.json``
(``<name>-custom-<id>.json`` for an experiment) beside them instead, ``<id>`` ten letters naming the options that
differ and their values (two different custom runs never share a file), a name no chapter reads, ignored by git,
and says so before any compute; ``--output`` still writes anywhere. The compute is replaced by stubs: these tests
check where the file goes, before any work.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from svmuon import results
from svmuon._cli import CUSTOM_ID_LENGTH, custom_id, custom_options
from svmuon.bench import gpu, monte_carlo, msign, stiefel
from svmuon.experiments import orthogonal_drift, stiefel_digits

STAMP = dt.date.today().strftime("%Y%m%d")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty book repository as the working directory (its results folders are the defaults); the system's
    temporary folder is ``<tmp_path>/tmp`` (where smoke runs write)."""
    (tmp_path / "_toc.yml").write_text("")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
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


def _custom_bench(name, options, device="cpu"):
    return f"{name}-custom-{device}-{STAMP}-{custom_id(options)}.json"


# ------------------------------------------------------------------------------------ the custom options and id

def test_custom_options_name_what_differs_from_the_defaults():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    selection = ("sizes", "steps")
    assert custom_options(parser, parser.parse_args([]), selection) == {}
    assert custom_options(parser, parser.parse_args(["--sizes", "1", "2", "--threads", "2"]), selection) == {}
    assert custom_options(parser, parser.parse_args(["--sizes", "2", "--steps", "4"]), selection) == \
        {"--sizes": [2], "--steps": 4}
    assert list(custom_options(parser, parser.parse_args(["--sizes", "2", "1"]), selection)) == ["--sizes"]  # order


def test_custom_id_names_the_selection_stably():
    a = custom_id({"--seed": 1})
    assert re.fullmatch(f"[a-z]{{{CUSTOM_ID_LENGTH}}}", a)  # letters: never read as a date
    assert a == custom_id({"--seed": 1})
    assert a == "gptebedgcw"  # the same on every run and machine (a rerun of a selection replaces its own file)
    assert custom_id({"--seed": 2}) != a and custom_id({"--steps": 1}) != a
    assert custom_id({"--sizes": [1, 2]}) != custom_id({"--sizes": [2, 1]})
    assert custom_id({"--seed": 1, "--tol": 1e-8}) == custom_id({"--tol": 1e-8, "--seed": 1})
    assert custom_id({"--sizes": (1, 2)}) == custom_id({"--sizes": [1, 2]})
    with pytest.raises(ValueError):
        custom_id({})


def test_custom_names_are_neither_records_nor_dated(repo):
    """No chapter can read a custom file for a record: :mod:`svmuon.results` sees no date in its name."""
    folder = repo / "benchmarks" / "results"
    folder.mkdir(parents=True)
    for options in ({"--seed": s} for s in range(200)):
        (folder / _custom_bench("stiefel", options)).write_text("{}")
    names = results.names("benchmarks", root=repo)
    assert not [n for n in names if n[-8:].isdigit()]  # chapters/part2/performance.md's "dated" filter
    with pytest.raises(FileNotFoundError):
        results.path("benchmarks", "stiefel-cpu", root=repo)


def test_custom_files_are_ignored_by_git_and_records_are_not():
    paths = [f"benchmarks/results/{_custom_bench('stiefel', {'--seed': 1})}",
             f"benchmarks/results/{_custom_bench('stiefel-wide', {'--seed': 1})}",
             f"experiments/results/orthogonal-drift-custom-{custom_id({'--steps': 1})}.json",
             f"benchmarks/results/stiefel-cpu-{STAMP}.json", "experiments/results/orthogonal-drift.json"]
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no git here")
    if done.returncode not in (0, 1):
        pytest.skip(f"git check-ignore failed: {done.stderr}")
    assert done.stdout.split() == paths[:3]


# ------------------------------------------------------------------------------------------ the Stiefel benchmark

def test_the_recorded_command_writes_the_recorded_name(repo, stiefel_args, capsys):
    assert stiefel.main([]) == 0
    assert _files(repo / "benchmarks" / "results") == [f"stiefel-cpu-{STAMP}.json"]
    assert "differ" not in capsys.readouterr().out


def test_every_stiefel_option_is_sorted_into_selection_or_not():
    """A new option must be put in SELECTION (what is measured) or NOT_SELECTION (how long, how precisely,
    where): else a run with it could replace the record."""
    dests = {a.dest for a in stiefel._parser()._actions if a.dest != "help"}
    assert set(stiefel.SELECTION) | set(stiefel.NOT_SELECTION) == dests
    assert not set(stiefel.SELECTION) & set(stiefel.NOT_SELECTION)


def test_the_stiefel_record_matches_the_defaults():
    """The recorded file the chapter reads was run with the defaults of SELECTION: the default command writes it."""
    recorded = sorted((ROOT / "benchmarks" / "results").glob("stiefel-cpu-*.json"))
    if not recorded:
        pytest.skip("no recorded stiefel-cpu file here")
    settings = json.loads(recorded[-1].read_text())["settings"]
    parser = stiefel._parser()
    assert {k: settings[k] for k in stiefel.SELECTION if k in settings} == \
        {k: parser.get_default(k) for k in stiefel.SELECTION if k in settings}


@pytest.mark.parametrize("argv, custom", [
    (["--sections", "ratio"], ["--sections"]),
    (["--workloads", "digits"], ["--workloads"]),
    (["--optimizers", "stiefel"], ["--optimizers"]),
    (["--seed", "1"], ["--seed"]),
    (["--tol", "1e-8"], ["--tol"]),
    (["--samples", "3"], ["--samples"]),
    (["--steps", "100"], ["--steps"]),
    (["--sdp-columns", "8"], ["--sdp-columns"]),
    (["--shapes", "12x4"], ["--shapes"]),
    (["--seed", "1", "--tol", "1e-8", "--threads", "2"], ["--tol", "--seed"]),
    (["--workloads", "text-wide", "--sections", "ratio"], ["--sections"]),
    (["--workloads", "text-wide", "--seed", "3"], ["--seed"]),
    (["--workloads", "text-wide", "--samples", "2"], ["--samples"]),
])
def test_a_custom_stiefel_run_keeps_the_recorded_file(repo, stiefel_args, capsys, argv, custom):
    folder = repo / "benchmarks" / "results"
    folder.mkdir(parents=True)
    name = "stiefel-wide" if "text-wide" in argv else "stiefel"
    recorded = folder / f"{name}-cpu-{STAMP}.json"
    recorded.write_text('{"benchmark": "stiefel", "results": {}}')
    assert stiefel.main(argv) == 0
    assert recorded.read_text() == '{"benchmark": "stiefel", "results": {}}'  # untouched
    options = custom_options(stiefel._parser() if name == "stiefel" else _wide_parser(), stiefel_args[-1],
                             stiefel.SELECTION)
    assert list(options) == custom
    assert _files(folder) == sorted([recorded.name, _custom_bench(name, options)])
    out = capsys.readouterr().out
    assert f"{', '.join(custom)} differ from the recorded run's" in out and "does not read" in out
    assert str(folder / _custom_bench(name, options)) in out  # the message names the file


def _wide_parser():
    parser = stiefel._parser()
    parser.set_defaults(workloads=["text-wide"], **stiefel.WIDE)
    return parser


@pytest.mark.parametrize("argv", [["--threads", "2"], ["--warmup", "5"], ["--sync-rounds", "2"], ["--repeats", "1"],
                                  ["--note", "quiet"], ["--seed", "0", "--tol", "1e-6", "--samples", "6"]])
def test_how_long_or_precisely_is_not_custom(repo, stiefel_args, capsys, argv):
    """Threads, warm-up, host-read rounds, repeats and the note say how it is measured; the defaults given
    explicitly are the recorded command too."""
    assert stiefel.main(argv) == 0
    assert _files(repo / "benchmarks" / "results") == [f"stiefel-cpu-{STAMP}.json"]
    assert "differ" not in capsys.readouterr().out


def test_two_custom_runs_get_two_files_and_a_rerun_its_own(repo, stiefel_args):
    folder = repo / "benchmarks" / "results"
    assert stiefel.main(["--seed", "1"]) == 0
    assert stiefel.main(["--seed", "2"]) == 0
    assert stiefel.main(["--sections", "ratio"]) == 0
    first = _files(folder)
    assert len(first) == 3 and all(n.startswith(f"stiefel-custom-cpu-{STAMP}-") for n in first)
    assert json.loads((folder / _custom_bench("stiefel", {"--seed": 1})).read_text())["settings"]["seed"] == 1
    assert json.loads((folder / _custom_bench("stiefel", {"--seed": 2})).read_text())["settings"]["seed"] == 2
    assert stiefel.main(["--seed", "1", "--threads", "2"]) == 0  # the same selection: its own file again
    assert _files(folder) == first


def test_the_note_comes_before_the_compute(repo, monkeypatch, capsys):
    printed = []
    monkeypatch.setattr(stiefel, "run", lambda args, shapes: (printed.append(capsys.readouterr().out),
                                                              {"targets": stiefel._targets({}, args.workloads)})[1])
    assert stiefel.main(["--seed", "5"]) == 0
    assert f"writing {repo / 'benchmarks' / 'results' / _custom_bench('stiefel', {'--seed': 5})}" in printed[0]


def test_the_wide_workload_alone_is_its_own_record_with_its_defaults(repo, stiefel_args):
    """``--workloads text-wide`` is the command the chapter prints for the record it reads."""
    assert stiefel.main(["--workloads", "text-wide"]) == 0
    args = stiefel_args[-1]
    assert {k: getattr(args, k) for k in stiefel.WIDE} == stiefel.WIDE
    assert _files(repo / "benchmarks" / "results") == [f"stiefel-wide-cpu-{STAMP}.json"]
    stiefel.main(["--workloads", "text-wide", "--steps", "40"])  # the chapter asserts WIDE's steps: custom
    assert stiefel_args[-1].steps == 40 and stiefel_args[-1].sections == stiefel.WIDE["sections"]
    assert _files(repo / "benchmarks" / "results") == sorted([f"stiefel-wide-cpu-{STAMP}.json",
                                                              _custom_bench("stiefel-wide", {"--steps": 40})])


def test_output_and_smoke_are_unchanged(repo, stiefel_args, capsys):
    target = repo / "mine.json"
    assert stiefel.main(["--sections", "ratio", "--seed", "1", "--output", str(target)]) == 0
    assert json.loads(target.read_text())["settings"]["sections"] == ["ratio"]
    assert stiefel.main(["--smoke", "--sections", "gap", "--seed", "1"]) == 0  # the temporary folder, as before
    assert stiefel.main(["--smoke"]) == 0
    assert stiefel_args[-1].steps == stiefel.SMOKE["steps"]
    assert _files(repo / "benchmarks" / "results") == []
    assert _files(repo / "tmp" / "svmuon-smoke") == [f"stiefel-smoke-cpu-{STAMP}.json"]
    assert "differ" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- other benchmarks

def test_a_custom_msign_run_is_named_custom(repo, monkeypatch, capsys):
    monkeypatch.setattr(msign, "bench_size", lambda *a, **k: {})
    monkeypatch.setattr(msign, "bench_muon", lambda *a, **k: {})
    monkeypatch.setattr(msign, "_print_table", lambda *a: None)
    assert msign.main(["--device", "cpu", "--sizes", "8", "--muon-sizes"]) == 0
    assert _files(repo / "benchmarks" / "results") == [_custom_bench("msign", {"--sizes": [8], "--muon-sizes": []})]
    assert "--sizes, --muon-sizes differ" in capsys.readouterr().out
    assert msign.main(["--device", "cpu", "--repeats", "2"]) == 0  # the recorded command (--threads too)
    assert f"msign-cpu-{STAMP}.json" in _files(repo / "benchmarks" / "results")


def test_a_monte_carlo_run_with_other_work_is_custom(repo, monkeypatch):
    monkeypatch.setattr(monte_carlo, "measure", lambda n, work, repeats, device: {
        "n": n, "samples": work // n, "ours_elements_per_s": 1.0, "numpy_elements_per_s": 1.0, "ratio_median": 1.0,
        "cpu_ratio_median": 1.0, "ours_peak_bytes": 0, "numpy_peak_bytes": 0})
    folder = repo / "benchmarks" / "results"
    assert monte_carlo.main(["--repeats", "7"]) == 0  # the recorded command (chapters/part2/performance.md)
    assert _files(folder) == [f"monte-carlo-cpu-{STAMP}.json"]
    assert monte_carlo.main(["--work", "4096"]) == 0
    assert _files(folder) == sorted([f"monte-carlo-cpu-{STAMP}.json",
                                     _custom_bench("monte-carlo", {"--work": 4096})])


@pytest.mark.parametrize("argv, custom", [
    ([], None), (["--compile"], None), (["--drift-steps", str(gpu.FULL["drift_steps"])], None),
    (["--drift-steps", "200"], {"--drift-steps": 200}), (["--no-compile"], {"--no-compile": True}),
])
def test_a_custom_gpu_run_keeps_the_recorded_file(repo, monkeypatch, argv, custom):
    """On a CUDA machine (faked: the compute is stubbed), a shorter drift run or no compile section is custom."""
    written = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu, "run", lambda *a: {})
    monkeypatch.setattr(gpu, "_print", lambda res: None)
    monkeypatch.setattr(gpu, "write_result", lambda path, *a, **k: written.append(Path(path)))
    assert gpu.main(argv) == 0
    name = f"gpu-cuda-{STAMP}.json" if custom is None else _custom_bench("gpu", custom, "cuda")
    assert written == [repo / "benchmarks" / "results" / name]


# --------------------------------------------------------------------------------------------------- experiments

def _stub_drift(monkeypatch):
    monkeypatch.setattr(orthogonal_drift, "run_one", lambda *a, **k: {"checkpoints": [1], "error": {"4": [0.0]},
                                                                        "seconds": 0.0})


def test_a_custom_experiment_run_keeps_the_recorded_file(repo, monkeypatch, capsys):
    _stub_drift(monkeypatch)
    folder = repo / "experiments" / "results"
    assert orthogonal_drift.main(["--steps", "1"]) == 0
    name = f"orthogonal-drift-custom-{custom_id({'--steps': 1})}.json"
    assert _files(folder) == [name]
    out = capsys.readouterr().out
    assert "--steps differ" in out and str(folder / name) in out


def test_two_custom_experiment_runs_get_two_files(repo, monkeypatch):
    _stub_drift(monkeypatch)
    folder = repo / "experiments" / "results"
    assert orthogonal_drift.main(["--steps", "1"]) == 0
    assert orthogonal_drift.main(["--steps", "2"]) == 0
    assert orthogonal_drift.main(["--steps", "1"]) == 0  # a rerun: its own file again
    assert _files(folder) == sorted(f"orthogonal-drift-custom-{custom_id({'--steps': s})}.json" for s in (1, 2))
    assert {json.loads((folder / n).read_text())["steps"] for n in _files(folder)} == {1, 2}
    assert orthogonal_drift.main([]) == 0
    assert "orthogonal-drift.json" in _files(folder)


def test_stiefel_digits_reads_the_seeds_as_given(repo, monkeypatch):
    """Its ``--seeds`` default is filled in after parsing: ``--seeds 0 1 2`` is the recorded run, ``--seeds 0`` not."""
    calls = []
    monkeypatch.setattr(stiefel_digits, "_run_task", lambda task, args, smoke: (calls.append(task), ([], [], {}))[1])
    monkeypatch.setattr(stiefel_digits, "environment", lambda **k: {})
    folder = repo / "experiments" / "results"
    assert stiefel_digits.main(["--seeds", "0", "1", "2"]) == 0
    assert _files(folder) == ["stiefel-digits.json"]
    assert stiefel_digits.main(["--seeds", "0", "--tasks", "digits"]) == 0
    custom = f"stiefel-digits-custom-{custom_id({'--tasks': ['digits'], '--seeds': [0]})}.json"
    assert _files(folder) == sorted([custom, "stiefel-digits.json"])
    assert calls == ["digits", "text", "digits"]
    assert stiefel_digits.main(["--smoke", "--tasks", "digits"]) == 0  # the temporary folder, as before
    assert _files(folder) == sorted([custom, "stiefel-digits.json"])
    assert _files(repo / "tmp" / "svmuon-smoke") == ["stiefel-digits-smoke.json"]

"""Every option of every ``python -m svmuon.experiments NAME`` and ``python -m svmuon.bench NAME`` is checked
before any compute (issue 19, item 5): a bad value exits with status 2 and a one-line message naming the option.

The compute entry points are replaced by stubs that fail the test, so a check that came too late would show.
"""

from __future__ import annotations

import importlib
import json
import os

import pytest
import torch

from svmuon.bench import entropy_monitor, gpu, monte_carlo, msign, muon_step, orthogonal, stiefel
from svmuon.experiments import _gpt_train, digits_training, fixed_entropy, gpt, orthogonal_drift, orthogonal_rnn
from svmuon.experiments import stiefel_digits

COMPUTE = {  # module -> the functions a run calls first, after its checks
    digits_training: ["run"], fixed_entropy: ["run_task", "load_task"], orthogonal_drift: ["run_one"],
    orthogonal_rnn: ["load_sequences", "train"], stiefel_digits: ["load_task", "train"], gpu: ["run"],
    monte_carlo: ["measure"], msign: ["bench_size", "bench_muon"], muon_step: ["step_overhead"],
    orthogonal: ["measure"], stiefel: ["run"], gpt: ["run_arm"], _gpt_train: ["load_data"],
    entropy_monitor: ["measure"],
}
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of --device cuda without a GPU")


@pytest.fixture(autouse=True)
def no_compute(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("compute started before the arguments were checked")

    for module, names in COMPUTE.items():
        for name in names:
            monkeypatch.setattr(module, name, started)


def _refused(module, argv, capsys, *expected):
    with pytest.raises(SystemExit) as info:
        module.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    last = err.strip().splitlines()[-1]  # argparse: the usage line, then one line "prog: error: ..."
    for text in expected:
        assert text in last, last
    return last


CASES = [  # the table, then more
    (orthogonal_drift, ["--steps", "0"], "--steps"),
    (orthogonal_rnn, ["--methods", "nope"], "--methods"),
    (orthogonal_rnn, ["--epochs", "0"], "--epochs"),
    (stiefel_digits, ["--epochs", "0"], "--epochs"),
    (digits_training, ["--epochs", "0"], "--epochs"),
    (digits_training, ["--threads", "0"], "--threads"),
    (fixed_entropy, ["--threads", "0"], "--threads"),
    (stiefel, ["--repeats", "0"], "--repeats"),
    (monte_carlo, ["--repeats", "0"], "--repeats"),
    (muon_step, ["--rounds", "0"], "--rounds"),
    (monte_carlo, ["--sizes", "0"], "--sizes"),
    (msign, ["--sizes", "-4"], "--sizes"),
    (stiefel, ["--shapes", "4x8"], "--shapes", "tall"),
    (stiefel, ["--shapes", "abc"], "--shapes"),
    (fixed_entropy, ["--lr-check", "5.0"], "--lr-check"),
    (digits_training, ["--muon-lrs", "nan"], "--muon-lrs"),
    # more: negative or zero sizes, NaN and infinite floats, zero counts, unknown names, repeats
    (orthogonal_drift, ["--steps", "-3"], "--steps"),
    (orthogonal_drift, ["--steps", "ten"], "--steps", "integer"),
    (orthogonal_rnn, ["--seeds", "-1"], "--seeds"),
    (orthogonal_rnn, ["--seeds", "0", "0"], "--seeds", "more than once"),
    (stiefel_digits, ["--methods", "sgd"], "--methods"),
    (stiefel_digits, ["--seeds", "x"], "--seeds"),
    (stiefel_digits, ["--methods", "adam", "adam"], "--methods"),
    (stiefel_digits, ["--tasks", "imagenet"], "--tasks"),
    (stiefel_digits, ["--tasks", "text", "text"], "--tasks", "more than once"),
    (stiefel_digits, ["--smoke", "--seeds", "-1"], "--seeds"),
    (digits_training, ["--adamw-lrs", "-1e-3"], "--adamw-lrs"),
    (digits_training, ["--adamw-lrs", "inf"], "--adamw-lrs"),
    (digits_training, ["--muon-lrs", "0"], "--muon-lrs"),
    (digits_training, ["--batch-size", "0"], "--batch-size"),
    (digits_training, ["--weight-decay", "-0.1"], "--weight-decay"),
    (digits_training, ["--weight-decay", "nan"], "--weight-decay"),
    (digits_training, ["--log-every", "0"], "--log-every"),
    (digits_training, ["--tune-seeds", "-2"], "--tune-seeds"),
    (digits_training, ["--seeds", str(2**64)], "--seeds"),
    (fixed_entropy, ["--lr-check", "0.3"], "--lr-check", "among --deltas"),  # in range, not in the sweep
    (fixed_entropy, ["--lr-check", "0.42", "--powers", "2"], "--lr-check", "r = 1"),
    (fixed_entropy, ["--deltas", "nan"], "--deltas"),
    (fixed_entropy, ["--deltas", "5"], "--deltas"),
    (fixed_entropy, ["--deltas", "-0.1"], "--deltas"),
    (fixed_entropy, ["--powers", "0"], "--powers"),
    (fixed_entropy, ["--powers", "nan"], "--powers"),
    (fixed_entropy, ["--square-seeds", "-1"], "--square-seeds"),
    (fixed_entropy, ["--seeds", "-1"], "--seeds"),
    (fixed_entropy, ["--tasks", "vision"], "--tasks"),
    (fixed_entropy, ["--smoke"], "--output-dir"),
    (gpu, ["--smoke", "--drift-steps", "0"], "--drift-steps"),
    (monte_carlo, ["--sizes", "1"], "--sizes"),
    (monte_carlo, ["--work", "0"], "--work"),
    (monte_carlo, ["--device", "tpu"], "--device"),
    (msign, ["--sizes", "0"], "--sizes"),
    (msign, ["--muon-sizes", "0"], "--muon-sizes"),
    (msign, ["--repeats", "0"], "--repeats"),
    (msign, ["--threads", "0"], "--threads"),
    (msign, ["--dtype", "float16"], "--dtype"),
    (muon_step, ["--n", "0"], "--n"),
    (muon_step, ["--threads", "-1"], "--threads"),
    (orthogonal, ["--sizes", "0"], "--sizes"),
    (orthogonal, ["--count", "0"], "--count"),
    (orthogonal, ["--repeats", "0"], "--repeats"),
    (orthogonal, ["--rounds", "0"], "--rounds"),
    (orthogonal, ["--threads", "0"], "--threads"),
    (stiefel, ["--shapes", "0x4"], "--shapes"),
    (stiefel, ["--shapes", ","], "--shapes"),
    (stiefel, ["--tol", "0"], "--tol"),
    (stiefel, ["--tol", "nan"], "--tol"),
    (stiefel, ["--steps", "0"], "--steps"),
    (stiefel, ["--samples", "0"], "--samples"),
    (stiefel, ["--samples", "270"], "--samples", "below --steps"),
    (stiefel, ["--steps", "20", "--warmup", "19"], "--steps", "no timed round"),
    (stiefel, ["--warmup", "-1"], "--warmup"),
    (stiefel, ["--sync-rounds", "0"], "--sync-rounds"),
    (stiefel, ["--sdp-columns", "0"], "--sdp-columns"),
    (stiefel, ["--sections", "speed"], "--sections"),
    (stiefel, ["--sections", "gap", "gap"], "--sections", "more than once"),
    (stiefel, ["--workloads", "imagenet"], "--workloads"),
    (stiefel, ["--workloads", "text", "text"], "--workloads", "more than once"),
    (stiefel, ["--smoke", "--shapes", "4x8"], "--shapes", "tall"),
    (stiefel, ["--threads", "0"], "--threads"),
    (stiefel, ["--seed", "-1"], "--seed"),
    (gpt, ["--threads", "0"], "--threads"),
    (gpt, ["--seeds", "-1"], "--seeds"),
    (gpt, ["--seeds", "0", "0"], "--seeds", "more than once"),
    (gpt, ["--arms", "sgd"], "--arms"),
    (gpt, ["--arms", "muon", "muon"], "--arms", "more than once"),
    (gpt, ["--deltas", "9"], "--deltas", "log k"),
    (gpt, ["--deltas", "nan"], "--deltas"),
    (gpt, ["--scope-deltas", "-0.1"], "--scope-deltas"),
    (gpt, ["--size", "huge"], "--size"),
    (gpt, ["--smoke"], "--output-dir"),
    (entropy_monitor, ["--steps", "0"], "--steps"),
    (entropy_monitor, ["--every", "0"], "--every"),
    (entropy_monitor, ["--every", "10", "--steps", "5"], "--every"),
    (entropy_monitor, ["--threads", "-1"], "--threads"),
]


@pytest.mark.parametrize(("module", "argv", "expected"), [(m, a, e) for m, a, *e in CASES],
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}{' '.join(a)}" for m, a, *_ in CASES])
def test_a_bad_value_is_refused_before_compute(module, argv, expected, capsys, tmp_path):
    folders = (fixed_entropy, gpt)  # these take --output-dir
    option = ["--output-dir", str(tmp_path)] if module in folders and "--smoke" not in argv else (
        [] if module in folders else ["--output", str(tmp_path / "r.json")])
    _refused(module, [*argv, *option], capsys, *expected)


@NO_GPU
@pytest.mark.parametrize("module", [monte_carlo, msign, orthogonal, entropy_monitor])
def test_cuda_without_a_gpu_is_refused(module, capsys, tmp_path):
    _refused(module, ["--device", "cuda", "--output", str(tmp_path / "r.json")], capsys, "--device", "CUDA")


@NO_GPU
def test_the_gpu_size_without_a_gpu_is_refused(capsys, tmp_path):
    _refused(gpt, ["--size", "gpu", "--output-dir", str(tmp_path)], capsys, "--size", "CUDA")
    _refused(gpt, ["--device", "cuda", "--output-dir", str(tmp_path)], capsys, "--device", "CUDA")


OUTPUT = {  # module -> its output option
    digits_training: "--output", orthogonal_drift: "--output", orthogonal_rnn: "--output", stiefel_digits: "--output",
    gpu: "--output", monte_carlo: "--output", msign: "--output", muon_step: "--output", orthogonal: "--output",
    stiefel: "--output", entropy_monitor: "--output",
}


@pytest.mark.parametrize("module", list(OUTPUT), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_an_output_path_that_cannot_be_written_is_refused_before_compute(module, capsys, tmp_path):
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    _refused(module, [OUTPUT[module], str(tmp_path)], capsys, OUTPUT[module], "is a folder")
    _refused(module, [OUTPUT[module], str(a_file / "r.json")], capsys, OUTPUT[module], "is a file, not a folder")


@pytest.mark.parametrize("module", [fixed_entropy, gpt], ids=["fixed_entropy", "gpt"])
def test_output_folder_checks(module, capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    _refused(module, ["--output-dir", str(a_file)], capsys, "--output-dir", "is a file")
    _refused(module, ["--output-dir", str(a_file / "sub")], capsys, "--output-dir", "is a file")


def test_a_read_only_folder_is_refused(capsys, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root writes anyway: then the folder *is* writable, nothing to refuse
            pytest.skip("running as root: a read-only permission does not stop this user")
        _refused(orthogonal_drift, ["--output", str(folder / "r.json")], capsys, "--output", "cannot write in")
    finally:
        folder.chmod(0o755)


def test_a_read_only_filesystem_is_refused(capsys, tmp_path, monkeypatch):
    """What a read-only mount (EROFS) or a folder without write permission looks like to the check: the
    probe file cannot be created (simulated, so that the test holds as root too)."""
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    _refused(orthogonal_drift, ["--output", str(tmp_path / "r.json")], capsys, "--output", "Read-only file system")
    _refused(fixed_entropy, ["--output-dir", str(tmp_path)], capsys, "--output-dir", "Read-only file system")


@pytest.mark.parametrize(("content", "what"), [
    ("", "empty"), ("null", "holds null"), ('{"experiment": "fixed-entropy", "task": "dig', "not valid JSON"),
    ('{"benchmark": "msign"}', "not a result of 'fixed-entropy'"), ("[]", "a JSON list"),
])
def test_a_damaged_results_file_of_a_resumable_run_is_named(content, what, capsys, tmp_path):
    path = tmp_path / "fixed-entropy-digits.json"
    path.write_text(content)
    _refused(fixed_entropy, ["--tasks", "digits", "--output-dir", str(tmp_path)], capsys, str(path), what)
    assert path.read_text() == content  # nothing changed


def test_a_results_file_with_damaged_fields_is_named(capsys, tmp_path):
    head = {"experiment": "fixed-entropy", "task": "digits", "config": fixed_entropy.TASKS["digits"],
            "grids": fixed_entropy.GRIDS, "other_lr": fixed_entropy.OTHER_LR, "runs": {"oops": 1}}
    path = tmp_path / "fixed-entropy-digits.json"
    path.write_text(json.dumps(head))
    _refused(fixed_entropy, ["--tasks", "digits", "--output-dir", str(tmp_path)], capsys, str(path), "'runs'")


def test_default_output_outside_the_repository_is_the_working_directory(tmp_path, monkeypatch):
    """Run from outside the book's repository without --output, a run writes under the working directory,
    never into the installed copy's recorded results (issue 19, item 4)."""
    from svmuon._paths import default_results_dir
    from svmuon.bench._common import default_output as bench_output
    from svmuon.experiments.runs import default_output

    monkeypatch.chdir(tmp_path)
    assert default_output("experiments", "x.json") == tmp_path / "experiments" / "results" / "x.json"
    assert bench_output("msign").parent == tmp_path / "benchmarks" / "results"
    (tmp_path / "_toc.yml").write_text("")
    (tmp_path / "chapters").mkdir()
    monkeypatch.chdir(tmp_path / "chapters")  # inside a repository: its results folder, from any subfolder
    assert default_results_dir("experiments") == tmp_path / "experiments" / "results"


def test_orthogonal_drift_writes_its_default_file_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(orthogonal_drift, "run_one", lambda *a, **k: {"checkpoints": [1], "error": {"4": [0.0]},
                                                                        "seconds": 0.0})
    assert orthogonal_drift.main(["--steps", "1"]) == 0
    # --steps 1 is a custom run (tests/test_custom_runs.py): the -custom name, under the working directory
    (path,) = (tmp_path / "experiments" / "results").glob("orthogonal-drift-custom-*.json")
    doc = json.loads(path.read_text())
    assert doc["experiment"] == "orthogonal-drift" and len(doc["runs"]) == 12 and "torch" in doc["environment"]


def test_every_command_is_covered():
    """Each experiment and benchmark module appears here (a new one must get its checks and a case)."""
    import svmuon.bench
    import svmuon.experiments
    from svmuon._cli import available

    covered = {m.__name__ for m in COMPUTE}
    for package in (svmuon.experiments, svmuon.bench):
        for name in available(package):
            module = importlib.import_module(f"{package.__name__}.{name.replace('-', '_')}")
            assert module.__name__ in covered, module.__name__


@pytest.mark.parametrize(("content", "what"), [("", "empty"), ('{"experiment": "gpt", "arm": "ad', "not valid JSON"),
                                               ('{"experiment": "gpt", "arm": "muon"}', "arm")])
def test_a_damaged_or_foreign_gpt_results_file_is_named(content, what, capsys, tmp_path):
    path = tmp_path / "gpt-cpu-adamw.json"
    path.write_text(content)
    _refused(gpt, ["--arms", "adamw", "--output-dir", str(tmp_path)], capsys, str(path), what)
    assert path.read_text() == content  # nothing changed

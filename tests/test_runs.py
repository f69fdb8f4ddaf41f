"""``svmuon.experiments.runs``: the data, evaluation, epoch loop, tuning and results I/O every experiment shares."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from svmuon.experiments import runs


def test_digits_split_is_complete_and_stratified():
    data = runs.load_digits(0)
    sizes = {k: len(v[1]) for k, v in data.items()}
    # sklearn rounds the test share up: ceil(0.2 · 1797) = 360, then ceil(0.25 · 1437) = 360
    assert sizes == {"train": 1077, "val": 360, "test": 360}
    for X, y in data.values():
        assert X.dtype == torch.float32 and y.dtype == torch.int64 and X.shape[1] == 64
        assert 0 <= float(X.min()) and float(X.max()) <= 1
        assert set(torch.unique(y).tolist()) == set(range(10))
    seq = runs.load_digits(0, sequences=True)
    for split in data:  # the same examples, read as 8 rows of 8 pixels
        assert torch.equal(seq[split][0].reshape(-1, 64), data[split][0]) and torch.equal(seq[split][1], data[split][1])


def test_evaluate_against_numpy():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3).double()
    X, y = torch.randn(40, 5, dtype=torch.float64), torch.randint(0, 3, (40,))
    loss, acc = runs.evaluate(model, X, y)
    logits = model(X).detach().numpy()
    expected = float(np.mean(logsumexp(logits, axis=1) - logits[np.arange(40), y.numpy()]))
    assert loss == pytest.approx(expected, rel=1e-13)  # float64 log-sum-exp, ~1e-16 per term
    assert acc == runs.accuracy(model, X, y)
    assert acc == pytest.approx(float(np.mean(logits.argmax(1) == y.numpy())), abs=6e-8)  # a float32 mean


def test_train_epoch_is_the_plain_loop_and_calls_its_hooks():
    def setup():
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 3)
        return model, [torch.optim.SGD([model.weight], lr=0.1), torch.optim.SGD([model.bias], lr=0.1)]

    X, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    batches = torch.arange(10).split(4)
    model, opts = setup()
    losses, times = [], []
    total = runs.train_epoch(model, opts, X, y, batches, after_step=losses.append, step_times=times)
    ref, ref_opts = setup()
    ref_losses = []
    for idx in batches:  # the loop written out
        ref.zero_grad()
        loss = torch.nn.functional.cross_entropy(ref(X[idx]), y[idx])
        loss.backward()
        for o in ref_opts:
            o.step()
        ref_losses.append(float(loss.detach()))
    assert losses == ref_losses and len(times) == 3 and all(t >= 0 for t in times)
    assert total == sum(l * len(b) for l, b in zip(ref_losses, batches))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters()))


def test_tune_keeps_the_first_best_and_the_seeds_reuse_the_tuning_run():
    grid = [0.1, 0.2, 0.3, 0.4]
    scores = {0.1: 1.0, 0.2: 3.0, 0.3: 3.0, 0.4: 2.0}
    assert runs.tune(grid, lambda lr: scores[lr], score=lambda s: s) == (0.2, [1.0, 3.0, 3.0, 2.0])
    assert runs.tune(grid, lambda lr: scores[lr], score=lambda s: s, minimize=True)[0] == 0.1
    calls = []

    def run(lr, seed):
        calls.append((lr, seed))
        return {"lr": lr, "seed": seed, "score": scores[lr]}

    lr, tuning, finals = runs.tune_then_seeds(grid, run, [0, 5, 6], score=lambda r: r["score"])
    assert lr == 0.2 and [t["lr"] for t in tuning] == grid
    assert finals[0] is tuning[1] and [(f["lr"], f["seed"]) for f in finals] == [(0.2, 0), (0.2, 5), (0.2, 6)]
    assert calls == [(0.1, 0), (0.2, 0), (0.3, 0), (0.4, 0), (0.2, 5), (0.2, 6)]  # seed 0 not rerun


def test_environment_records_the_machine():
    env = runs.environment(torch_threads=3)
    assert env["torch_threads"] == 3 and env["torch"] == torch.__version__ and env["cpu_count"] >= 1
    assert {"date", "platform", "processor", "python", "numpy", "svmuon"} <= set(env)
    if hasattr(os, "getloadavg"):  # the load beside a timing: three non-negative averages (1, 5, 15 min)
        load = env["load_average"]
        assert len(load) == 3 and all(x >= 0 for x in load)
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and env["cpu_bf16"] in (True, False, None)


@pytest.mark.parametrize("flags, expected", [("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16", True),
                                             ("fp asimd bf16", True), ("fpu avx512f avx2", False)])
def test_environment_reads_native_bf16_from_the_cpu_flags(tmp_path, monkeypatch, flags, expected):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(runs, "Path", lambda _: info)
    assert runs._cpu_bf16() is expected
    monkeypatch.setattr(runs, "Path", lambda _: tmp_path / "absent")  # no /proc: unknown, not False
    assert runs._cpu_bf16() is None


def test_text_corpus_is_the_standard_library_offline():
    tokens, info = runs.text_corpus(5000)
    assert len(tokens) == 5000 and tokens.min() >= 0 and tokens.max() <= 96
    assert info["files"] >= 1 and info["first"].endswith(".py")


def test_save_keeps_the_results_when_the_target_cannot_be_written(tmp_path, monkeypatch, capsys):
    from svmuon import results

    real = results.write
    target = tmp_path / "r.json"

    def failing(path, payload, **kw):
        if str(path) == str(target):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, payload, **kw)

    monkeypatch.setattr(results, "write", failing)
    with pytest.raises(SystemExit) as info:
        runs.save(target, {"hours": "of compute"})
    assert info.value.code == 1
    err = capsys.readouterr().err
    spare = err.split("saved to ")[1].split(" instead")[0]
    assert "No space left on device" in err and json.loads(open(spare).read()) == {"hours": "of compute"}
    assert not target.exists()


def test_text_corpus_names_its_files_and_hashes_its_text():
    """The description lists the files in order and the SHA-256 of exactly the text used, checked by reading
    the listed files again; the recursive corpus covers sub-packages and never site-packages."""
    import hashlib
    import sysconfig
    from pathlib import Path

    tokens, info = runs.text_corpus(60_000)
    folder = Path(sysconfig.get_paths()["stdlib"])
    text = "".join((folder / n).read_text(encoding="utf-8", errors="replace") for n in info["names"])[:60_000]
    assert info["sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest() and info["files"] == len(info["names"])
    assert all("/" not in n for n in info["names"])  # top-level modules only
    _, deep = runs.text_corpus(3_000_000, recursive=True)
    assert any("/" in n for n in deep["names"]) and not any("site-packages" in n for n in deep["names"])
    assert deep["names"] == sorted(deep["names"], key=lambda n: Path(n).parts)

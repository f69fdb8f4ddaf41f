"""The Muon-vs-AdamW digits experiment: splits are disjoint and standardised, both optimisers learn."""

from __future__ import annotations

import math

import torch

from svmuon.experiments import muon_digits as exp


def test_splits_and_short_training():
    data = exp.load_splits()
    sizes = {k: len(v[1]) for k, v in data.items()}
    assert sizes == {"train": 1078, "val": 359, "test": 360}  # 1797 digits, stratified 60/20/20
    # standardised with the training statistics: training features have mean 0 (float32 rounding: 1e-5)
    assert float(data["train"][0].mean(0).abs().max()) < 1e-5
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 64x128 matmuls: threads only add overhead (restored below)
    try:
        runs = {name: exp.train(name, 1e-3, 0, data, epochs=2) for name in ("adamw", "muon")}
    finally:
        torch.set_num_threads(threads)
    for run in runs.values():
        # chance level is log(10) = 2.30 nats and 10 % accuracy; two epochs are already well above it
        # (measured: AdamW 0.95 nats / 82 %, Muon 2.07 nats / 77 % at lr 1e-3)
        assert run["val_loss"][-1] < math.log(10) - 0.1 and run["test_acc"][-1] > 0.5
        assert run["train_loss"][1] < run["train_loss"][0]
    opts = exp.make_optimizers(exp.make_model(0), "muon", 1e-3)
    assert sum(len(g["params"]) for g in opts[0].param_groups) == 2  # the two hidden weight matrices
    assert all(p.ndim == 2 for g in opts[0].param_groups for p in g["params"])
    assert isinstance(opts[1], torch.optim.AdamW)

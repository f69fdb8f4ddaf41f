"""ManifoldMuon(manifold=Stiefel()) under torch.distributed (gloo, 2 CPU processes): DDP and FSDP2.

Independent route: the same model, data and optimizer in this single process on the whole batch. Two ranks each
see half of the batch; DDP all-reduces and FSDP2 reduce-scatters the mean gradient, so after a few steps the
parameters must equal the single-process ones up to the rounding of the gradient reduction. The model has a tall
(12×8) and a wide (5×12) weight, both on their Stiefel manifolds; FSDP2 shards each by rows, so the optimizer must
gather the whole matrix (svmuon.optim.distributed) — the Stiefel kernels themselves see plain tensors.
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from svmuon import ManifoldMuon, Stiefel
from svmuon.optim.distributed import is_dtensor, whole

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                 reason="needs torch.distributed with the gloo backend")]

WORLD, STEPS, BATCH = 2, 3, 8
DTYPE = torch.float64
# float64; the runs differ only in the order of the gradient reduction (a few ulps per entry). The Newton
# solver runs to 1e-12, so its output is a smooth function of the gradient up to that tolerance: differences of
# ~1e-15 in G give ~1e-14 in the step. 1e-10 leaves room for a different number of Newton iterations near the
# stopping threshold (each one changes Φ by at most the tolerance).
ATOL = 1e-10


def _model() -> torch.nn.Sequential:
    gen = torch.Generator().manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(8, 12, bias=False), torch.nn.Tanh(),
                                torch.nn.Linear(12, 5, bias=False)).to(DTYPE)
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(Stiefel().project(torch.randn(*layer.weight.shape, generator=gen, dtype=DTYPE)))
    return model


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(BATCH, 8, generator=gen, dtype=DTYPE), torch.randn(BATCH, 5, generator=gen, dtype=DTYPE)


def _train(model, params, X, Y):
    opt = ManifoldMuon(params, lr=0.1, momentum=0.9, manifold=Stiefel(tol=1e-12), msign_method="svd")
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(X), Y).backward()
        opt.step()


def _worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    results: dict = {}
    X, Y = (t.chunk(WORLD)[rank] for t in _data())
    try:
        try:
            model = _model()
            _train(torch.nn.parallel.DistributedDataParallel(model), model.parameters(), X, Y)
            results["ddp"] = [p.detach().clone() for p in model.parameters()]
        except Exception:  # noqa: BLE001 - reported by the test
            results["ddp"] = traceback.format_exc()
        try:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            model = _model()
            mesh = init_device_mesh("cpu", (WORLD,))
            for layer in (model[0], model[2]):
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            assert all(is_dtensor(p) for p in model.parameters())
            _train(model, model.parameters(), X, Y)
            results["fsdp"] = [whole(p).detach().clone() for p in model.parameters()]
        except Exception:  # noqa: BLE001
            results["fsdp"] = traceback.format_exc()
        if rank == 0:
            torch.save(results, os.path.join(outdir, "results.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results():
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as outdir:
        mp.start_processes(_worker, args=(_free_port(), outdir), nprocs=WORLD, start_method=method, join=True)
        return torch.load(os.path.join(outdir, "results.pt"))


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_matches_single_process(results, mode):
    value = results[mode]
    assert not isinstance(value, str), value
    model = _model()
    _train(model, model.parameters(), *_data())
    for got, want in zip(value, model.parameters()):
        assert float((got - want.detach()).abs().max()) <= ATOL
        assert float(Stiefel().defect(got)) <= 1e-12  # float64 points after Björck-corrected steps: rounding, ~1e-15

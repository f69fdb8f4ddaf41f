"""Muon and OrthogonalMuon under torch.distributed (gloo, 2 CPU processes): DDP and FSDP2 (DTensor shards).

The expected values come from an independent route: the same model, data and optimizer run in this single
process on the whole batch. Two ranks each see half of the batch; DDP all-reduces and FSDP2
reduce-scatters the mean gradient, so after k steps the parameters must equal the single-process ones
up to the rounding of the gradient reduction (summing two half-batch means instead of one full mean).

The negative control runs the *wrong* algorithm -- the optimizer applied to each rank's row block of a
sharded matrix, as if msign acted entrywise -- through the same comparison and checks that it fails it,
so the comparison is able to fail.

All scenarios share one launch of two forked processes (forking avoids re-importing torch in the children,
which costs ~10 s each on a busy 2-core machine).
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

from svmuon.optim import Muon, OrthogonalMuon
from svmuon.optim.distributed import apply_whole, is_dtensor, shard_like, whole
from svmuon.orthogonal import msign

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with the gloo backend")

WORLD, STEPS, BATCH, DIM = 2, 3, 8, 8
DTYPE = torch.float64
# float64 throughout; the only difference from the single-process run is the order of the gradient
# reduction (two half-batch means summed instead of one full mean): a few eps = 2.2e-16 per gradient entry,
# carried through Newton-Schulz, the retraction and 3 steps. Measured (torch 2.13, CPU): max |difference|
# = 2.2e-16 (one ulp of an entry of size ~1) for DDP and FSDP2, both optimizers. 1e-13 (~450 ulps) leaves
# room for other BLAS builds and is ~12 orders of magnitude below the shard-by-shard error (0.12-0.24).
ATOL = 1e-13
ORTH_LR = 0.1
OPTIMIZERS = {
    "muon": lambda ps, momentum=0.9: Muon(ps, lr=0.05, weight_decay=0.1, momentum=momentum),
    "orthogonal_muon": lambda ps, momentum=0.9: OrthogonalMuon(ps, lr=ORTH_LR, momentum=momentum),
}


def _model(name: str) -> torch.nn.Sequential:
    """Two bias-free layers; OrthogonalMuon's are square and start orthogonal, Muon's last one is 5 x 8
    (uneven row blocks 3 + 2 over two ranks)."""
    gen = torch.Generator().manual_seed(7)
    out = DIM if name == "orthogonal_muon" else 5
    model = torch.nn.Sequential(torch.nn.Linear(DIM, DIM, bias=False), torch.nn.Tanh(),
                                torch.nn.Linear(DIM, out, bias=False)).to(DTYPE)
    with torch.no_grad():
        for layer in (model[0], model[2]):
            A = torch.randn(DIM, DIM, generator=gen, dtype=DTYPE)
            W = torch.linalg.qr(A).Q if name == "orthogonal_muon" else A / DIM**0.5
            layer.weight.copy_(W[: layer.weight.shape[0]])
    return model


def _data(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    out = DIM if name == "orthogonal_muon" else 5
    return torch.randn(BATCH, DIM, generator=gen, dtype=DTYPE), torch.randn(BATCH, out, generator=gen, dtype=DTYPE)


def _train(model, params, X, Y, name, momentum=0.9):
    opt = OPTIMIZERS[name](params, momentum=momentum)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(X), Y).backward()
        opt.step()


def _single_process(name: str, momentum: float = 0.9) -> list[torch.Tensor]:
    model = _model(name)
    X, Y = _data(name)
    _train(model, model.parameters(), X, Y, name, momentum)
    return [p.detach().clone() for p in model.parameters()]


def _fsdp(model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _run_naive(model, X, Y, name):
    """The wrong algorithm, on each rank's row block ``W_r`` (rows of W) of every sharded matrix alone.

    Muon: the optimizer itself steps the blocks (msign of the block's momentum instead of the block of
    msign). OrthogonalMuon (its blocks are not square, so the optimizer refuses them): the same step
    formula with ``O_r = msign([W_rᵀ G_r]_skew)``, i.e. ``WᵀG`` summed over this rank's rows only, and
    momentum 0 (the reference then also runs with momentum 0).
    """
    params = list(model.parameters())
    local = [torch.nn.Parameter(p.to_local().detach().clone()) for p in params]
    opt = OPTIMIZERS[name](local, momentum=0.0) if name == "muon" else None
    for _ in range(STEPS):
        for p in params:
            p.grad = None
        torch.nn.functional.mse_loss(model(X), Y).backward()
        with torch.no_grad():
            for lp, p in zip(local, params):
                lp.grad = p.grad.to_local().detach().clone()
                if name == "orthogonal_muon":  # eq-orth-retraction on the block
                    O = msign((lp.mT @ lp.grad - lp.grad.mT @ lp) / 2, method="svd")
                    eye = torch.eye(O.shape[-1], dtype=O.dtype)
                    P = O.mT @ O
                    lp.copy_(lp @ (eye - ORTH_LR * O) @ (eye - P + P / (1 + ORTH_LR**2) ** 0.5))
            if opt is not None:
                opt.step()
            for lp, p in zip(local, params):
                p.to_local().copy_(lp)
    return [whole(p).detach().clone() for p in params], [lp.detach().clone() for lp in local]


def _scenario(results, key, fn):
    """Run one scenario; a failure is recorded (traceback text) so that only its own test fails."""
    try:
        results[key] = fn()
    except Exception:  # noqa: BLE001 - reported by the test that reads this key
        results[key] = traceback.format_exc()


def _ddp_run(name, X, Y):
    model = _model(name)
    _train(torch.nn.parallel.DistributedDataParallel(model), model.parameters(), X, Y, name)
    return [p.detach().clone() for p in model.parameters()]


def _fsdp_run(name, X, Y):
    model = _fsdp(_model(name))
    assert all(is_dtensor(p) for p in model.parameters()), "FSDP2 did not shard the parameters into DTensors"
    _train(model, model.parameters(), X, Y, name)
    return [whole(p).detach().clone() for p in model.parameters()]


def _comm_counts(name, X, Y):
    """Collectives issued by one optimizer step on FSDP2 parameters (DTensor's CommDebugMode)."""
    from torch.distributed.tensor.debug import CommDebugMode

    model = _fsdp(_model(name))
    opt = OPTIMIZERS[name](model.parameters())
    torch.nn.functional.mse_loss(model(X), Y).backward()
    with CommDebugMode() as comm:
        opt.step()
    return {str(op).split(".")[-1].strip("')>"): n for op, n in comm.get_comm_counts().items()}


def _nan_on_one_rank(name, X, Y):
    """A NaN in rank 1's block only: every rank must refuse the step (one raising alone would leave the
    others waiting in the next collective) and no parameter may change."""
    model = _fsdp(_model(name))
    opt = OPTIMIZERS[name](model.parameters())
    torch.nn.functional.mse_loss(model(X), Y).backward()
    before = [whole(p).detach().clone() for p in model.parameters()]
    if dist.get_rank() == 1:
        next(iter(model.parameters())).grad.to_local()[0, 0] = float("nan")
    try:
        opt.step()
        raised = False
    except ValueError:
        raised = True
    flags = [None] * WORLD
    dist.all_gather_object(flags, raised)
    after = [whole(p).detach().clone() for p in model.parameters()]
    return {"raised": flags, "unchanged": all(torch.equal(a, b) for a, b in zip(before, after))}


def _worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        results: dict = {}
        for name in OPTIMIZERS:
            X, Y = _data(name)
            X, Y = X.chunk(WORLD)[rank], Y.chunk(WORLD)[rank]
            _scenario(results, ("ddp", name), lambda: _ddp_run(name, X, Y))
            _scenario(results, ("fsdp", name), lambda: _fsdp_run(name, X, Y))
            _scenario(results, ("naive", name), lambda: (rank, *_run_naive(_fsdp(_model(name)), X, Y, name)))
            _scenario(results, ("comms", name), lambda: _comm_counts(name, X, Y))
            _scenario(results, ("nan", name), lambda: _nan_on_one_rank(name, X, Y))
        _scenario(results, "spread", _spread_check)
        if rank == 0:
            torch.save(results, os.path.join(outdir, "results.pt"))
    finally:
        dist.destroy_process_group()


def _spread_check() -> dict[str, float]:
    """apply_whole on DTensors against msign of the whole matrix, and the shard-by-shard negative control."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (WORLD,))
    gen = torch.Generator().manual_seed(3)
    mats = [torch.randn(7, 5, generator=gen, dtype=DTYPE) for _ in range(3)]  # 7 rows: blocks 4 + 3
    fn = lambda G: msign(G, method="svd")  # noqa: E731
    shards = [distribute_tensor(G, mesh, [Shard(0)]) for G in mats]
    errs = {}
    errs["apply_whole"] = max(float((whole(apply_whole(fn, S)) - fn(G)).abs().max()) for S, G in zip(shards, mats))
    errs["placed"] = float(all(apply_whole(fn, S).placements == S.placements for S in shards))
    errs["shard_by_shard"] = max(
        float((shard_like(fn(G), S).to_local() - fn(S.to_local())).abs().max()) for S, G in zip(shards, mats))
    return errs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def distributed_results():
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as outdir:
        mp.start_processes(_worker, args=(_free_port(), outdir), nprocs=WORLD, start_method=method, join=True)
        return torch.load(os.path.join(outdir, "results.pt"))


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _get(results, key):
    value = results[key]
    if isinstance(value, str):
        pytest.fail(f"scenario {key} raised in a worker:\n{value}")
    return value


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_matches_single_process(distributed_results, mode, name):
    reference = _single_process(name)
    assert _max_diff(_get(distributed_results, (mode, name)), reference) <= ATOL


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_one_all_gather_per_sharded_matrix(distributed_results, name):
    """The step gathers each sharded matrix once (Muon: the update; OrthogonalMuon: W and the update) and
    computes locally, the finiteness flags included: they are read from the gathered whole matrices, the
    same on every rank, so no collective is needed to agree on them. Without the explicit gather DTensor
    runs msign as distributed ops, with collectives inside the products (20 for Muon on these two
    matrices, measured)."""
    counts = _get(distributed_results, ("comms", name))
    per_param = 1 if name == "muon" else 2
    assert counts == {"all_gather_into_tensor": 2 * per_param}, counts


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_nan_in_one_shard_stops_every_rank(distributed_results, name):
    out = _get(distributed_results, ("nan", name))
    assert out == {"raised": [True] * WORLD, "unchanged": True}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_shard_by_shard_is_wrong(distributed_results, name):
    """Negative control: orthogonalising row blocks on their own lands far from the single-process run."""
    reference = _single_process(name, momentum=0.0)
    rank, naive, local = _get(distributed_results, ("naive", name))
    # the blocks really were written into the sharded model: its gathered weights hold them
    assert all(torch.equal(W.chunk(WORLD)[rank], B) for W, B in zip(naive, local))
    # Far outside the tolerance the correct runs meet (a sharding error is O(lr), not O(eps)).
    assert _max_diff(naive, reference) > 1e-3


@pytest.mark.slow
def test_helpers_gather_compute_and_shard_back(distributed_results):
    errs = _get(distributed_results, "spread")
    # SVD msign of 7 x 5 float64 matrices: every route computes the same SVD of the same whole matrix
    # (same kernel, same input), so the results agree to a few ulps; 1e-12 leaves headroom.
    assert errs["apply_whole"] <= 1e-12
    assert errs["placed"] == 1.0
    # The polar factor of a row block is not the row block of the polar factor.
    assert errs["shard_by_shard"] > 1e-2


def test_helpers_are_identity_without_dtensors():
    G = torch.randn(4, 3, dtype=DTYPE)
    assert whole(G) is G
    assert shard_like(G, G) is G
    assert torch.equal(apply_whole(lambda A: 2 * A, G), 2 * G)
    with pytest.raises(ValueError, match="full"):
        shard_like(G, torch.zeros(3, 3))
    assert not is_dtensor(G)

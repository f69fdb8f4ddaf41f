"""The recorded gradient streams of ``svmuon.bench._workloads``: deterministic, and what the solver really saw."""

from __future__ import annotations

import math

import pytest
import torch

from svmuon.bench import _workloads
from svmuon.experiments.stiefel_tasks import load_task


@pytest.fixture(scope="module")
def text_data():
    return load_task("text", chars=20_000)  # a short corpus: the stream's code path, in a fraction of a second


def test_sample_steps_spread_over_the_stream():
    assert _workloads.sample_steps(270, 6) == [45, 90, 134, 179, 224, 269]  # the last step, none at step 0
    assert _workloads.sample_steps(2, 1) == [1]
    assert _workloads.sample_steps(4, 10) == [1, 2, 3]  # no repeats when there are more samples than steps
    assert _workloads.sample_steps(1, 3) == [] and _workloads.sample_steps(10, 0) == []


def test_the_stream_is_deterministic(text_data):
    a = _workloads.record("text", steps=3, samples=1, data=text_data)
    b = _workloads.record("text", steps=3, samples=1, data=text_data)
    assert len(a.grads) == 3 and [i.step for i in a.instances] == [2]
    for ga, gb in zip(a.grads, b.grads):
        assert all(torch.equal(x, y) for x, y in zip(ga, gb))  # bit for bit: same seed, same thread count
    ia, ib = a.instances[0], b.instances[0]
    for x, y in ((ia.W, ib.W), (ia.U, ib.U), (ia.Phi, ib.Phi), *zip(ia.previous, ib.previous)):
        assert torch.equal(x, y)
    assert a.losses == b.losses
    assert tuple(ia.W.shape) == (2, 256, 64)  # both hidden matrices, the wide one as its tall transpose
    other = _workloads.record("text", steps=3, samples=1, seed=1, data=text_data)
    assert not torch.equal(other.grads[0][0], a.grads[0][0])


def _tangent(W, Z):
    return Z - W @ ((W.mT @ Z + Z.mT @ W) / 2)


def test_the_instances_are_the_momentum_updates_the_solver_saw(text_data):
    """U of the recorded instances against the optimizer's documented rule, rebuilt from the recorded gradients
    (tangent momentum by projection transport, Nesterov: svmuon.optim.functional.manifold_muon_updates): their
    tangent parts, which alone decide the direction, agree up to the exact power-of-two rescaling the optimizer
    applies before the solver."""
    w = _workloads.record("text", steps=2, samples=1, data=text_data)
    (inst,) = w.instances
    canon = lambda pair: torch.stack([pair[0], pair[1].mT])  # noqa: E731  the manifold's tall orientation
    W0, W1 = canon(w.start), inst.W
    assert torch.equal(inst.previous[0], W0)
    g0, g1 = canon(w.grads[0]), canon(w.grads[1])
    B1 = _tangent(W0, 0.1 * g0)  # B0 = 0
    U0 = 0.1 * g0 + 0.9 * B1
    B2 = _tangent(W1, 0.9 * B1 + 0.1 * g1)
    U1 = 0.1 * g1 + 0.9 * B2
    for W, recorded, rebuilt in ((W0, inst.previous[1], U0), (W1, inst.U, U1)):
        for R, E in zip(_tangent(W, recorded), _tangent(W, rebuilt)):
            ratio = float(E.abs().max() / R.abs().max())
            scale = 2.0 ** round(math.log2(ratio))  # the rescaling is by a power of two: the ratio is one, to rounding
            assert abs(ratio / scale - 1) < 1e-5
            # float32: the same few operations in another order, ~10 ulps of the largest entry
            torch.testing.assert_close(R * scale, E, rtol=0, atol=1e-5 * float(E.abs().max()))
    assert float((inst.W.double().mT @ inst.W.double() - torch.eye(64, dtype=torch.float64)).abs().max()) < 1e-5


def test_the_training_context_is_trainings_forward_and_backward(text_data):
    """The work the step-ratio replays run before every timed step: at k = 0 it is training's first forward and
    backward pass, so its gradients are the stream's first ones, bit for bit; it cycles through the minibatches and
    leaves the recorded stream alone; a stream without data has none."""
    w = _workloads.record("text", steps=3, samples=0, data=text_data)
    context = _workloads.training_context(w)
    kept = [g.clone() for g in w.grads[0]]
    context(0)
    assert torch.equal(context.model.W1.grad, w.grads[0][0]) and torch.equal(context.model.W2.grad, w.grads[0][1])
    context(1)
    assert not torch.equal(context.model.W1.grad, w.grads[0][0])  # another minibatch
    context(3)  # the first minibatch again
    assert torch.equal(context.model.W1.grad, w.grads[0][0])
    assert all(torch.equal(a, b) for a, b in zip(kept, w.grads[0]))
    assert _workloads.training_context(_workloads.Workload("tiny", {}, {}, 0.05, 0, w.start, w.grads)) is None


def test_timed_inside_training_and_its_bad_arguments(text_data):
    from svmuon.bench import _stiefel_timing as timing

    w = _workloads.record("text", steps=3, samples=0, data=text_data)
    res = timing.in_training(w, ("muon", "stiefel"), warmup=1)
    assert res["steps"] == 3 and res["timed_steps"] == 2 and res["optimizers"]["muon"]["ratio_of_medians"] == 1.0
    assert res["optimizers"]["stiefel"]["thread_s"]["min"] > 0
    for bad in (dict(warmup=3), dict(warmup=-1), dict(names=("stiefel", "muon"))):
        with pytest.raises(ValueError, match="in_training needs"):
            timing.in_training(w, **{"names": ("muon", "stiefel"), "warmup": 1, **bad})
    assert timing.in_training(_workloads.Workload("tiny", {}, {}, 0.05, 0, w.start, w.grads)) is None


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(name="imagenet"), "workload"), (dict(name="text", steps=0), "steps"),
    (dict(name="text", steps=2.5), "steps"), (dict(name="text", samples=-1), "samples"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _workloads.record(**kwargs)

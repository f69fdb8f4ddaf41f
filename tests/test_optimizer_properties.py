"""The generic optimizer contract, written once and run on Muon, OrthogonalMuon and ManifoldMuon(Stiefel()).

As torch's ``OptimizerInfo`` (``torch/testing/_internal/common_optimizers.py``) describes each optimizer for
``test/test_optim.py``, :data:`INFOS` says for each optimizer how to build it and how to make parameters that
are valid for it (points of the manifold for the manifold optimizers, ``svmuon.<Manifold>().random``), which
hyperparameters it must refuse, and whether it has a manifold; the Stiefel manifold runs with both solvers
(the default completion, and Newton, whose warm start is state a step must keep or refuse whole). The checks use
the public contract only (the optimizers' docstrings): steps, errors, state dicts and copies; never the values
inside the state, which each optimizer's own module tests (tests/test_muon.py, tests/test_manifold_muon.py,
tests/test_stiefel.py). torch's own battery, run on svmuon.Muon, is tests/test_torch_contract.py.
"""

from __future__ import annotations

import copy
import io
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import torch

from svmuon import ManifoldMuon, Muon, Orthogonal, OrthogonalMuon, Stiefel
from svmuon.optim import NonFiniteUpdateError, OffManifoldError

F64 = torch.float64
# bad constructor arguments every optimizer refuses, with the name its message must give
COMMON_BAD = ({"lr": -1.0}, "lr"), ({"lr": float("nan")}, "lr"), ({"lr": "a"}, "lr"), ({"momentum": 1.0}, "momentum"), \
    ({"momentum": 2.0}, "momentum"), ({"nesterov": "no"}, "nesterov"), ({"nesterov": None}, "nesterov"), \
    ({"nesterov": 1}, "nesterov"), ({"nan_policy": "ignore"}, "nan_policy"), \
    ({"ns_steps": -1}, "ns_steps"), ({"ns_steps": 5.0}, "ns_steps"), ({"ns_coefficients": "quartic"}, "ns_coefficients")


@dataclass(frozen=True)
class OptimInfo:
    """How to test one optimizer: its class and arguments, valid parameter shapes and points, bad arguments."""

    name: str
    cls: type
    kwargs: dict[str, Any]
    shapes: tuple[tuple[int, int], ...]  # three matrix shapes (the first two equal: one batched call)
    point: Callable[[tuple[int, int], torch.Generator], torch.Tensor]  # a valid float64 parameter value
    bad: tuple[tuple[dict[str, Any], str], ...] = field(default=COMMON_BAD)
    manifold: Any = None  # the manifold the parameters must stay on (None: any matrix)

    def params(self, seed: int = 0) -> list[torch.nn.Parameter]:
        gen = torch.Generator().manual_seed(seed)
        return [torch.nn.Parameter(self.point(s, gen)) for s in self.shapes]

    def make(self, params: Any, **overrides: Any) -> torch.optim.Optimizer:
        return self.cls(params, **{**self.kwargs, **overrides})


INFOS = [
    OptimInfo("Muon", Muon, dict(lr=0.05), ((6, 4), (6, 4), (4, 6)),
              lambda s, gen: torch.randn(*s, generator=gen, dtype=F64),
              bad=COMMON_BAD + (({"ns_steps": 0}, "ns_steps"), ({"weight_decay": float("nan")}, "weight_decay"),
                                ({"weight_decay": -1.0}, "weight_decay"), ({"eps": float("inf")}, "eps"),
                                ({"adjust_lr_fn": "sqrt"}, "adjust_lr_fn"),
                                ({"compute_dtype": torch.int8}, "compute_dtype"))),
    OptimInfo("OrthogonalMuon", OrthogonalMuon, dict(lr=0.1), ((4, 4), (4, 4), (5, 5)),
              lambda s, gen: Orthogonal().random(*s, dtype=F64, generator=gen),
              bad=COMMON_BAD + (({"atol": 100.0}, "atol"), ({"polar_every": -1}, "polar_every"),
                                ({"eps": 2.0}, "eps")), manifold=Orthogonal()),
    OptimInfo("ManifoldMuon-Stiefel", ManifoldMuon, dict(lr=0.1, manifold=Stiefel()), ((7, 3), (7, 3), (3, 6)),
              lambda s, gen: Stiefel().random(*s, dtype=F64, generator=gen),
              bad=COMMON_BAD + (({"atol": 100.0}, "atol"), ({"polar_every": -1}, "polar_every")),
              manifold=Stiefel()),
    OptimInfo("ManifoldMuon-Stiefel-newton", ManifoldMuon, dict(lr=0.1, manifold=Stiefel(solver="newton")),
              ((7, 3), (7, 3), (3, 6)), lambda s, gen: Stiefel().random(*s, dtype=F64, generator=gen),
              bad=COMMON_BAD + (({"atol": 100.0}, "atol"), ({"polar_every": -1}, "polar_every")),
              manifold=Stiefel()),  # the solver with a state (its warm start) that a step must keep or refuse whole
]
MANIFOLD_INFOS = [info for info in INFOS if info.manifold is not None]


@pytest.fixture(params=INFOS, ids=lambda info: info.name)
def info(request) -> OptimInfo:
    return request.param


def grads(params, seed, bad=None):
    """Seeded gradients; ``bad=(i, value)`` puts ``value`` (NaN, Inf) into entry [0, 0] of parameter i's."""
    gen = torch.Generator().manual_seed(100 + seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
    if bad is not None:
        params[bad[0]].grad[0, 0] = bad[1]


def run(opt, params, steps, start=0):
    for t in range(start, start + steps):
        grads(params, t)
        opt.step()


def same(a, b) -> bool:
    """State dicts equal: tensors bitwise (NaN where NaN) and of one dtype and shape, the rest by ``==``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a.isnan(), b.isnan())
                and torch.equal(a.nan_to_num(), b.nan_to_num()))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def snapshot(opt, params):
    return [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict()), opt.skipped_steps


def assert_unchanged(opt, params, snap):
    before, sd, skipped = snap
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))
    assert same(opt.state_dict(), sd) and opt.skipped_steps == skipped


def twins(info):
    """Two identical parameter lists (the same values in distinct tensors)."""
    ps = info.params()
    return ps, [torch.nn.Parameter(p.detach().clone()) for p in ps]


# -- steps ---------------------------------------------------------------------------------------------------
def test_parameters_without_gradients_are_untouched(info):
    ps = info.params()
    before = [p.detach().clone() for p in ps]
    opt = info.make(ps)
    ps[0].grad = torch.randn(ps[0].shape, dtype=F64)
    opt.step()
    assert not torch.equal(ps[0].detach(), before[0])
    for p, b in zip(ps[1:], before[1:]):
        assert torch.equal(p.detach(), b) and p not in opt.state


def test_closure_runs_with_grad_enabled_and_its_loss_is_returned(info):
    ps = info.params()
    opt = info.make(ps)
    target = [torch.randn(p.shape, dtype=F64) for p in ps]

    def closure():
        opt.zero_grad()
        assert torch.is_grad_enabled()
        loss = sum(((p - t) ** 2).sum() for p, t in zip(ps, target))
        loss.backward()
        return loss

    first = opt.step(closure)
    assert isinstance(first, torch.Tensor) and all(p.grad is not None for p in ps)
    for _ in range(5):
        last = opt.step(closure)
    assert last.item() < first.item()  # small steps along a descent direction of a convex quadratic


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_gradient_is_refused_by_name_and_changes_nothing(info, bad):
    ps = info.params()
    opt = info.make(ps)
    run(opt, ps, 2)
    snap = snapshot(opt, ps)
    grads(ps, 2, bad=(2, bad))  # the last parameter: the earlier ones must not have been written first
    with pytest.raises(NonFiniteUpdateError, match=r"param_groups\[0\]\['params'\]\[2\].*NaN or Inf"):
        opt.step()
    assert_unchanged(opt, ps, snap)
    run(opt, ps, 1, start=3)  # still usable


def test_failed_first_step_leaves_no_state(info):
    ps = info.params()
    opt = info.make(ps)
    grads(ps, 0, bad=(1, float("inf")))
    with pytest.raises(NonFiniteUpdateError):
        opt.step()
    assert len(opt.state) == 0 and all(torch.equal(p.detach(), q) for p, q in zip(ps, info.params()))


def test_param_groups_are_atomic_together(info):
    ps = info.params()
    opt = info.make([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.01}])
    run(opt, ps, 1)
    snap = snapshot(opt, ps)
    grads(ps, 1, bad=(2, float("nan")))  # the second group's: the first group (planned earlier) must not move
    with pytest.raises(NonFiniteUpdateError, match=r"param_groups\[1\]\['params'\]\[0\]"):
        opt.step()
    assert_unchanged(opt, ps, snap)


def test_nan_policy_skip_counts_changes_nothing_and_is_kept(info):
    ps = info.params()
    opt = info.make(ps, nan_policy="skip")
    run(opt, ps, 1)
    snap = snapshot(opt, ps)
    grads(ps, 1, bad=(1, float("nan")))
    opt.step()
    assert opt.skipped_steps == 1
    assert_unchanged(opt, ps, (snap[0], {**snap[1], "skipped_steps": 1}, 1))
    clone = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    other = info.make(clone)  # nan_policy="raise": the loaded groups bring "skip" back
    other.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert other.skipped_steps == 1 and other.param_groups[0]["nan_policy"] == "skip"
    assert copy.deepcopy(other).skipped_steps == 1


def test_reading_the_state_before_the_first_step_changes_nothing(info):
    # opt.state is a defaultdict: logging code that reads opt.state[p] leaves {} behind
    (ps, qs) = twins(info)
    opt, twin = info.make(ps), info.make(qs)
    assert all(opt.state[p] == {} for p in ps)
    run(opt, ps, 2)
    run(twin, qs, 2)
    assert all(torch.equal(p, q) for p, q in zip(ps, qs))


def test_tensor_lr_and_a_scheduler_take_the_float_lr_steps(info):
    (ps, qs) = twins(info)
    opt, twin = info.make(ps, lr=torch.tensor(0.05, dtype=F64)), info.make(qs, lr=0.05)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (opt, twin)]
    for t in range(3):
        run(opt, ps, 1, start=t)
        run(twin, qs, 1, start=t)
        for s in scheds:
            s.step()
    assert float(opt.param_groups[0]["lr"]) == 0.05 / 8
    # a float64 tensor lr enters the same products as the float, possibly in another order (kept on the device):
    # rounding only, a few ulps of entries <= 1 per step (measured: bitwise for Muon and O(n), 2 ulps on Stiefel
    # after 3 steps); a step with the wrong lr (unscheduled: 0.05, not 0.025) moves W by ~1e-2
    for p, q in zip(ps, qs):
        torch.testing.assert_close(p, q, rtol=0, atol=16 * torch.finfo(F64).eps)


def test_parameter_replaced_with_another_shape_or_dtype_is_named(info):
    for new in (info.point(info.shapes[2], torch.Generator().manual_seed(1)), info.params()[0].detach().float()):
        ps = info.params()
        opt = info.make(ps)
        run(opt, ps, 1)
        state = copy.deepcopy(opt.state_dict())
        ps[0].data = new
        grads(ps, 1)
        with pytest.raises(ValueError, match=r"params'\]\[0\].*changed shape or dtype"):
            opt.step()
        assert torch.equal(ps[0].detach(), new) and same(opt.state_dict(), state)


def test_named_parameters_are_named_in_messages_and_state_dicts(info):
    ps = info.params()
    named = [(f"layer{i}.weight", p) for i, p in enumerate(ps)]
    opt = info.make(named)
    run(opt, ps, 1)
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["layer0.weight", "layer1.weight", "layer2.weight"]
    grads(ps, 1, bad=(1, float("nan")))
    with pytest.raises(NonFiniteUpdateError, match="parameter 'layer1.weight'"):
        opt.step()


# -- state dicts and copies -------------------------------------------------------------------------------------
def test_state_dict_round_trip_continues_bitwise(info):
    ps = info.params()
    opt = info.make(ps)
    run(opt, ps, 3)
    clone = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    other = info.make(clone, lr=0.123)  # the hyperparameters come back from the state dict
    other.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert other.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    run(opt, ps, 3, start=3)
    run(other, clone, 3, start=3)
    assert all(torch.equal(p, q) for p, q in zip(ps, clone))  # same state, same arithmetic: bitwise


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_continue_bitwise(info, how):
    ps = info.params()
    opt = info.make(ps, nan_policy="skip")
    run(opt, ps, 2)
    grads(ps, 2, bad=(0, float("nan")))
    opt.step()  # skipped: the counter must be copied too
    copied_ps, copied = (copy.deepcopy if how == "deepcopy" else lambda x: pickle.loads(pickle.dumps(x)))((ps, opt))
    assert copied.skipped_steps == 1 and all(q in copied.state for q in copied_ps)
    run(opt, ps, 2, start=3)
    run(copied, copied_ps, 2, start=3)
    assert all(torch.equal(p, q) for p, q in zip(ps, copied_ps))


def _corrupt(info, sd, what):
    if what == "buffer shape":  # every per-parameter tensor of the parameter's shape (a momentum buffer)
        p0 = info.params()[0]
        for key, value in sd["state"][0].items():
            if isinstance(value, torch.Tensor) and value.shape == p0.shape:
                sd["state"][0][key] = torch.zeros(2, 2, dtype=F64)
    elif what == "expanded buffer":  # stride 0: a step's in-place write into it would fail mid-commit
        p0 = info.params()[0]
        for key, value in sd["state"][0].items():
            if isinstance(value, torch.Tensor) and value.shape == p0.shape:
                sd["state"][0][key] = value[:1].expand(value.shape)
    elif what == "state not a dict":
        sd["state"][0] = None
    elif what in ("lr", "momentum"):
        sd["param_groups"][0][what] = -1.0 if what == "lr" else 2.0
    elif what == "skipped_steps":
        sd["skipped_steps"] = "x"
    elif what == "foreign":  # torch.optim.Adam's: its groups lack this optimizer's options
        ps = info.params()
        adam = torch.optim.Adam(ps)
        run(adam, ps, 1)
        sd = adam.state_dict()
    return sd


@pytest.mark.parametrize("what,words", [("buffer shape", r"params'\]\[0\].*shape"), ("lr", "lr must"),
                                        ("expanded buffer", "share memory"), ("state not a dict", "must be a dict"),
                                        ("momentum", "momentum"), ("skipped_steps", "skipped_steps"),
                                        ("foreign", "another optimizer")])
def test_malformed_state_dict_is_refused_by_name_and_changes_nothing(info, what, words):
    ps = info.params()
    opt = info.make(ps)
    run(opt, ps, 2)
    snap = snapshot(opt, ps)
    groups = copy.deepcopy([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
    with pytest.raises(ValueError, match=words):
        opt.load_state_dict(_corrupt(info, copy.deepcopy(opt.state_dict()), what))
    assert_unchanged(opt, ps, snap)
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups
    run(opt, ps, 1, start=2)  # still usable


def test_a_parameter_whose_entries_share_memory_is_refused_at_construction(info):
    """An expand()ed parameter: a step could not write it in place, and torch's error would come in the middle of
    the commit, after the other parameters were written (found: the weights moved, the momentum was lost)."""
    ps = info.params()
    shared = torch.nn.Parameter(ps[0].detach()[:1].expand(ps[0].shape))
    with pytest.raises(ValueError, match=r"share memory.*\.clone\(\)"):
        info.make([ps[1] if len(ps) > 1 else ps[0], shared])


# -- hyperparameters -----------------------------------------------------------------------------------------------
def test_bad_hyperparameters_are_refused_naming_the_argument(info):
    for kwargs, name in info.bad:
        with pytest.raises((TypeError, ValueError), match=name):
            info.make(info.params(), **kwargs)


def test_param_group_options_get_the_constructors_checks(info):
    for kwargs, name in info.bad:
        ps = info.params()
        with pytest.raises((TypeError, ValueError), match=name):
            info.make([{"params": ps[:1], **kwargs}])
        opt = info.make(ps[:1])
        with pytest.raises((TypeError, ValueError), match=name):
            opt.add_param_group({"params": ps[1:], **kwargs})
        assert len(opt.param_groups) == 1  # a refused group is not added


def test_numpy_scalar_hyperparameters_act_as_python_numbers(info):
    (ps, qs) = twins(info)
    opt = info.make(ps, lr=np.float64(0.05), momentum=np.float32(0.5), ns_steps=np.int64(7), nesterov=np.bool_(True))
    twin = info.make(qs, lr=0.05, momentum=float(np.float32(0.5)), ns_steps=7, nesterov=True)
    run(opt, ps, 2)
    run(twin, qs, 2)
    assert all(torch.equal(p, q) for p, q in zip(ps, qs))
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["param_groups"][0]["ns_steps"] == 7  # NumPy scalars would be refused


# -- manifold optimizers: the parameters are points -----------------------------------------------------------------
@pytest.mark.parametrize("info", MANIFOLD_INFOS, ids=lambda info: info.name)
def test_a_start_off_the_manifold_is_refused_naming_project(info):
    gen = torch.Generator().manual_seed(0)
    for bad in (2 * info.point(info.shapes[0], gen), torch.randn(*info.shapes[0], generator=gen, dtype=F64)):
        with pytest.raises(ValueError, match=r"params'\]\[0\].*not on the manifold.*project"):
            info.make([torch.nn.Parameter(bad)])
    nan = info.point(info.shapes[0], gen)
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        info.make([torch.nn.Parameter(nan)])
    with pytest.raises(TypeError, match="float32 or float64"):
        info.make([torch.nn.Parameter(info.point(info.shapes[0], gen).to(torch.bfloat16))])


@pytest.mark.parametrize("info", MANIFOLD_INFOS, ids=lambda info: info.name)
@pytest.mark.parametrize("change", ["scale", "overwrite"])
def test_a_point_moved_off_the_manifold_outside_the_optimizer_is_refused(info, change):
    ps = info.params()
    opt = info.make(ps)
    run(opt, ps, 2)
    with torch.no_grad():
        if change == "scale":
            ps[2].mul_(2)  # used to turn W into -W silently on O(n)
        else:
            ps[2].copy_(torch.randn(ps[2].shape, generator=torch.Generator().manual_seed(9), dtype=F64))
    snap = snapshot(opt, ps)
    grads(ps, 2)
    with pytest.raises(OffManifoldError, match=r"params'\]\[2\].*no longer on its manifold"):
        opt.step()
    assert_unchanged(opt, ps, snap)


@pytest.mark.parametrize("info", MANIFOLD_INFOS, ids=lambda info: info.name)
def test_parameters_stay_on_the_manifold(info):
    ps = info.params()
    opt = info.make(ps)
    run(opt, ps, 20)
    # float64 with a Björck correction every step: the defect is the rounding of the last correction, ~n u
    # (measured <= 4.4e-16 over 8 seeds); an uncorrected or non-retracted step would leave ~η² = 1e-2
    assert all(float(info.manifold.defect(p.detach()).max()) <= 1e-13 for p in ps)

"""Options changed in ``param_groups`` after construction, and parameters replaced after backward: the step
refuses them by name before anything is written (the standard's atomic step), as the constructor would."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from svmuon import ManifoldMuon, Muon, Stiefel


def _muon():
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5, 2, generator=g))
    opt = Muon([p], lr=0.1)
    p.grad = torch.randn(5, 2, generator=g)
    opt.step()
    p.grad = torch.randn(5, 2, generator=g)
    return p, opt


def _manifold():
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(Stiefel().random(8, 3, generator=g, dtype=torch.float32))
    opt = ManifoldMuon([p], lr=0.05, manifold=Stiefel())
    p.grad = torch.randn(8, 3, generator=g)
    opt.step()
    p.grad = torch.randn(8, 3, generator=g)
    return p, opt


def _refused(p, opt, error, match):
    before = p.detach().clone()
    state = copy.deepcopy(opt.state[p])
    with pytest.raises(error, match=match):
        opt.step()
    assert torch.equal(p.detach(), before)
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(opt.state[p][k], v), k


@pytest.mark.parametrize("make", [_muon, _manifold])
@pytest.mark.parametrize("option,value,error", [
    ("momentum", 1.5, ValueError), ("nesterov", "no", TypeError), ("ns_steps", 0, ValueError),
    ("nan_policy", "bogus", ValueError)])
def test_an_option_set_after_construction_is_checked_again(make, option, value, error):
    p, opt = make()
    opt.param_groups[0][option] = value
    _refused(p, opt, error, rf"param_groups\[0\] \(set after construction\): {option}")


@pytest.mark.parametrize("option,value", [("atol", 10.0), ("atol", -1.0), ("eps", 5.0), ("polar_every", -1)])
def test_manifold_options_set_after_construction(option, value):
    p, opt = _manifold()
    opt.param_groups[0][option] = value
    _refused(p, opt, (ValueError, TypeError), option)


def test_muon_weight_decay_set_after_construction():
    p, opt = _muon()
    opt.param_groups[0]["weight_decay"] = -5.0
    _refused(p, opt, ValueError, "weight_decay")


@pytest.mark.parametrize("make", [_muon, _manifold])
def test_a_valid_change_is_taken_and_a_restored_option_steps_again(make):
    p, opt = make()
    opt.param_groups[0]["momentum"] = 1.5
    with pytest.raises(ValueError):
        opt.step()
    opt.param_groups[0]["momentum"] = 0.5  # a valid value after a refused one
    before = p.detach().clone()
    opt.step()
    assert not torch.equal(p.detach(), before)
    for copied in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):  # copies check their own options
        q = copied.param_groups[0]["params"][0]
        q.grad = torch.ones_like(q)  # a copy's parameters carry no gradient
        copied.param_groups[0]["momentum"] = 2.0
        with pytest.raises(ValueError, match="momentum"):
            copied.step()


@pytest.mark.parametrize("make", [_muon, _manifold])
@pytest.mark.parametrize("lr,error,match", [(torch.tensor([0.1, 0.2]), ValueError, "one-element"),
                                            (torch.tensor(1), TypeError, "floating-point")])
def test_a_bad_tensor_lr_set_after_construction(make, lr, error, match):
    p, opt = make()
    opt.param_groups[0]["lr"] = lr
    _refused(p, opt, error, match)


@pytest.mark.parametrize("make", [_muon, _manifold])
def test_a_parameter_replaced_after_backward_is_named(make):
    p, opt = make()
    p.data = torch.randn(*reversed(p.shape))  # the old gradient keeps the old shape
    with pytest.raises(ValueError, match=r"params'\]\[0\].*gradient of shape"):
        opt.step()


def test_numpy_integer_dim_and_an_oversized_simplex():  # two boundary checks found with the options above
    import numpy as np

    from svmuon import renyi_entropy, sample_simplex, shannon_entropy

    p = torch.tensor([[0.25, 0.75], [0.75, 0.25]], dtype=torch.float64)  # rows and columns sum to 1
    assert torch.equal(shannon_entropy(p, dim=np.int64(1)), shannon_entropy(p, dim=1))
    assert torch.equal(renyi_entropy(p, 2.0, dim=np.int64(0)), renyi_entropy(p, 2.0, dim=0))
    with pytest.raises(ValueError, match="2\\^63"):
        sample_simplex(10**30, 0)


def _on_stiefel(m=8, n=3, seed=2):
    return torch.nn.Parameter(Stiefel().random(m, n, generator=torch.Generator().manual_seed(seed),
                                               dtype=torch.float32))


def test_an_atol_below_the_rounding_floor_is_refused_wherever_it_is_set():
    # floor 16 √m eps, here computed from float32's eps by hand: m = 8 -> 16 · 2.828 · 1.19e-7 = 5.4e-6
    floor = 16 * 8**0.5 * 2.0**-23
    a, b = _on_stiefel(seed=2), _on_stiefel(seed=3)
    with pytest.raises(ValueError, match=r"param_groups\[1\]: atol = 1e-06 is below"):
        ManifoldMuon([{"params": [a]}, {"params": [b], "atol": 1e-6}], lr=0.05, manifold=Stiefel())
    opt = ManifoldMuon([{"params": [a]}, {"params": [b], "atol": 2 * floor}], lr=0.05, manifold=Stiefel())
    sd = opt.state_dict()
    for atol, ok in ((0.5 * floor, False), (1e-20, False), (1.01 * floor, True)):
        sd["param_groups"][1]["atol"] = atol
        if ok:
            opt.load_state_dict(sd)
            assert opt.param_groups[1]["atol"] == atol
            continue
        with pytest.raises(ValueError, match=rf"load_state_dict: param_groups\[1\]: atol = {atol!r} is below"):
            opt.load_state_dict(sd)
        assert opt.param_groups[1]["atol"] == 2 * floor  # the refused load changed nothing
    # set by hand after construction: the step's re-check refuses it before anything is written
    a.grad, b.grad = torch.randn_like(a), torch.randn_like(b)
    opt.param_groups[1]["atol"] = 0.5 * floor
    _refused(b, opt, ValueError, r"param_groups\[1\] \(set after construction\): atol = .* is below")


@pytest.mark.parametrize("make", [_muon, _manifold])
def test_tensor_coefficients_set_after_construction_are_read_once_and_stored_as_lists(make):
    from svmuon.orthogonal.coefficients import get_schedule

    p, opt = make()
    triples = [list(t) for t in get_schedule("polar_express")]
    opt.param_groups[0]["ns_coefficients"] = torch.tensor([[1.0, 2.0]] * 3)  # (k, 2): not triples
    _refused(p, opt, ValueError, "ns_coefficients|triple")
    assert isinstance(opt.param_groups[0]["ns_coefficients"], torch.Tensor)  # a refused step changed nothing
    twin_p, twin = make()  # the same step with the schedule by name: the tensor form must give the same update
    twin.param_groups[0].update(ns_coefficients="polar_express", ns_steps=len(triples))
    opt.param_groups[0].update(ns_coefficients=torch.tensor(triples, dtype=torch.float64), ns_steps=len(triples))
    opt.step()
    twin.step()
    stored = opt.param_groups[0]["ns_coefficients"]
    assert isinstance(stored, list) and stored == triples  # float64 holds each triple exactly
    assert torch.equal(p.detach(), twin_p.detach())

"""svmuon.optim.Muon against torch.optim.Muon (bf16) and an fp32 reference of the same recursion."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import svmuon.optim.functional as functional
import importlib
from svmuon.optim import Muon, NonFiniteUpdateError

msign_module = importlib.import_module("svmuon.orthogonal.msign")  # the module (the name msign is the function)
KJ = (3.4445, -4.7750, 2.0315)
SHAPES = [(8, 4), (4, 8), (8, 4), (6, 6)]


def reference_step(W, bufs, grads, *, lr, wd, mu, nesterov, steps, rule):
    """fp32 Muon step written from torch.optim.Muon's formulas, one matrix at a time (no svmuon code)."""
    out = []
    for w, b, g in zip(W, bufs, grads):
        b.mul_(mu).add_(g, alpha=1 - mu)
        u = (1 - mu) * g + mu * b if nesterov else b.clone()
        x = u.T if u.shape[0] > u.shape[1] else u
        x = x / x.norm()
        for _ in range(steps):
            A = x @ x.T
            x = KJ[0] * x + (KJ[1] * A + KJ[2] * A @ A) @ x
        o = x.T if u.shape[0] > u.shape[1] else x
        m, n = w.shape
        scale = math.sqrt(max(1, m / n)) if rule is None else 0.2 * math.sqrt(max(m, n))
        out.append(w * (1 - lr * wd) - lr * scale * o)
    return out


def make_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_() for s in SHAPES]


def grads_for(step, shapes=SHAPES):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in shapes]


def run(opt_cls, n_steps, **kw):
    params = make_params()
    opt = opt_cls(params, **kw)
    for t in range(n_steps):
        for p, g in zip(params, grads_for(t)):
            p.grad = g.clone()
        opt.step()
    return params


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("rule", [None, "match_rms_adamw"])
def test_fp32_matches_reference_recursion(nesterov, rule):
    kw = dict(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr_fn=rule)
    ours = run(Muon, 3, **kw)
    W = [p.detach().clone() for p in make_params()]
    bufs = [torch.zeros_like(w) for w in W]
    for t in range(3):
        W = reference_step(W, bufs, grads_for(t), lr=0.02, wd=0.1, mu=0.9, nesterov=nesterov, steps=5, rule=rule)
    for p, w in zip(ours, W):
        # both fp32; they differ only in summation order and in svmuon's power-of-two prescaling:
        # a few ulps of entries of size ~1, amplified by the quintic's slope over 5 steps: 1e-5.
        torch.testing.assert_close(p.detach(), w, rtol=0, atol=1e-5)


@pytest.mark.parametrize("rule", [None, "match_rms_adamw"])
def test_bf16_matches_torch_muon(rule):
    kw = dict(lr=0.02, weight_decay=0.1, momentum=0.95, adjust_lr_fn=rule)
    theirs = run(torch.optim.Muon, 2, **kw)
    ours = run(Muon, 2, compute_dtype=torch.bfloat16, **kw)
    start = make_params()
    for a, b, w in zip(theirs, ours, start):
        step = (a - w).detach().abs().max()
        # both iterate in bf16 (8-bit mantissa, ulp 2^-8 at 1); torch normalises in bf16, svmuon in fp32,
        # and the 5 quintic steps amplify rounding (slope up to 3.4): measured ~1-3 % of the step,
        # so 6 % of the largest step entry.
        assert float((a - b).detach().abs().max()) <= 0.06 * float(step)


def test_non_2d_parameters_refused():
    with pytest.raises(ValueError, match="AdamW"):
        Muon([torch.zeros(3, requires_grad=True)])
    opt = Muon([torch.zeros(3, 2, requires_grad=True)])
    with pytest.raises(ValueError, match="AdamW"):
        opt.add_param_group({"params": [torch.zeros(2, 2, 2, requires_grad=True)]})


def test_same_shape_matrices_share_one_msign_call(monkeypatch):
    calls = []
    real = msign_module._msign_newton_schulz

    def counting(G, *args):
        calls.append(tuple(G.shape))
        return real(G, *args)

    monkeypatch.setattr(msign_module, "_msign_newton_schulz", counting)
    batched = run(Muon, 1, lr=0.05)
    assert sorted(calls) == sorted([(2, 8, 4), (1, 4, 8), (1, 6, 6)])
    monkeypatch.setattr(msign_module, "_msign_newton_schulz", real)
    for i, shape in enumerate(SHAPES):  # batched == each matrix in its own optimizer
        p = make_params()[i]
        opt = Muon([p], lr=0.05)
        p.grad = grads_for(0)[i]
        opt.step()
        torch.testing.assert_close(p.detach(), batched[i].detach(), rtol=0, atol=1e-6)  # fp32, batched kernels


def test_scale_invariant_step_and_zero_gradient():
    g = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    outs = []
    for c in (1.0, 1e-20):  # eps=0: msign is scale invariant, so a tiny gradient takes the same step
        p = torch.ones(6, 4, requires_grad=True)
        opt = Muon([p], lr=0.1, eps=0.0, weight_decay=0.0)
        p.grad = g * c
        opt.step()
        outs.append(p.detach().clone())
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-6)
    p = torch.ones(6, 4, requires_grad=True)
    opt = Muon([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.zeros(6, 4)
    opt.step()  # msign(0) = 0: only the decoupled weight decay acts
    assert torch.equal(p.detach(), torch.full((6, 4), 1 - 0.1 * 0.5))


def test_gradient_near_the_largest_float_takes_the_full_step():
    # Review fix: a finite gradient with max|g| >= 2^127 (momentum 0, so U = g) made msign's power-of-two scale
    # overflow to inf and the step silently zero. Expected: the step of the same gradient at scale 1 (msign is scale
    # invariant); c is not a power of two, so c g is rounded once per entry: 1e-6 as in the test above.
    g = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    outs = []
    for c in (1.0, 3.0e38 / float(g.abs().max())):
        p = torch.ones(6, 4, requires_grad=True)
        opt = Muon([p], lr=0.1, eps=0.0, weight_decay=0.0, momentum=0.0)
        p.grad = g * c
        opt.step()
        outs.append(p.detach().clone())
    assert float((outs[0] - 1).abs().max()) > 0.01  # a real step
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-6)


def test_named_schedule_and_adjust_lr():
    assert functional.adjust_lr(1.0, None, (16, 4)) == pytest.approx(2.0)
    assert functional.adjust_lr(1.0, "original", (4, 16)) == pytest.approx(1.0)
    assert functional.adjust_lr(1.0, "match_rms_adamw", (4, 16)) == pytest.approx(0.8)
    p = torch.zeros(5, 3, requires_grad=True)
    opt = Muon([p], lr=1.0, ns_coefficients="polar_express", ns_steps=10, weight_decay=0.0, momentum=0.0,
               nesterov=False)
    p.grad = torch.randn(5, 3, generator=torch.Generator().manual_seed(4))
    opt.step()
    sv = torch.linalg.svdvals(p.detach())  # converged msign, times sqrt(5/3): every singular value equal
    torch.testing.assert_close(sv, torch.full((3,), math.sqrt(5 / 3)), rtol=1e-5, atol=0)


@pytest.mark.parametrize("bad", [torch.zeros(3, 3, dtype=torch.int64), torch.zeros(3, 3, dtype=torch.complex64),
                                 torch.zeros(0, 3)])
def test_bad_parameters_are_refused_at_construction(bad):
    with pytest.raises((TypeError, ValueError), match=r"param_groups\[0\]\['params'\]\[0\]"):
        Muon([bad], lr=0.01)



def _snapshot(opt, params):
    return [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict())


def _assert_unchanged(opt, params, snap):
    before, sd = snap
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)
    after = opt.state_dict()
    assert after["state"].keys() == sd["state"].keys()
    for k, v in sd["state"].items():  # equal_nan: a NaN buffer loaded from a checkpoint stays as it was
        assert torch.equal(after["state"][k]["momentum_buffer"].isnan(), v["momentum_buffer"].isnan())
        torch.testing.assert_close(after["state"][k]["momentum_buffer"], v["momentum_buffer"], rtol=0, atol=0,
                                   equal_nan=True)
    assert after["skipped_steps"] == sd["skipped_steps"]


def test_overflowing_momentum_from_finite_gradients_is_refused():
    # ±3.3e38 are finite float32 gradients; B.lerp(g, 0.05) forms g - B = -3.465e38 > float32 max (3.40e38):
    # the momentum overflows to -inf at the second step. Today's torch.optim.Muon writes NaN into W then.
    params = make_params()
    opt = Muon(params, lr=0.01)
    for p in params:
        p.grad = torch.full(p.shape, 3.3e38)
    opt.step()  # finite: B = 1.65e37, and msign only sees the direction
    snap = _snapshot(opt, params)
    for p in params:
        p.grad = torch.full(p.shape, -3.3e38)
    with pytest.raises(NonFiniteUpdateError, match=r"params'\]\[0\]"):
        opt.step()
    _assert_unchanged(opt, params, snap)


def test_nan_buffer_from_a_checkpoint_is_refused_and_named():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.Linear(3, 2, bias=False))
    opt = Muon(model.named_parameters(), lr=0.01)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    model(x).sum().backward()
    opt.step()
    sd = opt.state_dict()
    sd["state"][1]["momentum_buffer"][0, 0] = float("nan")  # a corrupted checkpoint
    opt.load_state_dict(sd)
    snap = _snapshot(opt, list(model.parameters()))
    opt.zero_grad()
    model(x).sum().backward()
    with pytest.raises(NonFiniteUpdateError, match=r"parameter '1.weight'.*no parameter or optimizer state"):
        opt.step()
    _assert_unchanged(opt, list(model.parameters()), snap)


def test_torch_muon_state_dict_resets_the_skip_counter():
    # the rest of nan_policy="skip" is in tests/test_optimizer_properties.py
    params = make_params()
    opt = Muon(params, lr=0.01, nan_policy="skip")
    for p, g in zip(params, grads_for(0)):
        p.grad = g
    params[2].grad[1, 1] = float("nan")
    opt.step()
    assert opt.skipped_steps == 1
    theirs = torch.optim.Muon([p.detach().clone().requires_grad_() for p in params], lr=0.01)
    opt.load_state_dict(theirs.state_dict())  # a torch.optim.Muon state dict has no counter: 0
    assert opt.skipped_steps == 0


SYNC_METHODS = ("__bool__", "item", "tolist", "__float__", "__int__", "__index__", "numpy")


def count_host_syncs(monkeypatch):
    """Record every call of a torch.Tensor method that reads a value back to the host (a synchronisation
    on an accelerator): bool(), item(), tolist(), float(), int(), index, numpy()."""
    calls = []
    for name in SYNC_METHODS:
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return calls


@pytest.mark.parametrize("tensor_lr", [False, True])
def test_one_host_sync_per_step(monkeypatch, tensor_lr):
    params = make_params()
    lr = torch.tensor(0.02) if tensor_lr else 0.02
    opt = Muon([{"params": params[:2]}, {"params": params[2:], "weight_decay": 0.0}], lr=lr)
    for p, g in zip(params, grads_for(0)):
        p.grad = g
    opt.step()
    calls = count_host_syncs(monkeypatch)
    for t in range(1, 4):
        for p, g in zip(params, grads_for(t)):
            p.grad = g
        opt.step()
    assert calls == ["__bool__"] * 3  # the single fused finiteness check of each step


@pytest.mark.cuda
def test_one_host_sync_per_step_cuda():
    import warnings

    params = [p.detach().cuda().requires_grad_() for p in make_params()]
    opt = Muon(params, lr=0.02)
    for p, g in zip(params, grads_for(0)):
        p.grad = g.cuda()
    opt.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len([w for w in caught if "synchroniz" in str(w.message)]) <= 1


def test_functional_muon_is_the_optimizer_step():
    # the torch-style functional API on plain lists gives exactly the shell's step (same kernels, same order)
    from svmuon.orthogonal import Orthogonalizer

    params = make_params()
    opt = Muon(params, lr=0.03, weight_decay=0.1, momentum=0.9)
    mirror = [p.detach().clone() for p in params]
    bufs = [torch.zeros_like(p) for p in mirror]
    orth = Orthogonalizer("newton_schulz", ns_coefficients=KJ, ns_steps=5)
    for t in range(3):
        grads = grads_for(t)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        functional.muon(mirror, grads, bufs, lr=0.03, weight_decay=0.1, momentum=0.9, nesterov=True,
                        orthogonalize=orth, eps=1e-7, adjust_lr_fn=None)
    for p, q in zip(params, mirror):
        assert torch.equal(p.detach(), q)
    bad = grads_for(3)
    bad[0][0, 0] = float("nan")
    before = [q.clone() for q in mirror]
    with pytest.raises(NonFiniteUpdateError, match="parameter 0"):
        functional.muon(mirror, bad, bufs, lr=0.03, weight_decay=0.1, momentum=0.9, nesterov=True,
                        orthogonalize=orth, eps=1e-7, adjust_lr_fn=None)
    assert all(torch.equal(a, b) for a, b in zip(mirror, before))


# Review fixes: state dicts that are foreign or corrupted.
def test_torch_muon_state_dict_loads_and_continues():
    # torch.optim.Muon's param groups lack svmuon's compute_dtype and nan_policy: loading one used to succeed and the
    # next step raised KeyError 'compute_dtype'. The missing options now keep the values this optimizer was built
    # with (its defaults, as torch's add_param_group fills a group); the rest and the buffers are torch's.
    params = make_params()
    theirs = torch.optim.Muon(params, lr=0.02)
    for p, g in zip(params, grads_for(0)):
        p.grad = g
    theirs.step()
    opt = Muon(params, lr=0.5, compute_dtype=torch.float64, nan_policy="skip")
    opt.load_state_dict(copy.deepcopy(theirs.state_dict()))
    group = opt.param_groups[0]
    assert group["lr"] == 0.02 and group["compute_dtype"] == torch.float64 and group["nan_policy"] == "skip"
    for p in params:
        assert torch.equal(opt.state[p]["momentum_buffer"], theirs.state[p]["momentum_buffer"])
    for p, g in zip(params, grads_for(1)):
        p.grad = g
    opt.step()


def _corrupt(sd, what):
    if what == "buffer shape":
        sd["state"][0]["momentum_buffer"] = torch.zeros(3, 3)
    elif what == "ns_steps":
        sd["param_groups"][0]["ns_steps"] = 0
    elif what == "foreign":
        del sd["param_groups"][0]["weight_decay"]
    return sd


@pytest.mark.parametrize("what,words", [("buffer shape", r"params'\]\[0\].*momentum_buffer.*\(8, 4\)"),
                                        ("ns_steps", "ns_steps"), ("foreign", "another optimizer")])
def test_corrupted_state_dict_is_refused_and_changes_nothing(what, words):
    # Before: each of these loaded silently; the step then raised an unrelated error (RuntimeError, KeyError).
    # The cases every optimizer shares (lr, momentum, skipped_steps, ...) are in tests/test_optimizer_properties.py.
    params = make_params()
    opt = Muon(params, lr=0.01)
    for p, g in zip(params, grads_for(0)):
        p.grad = g
    opt.step()
    snap = _snapshot(opt, params)
    groups = copy.deepcopy([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
    with pytest.raises(ValueError, match=words):
        opt.load_state_dict(_corrupt(copy.deepcopy(opt.state_dict()), what))
    _assert_unchanged(opt, params, snap)
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups
    opt.step()  # still usable


def test_functional_refuses_lists_of_unequal_length():
    # Review fix: zip() truncated silently: two parameters, one gradient updated only the first parameter.
    from svmuon.orthogonal import Orthogonal, Orthogonalizer

    orth = Orthogonalizer("newton_schulz", ns_coefficients=KJ, ns_steps=5)
    params = [torch.randn(4, 4), torch.randn(4, 4)]
    before = [p.clone() for p in params]
    with pytest.raises(ValueError, match="equal lengths"):
        functional.muon(params, [torch.randn(4, 4)], [torch.zeros(4, 4)] * 2, lr=0.1, weight_decay=0.0, momentum=0.9,
                        nesterov=True, orthogonalize=orth, eps=1e-7, adjust_lr_fn=None)
    assert all(torch.equal(p, b) for p, b in zip(params, before))
    Q = Orthogonal().random(4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="equal lengths"):
        functional.manifold_muon([Q.clone()], [torch.randn(4, 4, dtype=torch.float64)], [torch.zeros(4, 4)], [{}, {}],
                                 lr=0.1, manifold=Orthogonal(), orthogonalize=orth, momentum=0.9, nesterov=True,
                                 eps=None, correct=True, atol=None)


def test_functional_orthogonalize_returning_its_input_does_not_corrupt_the_buffer():
    # Review fix: the update is built in place in the orthogonaliser's output; an orthogonaliser that returns its
    # input (an identity, e.g. for a test) made that the momentum buffer, which then held the new parameters.
    # Expected: B' = μ B + (1 - μ) g = 0.5 g and W' = W - lr · B' (identity "msign", eps = 0, no decay).
    g = torch.randn(4, 4, generator=torch.Generator().manual_seed(7))
    W = torch.randn(4, 4, generator=torch.Generator().manual_seed(8))
    params, bufs = [W.clone()], [torch.zeros(4, 4)]
    functional.muon(params, [g], bufs, lr=0.1, weight_decay=0.0, momentum=0.5, nesterov=False,
                    orthogonalize=lambda X: X, eps=0.0, adjust_lr_fn=None)
    torch.testing.assert_close(bufs[0], 0.5 * g, rtol=0, atol=0)
    torch.testing.assert_close(params[0], W - 0.1 * 0.5 * g, rtol=1e-6, atol=1e-7)  # fp32 rounding of one update


def _one_step(ns_coefficients, seed=3):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(6, 4, generator=g))
    opt = Muon([p], lr=0.1, ns_coefficients=ns_coefficients)
    p.grad = torch.randn(6, 4, generator=g)
    opt.step()
    return p.detach(), opt


@pytest.mark.parametrize("form", ["list", "tuple", "ndarray", "tensor", "bare ndarray", "bare tensor"])
def test_explicit_triples_in_any_container_take_msigns_route(form, tmp_path):
    import numpy as np

    rows = [KJ] * 5
    forms = {"list": [list(t) for t in rows], "tuple": tuple(rows), "ndarray": np.array(rows),
             "tensor": torch.tensor(rows, dtype=torch.float64), "bare ndarray": np.array(KJ),
             "bare tensor": torch.tensor(KJ, dtype=torch.float64)}  # float64: a float32 one rounds the triple
    W, opt = _one_step(forms[form])
    assert torch.equal(W, _one_step(KJ)[0])  # the default, torch.optim.Muon's bare triple
    stored = opt.param_groups[0]["ns_coefficients"]
    assert isinstance(stored, (list, tuple)) and np.array_equal(stored, forms[form])  # no tensor read per step
    torch.save(opt.state_dict(), tmp_path / "sd.pt")
    torch.load(tmp_path / "sd.pt", weights_only=True)  # NumPy or tensors in the options would refuse or differ


@pytest.mark.parametrize("bad", ["k x 2 ndarray", "k x 2 tensor", "nan ndarray", "inf tensor", "bool tensor",
                                 "complex tensor", "meta tensor"])
def test_explicit_triples_of_a_bad_shape_or_value_are_refused_as_by_msign(bad):
    import numpy as np

    forms = {"k x 2 ndarray": np.ones((4, 2)), "k x 2 tensor": torch.ones(4, 2),
             "nan ndarray": np.array([[1.5, np.nan, 0.0]]), "inf tensor": torch.tensor([[1.5, -0.5, float("inf")]]),
             "bool tensor": torch.ones(2, 3, dtype=torch.bool),
             "complex tensor": torch.ones(2, 3, dtype=torch.complex64), "meta tensor": torch.empty(2, 3, device="meta")}
    p = torch.nn.Parameter(torch.randn(6, 4))
    with pytest.raises((ValueError, TypeError), match="ns_coefficients"):
        Muon([p], ns_coefficients=forms[bad])
    opt = Muon([p])
    with pytest.raises((ValueError, TypeError), match="ns_coefficients"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(3, 3))], "ns_coefficients": forms[bad]})
    assert len(opt.param_groups) == 1  # the refused group was not added


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.int32, torch.complex64, "bfloat16"], ids=str)
def test_a_compute_dtype_outside_msigns_four_is_refused(dtype):
    from svmuon import ManifoldMuon, Orthogonal

    with pytest.raises(TypeError, match="compute_dtype must be one of torch.float16"):
        Muon([torch.nn.Parameter(torch.randn(6, 4))], compute_dtype=dtype)
    with pytest.raises(TypeError, match="compute_dtype must be one of torch.float16"):
        ManifoldMuon([torch.nn.Parameter(torch.eye(3))], manifold=Orthogonal(), compute_dtype=dtype)


def test_a_meta_parameter_is_refused_by_name():
    from svmuon import ManifoldMuon

    for opt, shape in ((Muon, (4, 3)), (ManifoldMuon, (3, 3))):
        with pytest.raises(ValueError, match=r"params'\]\[0\], shape \(\d, 3\) is a meta tensor \(no values\)"):
            opt([torch.nn.Parameter(torch.empty(*shape, device="meta"))])

"""svmuon.Muon against torch's generic optimizer battery, wherever torch.optim.Muon passes it.

The inputs are torch's own (``torch/testing/_internal/common_optimizers.py``: the ``OptimizerInput`` kwargs,
error inputs and LR-scheduler constructors it lists for ``torch.optim.Muon``); the checks are those of
pytorch's ``test/test_optim.py`` (``TestOptimRenewed``), written here again for matrices: both Muons refuse
biases and other non-2-D parameters, so every parameter below is a matrix. Each check runs on
``torch.optim.Muon`` first; where torch's Muon fails a check, svmuon's is not held to it (the test
skips, saying so). Numerics against torch's are in ``tests/test_muon.py``.

Where svmuon is deliberately stricter, the error checks say so (``STRICTER``): complex parameters are
refused at construction (``TypeError``) instead of at the first step (``RuntimeError``).
"""

from __future__ import annotations

import copy
import functools
import tempfile

import pytest
import torch
from torch.nn import Parameter
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

import svmuon

pytestmark = pytest.mark.slow


@functools.cache
def _common():
    """torch's test helpers, imported at first use: the import alone takes ~5 s of CPU, which every pytest worker
    would otherwise spend at collection, also in the fast run that deselects this module."""
    return pytest.importorskip("torch.testing._internal.common_optimizers", reason="needs expecttest (requirements.txt)")


class _Lazy:
    """An attribute proxy for an object built at first use."""

    def __init__(self, build):
        self._build = build

    def __getattr__(self, name):
        return getattr(self._build(), name)


common = _Lazy(_common)

_info = functools.cache(lambda: next(o for o in common.optim_db if o.optim_cls is torch.optim.Muon))
INFO = _Lazy(_info)
CLASSES = {"torch": torch.optim.Muon, "svmuon": svmuon.Muon}
DTYPE = torch.float32
# svmuon refuses these earlier or with a more precise type than torch.optim.Muon (desc -> (type, when))
STRICTER = {"does not support complex parameters": (TypeError, "CONSTRUCTION_ERROR")}


def inputs():
    """Fresh OptimizerInputs (a Tensor lr is mutated by schedulers, so every use gets new ones)."""
    return common._get_optim_inputs_including_global_cliquey_kwargs("cpu", DTYPE, _info(), skip=("differentiable",))


_TORCH_PASSES: dict[str, bool | str] = {}


@pytest.fixture(params=list(CLASSES))
def impl(request):
    return request.param


def holds(impl, key, check):
    """Run ``check(cls)`` for ``impl``; svmuon's run skips where torch.optim.Muon fails the same check."""
    if key not in _TORCH_PASSES:
        try:
            check(torch.optim.Muon)
            _TORCH_PASSES[key] = True
        except AssertionError as err:  # torch's own Muon fails this check: it does not bind svmuon
            _TORCH_PASSES[key] = f"torch.optim.Muon fails this check too: {err}"
    if _TORCH_PASSES[key] is not True:
        (pytest.xfail if impl == "torch" else pytest.skip)(_TORCH_PASSES[key])
    if impl == "svmuon":
        check(svmuon.Muon)


def matrices(*shapes, contiguous=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    if contiguous:
        return [Parameter(torch.randn(s, generator=g, dtype=DTYPE)) for s in shapes]
    return [Parameter(torch.randn(*s, 2, generator=g, dtype=DTYPE)[..., 0]) for s in shapes]


def quadratic(W, V, x):
    """The battery's loss with a second matrix in place of the bias: ‖W x + V 1‖²."""
    return ((W @ x) + V.sum(dim=1)).pow(2).sum()


def fwd_bwd(opt, W, V, x):
    opt.zero_grad()
    loss = quadratic(W, V, x)
    loss.backward()
    return loss


# -- construction errors -----------------------------------------------------------------------------------

def test_error_inputs():
    for error_input in INFO.optim_error_inputs_func(device="cpu", dtype=DTYPE):
        oi = error_input.optimizer_error_input
        for impl, cls in CLASSES.items():
            err_type, when, regex = error_input.error_type, error_input.error_on, error_input.error_regex
            if impl == "svmuon" and oi.desc in STRICTER:
                (err_type, when), regex = STRICTER[oi.desc], "complex"
                when = getattr(common.OptimizerErrorEnum, when)
            params = copy.copy(oi.params)
            if issubclass(err_type, Warning):
                with pytest.warns(err_type, match=regex):
                    cls(params, **oi.kwargs)
            elif when == common.OptimizerErrorEnum.CONSTRUCTION_ERROR:
                with pytest.raises(err_type, match=regex):
                    cls(params, **oi.kwargs)
            else:
                opt = cls(params, **oi.kwargs)
                with pytest.raises(err_type, match=regex):
                    opt.step()


# -- the update goes the right way, with schedulers, groups and a Tensor lr ---------------------------------

@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("with_lrsched", [True, False])
def test_forloop_goes_right_direction(impl, contiguous, with_lrsched):
    def check(cls):
        for sched_ctors in (INFO.scheduler_inputs if with_lrsched else [[]]):
            for oi in inputs():
                W, V = matrices((10, 5), (10, 3), contiguous=contiguous)
                x = torch.randn(5, generator=torch.Generator().manual_seed(1))
                opt = cls([W, V], **oi.kwargs)
                scheds = [s(opt) for s in sched_ctors]
                first = fwd_bwd(opt, W, V, x).item()
                for _ in range(20):
                    loss = fwd_bwd(opt, W, V, x)
                    opt.step()
                    for s in scheds:
                        s.step(loss.item()) if isinstance(s, ReduceLROnPlateau) else s.step()
                assert quadratic(W, V, x).item() < first, (oi.desc, sched_ctors)

    holds(impl, f"right_direction-{contiguous}-{with_lrsched}", check)


def test_param_group_with_lrscheduler_goes_right_direction(impl):
    def check(cls):
        for sched_ctors in INFO.scheduler_inputs:
            W, V = matrices((10, 5), (10, 3))
            x = torch.randn(5, generator=torch.Generator().manual_seed(1))
            opt = cls([{"params": [W]}, {"params": [V], "lr": 0.01}])
            scheds = [s(opt) for s in sched_ctors]
            first = fwd_bwd(opt, W, V, x).item()
            for _ in range(20):
                loss = fwd_bwd(opt, W, V, x)
                opt.step()
                for s in scheds:
                    s.step(loss.item()) if isinstance(s, ReduceLROnPlateau) else s.step()
            assert quadratic(W, V, x).item() < first

    holds(impl, "test_param_group_with_lrscheduler_goes_right_direction", check)


def test_tensor_lr(impl):
    def check(cls):
        for oi in inputs():
            W, V = matrices((10, 5), (10, 3))
            Wc, Vc = (Parameter(p.detach().clone()) for p in (W, V))
            x = torch.randn(5, generator=torch.Generator().manual_seed(1))
            kwargs = {k: v for k, v in oi.kwargs.items() if k != "lr"}
            ref = cls([W, V], lr=1e-3, **kwargs)
            opt = cls([Wc, Vc], lr=torch.tensor(1e-3), **kwargs)
            for _ in range(5):
                fwd_bwd(ref, W, V, x)
                fwd_bwd(opt, Wc, Vc, x)
                ref.step()
                opt.step()
                # float32 products of lr with the shape factor: a Python float against a float32 tensor,
                # a few ulps of the step; torch's assertEqual default for float32 (rtol 1.3e-6, atol 1e-5)
                torch.testing.assert_close(W, Wc)
                torch.testing.assert_close(V, Vc)

    holds(impl, "test_tensor_lr", check)


def test_param_groups_weight_decay(impl):
    def check(cls):
        for oi in inputs():
            W, V = matrices((10, 5), (10, 3))
            x = torch.randn(5, generator=torch.Generator().manual_seed(1))
            no_decay = {**oi.kwargs, "weight_decay": 0.0}
            opt = cls([dict(params=[W], **oi.kwargs), dict(params=[V], **no_decay)])
            first = quadratic(W, V, x).item()
            for _ in range(20):
                fwd_bwd(opt, W, V, x)
                opt.step()
            assert quadratic(W, V, x).item() < first

    holds(impl, "test_param_groups_weight_decay", check)


def test_param_groups_lr(impl):
    def check(cls):
        for oi in inputs():
            kwargs = dict(oi.kwargs)
            if not kwargs.get("lr"):
                kwargs["lr"] = 1e-3
            W, V, irrelevant = matrices((10, 5), (10, 3), (2, 2))
            before = irrelevant.detach().clone()
            x = torch.randn(5, generator=torch.Generator().manual_seed(1))
            opt = cls([dict(params=[W, V], **kwargs), dict(params=[irrelevant])], lr=1e-28)
            first = quadratic(W, V, x).item()
            for _ in range(20):
                fwd_bwd(opt, W, V, x)
                irrelevant.grad = torch.rand_like(irrelevant)
                opt.step()
            assert quadratic(W, V, x).item() < first
            assert torch.equal(irrelevant.detach(), before)  # lr 1e-28: below half an ulp of every entry

    holds(impl, "test_param_groups_lr", check)


# -- no-ops ------------------------------------------------------------------------------------------------

def test_step_is_noop_when_params_have_no_grad(impl):
    def check(cls):
        params = matrices((2, 3), (2, 3))
        before = [p.detach().clone() for p in params]
        for oi in inputs():
            opt = cls(params, **oi.kwargs)
            opt.step(lambda: torch.tensor([1.0]))
            assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))

    holds(impl, "test_step_is_noop_when_params_have_no_grad", check)


def test_step_is_noop_for_zero_grads(impl):
    def check(cls):
        for oi in inputs():
            (param,) = matrices((5, 1))
            old = param.detach().clone()
            opt = cls([param], **{**oi.kwargs, "weight_decay": 0.0})  # weight decay moves params without grads
            param.grad = torch.zeros_like(param)
            opt.step(lambda: torch.tensor([1.0]))
            assert torch.equal(param.detach(), old)

    holds(impl, "test_step_is_noop_for_zero_grads", check)


def test_optimizer_can_be_printed(impl):
    def check(cls):
        for oi in inputs():
            assert cls.__name__ in repr(cls(matrices((2, 3), (2, 3)), **oi.kwargs))

    holds(impl, "test_optimizer_can_be_printed", check)


def test_non_empty_state(impl):
    def check(cls):
        model = torch.nn.Linear(5, 5, bias=False)
        for oi in inputs():
            opt = cls(model.parameters(), **oi.kwargs)
            opt.zero_grad()
            model(torch.rand(2, 5)).sum().backward()
            opt.step()
            assert all(len(state) > 0 for state in opt.state.values())

    holds(impl, "test_non_empty_state", check)


# -- state dicts: determinism, names, old dicts, save/load, dtype casting ------------------------------------

def same(a, b) -> bool:
    """Equal state dicts: tensors bitwise (and of one dtype), everything else by ``==``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def named(params, is_named):
    return [(f"name{i}", p) for i, p in enumerate(params)] if is_named else params


def without_names(sd):
    sd = copy.deepcopy(sd)
    for g in sd["param_groups"]:
        g.pop("param_names", None)
    return sd


@pytest.mark.parametrize("named0", [True, False])
@pytest.mark.parametrize("named1", [True, False])
def test_state_dict_deterministic(impl, named0, named1):
    def check(cls):
        for oi in inputs():
            W, V = matrices((2, 3), (2, 4))
            x = torch.randn(3, generator=torch.Generator().manual_seed(1))
            opt = cls(named([W, V], named0), **oi.kwargs)
            for _ in range(10):
                fwd_bwd(opt, W, V, x)
                opt.step()
            Wc, Vc = (Parameter(p.detach().clone()) for p in (W, V))
            opt_c = cls(named([Wc, Vc], named1), **oi.kwargs)
            opt_c.load_state_dict(copy.deepcopy(opt.state_dict()))
            for _ in range(10):
                fwd_bwd(opt, W, V, x)
                fwd_bwd(opt_c, Wc, Vc, x)
                opt.step()
                opt_c.step()
                assert torch.equal(W, Wc) and torch.equal(V, Vc)  # same state, same arithmetic: bitwise
            a, b = without_names(opt.state_dict()), without_names(opt_c.state_dict())
            assert same(a, b)
            opt_c.param_groups.extend(opt_c.param_groups)  # repeated groups are represented identically
            assert without_names(opt.state_dict())["param_groups"][-1] == \
                without_names(opt_c.state_dict())["param_groups"][-1]

    holds(impl, f"deterministic-{named0}-{named1}", check)


def linear_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.Tanh(), torch.nn.Linear(3, 2, bias=False))


def test_can_load_older_state_dict(impl):
    def check(cls):
        for oi in inputs():
            model = linear_model()
            x = torch.rand(6, 4)
            opt = cls(model.parameters(), **oi.kwargs)
            for _ in range(3):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            old = copy.deepcopy(opt.state_dict())
            for group in old["param_groups"]:
                for flag in INFO.not_og_supported_flags:
                    group.pop(flag, None)
            opt.load_state_dict(old)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()

    holds(impl, "test_can_load_older_state_dict", check)


@pytest.mark.parametrize("named0", [True, False])
@pytest.mark.parametrize("named1", [True, False])
def test_can_load_from_to_named_state_dict(impl, named0, named1):
    def check(cls):
        for oi in inputs():
            model = linear_model()
            x = torch.rand(6, 4)
            opt = cls(model.named_parameters() if named0 else model.parameters(), **oi.kwargs)
            for _ in range(3):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            sd = copy.deepcopy(opt.state_dict())
            opt2 = cls(model.named_parameters() if named1 else model.parameters(), **oi.kwargs)
            opt2.load_state_dict(sd)
            opt2.zero_grad()
            model(x).sum().backward()
            opt2.step()
            if named0 or named1:
                assert opt2.state_dict()["param_groups"][0]["param_names"] == ["0.weight", "2.weight"]

    holds(impl, f"named-{named0}-{named1}", check)


@pytest.mark.parametrize("is_named", [True, False])
def test_save_load_equality_with_weights_only(impl, is_named):
    def check(cls):
        for oi in inputs():
            W, V = matrices((2, 3), (2, 4))
            x = torch.randn(3, generator=torch.Generator().manual_seed(1))
            opt = cls(named([W, V], is_named), **oi.kwargs)
            for _ in range(3):
                opt.step(functools.partial(fwd_bwd, opt, W, V, x))
            sd = opt.state_dict()
            with tempfile.TemporaryFile() as f:
                torch.save(sd, f)
                f.seek(0)
                assert same(torch.load(f, weights_only=False), sd)
                f.seek(0)
                assert same(torch.load(f, weights_only=True), sd)

    holds(impl, f"weights_only-{is_named}", check)


def test_load_state_dict_casts_state_to_the_parameters_dtype(impl):
    def check(cls):
        for oi in inputs():
            W, V = matrices((4, 3), (4, 2))
            x = torch.randn(3, generator=torch.Generator().manual_seed(1))
            opt = cls([W, V], **oi.kwargs)
            for _ in range(3):
                fwd_bwd(opt, W, V, x)
                opt.step()
            W64, V64 = (Parameter(p.detach().double()) for p in (W, V))
            opt64 = cls([W64, V64], **oi.kwargs)
            opt64.load_state_dict(copy.deepcopy(opt.state_dict()))
            for p in (W64, V64):
                assert opt64.state[p]["momentum_buffer"].dtype == torch.float64
            fwd_bwd(opt64, W64, V64, x.double())
            opt64.step()

    holds(impl, "test_load_state_dict_casts_state_to_the_parameters_dtype", check)


def test_deepcopy_copies_all_public_attrs(impl):
    def check(cls):
        params = matrices((2, 3), (2, 3))
        for p in params:
            p.grad = torch.rand_like(p)
        public = lambda o: {k for k in o.__dict__ if not k.startswith("_")}  # noqa: E731
        for oi in inputs():
            opt = cls(params, **oi.kwargs)
            for _ in range(3):
                opt.step()
            assert public(opt) == public(copy.deepcopy(opt))

    holds(impl, "test_deepcopy_copies_all_public_attrs", check)


# -- hooks ----------------------------------------------------------------------------------------------------

def test_state_dict_hooks(impl):
    def check(cls):
        for oi in inputs():
            opt = cls([Parameter(torch.rand(2, 3))], **oi.kwargs)
            opt.register_state_dict_pre_hook(lambda o: o.state.__setitem__("test", 1))

            def post(o, sd):
                sd["ran_pre_hook"] = sd["state"].pop("test", None) == 1
                return sd

            opt.register_state_dict_post_hook(post)
            sd = opt.state_dict()
            assert "test" not in sd["state"] and sd["ran_pre_hook"]

    holds(impl, "test_state_dict_hooks", check)


def test_load_state_dict_hooks_and_prepend(impl):
    def check(cls):
        for oi in inputs():
            opt = cls([Parameter(torch.rand(2, 3))], **oi.kwargs)
            sd = opt.state_dict()

            def pre1(o, s):
                s["param_groups"][0]["lr"] = 0.002

            def pre2(o, s):
                s = copy.deepcopy(s)
                s["param_groups"][0]["lr"] = 0.003
                return s

            opt.register_load_state_dict_pre_hook(pre1)
            opt.load_state_dict(sd)
            assert opt.param_groups[0]["lr"] == 0.002
            opt.register_load_state_dict_pre_hook(pre2, prepend=True)
            opt.load_state_dict(sd)
            assert opt.param_groups[0]["lr"] == 0.002  # prepended: pre1 runs last and wins
            ran = []
            opt.register_load_state_dict_post_hook(lambda o: ran.append(o.param_groups[0]["lr"]))
            opt.load_state_dict(sd)
            assert ran == [0.002]

    holds(impl, "test_load_state_dict_hooks_and_prepend", check)


def test_step_hooks_in_order(impl):
    def check(cls):
        data = []
        params = [Parameter(torch.tensor([[1.0, 1.0]]))]
        for oi in inputs():
            opt, sgd = cls(params, **oi.kwargs), torch.optim.SGD(params)
            data.clear()
            handles = [register_optimizer_step_pre_hook(lambda *a: data.append(0)),
                       register_optimizer_step_post_hook(lambda *a: data.append(5)),
                       opt.register_step_pre_hook(lambda *a: data.append(1)),
                       opt.register_step_post_hook(lambda *a: data.append(2)),
                       sgd.register_step_pre_hook(lambda *a: data.append(1)),
                       sgd.register_step_post_hook(lambda *a: data.append(2))]
            try:
                opt.step()
                sgd.step()
                opt.step()
                assert data == [0, 1, 2, 5] * 3
            finally:
                for h in handles:
                    h.remove()
            opt.step()
            sgd.step()
            assert data == [0, 1, 2, 5] * 3


    holds(impl, "test_step_hooks_in_order", check)
"""FixedEntropyLinear (svmuon.experiments.fixed_entropy_model): its entropy, its options bias and gain, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from svmuon import singular_value_entropy
from svmuon.experiments.fixed_entropy_model import FixedEntropyLinear


@pytest.mark.parametrize("n_in, n_out", [(12, 5), (5, 12), (7, 7)])
@pytest.mark.parametrize("power", [1, 2])
def test_entropy_is_exactly_the_target_and_gain_sets_the_norm(n_in, n_out, power):
    """The SVD of W (float64) gives H = log k - δ to rounding (1e-10: the root's accuracy is 1e-10 nats,
    tempered_softmax's contract), and ‖W‖_F² = gain · n_out (U, V orthonormal: a sum of σ_i², 1e-12)."""
    gen = torch.Generator().manual_seed(0)
    layer = FixedEntropyLinear(n_in, n_out, 0.3, power, True, gen, torch.float64, bias=False, gain=0.5)
    W = layer.weight().detach()
    assert W.shape == (n_out, n_in)
    k = min(n_in, n_out)
    assert abs(float(singular_value_entropy(W, power=power)) - (math.log(k) - 0.3)) < 1e-10
    assert float(W.pow(2).sum()) == pytest.approx(0.5 * n_out, rel=1e-12)
    x = torch.randn(3, n_in, dtype=torch.float64, generator=gen)
    assert layer.bias is None and "bias" not in dict(layer.named_parameters())
    torch.testing.assert_close(layer(x), x @ W.T, rtol=1e-12, atol=1e-12)


def test_defaults_keep_he_initialisation_and_a_bias():
    layer = FixedEntropyLinear(16, 32, 0.0, 1, False, torch.Generator().manual_seed(1), torch.float64)
    assert float(layer.weight().detach().pow(2).sum()) == pytest.approx(2 * 32, rel=1e-12)  # ‖W‖_F² = 2 n_out
    assert layer.bias is not None and layer.bias.shape == (32,)


@pytest.mark.parametrize("kw, match", [(dict(delta=-0.1), "delta"), (dict(delta=math.log(4)), "delta"),
                                       (dict(gain=0.0), "gain"), (dict(gain=math.inf), "gain"),
                                       (dict(gain=True), "gain")])
def test_bad_delta_and_gain_are_refused(kw, match):
    args = dict(n_in=4, n_out=6, delta=0.1, power=1, learn_spectrum=True, gen=torch.Generator().manual_seed(0))
    gain = kw.pop("gain", 1.0)
    with pytest.raises(ValueError, match=match):
        FixedEntropyLinear(**(args | kw), gain=gain)


@pytest.mark.parametrize("delta", [0.0, 0.4])
def test_net_start_sets_the_scale_of_every_fixed_entropy_layer(delta):
    """``Net(start=...)``: He's ‖W‖_F² = 2 n_out, or a Stiefel matrix's ‖W‖_F² = k (every σ = 1 at δ = 0), for the
    tall and the wide hidden matrix (a sum of σ_i², 1e-12 in float64); the entropy is the target either way."""
    from svmuon.experiments.fixed_entropy_model import Net

    for start in ("he", "unit"):
        net = Net((6, 12, 5, 3), 0, "shape", delta, 1, dtype=torch.float64, start=start)
        for W in net.weights():
            n_out, k = W.shape[0], min(W.shape)
            energy = 2 * n_out if start == "he" else k
            assert float(W.detach().pow(2).sum()) == pytest.approx(energy, rel=1e-12)
            assert abs(float(singular_value_entropy(W.detach())) - (math.log(k) - delta)) < 1e-10
            if start == "unit" and delta == 0.0:
                torch.testing.assert_close(torch.linalg.svdvals(W.detach()), torch.ones(k, dtype=torch.float64))
    with pytest.raises(ValueError, match="start must be one of"):
        Net((6, 12, 5, 3), 0, "shape", delta, 1, start="xavier")

"""Per-layer spectral report of a model: singular-value entropies of every weight matrix, beside the theory.

:func:`spectral_report` takes a ``torch.nn.Module``, a state dict (name -> tensor) or a weights file and
returns one row per weight matrix with its Shannon and Rényi entropies in both normalisations
(p ∝ σ and p ∝ σ², book eq. ``eq-normalisations``), the entropy divided by log k, the effective ranks,
the stable rank, and three reference values for a k-dimensional spectrum (k = min(m, n)):

* ``log k``, the maximum (all singular values equal, an orthogonal matrix);
* the mean-field value of a uniformly random point of the simplex, ``log k - (1 - γ)`` for q = 1 and
  ``log(k/2)`` for q = 2 (:func:`svmuon.spectral.theory.mean_field_entropy`, eq. ``eq-mean-field``);
* the large-n value for a Gaussian matrix of the same aspect ratio
  (:func:`svmuon.spectral.random_matrix.gaussian_entropy_limit`, eq. ``eq-gaussian-limit``).

Loading never unpickles code: ``.safetensors`` files are read with ``safetensors.torch.load_file`` and
anything else with ``torch.load(..., weights_only=True)``.

References: su2025entropy, liu2025moonlight, roy2007effective, marchenko1967distribution.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from svmuon.spectral.entropy import renyi_entropy
from svmuon.spectral.random_matrix import gaussian_entropy_limit
from svmuon.spectral.spectrum import _distribution, _scale_free, _svdvals

__all__ = ["spectral_report", "plot_spectral_report", "load_weights"]


def _mean_field(k: int, q: float) -> float:
    """Mean-field E[H_q] of a uniform point of Δ^{k-1}; the theory module if present, else γ / log Γ."""
    try:
        from svmuon.spectral.theory import mean_field_entropy
    except ImportError:  # pragma: no cover - the theory module ships with the library
        if q == 1.0:
            return math.log(k) - (1 - np.euler_gamma)
        return math.log(k) - math.lgamma(q + 1) / (q - 1)
    return float(mean_field_entropy(k, q))


@lru_cache(maxsize=256)
def _gaussian(aspect_ratio: float, q: float, power: float) -> float:
    return gaussian_entropy_limit(aspect_ratio, q=q, power=power)


def load_weights(source: Any) -> tuple[dict[str, Any], str]:
    """Return ``(name -> tensor mapping, label)`` for a module, a state dict or a weights file.

    Args:
        source: ``torch.nn.Module`` (its ``named_parameters()``), a mapping name -> tensor/array, or a path
            (``str``/``os.PathLike``) to a ``.safetensors`` file or a ``torch.save`` file of tensors.

    Returns:
        The mapping (tensors are not copied) and a short label naming the source for error messages.

    Raises:
        FileNotFoundError: the path does not exist.
        TypeError: an unsupported source, or a file whose content is not a mapping of names to tensors.
        ValueError: a file torch cannot read with ``weights_only=True`` (it would need to unpickle code), or a
            ``.safetensors`` file (any case of the suffix) that is not one; the message names the file.
    """
    if isinstance(source, torch.nn.Module):
        return dict(source.named_parameters()), f"module {type(source).__name__}"
    if isinstance(source, Mapping):
        return dict(source), "state dict"
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"source: no weights file at {str(path)!r}")
        label = f"file {path.name!r}"
        if path.suffix.lower() == ".safetensors":  # .SAFETENSORS too: never sent to torch.load
            from safetensors.torch import load_file

            try:
                return load_file(str(path), device="cpu"), label
            except Exception as err:  # SafetensorError names neither the file nor the format
                raise ValueError(f"source: {label} ({path}) is not a readable safetensors file: "
                                 f"{type(err).__name__}: {err}") from err
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # UnpicklingError and friends: refuse rather than run arbitrary code
            raise ValueError(f"source: {label} cannot be read with torch.load(weights_only=True): {err}") from err
        if not isinstance(loaded, Mapping):
            raise TypeError(f"source: {label} holds a {type(loaded).__name__}, expected a mapping name -> tensor")
        return dict(loaded), label
    raise TypeError("source must be a torch.nn.Module, a mapping name -> tensor, or a path to a weights file, "
                    f"got {type(source).__name__}")


def _as_matrix(name: str, value: Any, label: str) -> tuple[torch.Tensor | None, str]:
    """One entry as a CPU float32/float64 matrix (conv kernels flattened), or ``(None, reason)`` if it is not one."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{label}: entry {name!r} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}")
    if not value.is_floating_point():
        return None, f"not floating point ({value.dtype})"
    if value.ndim < 2:
        return None, f"{value.ndim}-D parameter, shape {tuple(value.shape)}"
    t = value.detach()
    if t.device.type == "meta":
        raise ValueError(f"{label}: parameter {name!r} of shape {tuple(t.shape)} is on the meta device (a shape "
                         "without values): load or initialise the weights first, e.g. module.to_empty(device='cpu') "
                         "and load_state_dict")
    if t.numel() == 0:
        raise ValueError(f"{label}: parameter {name!r} is an empty matrix of shape {tuple(t.shape)}; "
                         "a weight matrix must have at least one entry")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{label}: parameter {name!r} of shape {tuple(t.shape)} holds "
                         f"{int(torch.isnan(t).sum())} NaN and {int(torch.isinf(t).sum())} infinite entries")
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32  # half precision is computed in float32
    W = t.reshape(t.shape[0], -1).to(device="cpu", dtype=dtype)  # conv (out, in, kh, kw) -> (out, in·kh·kw)
    if min(W.shape) < 2:
        return None, f"min(m, n) = {min(W.shape)} < 2, shape {tuple(t.shape)}"
    if not bool(W.any()):
        return None, f"zero matrix, shape {tuple(t.shape)} (its entropy is undefined)"
    return W, ""


_MAX_EXPONENT = 1000.0  # bound on power and on q·power: the Gaussian reference integrates x^(q·power/2) over the
# Marchenko–Pastur support, which reaches x = 4, and 4^(q·power/2) overflows float64 once q·power > 1024


def _check_values(values: Any, name: str, positive: bool) -> tuple[float, ...]:
    """``values`` (a real number or a sequence of them) as a tuple of floats; TypeError/ValueError naming ``name``."""
    expected = f"a real number or a sequence of real numbers {'> 0' if positive else '>= 0'}"
    if isinstance(values, np.ndarray):
        values = values.ravel().tolist()
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = (values,)
    elif isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be {expected}, got {type(values).__name__}")
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must hold at least one value")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be {expected}, got an element {v!r} of type {type(v).__name__}")
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f) or f < 0 or (positive and f == 0):
            raise ValueError(f"{name} must hold finite real numbers {'> 0' if positive else '>= 0'}, "
                             f"got {reprlib.repr(v)}")
        out.append(f)
    repeated = sorted({v for v in out if out.count(v) > 1})
    if repeated:
        raise ValueError(f"{name} must not hold the same value twice (each value is one set of columns), "
                         f"got {', '.join(map(repr, repeated))} more than once in {reprlib.repr(values)}")
    return tuple(out)


def _check_exponents(qs: tuple[float, ...], powers: tuple[float, ...]) -> None:
    """Raise ``ValueError`` unless power <= 1000 and q·power <= 1000 for every pair (see ``_MAX_EXPONENT``)."""
    for power in powers:
        if power > _MAX_EXPONENT:
            raise ValueError(f"power must be at most {_MAX_EXPONENT:g} (the Gaussian reference overflows float64 "
                             f"beyond ~1024), got {power!r}")
        for q in qs:
            if q * power > _MAX_EXPONENT:
                raise ValueError(f"q·power must be at most {_MAX_EXPONENT:g} for the Gaussian reference (x^(q·power/2) "
                                 f"on [0, 4] overflows float64 beyond ~1024), got q={q!r} with power={power!r}")


def _tag(x: float) -> str:
    """Column suffix of an order or power: ``2``, ``0.5``, ``inf``; full precision where ``:g`` would round
    (``2.0000001``), so that two different values never share a column."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


def _row(name: str, shape: tuple[int, ...], W: torch.Tensor, qs: tuple[float, ...], powers: tuple[float, ...]) -> dict:
    m, n = W.shape
    k = min(m, n)
    row: dict[str, Any] = {"name": name, "shape": shape, "m": m, "n": n, "k": k, "flattened": len(shape) > 2,
                           "log_k": math.log(k)}
    # one SVD per matrix; the distributions below reuse it (eq-normalisations). Taken after an exact power-of-two
    # rescaling: every column is scale invariant, and σ_1 of finite float32 weights can overflow (3e38 entries)
    sigma = _svdvals(_scale_free(W))
    # stable rank = ‖W‖_F² / ‖W‖_2² = exp H_∞(σ²/Σσ²) = 1 / max_i p_i (see svmuon.spectral.entropy.stable_rank)
    row["stable_rank"] = math.exp(float(renyi_entropy(_distribution(sigma, 2.0, tuple(W.shape), None), math.inf)))
    for power in powers:
        p = _distribution(sigma, power, tuple(W.shape), None)
        for q in qs:
            s = f"q{_tag(q)}_p{_tag(power)}"
            H = float(renyi_entropy(p, q))
            row[f"H_{s}"] = H
            row[f"Hnorm_{s}"] = H / math.log(k)
            row[f"erank_{s}"] = math.exp(H)  # effective rank = exp(H_q) (roy2007effective)
            row[f"gap_logk_{s}"] = math.log(k) - H
            row[f"gap_mf_{s}"] = H - _mean_field(k, q)
            row[f"gauss_{s}"] = math.log(k) + _gaussian(k / max(m, n), q, power)
    return row


def spectral_report(source: Any, *, q: Any = (1, 2), power: Any = (1, 2)) -> pd.DataFrame:
    """One row per weight matrix of ``source``: entropies of its normalised singular values and references.

    Args:
        source: A ``torch.nn.Module``, a mapping name -> tensor (a state dict), or a path to a
            ``.safetensors`` / ``torch.save`` weights file (read without unpickling code).
        q: Rényi order(s) in [0, inf) (1 = Shannon), a real number or a sequence of them; default (1, 2).
        power: Normalisation exponent(s) > 0: 1 for p ∝ σ, 2 for p ∝ σ²; a real number or a sequence of
            them; default (1, 2). ``power`` <= 1000 and ``q·power`` <= 1000 for every pair (beyond that the
            Gaussian reference overflows float64). No value may appear twice in ``q`` or in ``power``.

    Returns:
        ``pandas.DataFrame`` with columns ``name``, ``shape`` (the parameter's own shape), ``m``, ``n``,
        ``k = min(m, n)``, ``flattened`` (True for a ≥3-D kernel reshaped to ``(out, in·kh·kw)``), ``log_k``,
        ``stable_rank`` and, for every order q and power P with suffix ``s = "q{q}_p{P}"``:
        ``H_s`` (nats), ``Hnorm_s`` = H / log k, ``erank_s`` = exp H, ``gap_logk_s`` = log k - H,
        ``gap_mf_s`` = H - mean-field value (log k - (1 - γ) at q = 1, eq. ``eq-mean-field``) and
        ``gauss_s``, the large-n Gaussian value log k + limit (eq. ``eq-gaussian-limit``).
        Computed on the CPU in float64 for float64 weights, else in float32 (entropies to ~1e-6 nats). ``df.attrs["skipped"]`` maps every entry that is not a row
        (1-D parameters, integer buffers, matrices with min(m, n) < 2, zero matrices) to the reason, and
        ``df.attrs["source"]`` names the source. The suffix writes q and P with ``:g`` (``q2_p1``, ``q0.5_p2``)
        unless that would round them, in which case in full (``q2.0000001_p1``): distinct values, distinct columns.

    Raises:
        TypeError: unsupported ``source`` or an entry that is not a tensor (message names source and entry);
            ``q``/``power`` not a number or a sequence of numbers.
        FileNotFoundError: a path that does not exist.
        ValueError: a NaN/Inf weight, an empty matrix or one on the meta device (names the parameter), an
            unreadable weights file (names it), no weight matrix at all,
            ``q``/``power`` out of range (negative, non-finite, power 0, or beyond the bounds above) or
            holding a value twice.

    References:
        su2025entropy, liu2025moonlight, roy2007effective.
    """
    qs, powers = _check_values(q, "q", positive=False), _check_values(power, "power", positive=True)
    _check_exponents(qs, powers)
    weights, label = load_weights(source)
    rows, skipped = [], {}
    for name, value in weights.items():
        W, reason = _as_matrix(name, value, label)
        if W is None:
            skipped[name] = reason
            continue
        rows.append(_row(name, tuple(value.shape), W, qs, powers))
    if not rows:
        raise ValueError(f"source: {label} has no weight matrix (no floating parameter with >= 2 dimensions and "
                         f"min(m, n) >= 2); skipped: {skipped or 'nothing, it is empty'}")
    df = pd.DataFrame(rows)
    df.attrs["skipped"] = skipped
    df.attrs["source"] = label
    return df


def plot_spectral_report(df: pd.DataFrame, *, q: float = 1, power: float = 1, ax: Any = None,
                         labels: bool = True) -> Any:
    """Per-layer plot of H_q - log k with the Gaussian-init and mean-field references.

    Args:
        df: A frame from :func:`spectral_report` that holds the columns for ``q`` and ``power``.
        q, power: Which entropy to draw.
        ax: A matplotlib ``Axes`` to draw on (default: a new figure).
        labels: Write the parameter names as x tick labels.

    Returns:
        The ``Axes``. Points: H - log k of each matrix (0 = orthogonal); crosses: the Gaussian matrix of
        the same shape; dashed line: the mean-field value of a uniform point of the simplex.

    Raises:
        KeyError: ``df`` lacks the columns for ``(q, power)``.
    """
    import matplotlib.pyplot as plt

    s = f"q{_tag(float(q))}_p{_tag(float(power))}"
    if f"H_{s}" not in df:
        raise KeyError(f"df has no column H_{s}; run spectral_report with q={q!r} and power={power!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.18 * len(df)), 3.8))
    x = np.arange(len(df))
    ax.axhline(0.0, color="k", lw=0.8, label="log k (orthogonal)")
    mf = (df[f"H_{s}"] - df[f"gap_mf_{s}"] - df["log_k"]).to_numpy()
    ax.plot(x, mf, "--", color="tab:red", label="mean field (uniform simplex)")
    ax.plot(x, df[f"gauss_{s}"] - df["log_k"], "x", color="tab:gray", label="Gaussian matrix, same shape")
    ax.plot(x, df[f"H_{s}"] - df["log_k"], "o", ms=4, color="tab:blue", label="this model")
    ax.set_ylabel(f"$H_{{{_tag(float(q))}}} - \\log k$ (nats), $p\\propto\\sigma^{{{_tag(float(power))}}}$")
    ax.set_xlabel("weight matrix")
    if labels:
        ax.set_xticks(x, df["name"], rotation=90, fontsize=6)
    ax.legend(fontsize=7)
    return ax

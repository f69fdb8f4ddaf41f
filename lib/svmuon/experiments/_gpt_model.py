"""A small decoder-only transformer (GPT) whose hidden matrices are separate parameters, for ``gpt``.

Pre-norm blocks ``x + attn(norm(x))``, ``x + mlp(norm(x))`` (RMSNorm with a learned gain), causal multi-head
self-attention with *separate* query, key, value and output projections (so each is one matrix parameter of
its own, as an optimizer or an entropy monitor sees it), a GELU MLP of width ``mlp_ratio · d_model``,
learned position embeddings, and a token embedding tied to the output layer (radford2019language; the
tied table is trained by AdamW in every arm). No biases. Initialisation as GPT-2/nanoGPT: Gaussian entries
of standard deviation 0.02, ``0.02/√(2 n_layer)`` for the two projections that write into the residual
stream (the attention output and the MLP's second matrix).

The hidden matrices are built by a ``make_linear(n_in, n_out, kind, std)`` factory, so the same model
serves plain ``Linear`` weights and the fixed-entropy layer (:class:`svmuon.experiments.fixed_entropy_model.FixedEntropyLinear`).
``kind`` is the layer type: ``q``, ``k``, ``v``, ``o`` (attention) or ``mlp_in``, ``mlp_out``.

References: vaswani2017attention, radford2019language, zhang2019root (RMSNorm), hendrycks2016gaussian (GELU).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

__all__ = ["GPTConfig", "GPT", "ATTENTION", "MLP", "KINDS"]

ATTENTION = ("q", "k", "v", "o")
MLP = ("mlp_in", "mlp_out")
KINDS = ATTENTION + MLP
INIT_STD = 0.02  # GPT-2's initialisation (radford2019language)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the model: vocabulary, context length (tokens), width, depth, heads, MLP ratio."""

    vocab: int = 97
    context: int = 128
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"GPTConfig: d_model = {self.d_model} must be a multiple of n_head = {self.n_head}")

    def shapes(self) -> dict[str, tuple[int, int]]:
        """``(n_out, n_in)`` of each layer type's matrix."""
        d, f = self.d_model, self.mlp_ratio * self.d_model
        return {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "mlp_in": (f, d), "mlp_out": (d, f)}


def plain_linear(n_in: int, n_out: int, kind: str, std: float) -> torch.nn.Module:
    """``Linear(n_in, n_out, bias=False)`` with Gaussian entries of standard deviation ``std``."""
    layer = torch.nn.Linear(n_in, n_out, bias=False)
    torch.nn.init.normal_(layer.weight, std=std)
    return layer


class _Attention(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, make_linear: Callable[..., torch.nn.Module], out_std: float) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.q, self.k, self.v = (make_linear(d, d, kind, INIT_STD) for kind in ("q", "k", "v"))
        self.o = make_linear(d, d, "o", out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        heads = [f(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for f in (self.q, self.k, self.v)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)  # softmax(q kᵀ/√d_head + causal mask) v
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class _MLP(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, make_linear: Callable[..., torch.nn.Module], out_std: float) -> None:
        super().__init__()
        d, f = cfg.d_model, cfg.mlp_ratio * cfg.d_model
        self.mlp_in = make_linear(d, f, "mlp_in", INIT_STD)
        self.mlp_out = make_linear(f, d, "mlp_out", out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp_out(F.gelu(self.mlp_in(x)))


class _Block(torch.nn.Module):
    def __init__(self, cfg: GPTConfig, make_linear: Callable[..., torch.nn.Module]) -> None:
        super().__init__()
        out_std = INIT_STD / math.sqrt(2 * cfg.n_layer)
        self.norm1, self.norm2 = torch.nn.RMSNorm(cfg.d_model), torch.nn.RMSNorm(cfg.d_model)
        self.attn = _Attention(cfg, make_linear, out_std)
        self.mlp = _MLP(cfg, make_linear, out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(torch.nn.Module):
    """Decoder-only transformer over ``cfg.vocab`` tokens (module docstring).

    Args:
        cfg: the sizes. seed: seeds ``torch.manual_seed`` before the parameters are drawn.
        make_linear: factory of the hidden matrices, ``(n_in, n_out, kind, std) -> Module`` (default
            ``plain_linear``).

    ``forward(idx)`` maps token ids ``(B, T)``, ``T <= cfg.context``, to logits ``(B, T, vocab)``.
    """

    def __init__(self, cfg: GPTConfig, seed: int, make_linear: Callable[..., torch.nn.Module] = plain_linear) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.tok = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = torch.nn.Embedding(cfg.context, cfg.d_model)
        for table in (self.tok, self.pos):
            torch.nn.init.normal_(table.weight, std=INIT_STD)
        self.blocks = torch.nn.ModuleList([_Block(cfg, make_linear) for _ in range(cfg.n_layer)])
        self.norm = torch.nn.RMSNorm(cfg.d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tok.weight.T  # tied output layer

    def hidden(self) -> dict[str, torch.nn.Module]:
        """The hidden-matrix layers by name, ``"<layer>.<kind>"`` (e.g. ``"0.q"``, ``"3.mlp_out"``)."""
        out = {}
        for i, block in enumerate(self.blocks):
            for kind in KINDS:
                out[f"{i}.{kind}"] = getattr(block.attn if kind in ATTENTION else block.mlp, kind)
        return out

    def matrices(self) -> dict[str, Any]:
        """Name -> the hidden weight matrix (a ``Linear``'s weight tensor) or a callable returning it
        (a fixed-entropy layer's ``weight``), the form :class:`svmuon.spectral.monitor.EntropyMonitor` accepts."""
        return {name: m.weight for name, m in self.hidden().items()}


def kind_of(name: str) -> str:
    """The layer type of a hidden-matrix name ``"<layer>.<kind>"``."""
    return name.split(".", 1)[1]

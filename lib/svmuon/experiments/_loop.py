"""The minibatch loop the experiments share."""

from __future__ import annotations

from typing import Iterable, Sequence

import torch


def train_epoch(model: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer], X: torch.Tensor,
                y: torch.Tensor, batches: Iterable[torch.Tensor]) -> float:
    """One pass of cross-entropy training over ``batches`` (index tensors into ``X``, ``(N, ...)``, and ``y``,
    ``(N,)`` class labels): for each, every optimizer's gradients are zeroed, one forward and backward pass is
    made, and every optimizer steps, in the given order. Returns the summed loss (nats × examples)."""
    total = 0.0
    for idx in batches:
        for o in optimizers:
            o.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        loss.backward()
        for o in optimizers:
            o.step()
        total += float(loss.detach()) * len(idx)
    return total

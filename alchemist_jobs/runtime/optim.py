"""Optimizers: torch's SGD, Adam and AdamW, and LARS for large batches.

LARS (You, Gitman & Ginsburg, 2017) scales each layer's step by a trust ratio
eta * ||w|| / (||g|| + wd * ||w||). torch ships no LARS, and the libraries that do (timm)
would bring a model zoo along for twenty lines, so it is written here. Biases and other
1-D parameters are excluded from adaptation and decay, as is usual.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class LARS(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 0.001,
        eps: float = 1e-9,
    ):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if p.ndim > 1:  # adapt weights only; biases and norms take the plain step
                    wd = group["weight_decay"]
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(d)
                    # The paper's local lr: eta * ||w|| / (||g|| + wd * ||w||); 1 where a norm
                    # is zero (a fresh zero layer, or no gradient) so the step is plain SGD.
                    trust = torch.where(
                        (w_norm > 0) & (g_norm > 0),
                        group["eta"] * w_norm / (g_norm + wd * w_norm + group["eps"]),
                        torch.ones_like(w_norm),
                    )
                    if wd:
                        d = d.add(p, alpha=wd)
                    d = d.mul(trust)
                if group["momentum"]:
                    buf = self.state[p].get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = d.clone()
                    else:
                        buf.mul_(group["momentum"]).add_(d)
                    d = buf
                p.add_(d, alpha=-group["lr"])
        return loss


def build_optimizer(hyper, params: Iterable) -> torch.optim.Optimizer:
    if hyper.optimizer == "sgd":
        return torch.optim.SGD(params, lr=hyper.lr, momentum=hyper.momentum, weight_decay=hyper.weight_decay)
    if hyper.optimizer == "adam":
        return torch.optim.Adam(params, lr=hyper.lr, weight_decay=hyper.weight_decay)
    if hyper.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=hyper.lr, weight_decay=hyper.weight_decay)
    if hyper.optimizer == "lars":
        return LARS(
            params, lr=hyper.lr, momentum=hyper.momentum, weight_decay=hyper.weight_decay, eta=hyper.lars_eta
        )
    raise ValueError(f"unknown optimizer {hyper.optimizer!r}")

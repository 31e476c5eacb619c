"""Mixture of experts across attention heads with soft gating (seed 001 §4.2, Thm 4.1).

A multi-head Memformer whose H heads are experts. Head h is an LFOM Memformer (Eq. 19-20, seed 000) with its own
preconditioners A_l^h (Eq. 9) and memory weights Gamma_j^h (Gamma_j^{h,l} = Gamma_j^h, the case seed 000 §3.3
trains); its layer-l update on the shared state Z_l is

    R_l^h = Attn_{P_l^h, Q_l^h}(Z_l),        Delta_l^h = (1/n) sum_{j<=l} Gamma_j^h (.) R_j^h,

or, for a linear-transformer head (Eq. 6, no memory), Delta_l^h = (1/n) R_l^h. Thm 4.1 mixes the heads' layerwise
outputs with scalar gating coefficients,

    Z_{l+1} = Z_l + sum_h omega_h Delta_l^h,

so that with omega = e_h the model is head h alone, and with omega on the simplex it is a convex combination of the
heads' updates (footnote to Thm 4.1). The gate here is a softmax over logits b + W phi(Z_0), with phi the prompt's
empirical mean and log-variance of x: ``condition="global"`` keeps W = 0, i.e. one learned coefficient per head,
fitted at test time as in §4.2 ("a learnable gating mechanism scales the layerwise output per head"), and
``condition="prompt"`` is a Jacobs et al. (1991) gate that reads the prompt, which is what lets one set of
coefficients omega^(c) per mixture component c (Thm 4.1) be picked per prompt.

Also here: the out-of-distribution test distributions of §4.2 — Gaussian covariates with an unseen variance scale,
and Gaussian mixtures whose components differ in mean, variance scale and weight, one component per prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from mnemo_mpc.errors import InputError

log = logging.getLogger(__name__)

GateCondition = Literal["global", "prompt"]


def lsa_y_row(z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Last row of Attn_{P,Q}(Z) = P Z M (Z^T Q Z) (Eq. 5, mask Eq. 4) under the parameterisation of Eq. 9 with
    B = 0, for H heads at once: z (B, d+1, N), a (H, d, d) -> (B, H, N). With B = 0 every other row of the
    attention output is zero, so the row is the whole output. In w-space this is a step preconditioned by A^T
    (Eq. 22 multiplies the row Y by X^T A X); Lemma 1 writes A, its optimum being symmetric."""
    d = z.shape[1] - 1
    xs = z[:, :d, :]
    ys = z[:, d, :-1]  # Z M drops the query column: its label is never attended to
    # Z^T Q Z = -X^T A X; only the n key columns survive the mask
    kernel = torch.einsum("bdi,hde,bej->bhij", xs[:, :, :-1], a, xs)
    return -torch.einsum("bi,bhij->bhj", ys, kernel)


class PromptGate(nn.Module):
    """omega(Z_0) = softmax(b + W phi(Z_0)) over H heads (Thm 4.1 gating coefficients, seed 001).

    phi(Z_0) = (mean of x(1..n+1), log of their mean squared deviation): the statistics that tell Gaussian
    components with different means or variance scales apart. ``simplex=False`` drops the softmax and returns the
    raw logits, Thm 4.1's unconstrained scalar coefficients; they start at 1/H so both gates start uniform.
    """

    def __init__(self, d: int, heads: int, condition: GateCondition = "global", simplex: bool = True) -> None:
        super().__init__()
        if condition not in ("global", "prompt"):
            raise InputError(f"gate condition: expected 'global' or 'prompt', got {condition!r}")
        if heads < 1:
            raise InputError(f"heads: expected >= 1, got {heads}")
        self.condition, self.simplex = condition, simplex
        self.bias = nn.Parameter(torch.zeros(heads) if simplex else torch.full((heads,), 1.0 / heads))
        self.weight = nn.Parameter(torch.zeros(heads, d + 1)) if condition == "prompt" else None

    @staticmethod
    def features(z0: torch.Tensor) -> torch.Tensor:
        d = z0.shape[1] - 1
        xs = z0[:, :d, :]
        mean = xs.mean(dim=2)
        var = ((xs - mean[:, :, None]) ** 2).mean(dim=(1, 2)).clamp_min(1e-12)
        return torch.cat([mean, var.log()[:, None]], dim=1)

    def forward(self, z0: torch.Tensor) -> torch.Tensor:
        logits = self.bias.expand(z0.shape[0], -1)
        if self.weight is not None:
            logits = logits + self.features(z0).to(self.weight.dtype) @ self.weight.T
        return torch.softmax(logits, dim=1) if self.simplex else logits


class MoEMemformer(nn.Module):
    """H-head, L-layer Memformer (``memory=True``, Eq. 19-20) or linear transformer (``memory=False``, Eq. 6) whose
    heads' layerwise outputs are mixed by soft gating coefficients (Thm 4.1, seed 001).

    ``forward(z0, omega=None)`` returns predictions -[Z_l]_{d+1,n+1} for l = 0..L, shape (B, L+1) (Lemma 1, seed 000:
    this entry is -<x(n+1), w_l^gd>). ``omega`` (B, H) or (H,) overrides the gate, e.g. one-hot to train or run a
    single expert.
    """

    def __init__(
        self,
        d: int,
        n: int,
        layers: int,
        heads: int,
        memory: bool = True,
        condition: GateCondition = "global",
        simplex: bool = True,
        init_scale: float = 1.0,
        dtype: torch.dtype = torch.float32,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if min(d, n, layers, heads) < 1:
            raise InputError(f"d, n, layers, heads: expected >= 1, got {d}, {n}, {layers}, {heads}")
        self.d, self.n, self.layers, self.heads, self.memory = d, n, layers, heads, memory
        # i.i.d. Gaussian A_l as in seed 000 §3.3; scaled by 1/sqrt(d) so each head starts as a contraction-sized
        # preconditioner rather than one that overshoots on the first layer.
        a = torch.randn(heads, layers, d, d, dtype=dtype, generator=generator) * (init_scale / d**0.5)
        self.a = nn.Parameter(a)
        # Gamma_j^h over the (d+1) x (n+1) register; ones = each register enters the update unscaled
        self.gamma = nn.Parameter(torch.ones(heads, layers, d + 1, n + 1, dtype=dtype)) if memory else None
        self.gate = PromptGate(d, heads, condition=condition, simplex=simplex).to(dtype)

    def head_parameters(self) -> list[nn.Parameter]:
        return [self.a] + ([self.gamma] if self.gamma is not None else [])

    def _omega(self, z0: torch.Tensor, omega: torch.Tensor | None) -> torch.Tensor:
        if omega is None:
            return self.gate(z0)
        omega = omega.to(z0.dtype)
        if omega.ndim == 1:
            omega = omega.expand(z0.shape[0], -1)
        if omega.shape != (z0.shape[0], self.heads):
            raise InputError(
                f"omega: expected shape ({z0.shape[0]}, {self.heads}) or ({self.heads},), got {tuple(omega.shape)}"
            )
        return omega

    def forward(self, z0: torch.Tensor, omega: torch.Tensor | None = None) -> torch.Tensor:
        if z0.ndim != 3 or z0.shape[1] != self.d + 1 or z0.shape[2] != self.n + 1:
            raise InputError(f"prompt Z0: expected shape (B, {self.d + 1}, {self.n + 1}), got {tuple(z0.shape)}")
        w = self._omega(z0, omega)
        z = z0
        preds = [-z[:, self.d, -1]]
        registers: list[torch.Tensor] = []  # R_j^h, last row only (the others are zero under Eq. 9, B = 0)
        for layer in range(self.layers):
            r = lsa_y_row(z, self.a[:, layer])  # (B, H, N)
            if self.memory:
                registers.append(r)
                # Gamma_j^h (.) R_j^h: only the (d+1)-th row of Gamma meets a non-zero register entry
                hist = torch.stack(registers, dim=2)  # (B, H, l+1, N)
                upd = (hist * self.gamma[None, :, : layer + 1, self.d, :]).sum(dim=2) / self.n
            else:
                upd = r / self.n
            z = z.clone()
            z[:, self.d, :] = z[:, self.d, :] + torch.einsum("bh,bhn->bn", w, upd)
            preds.append(-z[:, self.d, -1])
        return torch.stack(preds, dim=1)


# --------------------------------------------------------------------------------------------------------------
# Out-of-distribution test distributions (seed 001 §4.2)


@dataclass(frozen=True)
class GaussianComponent:
    """One component of the covariate distribution: x ~ N(mean, scale * Sigma) with Sigma = U^T D U (seed 001
    §3.3 variance scaling), picked with probability ``weight``."""

    mean: float = 0.0
    scale: float = 1.0
    weight: float = 1.0


def sample_mixture_prompts(
    sigma: torch.Tensor,
    components: Sequence[GaussianComponent],
    batch: int,
    n: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts Z_0 (Eq. 2, seed 000) whose covariates come from a Gaussian mixture, one component per prompt (all
    n+1 tokens of a prompt share it, as in Thm 4.1). The component mean is ``mean * 1`` (the all-ones direction),
    the covariance ``scale * sigma``, and w* ~ N(0, (scale * sigma)^{-1}) — seed 001 §3.3 scales Sigma and then draws
    w* from N(0, Sigma^{-1}), which keeps Var y = d for every scale. A single component with mean 0 is the
    unseen-variance test of §4.2.

    Returns (z0 (B, d+1, n+1), y_query (B,), component index (B,))."""
    if sigma.ndim != 2 or sigma.shape[0] != sigma.shape[1]:
        raise InputError(f"sigma: expected a square matrix, got shape {tuple(sigma.shape)}")
    if not components:
        raise InputError("components: expected at least one Gaussian component")
    weights = torch.tensor([c.weight for c in components], dtype=torch.float64)
    if (weights < 0).any() or weights.sum() <= 0 or any(c.scale <= 0 for c in components):
        raise InputError(f"components: expected weights >= 0 with a positive sum and scales > 0, got {components}")
    if batch < 1 or n < 1:
        raise InputError(f"batch and n: expected >= 1, got {batch}, {n}")
    d = sigma.shape[0]
    dtype = sigma.dtype
    comp = torch.multinomial(weights, batch, replacement=True, generator=generator)
    chol = torch.linalg.cholesky(sigma.to(torch.float64))
    scales = torch.tensor([c.scale for c in components], dtype=torch.float64)[comp]
    means = torch.tensor([c.mean for c in components], dtype=torch.float64)[comp]
    eps = torch.randn(batch, n + 1, d, dtype=torch.float64, generator=generator)
    x = means[:, None, None] + scales.sqrt()[:, None, None] * eps @ chol.T
    # w* ~ N(0, Sigma^{-1}): Sigma^{-1} = L^{-T} L^{-1}, so w* = L^{-T} e has that covariance
    e = torch.randn(batch, d, dtype=torch.float64, generator=generator)
    wstar = torch.linalg.solve_triangular(chol.T, e.T, upper=True).T / scales.sqrt()[:, None]
    y = torch.einsum("bnd,bd->bn", x, wstar)
    z0 = torch.zeros(batch, d + 1, n + 1, dtype=torch.float64)
    z0[:, :d, :] = x.transpose(1, 2)
    z0[:, d, :n] = y[:, :n]
    return z0.to(dtype), y[:, n].to(dtype), comp

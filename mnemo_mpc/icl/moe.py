"""Mixture of experts across attention heads with soft gating (seed 001 §4.2, Thm 4.1).

Each head is an expert: a one-head LFOM Memformer (Eq. 19-20, seed 000), linear transformer (Eq. 6) or CGD-like
Memformer (Eq. 17-18), trained on its own data distribution. On the shared state Z_l head h proposes the layer-l
update it would make on its own,

    LFOM Memformer:  Delta_l^h = (1/n) sum_{j<=l} Gamma_j^{h,l} (.) R_j^h,   R_j^h = Attn_{P_j^h, Q_j^h}(Z_j),
    transformer:     Delta_l^h = (1/n) Attn_{P_l^h, Q_l^h}(Z_l),
    CGD-like:        Delta_l^h = alpha_l^h (1/n) R_l^h,  R_l^h = Attn(Z_l) + gamma_l^h R_{l-1}^h,

and Thm 4.1 mixes the heads' layerwise outputs with scalar gating coefficients,

    Z_{l+1} = Z_l + sum_h omega_h Delta_l^h.

With omega = e_h the model is head h alone; with omega on the simplex it is a convex combination of the heads'
updates (footnote to Thm 4.1). Every head keeps its own memory registers, so a head's register history is exactly
what it would hold on its own on the same trajectory.

The gate is a softmax over logits b + W phi(Z_0), phi = (empirical mean of the prompt's x, log of their variance):
``condition="global"`` keeps W = 0, i.e. one learned coefficient per head, fitted at test time on data from the
new distribution as in §4.2 ("a learnable gating mechanism scales the layerwise output per head ... each head has a
scalar gating coefficient"); ``condition="prompt"`` is a Jacobs et al. (1991) gate that reads the prompt, which is
how one set of coefficients omega^(c) per mixture component c (Thm 4.1) can be selected prompt by prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.data import GaussianMixtureTask
from mnemo_mpc.icl.linear_transformer import LinearTransformer
from mnemo_mpc.icl.memformer import CGDMemformer, LFOMMemformer

log = logging.getLogger(__name__)

GateCondition = Literal["global", "prompt"]
Expert = LinearTransformer | LFOMMemformer | CGDMemformer


class PromptGate(nn.Module):
    """omega(Z_0) = softmax(b + W phi(Z_0)) over H heads (Thm 4.1's gating coefficients, seed 001).

    phi(Z_0) = (mean of x(1..n+1), log of their mean squared deviation): the statistics that tell Gaussian
    components with different means or variance scales apart. ``simplex=False`` drops the softmax and returns the
    raw logits, Thm 4.1's unconstrained scalar coefficients; they start at 1/H so both kinds start uniform.
    """

    def __init__(self, d: int, heads: int, condition: GateCondition = "global", simplex: bool = True) -> None:
        super().__init__()
        if condition not in ("global", "prompt"):
            raise InputError(f"gate condition: expected 'global' or 'prompt', got {condition!r}")
        if heads < 1 or d < 1:
            raise InputError(f"gate: expected d >= 1 and heads >= 1, got d={d}, heads={heads}")
        self.condition, self.simplex = condition, simplex
        self.bias = nn.Parameter(torch.zeros(heads) if simplex else torch.full((heads,), 1.0 / heads))
        self.weight = nn.Parameter(torch.zeros(heads, d + 1)) if condition == "prompt" else None

    @staticmethod
    def features(z0: torch.Tensor) -> torch.Tensor:
        """phi(Z_0): (B, d+1)."""
        d = z0.shape[1] - 1
        xs = z0[:, :d, :]
        mean = xs.mean(dim=2)
        var = ((xs - mean[:, :, None]) ** 2).mean(dim=(1, 2)).clamp_min(1e-12)
        return torch.cat([mean, var.log()[:, None]], dim=1)

    def forward(self, z0: torch.Tensor) -> torch.Tensor:
        logits = self.bias.to(z0.dtype).expand(z0.shape[0], -1)
        if self.weight is not None:
            logits = logits + self.features(z0) @ self.weight.to(z0.dtype).T
        return torch.softmax(logits, dim=1) if self.simplex else logits


class MoEMemformer(nn.Module):
    """Heads (experts) of equal depth mixed layer by layer with soft gating coefficients (Thm 4.1, seed 001).

    ``forward(Z0, return_layers=False, omega=None)`` follows the transformer convention of
    `mnemo_mpc.icl.linear_transformer` (Z_L, or [Z_1..Z_L]; the prediction is -[Z]_{d+1,n+1}, Eq. 7), so the core
    trainer and per-layer evaluation apply unchanged. ``omega`` (B, H) or (H,) overrides the gate.
    """

    def __init__(self, experts: Sequence[Expert], gate: PromptGate | None = None) -> None:
        super().__init__()
        if not experts:
            raise InputError("MoEMemformer: expected at least one expert head")
        depths = {e.n_layers for e in experts}
        dims = {e.d for e in experts}
        if len(depths) != 1 or len(dims) != 1:
            raise InputError(f"MoEMemformer: experts must share depth and d, got depths {depths} and d {dims}")
        for e in experts:
            if not isinstance(e, LinearTransformer | LFOMMemformer | CGDMemformer):
                raise InputError(f"MoEMemformer: unsupported expert type {type(e).__name__}")
        self.experts = nn.ModuleList(experts)
        self.n_layers = depths.pop()
        self.d = dims.pop()
        self.heads = len(experts)
        self.gate = gate if gate is not None else PromptGate(self.d, self.heads)

    def gamma_parameters(self) -> list[nn.Parameter]:
        """The experts' memory weights Gamma_j^h (what §4.2 / Fig. 10 also adapts at test time)."""
        return [e.Gamma for e in self.experts if isinstance(e, LFOMMemformer)]

    def _omega(self, z0: torch.Tensor, omega: torch.Tensor | None) -> torch.Tensor:
        if omega is None:
            return self.gate(z0)
        omega = omega.to(dtype=z0.dtype, device=z0.device)
        if omega.ndim == 1:
            omega = omega.expand(z0.shape[0], -1)
        if omega.shape != (z0.shape[0], self.heads):
            raise InputError(
                f"omega: expected shape ({z0.shape[0]}, {self.heads}) or ({self.heads},), got {tuple(omega.shape)}"
            )
        return omega

    def forward(
        self, Z0: torch.Tensor, return_layers: bool = False, omega: torch.Tensor | None = None
    ) -> torch.Tensor | list[torch.Tensor]:
        if Z0.ndim != 3 or Z0.shape[1] != self.d + 1:
            raise InputError(f"prompt Z0: expected shape (B, {self.d + 1}, n+1), got {tuple(Z0.shape)}")
        w = self._omega(Z0, omega)
        n = Z0.shape[-1] - 1
        registers: list[list[torch.Tensor]] = [[] for _ in self.experts]
        cgd_dirs: list[torch.Tensor | None] = [None] * self.heads
        Z = Z0
        outs = []
        for layer in range(self.n_layers):
            step = torch.zeros_like(Z)
            for h, expert in enumerate(self.experts):
                attn = expert.attention(Z, layer)
                if isinstance(expert, LFOMMemformer):
                    registers[h].append(attn)
                    upd = sum(expert.gamma_weight(layer, j) * registers[h][j] for j in range(layer + 1))
                elif isinstance(expert, CGDMemformer):
                    prev = cgd_dirs[h]
                    cgd_dirs[h] = attn if prev is None else attn + expert.gamma[layer] * prev
                    upd = expert.alpha[layer] * cgd_dirs[h]
                else:
                    upd = attn
                step = step + w[:, h, None, None] * upd
            Z = Z + step / n
            outs.append(Z)
        return outs if return_layers else Z


# --------------------------------------------------------------------------------------------------------------
# Out-of-distribution test distributions (seed 001 §4.2)


@dataclass(frozen=True)
class GaussianComponent:
    """One covariate distribution of §4.2: x ~ N(mean * 1, variance * Sigma) with 1 the all-ones vector and Sigma the
    seed's U^T D U, w* ~ N(0, (variance * Sigma)^{-1}) (seed 001 §3.3's variance scalar), drawn with probability
    proportional to ``weight`` when part of a mixture."""

    mean: float = 0.0
    variance: float = 1.0
    weight: float = 1.0


def mixture_task(sigma: torch.Tensor, components: Sequence[GaussianComponent], n: int) -> GaussianMixtureTask:
    """The Gaussian mixture of §4.2 (one component per prompt, Thm 4.1) built on the seed's Sigma. A single component
    with mean 0 is the unseen-variance test distribution."""
    if not components:
        raise InputError("mixture_task: expected at least one Gaussian component")
    if any(not c.variance > 0 or c.weight < 0 for c in components):
        raise InputError(f"mixture_task: components need variance > 0 and weight >= 0, got {list(components)}")
    d = sigma.shape[0]
    means = [torch.full((d,), float(c.mean), dtype=sigma.dtype, device=sigma.device) for c in components]
    covs = [c.variance * sigma for c in components]
    return GaussianMixtureTask(means, covs, [c.weight for c in components], n)

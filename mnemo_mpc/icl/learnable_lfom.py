"""Linear first-order methods learned directly as algorithms (seed 001 §5, Thm 5.1).

An LFOM (Eq. 16, seed 000; Eq. 1.1, seed 001) run on one in-context prompt minimises the empirical least-squares
loss of that prompt (Eq. 12, seed 000),

    R(w) = 1/(2n) ||X^T w - y||^2,      grad R(w) = (1/n) X (X^T w - y),

with iterates

    w^{k+1} = w^0 + sum_{i=0}^{k} Gamma_i^k grad R(w^i),        Gamma_i^k diagonal,

and predicts y(n+1) = <w^K, x(n+1)>. Seed 001 §5 treats the Gamma_i^k themselves as the parameters theta of a
global algorithm: one shared set for every prompt, fitted by Adam on the in-context loss, and Thm 5.1 bounds the
gap between its empirical and population in-context loss. The variants here:

- ``"scalar"``: Gamma_i^k = gamma_i^k I (Eq. 15, seed 000: GD, heavy ball, NAG-on-w are of this form);
- ``"diagonal"``: Gamma_i^k diagonal (Eq. 16, the LFOM class proper);
- ``"preconditioned"``: diagonal Gamma_i^k applied to preconditioned gradients A_i grad R(w^i) with a learnable full
  A_i per step, the "LFOM-like" class that the LFOM Memformer (Eq. 20) realises when its A_l are not scalar.

``tie_steps=True`` imposes Gamma_i^k = Gamma_i for all k >= i, the special case seed 000 §3.3 trains for the
Memformer.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
from torch import nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.classical import least_squares_gradient

log = logging.getLogger(__name__)

LFOMKind = Literal["scalar", "diagonal", "preconditioned"]
KINDS: tuple[str, ...] = ("scalar", "diagonal", "preconditioned")


def split_prompt(z0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split prompts Z_0 (Eq. 2, seed 000; shape (B, d+1, n+1)) into the context covariates X (B, d, n) as columns
    (the paper's X-bar), their responses y (B, n) and the query x(n+1) (B, d)."""
    if z0.ndim != 3 or z0.shape[1] < 2 or z0.shape[2] < 2:
        raise InputError(f"prompt Z0: expected shape (batch, d+1, n+1) with d, n >= 1, got {tuple(z0.shape)}")
    d = z0.shape[1] - 1
    return z0[:, :d, :-1], z0[:, d, :-1], z0[:, :d, -1]


def momentum_gammas(steps: int, eta: float, beta: float) -> torch.Tensor:
    """Gamma_i^k of heavy-ball momentum GD (seed 000 §2.2 / App. B.2: v <- beta v - eta grad, w <- w + v) written as
    an LFOM: unrolling gives w^{k+1} = w^0 - eta sum_i (1 - beta^(k-i+1)) / (1 - beta) grad R(w^i). Returns a
    (steps, steps) lower-triangular tensor of the scalar weights gamma_i^k."""
    if steps < 1:
        raise InputError(f"steps: expected >= 1, got {steps}")
    g = torch.zeros(steps, steps, dtype=torch.float64)
    for k in range(steps):
        for i in range(k + 1):
            # sum_{m=0}^{k-i} beta^m, written as a sum so beta = 1 needs no special case
            g[k, i] = -eta * sum(beta**m for m in range(k - i + 1))
    return g


class LearnableLFOM(nn.Module):
    """A K-step LFOM whose weights Gamma_i^k are learnable parameters (seed 001 §5; Eq. 16, seed 000).

    ``forward(z0)`` returns its prediction in a transformer's output format (see `forward`), so it is trained and
    evaluated per step exactly like a K-layer Memformer. The iteration starts at w^0 = 0, as the Memformer does
    (Lemma 1, seed 000).
    Initialisation is plain GD with step ``init_step`` (Gamma_i^k = -init_step I for every i <= k, Eq. 14): a
    random start makes the K-fold product of step maps explode and is not what an optimiser designer would pick.
    """

    def __init__(
        self,
        d: int,
        steps: int,
        kind: LFOMKind = "diagonal",
        tie_steps: bool = False,
        init_step: float = 0.1,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise InputError(f"kind: expected one of {KINDS}, got {kind!r}")
        if d < 1 or steps < 1:
            raise InputError(f"d and steps: expected >= 1, got d={d}, steps={steps}")
        self.d, self.steps, self.kind, self.tie_steps = d, steps, kind, tie_steps
        width = 1 if kind == "scalar" else d
        rows = 1 if tie_steps else steps
        # Gamma_i^k's diagonal is stored as a 1 x width matrix so that §3.3's per-matrix gradient clipping (core
        # `train`, trailing 2-D slices) clips each Gamma_i^k on its own.
        gamma = torch.zeros(rows, steps, 1, width, dtype=dtype)
        if tie_steps:
            gamma[0] = -init_step
        else:
            for k in range(steps):
                gamma[k, : k + 1] = -init_step
        self.gamma = nn.Parameter(gamma)
        self.register_buffer("causal", torch.tril(torch.ones(steps, steps, dtype=dtype))[:, :, None, None])
        if kind == "preconditioned":
            self.precond = nn.Parameter(torch.eye(d, dtype=dtype).repeat(steps, 1, 1))
        else:
            self.register_parameter("precond", None)

    def weights(self) -> torch.Tensor:
        """The diagonals of Gamma_i^k as a (K, K, width) tensor, zero for i > k (an LFOM only uses past gradients)."""
        g = self.gamma.expand(self.steps, -1, -1, -1) if self.tie_steps else self.gamma
        return (g * self.causal)[:, :, 0, :]

    @torch.no_grad()
    def set_scalar_weights(self, gammas: torch.Tensor) -> None:
        """Load scalar weights gamma_i^k (a (K, K) lower-triangular tensor, e.g. `momentum_gammas`) into every
        coordinate of Gamma_i^k; preconditioners, if any, are reset to I."""
        if gammas.shape != (self.steps, self.steps):
            raise InputError(f"gammas: expected shape ({self.steps}, {self.steps}), got {tuple(gammas.shape)}")
        if self.tie_steps:
            raise InputError("set_scalar_weights: tie_steps=True cannot hold step-dependent Gamma_i^k")
        self.gamma.copy_(gammas.to(self.gamma.dtype)[:, :, None, None].expand_as(self.gamma))
        if self.precond is not None:
            self.precond.copy_(torch.eye(self.d, dtype=self.precond.dtype).repeat(self.steps, 1, 1))

    def iterates(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """w^0..w^K for context covariates x (B, d, n) as columns and responses y (B, n); shape (K+1, B, d), the
        layout of `mnemo_mpc.icl.classical`'s iterates."""
        if x.ndim != 3 or x.shape[1] != self.d or y.shape != (x.shape[0], x.shape[2]):
            raise InputError(
                f"x, y: expected shapes (B, {self.d}, n) and (B, n), got {tuple(x.shape)}, {tuple(y.shape)}"
            )
        gam = self.weights()
        w0 = torch.zeros(x.shape[0], self.d, dtype=x.dtype, device=x.device)
        ws, grads = [w0], []
        for k in range(self.steps):
            g = least_squares_gradient(x, y, ws[-1], "mean")
            if self.precond is not None:
                g = g @ self.precond[k].transpose(0, 1)
            grads.append(g)
            # w^{k+1} = w^0 + sum_i Gamma_i^k grad_i, all i at once: (k+1, B, d) * (k+1, 1, width)
            ws.append(w0 + (torch.stack(grads) * gam[k, : k + 1, None, :]).sum(dim=0))
        return torch.stack(ws, dim=0)

    def forward(self, z0: torch.Tensor, return_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """The LFOM's prediction in a transformer's output format, so the same loss (Eq. 8), trainer and per-layer
        evaluation serve both: Z_0 with the query's label slot [Z]_{d+1,n+1} set to -<w^k, x(n+1)> (Eq. 7 reads the
        prediction as minus that entry). Returns Z for k = K, or the list for k = 1..K when `return_layers`."""
        x, y, xq = split_prompt(z0)
        preds = torch.einsum("kbd,bd->kb", self.iterates(x, y)[1:], xq)
        steps = range(self.steps) if return_layers else [self.steps - 1]
        outs = []
        for k in steps:
            z = z0.clone()
            z[:, -1, -1] = -preds[k]
            outs.append(z)
        return outs if return_layers else outs[-1]

    def clip_groups(self) -> list[tuple[torch.Tensor, int]]:
        """Per-matrix clipping groups for `mnemo_mpc.icl.train.train` (§3.3): each Gamma_i^k and each A_k."""
        return [(p, 2) for p in self.parameters()]


def lfom_parameter_count(model: LearnableLFOM) -> int:
    """Free parameters of the learned algorithm (Remark 3.3, seed 001: one shared set, independent of the batch)."""
    width = model.gamma.shape[-1]
    free = model.gamma.numel() if model.tie_steps else int(model.causal.sum().item()) * width
    if model.precond is not None:
        free += model.precond.numel()
    return free

"""Classical linear first-order methods run separately on every prompt of a batch (seed 000 §2.2, App. A.2, App. B).

Each prompt defines the least-squares objective of Eq. 12, R(w) = (1/2n)‖X̄ᵀw − y‖² ("mean"), or its unnormalised
form ½‖X̄ᵀw − y‖² ("sum"), minimised from w₀ = 0. Everything is vectorised over the batch dimension B and works in
float64. Iterates come back as a (steps+1, B, d) tensor, index k holding w_k.

The objective's normalisation does not change CGD's iterates (its exact line search is scale-invariant), but it
rescales what a fixed step size means. App. B's NAG (η = 0.03) and momentum GD (η = 0.005) values were tuned for
the authors' gradient; with n = 20 and Σ's eigenvalues in [1/4, 1] only the unnormalised ("sum") gradient makes
them sensible steps (ηλ_max·n ≈ 0.6 and 0.1; with "mean" they would barely move in four steps), so that is their
default here. Pass objective="mean" to use Eq. 12 literally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mnemo_mpc.errors import InputError

Objective = Literal["mean", "sum"]

# App. B: "we selected η_k = 0.03 and β_k = 0.9" (NAG) and "η_k = 0.005 and β_k = 0.9" (MGD).
NAG_ETA, NAG_BETA = 0.03, 0.9
MGD_ETA, MGD_BETA = 0.005, 0.9


def _check(X: torch.Tensor, y: torch.Tensor) -> None:
    if X.ndim != 3 or y.ndim != 2 or X.shape[0] != y.shape[0] or X.shape[2] != y.shape[1]:
        raise InputError(f"expected X (B, d, n) and y (B, n), got {tuple(X.shape)} and {tuple(y.shape)}")


def _scale(X: torch.Tensor, objective: Objective) -> float:
    if objective not in ("mean", "sum"):
        raise InputError(f"objective must be 'mean' or 'sum', got {objective!r}")
    return 1.0 / X.shape[2] if objective == "mean" else 1.0


def least_squares_gradient(X: torch.Tensor, y: torch.Tensor, w: torch.Tensor, objective: Objective = "mean"):
    """∇R(w) = (1/n) X̄ (X̄ᵀw − y) for Eq. 12 ("mean"), without the 1/n for "sum". w: (B, d)."""
    resid = torch.einsum("bdn,bd->bn", X, w) - y
    return _scale(X, objective) * torch.einsum("bdn,bn->bd", X, resid)


def hessian_vector(X: torch.Tensor, v: torch.Tensor, objective: Objective = "mean") -> torch.Tensor:
    """H v with H = (1/n) X̄X̄ᵀ (App. A.2's Hessian of Eq. 12), per prompt."""
    return _scale(X, objective) * torch.einsum("bdn,bn->bd", X, torch.einsum("bdn,bd->bn", X, v))


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    # Once a prompt's residual is exactly 0 (CGD converged in <= d steps) its coefficients are 0, not 0/0.
    tiny = torch.finfo(num.dtype).tiny
    return torch.where(den.abs() > tiny, num / torch.where(den.abs() > tiny, den, torch.ones_like(den)), 0 * num)


@dataclass
class CGDTrace:
    """CGD per prompt: iterates (steps+1, B, d), line-search steps α_k (steps, B), conjugacy coefficients γ_k
    (steps, B) with γ_0 = 0."""

    iterates: torch.Tensor
    alpha: torch.Tensor
    gamma: torch.Tensor


def conjugate_gradient(
    X: torch.Tensor, y: torch.Tensor, steps: int, w0: torch.Tensor | None = None, objective: Objective = "mean"
) -> CGDTrace:
    """CGD with exact line search on each prompt's quadratic (§2.2 and App. A.2):
    r_k = −∇R(w_k), γ_k = ‖r_k‖²/‖r_{k−1}‖² (Fletcher–Reeves, γ_0 = 0), s_k = r_k + γ_k s_{k−1},
    α_k = argmin_α R(w_k + α s_k) = r_kᵀs_k / s_kᵀHs_k, w_{k+1} = w_k + α_k s_k."""
    _check(X, y)
    if steps < 0:
        raise InputError(f"conjugate_gradient: steps must be >= 0, got {steps}")
    b, d, _ = X.shape
    w = torch.zeros(b, d, dtype=X.dtype, device=X.device) if w0 is None else w0
    iterates, alphas, gammas = [w], [], []
    s = r_prev_sq = None
    for _ in range(steps):
        r = -least_squares_gradient(X, y, w, objective)
        r_sq = (r * r).sum(-1)
        if s is None:
            gamma = torch.zeros_like(r_sq)
            s = r
        else:
            gamma = _safe_div(r_sq, r_prev_sq)
            s = r + gamma.unsqueeze(-1) * s
        alpha = _safe_div((r * s).sum(-1), (s * hessian_vector(X, s, objective)).sum(-1))
        w = w + alpha.unsqueeze(-1) * s
        iterates.append(w)
        alphas.append(alpha)
        gammas.append(gamma)
        r_prev_sq = r_sq
    empty = torch.zeros(0, b, dtype=X.dtype, device=X.device)
    return CGDTrace(
        iterates=torch.stack(iterates),
        alpha=torch.stack(alphas) if alphas else empty,
        gamma=torch.stack(gammas) if gammas else empty,
    )


def momentum_gd(
    X: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    eta: float = MGD_ETA,
    beta: float = MGD_BETA,
    objective: Objective = "sum",
) -> torch.Tensor:
    """Heavy-ball momentum GD (§2.2, App. B.2): v_{k+1} = βv_k − η∇f(w_k), w_{k+1} = w_k + v_{k+1}, v_0 = 0."""
    _check(X, y)
    b, d, _ = X.shape
    w = torch.zeros(b, d, dtype=X.dtype, device=X.device)
    v = torch.zeros_like(w)
    out = [w]
    for _ in range(steps):
        v = beta * v - eta * least_squares_gradient(X, y, w, objective)
        w = w + v
        out.append(w)
    return torch.stack(out)


def nesterov(
    X: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    eta: float = NAG_ETA,
    beta: float = NAG_BETA,
    objective: Objective = "sum",
) -> torch.Tensor:
    """Nesterov's accelerated gradient (App. B.1): v_{k+1} = w_k + β(w_k − w_{k−1}), w_{k+1} = v_{k+1} − η∇f(v_{k+1}),
    with w_{−1} = w_0 = 0."""
    _check(X, y)
    b, d, _ = X.shape
    w = torch.zeros(b, d, dtype=X.dtype, device=X.device)
    w_prev = w
    out = [w]
    for _ in range(steps):
        v = w + beta * (w - w_prev)
        w_prev, w = w, v - eta * least_squares_gradient(X, y, v, objective)
        out.append(w)
    return torch.stack(out)


def preconditioned_gd(
    X: torch.Tensor, y: torch.Tensor, preconditioners: torch.Tensor, objective: Objective = "mean"
) -> torch.Tensor:
    """w_{ℓ+1} = w_ℓ − A_ℓ ∇R(w_ℓ) from w₀ = 0 (Lemma 1, Eq. 11). preconditioners: (L, d, d) shared or (L, B, d, d)
    per prompt."""
    _check(X, y)
    b, d, _ = X.shape
    if preconditioners.ndim not in (3, 4) or preconditioners.shape[-2:] != (d, d):
        raise InputError(
            f"preconditioners must be (L, {d}, {d}) or (L, B, {d}, {d}), got {tuple(preconditioners.shape)}"
        )
    w = torch.zeros(b, d, dtype=X.dtype, device=X.device)
    out = [w]
    for A in preconditioners:
        g = least_squares_gradient(X, y, w, objective)
        w = w - (g @ A.mT if A.ndim == 2 else torch.einsum("bij,bj->bi", A, g))
        out.append(w)
    return torch.stack(out)


def incremental_lfom(
    X: torch.Tensor, y: torch.Tensor, coefficients: torch.Tensor, objective: Objective = "mean"
) -> torch.Tensor:
    """The LFOM w_{ℓ+1} = w_ℓ − Σ_{j≤ℓ} c_{ℓ,j} ⊙ ∇R(w_j) (Eq. 20's update in parameter space). coefficients: (L, L)
    scalars or (L, L, d) diagonal preconditioners, entry [ℓ, j]; entries with j > ℓ are ignored. In Eq. 16's cumulative
    form w_{k+1} = w_0 + Σ_i Γ_i^k ∇R(w_i) this is Γ_i^k = −Σ_{ℓ=i}^{k} c_{ℓ,i}."""
    _check(X, y)
    b, d, _ = X.shape
    L = coefficients.shape[0]
    if coefficients.shape[:2] != (L, L) or coefficients.ndim not in (2, 3):
        raise InputError(f"coefficients must be (L, L) or (L, L, d), got {tuple(coefficients.shape)}")
    w = torch.zeros(b, d, dtype=X.dtype, device=X.device)
    out, grads = [w], []
    for layer in range(L):
        grads.append(least_squares_gradient(X, y, w, objective))
        step = torch.zeros_like(w)
        for j in range(layer + 1):
            c = coefficients[layer, j]
            step = step + (c * grads[j] if c.ndim == 0 else c.unsqueeze(0) * grads[j])
        w = w - step
        out.append(w)
    return torch.stack(out)


def momentum_lfom_coefficients(steps: int, eta: float = MGD_ETA, beta: float = MGD_BETA) -> torch.Tensor:
    """c_{ℓ,j} = ηβ^{ℓ−j} (j ≤ ℓ): heavy-ball momentum written as an incremental LFOM, since
    w_{ℓ+1} − w_ℓ = v_{ℓ+1} = −η Σ_{j≤ℓ} β^{ℓ−j} ∇f(w_j)."""
    idx = torch.arange(steps, dtype=torch.float64)
    diff = idx[:, None] - idx[None, :]
    return torch.where(diff >= 0, eta * beta ** diff.clamp_min(0), torch.zeros_like(diff))


def query_losses(iterates: torch.Tensor, x_query: torch.Tensor, y_query: torch.Tensor) -> torch.Tensor:
    """Eq. 8's test loss of each iterate: mean over prompts of (⟨w_k, x(n+1)⟩ − y(n+1))², shape (steps+1,)."""
    pred = torch.einsum("kbd,bd->kb", iterates, x_query)
    return ((pred - y_query.unsqueeze(0)) ** 2).mean(-1)

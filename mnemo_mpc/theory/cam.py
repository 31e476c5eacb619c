"""Compact associative memory (CAM) of seed 002 §4 and its baselines, on patterns in {-1, +1}^N.

- `ExponentialMemory`: the regular exponential associative memory, E_reg(ξ) = -Σ_μ exp(β ξᵀξ^μ) (Eq. 10,
  Demircigil et al. 2017; the paper's β = 1).
- `CompactAssociativeMemory`: E_rand(ξ) = φ(ξ)ᵀM with M = -Σ_μ φ(ξ^μ) (Eq. 14-15), φ one of the random feature maps
  of `mnemo_mpc.memory.features` (FAVOR++ in Theorem 4.4; FAVOR+ and hyperbolic FAVOR+ for comparison). Storing the
  r-vector M replaces storing the M patterns (Remark 4.3).
- `HopfieldMemory`: the classical Hopfield network with the Hebb rule W = (1/N) Σ_μ ξ^μ ξ^μᵀ, zero diagonal,
  E(ξ) = -½ ξᵀWξ.
- `run_dynamics`: the asynchronous dynamics of Eq. 11-12: a random coordinate j is set to the value of lower energy,
  T_j(ξ)[j] = sgn[E(ξ[j; -1]) - E(ξ[j; +1])] (a tie keeps the current value).
- Theorem 4.4 helpers: the capacity bound, exact expectation of ΔE_rand under a bit flip (= ΔE_reg, since the
  features are unbiased), and the closed-form variance of Eq. 16-18.

Each model keeps an incremental "field" per state (projections ωξ for the CAM, overlaps Ξξ for the exponential
memory, Wξ for Hopfield) so that one coordinate update costs O(r), O(M) or O(N) instead of recomputing energies.
Everything runs in float64: with β = 1 the energies are of order e^N.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.features import (
    FEATURE_KINDS,
    draw_projections,
    favor_plus_features,
    favor_plus_plus_coefficients,
    favor_plus_plus_features,
    favor_plus_plus_gamma,
    hyperbolic_features,
    rho_star,
)

__all__ = [
    "CompactAssociativeMemory",
    "ExponentialMemory",
    "HopfieldMemory",
    "ball_point",
    "capacity_bound",
    "delta_energy_terms",
    "expected_delta_energy",
    "flip",
    "hamming_distances",
    "run_dynamics",
    "separated_memories",
    "variance_delta_energy",
    "variance_delta_energy_by_kind",
]

DTYPE = torch.float64


# --------------------------------------------------------------------------------------------------------------
# patterns


def _check_patterns(x: Tensor, name: str) -> None:
    if not isinstance(x, Tensor) or x.ndim < 1:
        raise InputError(f"{name} must be a tensor of ±1 patterns (..., N)")
    if not torch.all((x == 1) | (x == -1)):
        raise InputError(f"{name} must contain only -1 and +1 entries")


def hamming_distances(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise Hamming distances of ±1 patterns: (n, N) × (m, N) -> (n, m), via d = (N - aᵀb)/2."""
    return ((a.shape[-1] - a.to(DTYPE) @ b.to(DTYPE).T) / 2).round().to(torch.long)


def separated_memories(
    num_memories: int,
    dim: int,
    tau: float,
    *,
    generator: torch.Generator | None = None,
    max_proposals: int = 2_000_000,
    allow_fewer: bool = False,
) -> Tensor:
    """M uniformly random patterns in {-1, +1}^N with pairwise Hamming distance >= ⌈τN⌉ (Theorem 4.4's
    assumption), by sequential rejection sampling, so the first m rows of the result are such a set for every m.
    When `max_proposals` random candidates do not yield M patterns (no such code may exist: see the Hamming
    bound) it raises InputError, or with `allow_fewer` returns the patterns found so far."""
    if num_memories < 1 or dim < 1:
        raise InputError(f"num_memories and dim must be >= 1, got {num_memories}, {dim}")
    if not 0.0 <= tau <= 1.0:
        raise InputError(f"tau must lie in [0, 1], got {tau}")
    min_dist = math.ceil(tau * dim - 1e-9)
    accepted = torch.empty(0, dim, dtype=DTYPE)
    proposals = 0
    batch = 256
    while accepted.shape[0] < num_memories:
        if proposals >= max_proposals:
            if allow_fewer:
                break
            raise InputError(
                f"could not draw {num_memories} patterns of length {dim} with pairwise Hamming distance >= "
                f"{min_dist} (tau={tau}) in {max_proposals} proposals; got {accepted.shape[0]}"
            )
        cand = torch.randint(0, 2, (batch, dim), generator=generator).to(DTYPE) * 2 - 1
        proposals += batch
        if accepted.shape[0]:
            ok = hamming_distances(cand, accepted).min(dim=1).values >= min_dist
            cand = cand[ok]
        # Candidates of one batch must also be separated from each other: keep them greedily in order.
        keep: list[int] = []
        if cand.shape[0]:
            close = (hamming_distances(cand, cand) < min_dist).numpy()
            for i in range(cand.shape[0]):
                if not close[i, keep].any():
                    keep.append(i)
                    if accepted.shape[0] + len(keep) == num_memories:
                        break
        accepted = torch.cat([accepted, cand[keep]])
    return accepted


def flip(x: Tensor, index: int | Tensor) -> Tensor:
    """neg(x, i): x with coordinate i negated (Appendix A.1, seed 002)."""
    out = x.clone()
    out[..., index] = -out[..., index]
    return out


def ball_point(
    center: Tensor, radius: int, *, generator: torch.Generator | None = None, toward: Tensor | None = None
) -> Tensor:
    """A pattern at Hamming distance exactly `radius` from `center` (a point of B(ξ, ρN), Def. 4.1).

    Random coordinates by default; with `toward`, the flipped coordinates are drawn from those where `toward`
    differs from `center`, i.e. the input is moved towards another memory (the adversarial case of Theorem 4.4).
    """
    n = center.shape[-1]
    if not 0 <= radius <= n:
        raise InputError(f"radius must lie in [0, N={n}], got {radius}")
    if toward is None:
        pool = torch.arange(n)
    else:
        pool = torch.nonzero(center != toward).flatten()
        if pool.numel() < radius:
            pool = torch.cat([pool, torch.nonzero(center == toward).flatten()])
    idx = pool[torch.randperm(pool.numel(), generator=generator)[:radius]]
    out = center.clone()
    out[idx] = -out[idx]
    return out


def capacity_bound(dim: int, tau: float, rho: float) -> float:
    """Theorem 4.4: M <= exp(2N(τ - 2ρ)) (1 - e^{-2}) / (2e²) guarantees the sign of E[ΔE_rand]."""
    if not 0 < rho < tau / 2:
        raise InputError(f"Theorem 4.4 needs 0 < rho < tau/2, got rho={rho}, tau={tau}")
    return math.exp(2 * dim * (tau - 2 * rho)) * (1 - math.exp(-2)) / (2 * math.exp(2))


# --------------------------------------------------------------------------------------------------------------
# energies and Theorem 4.4


def expected_delta_energy(memories: Tensor, x: Tensor, *, beta: float = 1.0) -> Tensor:
    """E[ΔE_rand] = ΔE_reg for flipping each coordinate of x (Eq. 19, 23-26): (..., N) -> (..., N).

    ΔE_i = E(neg(x, i)) - E(x) = Σ_μ [exp(β ξ^μᵀx) - exp(β ξ^μᵀneg(x, i))]. Unbiased feature maps make this the
    mean of ΔE_rand for any of them.
    """
    _check_patterns(memories, "memories")
    dots = x.to(DTYPE) @ memories.T  # (..., M)
    # ξ^μᵀneg(x, i) = ξ^μᵀx - 2 x_i ξ^μ_i
    flipped = dots.unsqueeze(-1) - 2 * x.to(DTYPE).unsqueeze(-2) * memories  # (..., M, N)
    return (torch.exp(beta * dots).unsqueeze(-1) - torch.exp(beta * flipped)).sum(dim=-2)


def _signed_sum(log_terms: list[Tensor], signs: list[float]) -> float:
    # The terms are of order e^{8N}: shift by the largest log before exponentiating.
    logs = torch.stack(log_terms)
    shift = logs.max()
    total = sum(sg * torch.exp(lt - shift) for lt, sg in zip(log_terms, signs, strict=True))
    return float(total * torch.exp(shift))


def _per_projection_variance(
    memories: Tensor, x: Tensor, xt: Tensor, a_hat: float, log_d: float, denom: float
) -> float:
    """Var of one positive-random-feature term T(ω) = Σ_μ (W^μ - Z^μ) for ω ~ N(0, I_N) (proof of Thm 4.4)."""
    n = memories.shape[1]
    b2 = 1 + 4 * a_hat
    pair = memories.unsqueeze(0) + memories.unsqueeze(1)  # (M, M, N)
    log_pref = 4 * log_d - 2 * n - n / 2 * math.log1p(8 * a_hat)

    def log_psi_sum(extra: Tensor) -> Tensor:
        sq = ((pair + extra) ** 2).sum(-1)
        return torch.logsumexp((log_pref + b2 * sq / (2 * denom)).flatten(), 0)

    v1, v2, v3 = log_psi_sum(2 * x), log_psi_sum(2 * xt), log_psi_sum(x + xt)
    lw = torch.logsumexp(memories @ x, 0)
    lz = torch.logsumexp(memories @ xt, 0)
    return _signed_sum([v1, v2, v3, 2 * lw, 2 * lz, lw + lz], [1, 1, -2, -1, -1, 2])


def variance_delta_energy(
    memories: Tensor, x: Tensor, index: int, rho: float, num_features: int, *, as_printed: bool = False
) -> float:
    """Closed-form Var(ΔE_rand) of Theorem 4.4 for FAVOR++ with iid ω (Eq. 16-18, seed 002).

    Var = (1/r)(V1 + V2 - 2V3 - V4 - V5 + 2V6) with V1..V3 sums of Ψ over pairs (μ1, μ2) at ξ^μ1 + ξ^μ2 + (2ξ̂,
    2ξ̃, ξ̂ + ξ̃) and V4..V6 the products of the means (exp(ξ^μ1ᵀξ̂)exp(ξ^μ2ᵀξ̂), the same with ξ̃, and the mixed
    one; the extracted text prints all three alike). Ψ(x) = D⁴ e^{-2N} (1 + 8Â)^{-N/2} exp(B²‖x‖²/(2(1 + 8Â))):
    Eq. 40 with A -> -4Â gives 1 + 8Â in the exponent, where Eq. 18 prints 1 - 8Â; `as_printed=True` evaluates
    the printed form for comparison. ρ uses this package's FAVOR++ convention (features.py).
    """
    _check_patterns(memories, "memories")
    _check_patterns(x, "x")
    n = memories.shape[1]
    coef = favor_plus_plus_coefficients(rho, n)
    x = x.to(DTYPE)
    denom = (1 - 8 * coef.a_hat) if as_printed else (1 + 8 * coef.a_hat)
    var = _per_projection_variance(memories.to(DTYPE), x, flip(x, index), coef.a_hat, coef.log_d, denom)
    return var / num_features


def variance_delta_energy_by_kind(
    memories: Tensor, x: Tensor, index: int, kind: str, num_features: int, *, rho: float | None = None
) -> float:
    """Closed-form Var(ΔE_rand) with r iid features for each feature map (proof of Thm 4.4 extended, Remark 4.5).

    FAVOR++: Eq. 16-18 (corrected). FAVOR+: the same with Â = 0 (B = D = 1). Hyperbolic: a pair term
    P = (T(ω) + T(-ω))/2 has E[P²] = (E[T²] + E[T(ω)T(-ω)])/2 with E[T(ω)T(-ω)] built from
    E[exp(ωᵀ(a - b))] = exp(‖a - b‖²/2), and r features hold r/2 pairs.
    """
    _check_patterns(memories, "memories")
    _check_patterns(x, "x")
    if kind == "favor_plus_plus":
        if rho is None:
            raise InputError("variance_delta_energy_by_kind: FAVOR++ needs rho")
        return variance_delta_energy(memories, x, index, rho, num_features)
    mem = memories.to(DTYPE)
    x = x.to(DTYPE)
    xt = flip(x, index)
    var_t = _per_projection_variance(mem, x, xt, 0.0, 0.0, 1.0)
    if kind == "favor_plus":
        return var_t / num_features
    if kind != "hyperbolic":
        raise InputError(f"kind must be one of {', '.join(FEATURE_KINDS)}, got {kind!r}")
    n = mem.shape[1]
    a_x, a_t = mem + x, mem + xt  # s^μ = ξ^μ + x (resp. x̃); T(ω) = e^{-N} Σ_μ (e^{ωᵀs_x^μ} - e^{ωᵀs_t^μ})

    def log_cross(a: Tensor, b: Tensor) -> Tensor:
        diff = a.unsqueeze(1) - b.unsqueeze(0)
        return torch.logsumexp((-2 * n + 0.5 * (diff**2).sum(-1)).flatten(), 0)

    lw = torch.logsumexp(mem @ x, 0)
    lz = torch.logsumexp(mem @ xt, 0)
    mean_sq_log = [2 * lw, 2 * lz, lw + lz]
    # E[T(ω)T(-ω)] - (E T)²
    cov = _signed_sum(
        [log_cross(a_x, a_x), log_cross(a_x, a_t), log_cross(a_t, a_x), log_cross(a_t, a_t), *mean_sq_log],
        [1, -1, -1, 1, -1, -1, 2],
    )
    var_pair = 0.5 * (var_t + cov)
    return var_pair / (num_features / 2)


def delta_energy_terms(
    memories: Tensor,
    x: Tensor,
    index: int,
    omega: Tensor,
    *,
    kind: str = "favor_plus_plus",
    rho: float | None = None,
    beta: float = 1.0,
) -> Tensor:
    """Per-projection terms Z_k = Σ_μ (W_k^μ - Z_k^μ) of ΔE_rand (Eq. 19-22 and 34, seed 002), one per row of ω.

    ΔE_rand = E_rand(neg(x, i)) - E_rand(x) computed with the first r features is the mean of the first r terms
    (r/2 terms for the hyperbolic map, whose term k is the mean over the antithetic pair ±ω_k). Each term is an
    unbiased estimate of ΔE_reg. Features come from `mnemo_mpc.memory.features`.
    """
    _check_patterns(memories, "memories")
    _check_patterns(x, "x")
    root = math.sqrt(beta)
    pts = torch.stack([x.to(DTYPE), flip(x.to(DTYPE), index)]) * root
    mem = memories.to(DTYPE) * root
    if kind == "favor_plus":
        phi_m, phi_x = favor_plus_features(mem, omega), favor_plus_features(pts, omega)
    elif kind == "hyperbolic":
        phi_m, phi_x = hyperbolic_features(mem, omega), hyperbolic_features(pts, omega)
    elif kind == "favor_plus_plus":
        if rho is None:
            raise InputError("delta_energy_terms: FAVOR++ needs rho")
        phi_m, phi_x = favor_plus_plus_features(mem, omega, rho), favor_plus_plus_features(pts, omega, rho)
    else:
        raise InputError(f"kind must be one of {', '.join(FEATURE_KINDS)}, got {kind!r}")
    width = phi_x.shape[-1]  # features are scaled by 1/√width; undo it so each term is a full estimate
    terms = width * phi_m.sum(0) * (phi_x[0] - phi_x[1])
    if kind == "hyperbolic":
        terms = terms.reshape(-1, 2).mean(-1)
    return terms


# --------------------------------------------------------------------------------------------------------------
# models


class _Memory(ABC):
    """Interface for `run_dynamics`: a per-state field and the preferred value of one coordinate."""

    dim: int

    @abstractmethod
    def field(self, x: Tensor) -> Tensor: ...

    @abstractmethod
    def preferred(self, x: Tensor, f: Tensor, j: Tensor) -> Tensor:
        """sgn[E(x[j;-1]) - E(x[j;+1])] per row, 0 on a tie (Eq. 12)."""

    @abstractmethod
    def update_field(self, f: Tensor, j: Tensor, delta: Tensor) -> Tensor:
        """Field after x[j] changes by `delta` (0 or ±2) per row."""

    @abstractmethod
    def energy(self, x: Tensor) -> Tensor: ...


class ExponentialMemory(_Memory):
    """Regular exponential associative memory, E_reg(ξ) = -Σ_μ exp(β ξᵀξ^μ) (Eq. 10, seed 002)."""

    def __init__(self, memories: Tensor, *, beta: float = 1.0) -> None:
        _check_patterns(memories, "memories")
        self.memories = memories.to(DTYPE)
        self.dim = memories.shape[1]
        self.beta = float(beta)

    def energy(self, x: Tensor) -> Tensor:
        return -torch.exp(self.beta * (x.to(DTYPE) @ self.memories.T)).sum(-1)

    def field(self, x: Tensor) -> Tensor:
        return x.to(DTYPE) @ self.memories.T  # overlaps (T, M)

    def preferred(self, x: Tensor, f: Tensor, j: Tensor) -> Tensor:
        xj = x.gather(1, j[:, None])  # (T, 1)
        col = self.memories[:, j].T  # (T, M): ξ^μ_j
        base = f - xj * col  # overlap without coordinate j
        # -E(x[j;+1]) vs -E(x[j;-1]) compared in log space: the sums are of order e^{βN}.
        plus = torch.logsumexp(self.beta * (base + col), dim=1)
        minus = torch.logsumexp(self.beta * (base - col), dim=1)
        return torch.sign(plus - minus)

    def update_field(self, f: Tensor, j: Tensor, delta: Tensor) -> Tensor:
        return f + delta[:, None] * self.memories[:, j].T


class HopfieldMemory(_Memory):
    """Classical Hopfield network, Hebb rule W = (1/N) Σ_μ ξ^μ ξ^μᵀ with zero diagonal, E = -½ ξᵀWξ."""

    def __init__(self, memories: Tensor) -> None:
        _check_patterns(memories, "memories")
        m = memories.to(DTYPE)
        self.dim = m.shape[1]
        self.weights = m.T @ m / self.dim
        self.weights.fill_diagonal_(0.0)

    def energy(self, x: Tensor) -> Tensor:
        x = x.to(DTYPE)
        return -0.5 * ((x @ self.weights) * x).sum(-1)

    def field(self, x: Tensor) -> Tensor:
        return x.to(DTYPE) @ self.weights  # local fields h = Wx (T, N)

    def preferred(self, x: Tensor, f: Tensor, j: Tensor) -> Tensor:
        # E(x[j;-1]) - E(x[j;+1]) = 2 h_j since W_jj = 0.
        return torch.sign(f.gather(1, j[:, None]).squeeze(1))

    def update_field(self, f: Tensor, j: Tensor, delta: Tensor) -> Tensor:
        return f + delta[:, None] * self.weights[j]


@dataclass(frozen=True)
class _FeatureSpec:
    kind: str
    rho: float | None


class CompactAssociativeMemory(_Memory):
    """Mnemosyne's compact associative memory, E_rand(ξ) = φ(ξ)ᵀM, M = -Σ_μ φ(ξ^μ) (Eq. 14-15, seed 002).

    `kind` picks φ: "favor_plus_plus" (Theorem 4.4; ρ defaults to ρ* of Eq. 9 with γ over all memory pairs, the
    inputs being near memories), "favor_plus" (Eq. 7) or "hyperbolic" (Eq. 8). `beta` scales the patterns by √β
    so that the estimated kernel is exp(β ξᵀξ'). The M patterns are not kept: only the r-vector M and ω.
    """

    def __init__(
        self,
        memories: Tensor,
        num_features: int,
        *,
        kind: str = "favor_plus_plus",
        rho: float | None = None,
        orthogonal: bool = False,
        beta: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        _check_patterns(memories, "memories")
        if kind not in FEATURE_KINDS:
            raise InputError(f"kind must be one of {', '.join(FEATURE_KINDS)}, got {kind!r}")
        if kind == "hyperbolic" and num_features % 2:
            raise InputError(f"hyperbolic features need an even num_features, got {num_features}")
        self.dim = memories.shape[1]
        self.num_features = int(num_features)
        self.beta = float(beta)
        self.scale = math.sqrt(self.beta)
        scaled = memories.to(DTYPE) * self.scale
        if kind == "favor_plus_plus" and rho is None:
            rho = float(rho_star(favor_plus_plus_gamma(scaled, scaled), self.dim))
        self.spec = _FeatureSpec(kind, rho)
        rows = num_features // 2 if kind == "hyperbolic" else num_features
        self.omega = draw_projections(rows, self.dim, orthogonal=orthogonal, generator=generator, dtype=DTYPE)
        # Column j of ω, scaled, is what one coordinate update needs: keep it contiguous per coordinate.
        self._columns = (self.omega.T * self.scale).contiguous()  # (N, rows)
        if kind == "favor_plus_plus":
            coef = favor_plus_plus_coefficients(rho, self.dim)
            self._b = coef.b
            self._offset = coef.log_d - coef.a_hat * (self.omega**2).sum(-1)  # per-projection constant
        else:
            self._b = 1.0
            self._offset = torch.zeros(rows, dtype=DTYPE)
        # M of Eq. 15, kept as log(-M) (M < 0 since features are positive) so large N does not overflow.
        self.log_neg_memory = torch.logsumexp(self._log_features(self.field(memories.to(DTYPE))), dim=0)

    @property
    def memory_vector(self) -> Tensor:
        """M(ξ^1, ..., ξ^M) of Eq. 15, shape (r,)."""
        return -torch.exp(self.log_neg_memory)

    def _log_features(self, proj: Tensor) -> Tensor:
        """log φ(ξ) from the projections ωᵀ(√β ξ) of ±1 patterns (‖√β ξ‖² = βN): (..., rows) -> (..., r)."""
        sq = self.beta * self.dim
        if self.spec.kind == "favor_plus":
            out = proj - 0.5 * sq
        elif self.spec.kind == "hyperbolic":
            out = torch.stack((proj - 0.5 * sq, -proj - 0.5 * sq), dim=-1).flatten(-2)
        else:
            out = self._b * proj + self._offset - 0.5 * sq
        return out - 0.5 * math.log(self.num_features)

    def features(self, x: Tensor) -> Tensor:
        """φ(√β x), identical to `mnemo_mpc.memory.features` for the same ω (tested)."""
        return torch.exp(self._log_features(self.field(x)))

    def energy(self, x: Tensor) -> Tensor:
        """E_rand(ξ) = φ(ξ)ᵀM (Eq. 14)."""
        return -torch.exp(torch.logsumexp(self._log_features(self.field(x)) + self.log_neg_memory, dim=-1))

    def field(self, x: Tensor) -> Tensor:
        return (x.to(DTYPE) * self.scale) @ self.omega.T  # projections (T, rows)

    def preferred(self, x: Tensor, f: Tensor, j: Tensor) -> Tensor:
        xj = x.gather(1, j[:, None]).to(DTYPE)
        col = self._columns[j]  # (T, rows)
        base = f - xj * col
        plus = torch.logsumexp(self._log_features(base + col) + self.log_neg_memory, dim=1)
        minus = torch.logsumexp(self._log_features(base - col) + self.log_neg_memory, dim=1)
        return torch.sign(plus - minus)

    def update_field(self, f: Tensor, j: Tensor, delta: Tensor) -> Tensor:
        return f + delta[:, None] * self._columns[j]


def run_dynamics(
    model: _Memory, x0: Tensor, *, max_sweeps: int = 10, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """Asynchronous dynamics of Eq. 11-12 (seed 002) for a batch of states x0: (T, N) -> (final (T, N), sweeps).

    Coordinates are visited in a fresh random order each sweep (Eq. 11 draws them at random; a permutation per
    sweep makes "a whole sweep without change" a certificate of a fixed point). Each visit sets
    x_j <- sgn[E(x[j;-1]) - E(x[j;+1])], keeping x_j on a tie. Stops when every row is at a fixed point.
    """
    _check_patterns(x0, "x0")
    if x0.ndim != 2 or x0.shape[1] != model.dim:
        raise InputError(f"x0 must have shape (T, {model.dim}), got {tuple(x0.shape)}")
    x = x0.to(DTYPE).clone()
    f = model.field(x)
    t, n = x.shape
    rows = torch.arange(t)
    sweeps = torch.zeros(t, dtype=torch.long)
    active = torch.ones(t, dtype=torch.bool)
    for _ in range(max_sweeps):
        if not active.any():
            break
        order = torch.argsort(torch.rand(t, n, generator=generator), dim=1)
        changed = torch.zeros(t, dtype=torch.bool)
        for step in range(n):
            j = order[:, step]
            want = model.preferred(x, f, j)
            cur = x[rows, j]
            new = torch.where(want == 0, cur, want)
            new = torch.where(active, new, cur)
            delta = new - cur
            if torch.any(delta != 0):
                x[rows, j] = new
                f = model.update_field(f, j, delta)
                changed |= delta != 0
        sweeps += active.long()
        active &= changed
    return x, sweeps

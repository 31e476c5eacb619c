"""Positive random features for the softmax kernel K(x, y) = exp(xᵀy) (seed 002 §3.2).

Three feature maps φ: R^d -> R^r with E[φ(x)ᵀφ(y)] = exp(xᵀy):

- FAVOR+ (Eq. 7, seed 002; Choromanski et al. 2021): φ(z) = Γ(z, r) (exp(ω₁ᵀz), ..., exp(ω_rᵀz)),
  Γ(z, r) = exp(-‖z‖²/2)/√r.
- hyperbolic-cosine FAVOR+ (Eq. 8): r/2 projections, each used twice as exp(+ωᵀz) and exp(-ωᵀz) (antithetic
  Monte Carlo), lower variance than FAVOR+ for the same r.
- FAVOR++ (§3.2.1; Likhosherstov et al. 2022, "optimal positive random features"): φ(z) = D/√r (exp(-Â‖ω_i‖² +
  Bω_iᵀz + C‖z‖²))_i with Â > 0, B = √(1 + 4Â), C = -1/2, D = (1 + 4Â)^{d/4}. Bounded in ω since Â > 0.

Projections ω are a block-orthogonal ensemble by default (QR of d×d Gaussian blocks, rows rescaled by
chi-distributed norms, as `gaussian_orthogonal_random_matrix` in google-research performer `fast_attention`), so
each row is still marginally N(0, I_d) and every estimator stays unbiased. `orthogonal=False` draws iid rows,
which the closed-form variance of Theorem 4.4 (Eq. 16-18) assumes.

FAVOR++ parametrisation. Seed 002 prints A = 1 - 1/ρ next to ρ* of Eq. 9, but ρ* of Eq. 9 is the minimiser of the
variance objective of Likhosherstov et al. (2022) for A = (1 - 1/ρ)/8 (i.e. 1 - 8A = 1/ρ); with A = 1 - 1/ρ the
"optimal" ρ* would not be optimal. We use A = (1 - 1/ρ)/8, so Eq. 9 is the optimum it claims to be
(`tests/test_memory_features.py` checks this numerically). Both give unbiased, bounded features for ρ ∈ (0, 1).

Stabilisation (`stabilize`): as in the Performer code, the largest exponent is subtracted before `exp` -- per
vector for queries (`"row"`) and over the whole key sequence for keys (`"sequence"`, max over the last two axes).
This rescales φ(q) by a per-query constant and all φ(k) by one constant, which cancels in attention's
normalisation but not in a raw kernel estimate; use `stabilize=None` (the default) for unbiased kernel values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from mnemo_mpc.errors import InputError

__all__ = [
    "FEATURE_KINDS",
    "FavorPlusFeatures",
    "FavorPlusPlusCoefficients",
    "FavorPlusPlusFeatures",
    "HyperbolicFeatures",
    "RandomFeatures",
    "Stabilize",
    "draw_projections",
    "favor_plus_features",
    "favor_plus_plus_coefficients",
    "favor_plus_plus_features",
    "favor_plus_plus_gamma",
    "gaussian_orthogonal_random_matrix",
    "hyperbolic_features",
    "iid_gaussian_random_matrix",
    "make_features",
    "optimal_rho",
    "rho_star",
    "softmax_kernel",
]

Stabilize = Literal["row", "sequence"] | None
FEATURE_KINDS = ("favor_plus", "hyperbolic", "favor_plus_plus")


# --------------------------------------------------------------------------------------------------------------
# random projections


def _check_sizes(num_rows: int, dim: int) -> None:
    if int(num_rows) != num_rows or num_rows < 1:
        raise InputError(f"num_features must be a positive integer, got {num_rows!r}")
    if int(dim) != dim or dim < 1:
        raise InputError(f"dim must be a positive integer, got {dim!r}")


def iid_gaussian_random_matrix(
    num_rows: int,
    dim: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Rows ω_i ~ N(0, I_d) drawn independently (the setting of Theorem 4.4, seed 002)."""
    _check_sizes(num_rows, dim)
    dtype = dtype or torch.get_default_dtype()
    return torch.randn(num_rows, dim, generator=generator, dtype=dtype).to(device)


def gaussian_orthogonal_random_matrix(
    num_rows: int,
    dim: int,
    *,
    scaling: Literal["chi", "sqrt_dim"] = "chi",
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Block-orthogonal ensemble (seed 002 §3.2, after Choromanski et al. 2021).

    Rows come in blocks of `dim` mutually orthogonal unit vectors (Q of a QR of a Gaussian d×d matrix); the last
    block is truncated. Each row is then rescaled by an independent chi(d) norm (`"chi"`, the norm of a fresh
    Gaussian vector) so that it is marginally N(0, I_d), or by √d (`"sqrt_dim"`, Performer's `scaling=1`).
    """
    _check_sizes(num_rows, dim)
    if scaling not in ("chi", "sqrt_dim"):
        raise InputError(f"scaling must be 'chi' or 'sqrt_dim', got {scaling!r}")
    dtype = dtype or torch.get_default_dtype()
    blocks = []
    remaining = num_rows
    while remaining > 0:
        # QR in float64: orthogonality to ~1e-15 regardless of the requested dtype.
        gaussian = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        # Householder QR returns Q with a sign convention on diag(R) that makes Q not Haar-distributed (the rows
        # then have a non-zero mean, and the kernel estimates a bias); fixing the signs gives a Haar Q (Mezzadri
        # 2007). The Performer code skips this step.
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        blocks.append(q.T[: min(dim, remaining)])
        remaining -= dim
    directions = torch.cat(blocks, dim=0)
    if scaling == "chi":
        norms = torch.linalg.vector_norm(
            torch.randn(num_rows, dim, generator=generator, dtype=torch.float64), dim=1, keepdim=True
        )
    else:
        norms = torch.full((num_rows, 1), math.sqrt(dim), dtype=torch.float64)
    return (norms * directions).to(dtype=dtype, device=device)


def draw_projections(
    num_rows: int,
    dim: int,
    *,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """ω ∈ R^{num_rows×dim}: block-orthogonal with chi norms (default) or iid Gaussian."""
    if orthogonal:
        return gaussian_orthogonal_random_matrix(num_rows, dim, generator=generator, dtype=dtype, device=device)
    return iid_gaussian_random_matrix(num_rows, dim, generator=generator, dtype=dtype, device=device)


# --------------------------------------------------------------------------------------------------------------
# functional feature maps


def softmax_kernel(x: Tensor, y: Tensor) -> Tensor:
    """Exact K(x, y) = exp(xᵀy) for all pairs: (..., n, d) × (..., m, d) -> (..., n, m)."""
    return torch.exp(x @ y.transpose(-1, -2))


def _check_input(x: Tensor, omega: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise InputError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if omega.ndim != 2:
        raise InputError(f"omega must have shape (num_projections, dim), got {tuple(omega.shape)}")
    if x.ndim < 1 or x.shape[-1] != omega.shape[1]:
        raise InputError(f"x must have shape (..., {omega.shape[1]}) to match omega, got {tuple(x.shape)}")


def _stabilized_exp(exponent: Tensor, stabilize: Stabilize, eps: float) -> Tensor:
    if stabilize is None:
        shift = None
    elif stabilize == "row":
        shift = exponent.amax(dim=-1, keepdim=True)
    elif stabilize == "sequence":
        if exponent.ndim < 2:
            raise InputError("stabilize='sequence' needs x of shape (..., length, dim)")
        shift = exponent.amax(dim=(-2, -1), keepdim=True)
    else:
        raise InputError(f"stabilize must be None, 'row' or 'sequence', got {stabilize!r}")
    if shift is not None:
        # The shift cancels in attention's normalisation, so no gradient needs to flow through it.
        exponent = exponent - shift.detach()
    out = torch.exp(exponent)
    return out + eps if eps else out


def favor_plus_features(x: Tensor, omega: Tensor, *, stabilize: Stabilize = None, eps: float = 0.0) -> Tensor:
    """FAVOR+ positive random features, Eq. 7 (seed 002): (..., d) -> (..., r) with r = omega.shape[0].

    φ(z) = exp(-‖z‖²/2)/√r · (exp(ω_iᵀz))_i, so E[φ(x)ᵀφ(y)] = exp(xᵀy) for ω_i ~ N(0, I_d).
    """
    _check_input(x, omega)
    r = omega.shape[0]
    exponent = x @ omega.T.to(x.dtype) - 0.5 * (x * x).sum(dim=-1, keepdim=True)
    return _stabilized_exp(exponent, stabilize, eps) / math.sqrt(r)


def hyperbolic_features(x: Tensor, omega: Tensor, *, stabilize: Stabilize = None, eps: float = 0.0) -> Tensor:
    """Hyperbolic-cosine FAVOR+ features, Eq. 8 (seed 002): (..., d) -> (..., r) with r = 2 · omega.shape[0].

    φ(z) = Γ(z, r) ∏_i (exp(ω_iᵀz), exp(-ω_iᵀz)) with Γ(z, r) = exp(-‖z‖²/2)/√r: the antithetic pair (ω, -ω)
    gives φ(x)ᵀφ(y) = (2/r) Σ_i exp(-(‖x‖²+‖y‖²)/2) cosh(ω_iᵀ(x+y)), unbiased for exp(xᵀy).
    """
    _check_input(x, omega)
    r = 2 * omega.shape[0]
    proj = x @ omega.T.to(x.dtype)
    half_sq = 0.5 * (x * x).sum(dim=-1, keepdim=True)
    # Interleave (+, -) per projection so feature 2i, 2i+1 belong to ω_i, as in Eq. 8's concatenation.
    exponent = torch.stack((proj - half_sq, -proj - half_sq), dim=-1).flatten(-2)
    return _stabilized_exp(exponent, stabilize, eps) / math.sqrt(r)


@dataclass(frozen=True)
class FavorPlusPlusCoefficients:
    """Â, B, C and log D of FAVOR++ (§3.2.1, seed 002) for a given ρ ∈ (0, 1) and input dimension d."""

    rho: float
    a_hat: float  # Â = -A > 0
    b: float  # B = √(1 + 4Â)
    c: float  # C = -1/2
    log_d: float  # log D = (d/4) log(1 + 4Â)


def favor_plus_plus_coefficients(rho: float, dim: int) -> FavorPlusPlusCoefficients:
    """Coefficients of FAVOR++ for ρ ∈ (0, 1) (§3.2.1 with A = (1 - 1/ρ)/8 of Likhosherstov et al. 2022; see the
    module docstring for why not the printed A = 1 - 1/ρ)."""
    rho = float(rho)
    if not (0.0 < rho < 1.0) or not math.isfinite(rho):
        raise InputError(f"FAVOR++ rho must lie in the open interval (0, 1), got {rho!r}")
    if int(dim) != dim or dim < 1:
        raise InputError(f"dim must be a positive integer, got {dim!r}")
    a_hat = (1.0 / rho - 1.0) / 8.0
    return FavorPlusPlusCoefficients(
        rho=rho,
        a_hat=a_hat,
        b=math.sqrt(1.0 + 4.0 * a_hat),
        c=-0.5,
        log_d=dim / 4.0 * math.log1p(4.0 * a_hat),
    )


def favor_plus_plus_features(
    x: Tensor, omega: Tensor, rho: float, *, stabilize: Stabilize = None, eps: float = 0.0
) -> Tensor:
    """FAVOR++ bounded positive random features, §3.2.1 (seed 002): (..., d) -> (..., r).

    φ(z) = D/√r · (exp(-Â‖ω_i‖² + Bω_iᵀz + C‖z‖²))_i, unbiased for exp(xᵀy) and, since Â > 0, bounded in ω.
    D is folded into the exponent (log D) so that large d does not overflow.
    """
    _check_input(x, omega)
    coef = favor_plus_plus_coefficients(rho, omega.shape[1])
    r = omega.shape[0]
    om = omega.to(x.dtype)
    exponent = (
        coef.b * (x @ om.T)
        - coef.a_hat * (om * om).sum(dim=-1)
        + coef.c * (x * x).sum(dim=-1, keepdim=True)
        + coef.log_d
    )
    return _stabilized_exp(exponent, stabilize, eps) / math.sqrt(r)


def favor_plus_plus_gamma(q: Tensor, k: Tensor) -> Tensor:
    """γ = (1/(n m)) Σ_i Σ_j ‖q^i + k^j‖² (below Eq. 9, seed 002) in time linear in n + m.

    q: (..., n, d), k: (..., m, d) -> (...). Uses Σ_ij ‖q^i + k^j‖² = m Σ‖q^i‖² + n Σ‖k^j‖² + 2 (Σq^i)ᵀ(Σk^j);
    the paper's rewriting drops the factors m and n, which only coincide with this when n = m = 1.
    """
    if q.ndim < 2 or k.ndim < 2 or q.shape[-1] != k.shape[-1]:
        raise InputError(
            f"q and k must have shapes (..., n, d) and (..., m, d), got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    n, m = q.shape[-2], k.shape[-2]
    total = (
        m * (q * q).sum(dim=(-2, -1))
        + n * (k * k).sum(dim=(-2, -1))
        + 2.0 * (q.sum(dim=-2) * k.sum(dim=-2)).sum(dim=-1)
    )
    return total / (n * m)


def rho_star(gamma: Tensor | float, dim: int) -> Tensor:
    """ρ* = (√((2γ + d)² + 8dγ) - 2γ - d) / (4γ), Eq. 9 (seed 002), the variance-minimising FAVOR++ parameter.

    Evaluated in the algebraically equal form 2d / (2γ + d + √((2γ + d)² + 8dγ)), which has no cancellation for
    large γ and tends to 1 as γ -> 0 (the limit of Eq. 9).
    """
    gamma_t = torch.as_tensor(gamma, dtype=torch.float64)
    if torch.any(gamma_t < 0) or not torch.all(torch.isfinite(gamma_t)):
        raise InputError(f"gamma must be finite and >= 0, got {gamma!r}")
    s = 2.0 * gamma_t + dim
    rho = 2.0 * dim / (s + torch.sqrt(s * s + 8.0 * dim * gamma_t))
    # ρ must stay inside the open interval: exactly 1 (γ = 0) means Â = 0, i.e. plain FAVOR+.
    return rho.clamp(max=1.0 - 1e-12)


def optimal_rho(q: Tensor, k: Tensor) -> float:
    """ρ* of Eq. 9 for a whole bidirectional kernel matrix [K(q^i, k^j)] (seed 002 §3.2.1), as one float."""
    gamma = favor_plus_plus_gamma(q.reshape(-1, q.shape[-1]), k.reshape(-1, k.shape[-1]))
    return float(rho_star(gamma, q.shape[-1]))


# --------------------------------------------------------------------------------------------------------------
# modules


class RandomFeatures(nn.Module):
    """Base for a random feature map (..., dim) -> (..., num_features); ω is a buffer, redrawn by `redraw()`.

    `seed` makes the first draw reproducible; `redraw()` continues the module's own generator unless one is given.
    """

    kind: str = ""

    def __init__(
        self,
        dim: int,
        num_features: int,
        *,
        orthogonal: bool = True,
        seed: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(num_features, dim)
        self.dim = int(dim)
        self.num_features = int(num_features)
        self.orthogonal = bool(orthogonal)
        self._generator = torch.Generator()
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        omega = draw_projections(
            self.num_projections, self.dim, orthogonal=self.orthogonal, generator=self._generator, dtype=dtype
        )
        self.register_buffer("omega", omega)

    @property
    def num_projections(self) -> int:
        """Number of rows of ω (r for FAVOR+/FAVOR++, r/2 for the hyperbolic map)."""
        return self.num_features

    @torch.no_grad()
    def redraw(self, generator: torch.Generator | None = None) -> None:
        """Draw fresh projections ω in place (Performer's feature redraw)."""
        new = draw_projections(
            self.num_projections,
            self.dim,
            orthogonal=self.orthogonal,
            generator=generator or self._generator,
            dtype=self.omega.dtype,
        )
        self.omega.copy_(new.to(self.omega.device))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_features={self.num_features}, orthogonal={self.orthogonal}"

    def kernel(self, x: Tensor, y: Tensor) -> Tensor:
        """Estimate of [exp(x_iᵀy_j)]: φ(x) φ(y)ᵀ, (..., n, d) × (..., m, d) -> (..., n, m)."""
        return self(x) @ self(y).transpose(-1, -2)


class FavorPlusFeatures(RandomFeatures):
    """FAVOR+ (Eq. 7, seed 002) as a module."""

    kind = "favor_plus"

    def forward(self, x: Tensor, stabilize: Stabilize = None, eps: float = 0.0) -> Tensor:
        return favor_plus_features(x, self.omega, stabilize=stabilize, eps=eps)


class HyperbolicFeatures(RandomFeatures):
    """Hyperbolic-cosine FAVOR+ (Eq. 8, seed 002) as a module; num_features must be even (r/2 projections)."""

    kind = "hyperbolic"

    def __init__(self, dim: int, num_features: int, **kwargs: object) -> None:
        if int(num_features) != num_features or num_features < 2 or num_features % 2:
            raise InputError(f"hyperbolic features need an even num_features >= 2, got {num_features!r}")
        super().__init__(dim, num_features, **kwargs)  # type: ignore[arg-type]

    @property
    def num_projections(self) -> int:
        return self.num_features // 2

    def forward(self, x: Tensor, stabilize: Stabilize = None, eps: float = 0.0) -> Tensor:
        return hyperbolic_features(x, self.omega, stabilize=stabilize, eps=eps)


class FavorPlusPlusFeatures(RandomFeatures):
    """FAVOR++ (§3.2.1, seed 002) as a module with a default ρ; `forward(x, rho=...)` overrides it per call (e.g.
    with ρ* of Eq. 9 from `optimal_rho(q, k)`, which queries and keys must then share)."""

    kind = "favor_plus_plus"

    def __init__(self, dim: int, num_features: int, *, rho: float = 0.5, **kwargs: object) -> None:
        favor_plus_plus_coefficients(rho, dim)  # validate early
        super().__init__(dim, num_features, **kwargs)  # type: ignore[arg-type]
        self.rho = float(rho)

    def forward(self, x: Tensor, stabilize: Stabilize = None, eps: float = 0.0, rho: float | None = None) -> Tensor:
        return favor_plus_plus_features(x, self.omega, self.rho if rho is None else rho, stabilize=stabilize, eps=eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rho={self.rho}"


_KINDS: dict[str, type[RandomFeatures]] = {
    "favor_plus": FavorPlusFeatures,
    "hyperbolic": HyperbolicFeatures,
    "favor_plus_plus": FavorPlusPlusFeatures,
}


def make_features(
    kind: str,
    dim: int,
    num_features: int,
    *,
    orthogonal: bool = True,
    seed: int | None = None,
    dtype: torch.dtype | None = None,
    rho: float = 0.5,
) -> RandomFeatures:
    """Factory: `kind` in {"favor_plus", "hyperbolic", "favor_plus_plus"}; `rho` only applies to FAVOR++."""
    if kind not in _KINDS:
        raise InputError(f"feature kind must be one of {', '.join(FEATURE_KINDS)}, got {kind!r}")
    kwargs: dict = {"orthogonal": orthogonal, "seed": seed, "dtype": dtype}
    if kind == "favor_plus_plus":
        kwargs["rho"] = rho
    return _KINDS[kind](dim, num_features, **kwargs)

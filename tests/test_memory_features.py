"""Random feature maps of seed 002 §3.2: unbiasedness, variance ordering, boundedness, projections, ρ*."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.features import (
    FEATURE_KINDS,
    FavorPlusPlusFeatures,
    HyperbolicFeatures,
    favor_plus_features,
    favor_plus_plus_coefficients,
    favor_plus_plus_features,
    favor_plus_plus_gamma,
    gaussian_orthogonal_random_matrix,
    hyperbolic_features,
    iid_gaussian_random_matrix,
    make_features,
    optimal_rho,
    rho_star,
    softmax_kernel,
)

DT = torch.float64


def _pairs(d: int = 6, n: int = 4, scale: float = 0.35, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n, d, generator=g, dtype=DT), scale * torch.randn(n, d, generator=g, dtype=DT)


def _per_sample_estimates(kind: str, x: torch.Tensor, y: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Unbiased single-projection estimates of exp(x_iᵀy_i): (num_projections, n)."""
    if kind == "favor_plus":
        fx, fy = favor_plus_features(x, omega), favor_plus_features(y, omega)
        return (fx * fy * omega.shape[0]).T
    if kind == "hyperbolic":
        fx, fy = hyperbolic_features(x, omega), hyperbolic_features(y, omega)
        prod = (fx * fy * 2 * omega.shape[0]).reshape(x.shape[0], omega.shape[0], 2)
        return prod.mean(dim=-1).T  # antithetic pair = one sample
    rho = optimal_rho(x, y)
    fx, fy = favor_plus_plus_features(x, omega, rho), favor_plus_plus_features(y, omega, rho)
    return (fx * fy * omega.shape[0]).T


@pytest.mark.parametrize("kind", FEATURE_KINDS)
@pytest.mark.parametrize("orthogonal", [False, True])
def test_kernel_estimate_is_unbiased(kind: str, orthogonal: bool) -> None:
    # z-test per pair: blocks of d orthogonal rows are independent, so block means are iid samples; 5 standard
    # errors (Bonferroni over 4 pairs × 6 cases at ~1e-6 false-alarm) is a sound tolerance.
    d = 6
    x, y = _pairs(d)
    num_blocks = 20000
    gen = torch.Generator().manual_seed(123)
    if orthogonal:
        omega = gaussian_orthogonal_random_matrix(num_blocks * d, d, generator=gen, dtype=DT)
    else:
        omega = iid_gaussian_random_matrix(num_blocks * d, d, generator=gen, dtype=DT)
    samples = _per_sample_estimates(kind, x, y, omega)  # (P, n)
    blocks = samples.reshape(num_blocks, d, -1).mean(dim=1)
    mean = blocks.mean(dim=0)
    se = blocks.std(dim=0) / math.sqrt(num_blocks)
    exact = torch.exp((x * y).sum(dim=-1))
    z = (mean - exact) / se
    assert torch.all(z.abs() < 5.0), f"{kind}: z-scores {z.tolist()}"
    assert torch.allclose(mean, exact, rtol=0.02)


@pytest.mark.parametrize("kind", FEATURE_KINDS)
def test_module_kernel_matrix_converges(kind: str) -> None:
    d = 5
    x, y = _pairs(d, n=3, scale=0.3)
    f = make_features(kind, d, 40000, seed=3, dtype=DT, rho=optimal_rho(x, y))
    est = f.kernel(x, y)
    assert est.shape == (3, 3)
    assert torch.allclose(est, softmax_kernel(x, y), rtol=0.05)


def test_hyperbolic_variance_not_above_favor_plus() -> None:
    # Closed forms (per feature budget r): Var_F+ = (e^{2‖s‖²-‖x‖²-‖y‖²} - e^{2xᵀy})/r and
    # Var_HF+ = (e^{2‖s‖²-‖x‖²-‖y‖²} + e^{-‖x‖²-‖y‖²} - 2e^{2xᵀy})/r with s = x + y; plus the empirical check.
    d = 4
    x, y = _pairs(d, n=6, scale=0.3, seed=5)
    s2 = ((x + y) ** 2).sum(-1)
    nx, ny, xy = (x * x).sum(-1), (y * y).sum(-1), (x * y).sum(-1)
    var_fp = torch.exp(2 * s2 - nx - ny) - torch.exp(2 * xy)
    var_hyp_pair = 0.5 * (torch.exp(2 * s2 - nx - ny) + torch.exp(-nx - ny)) - torch.exp(2 * xy)
    assert torch.all(var_hyp_pair <= var_fp / 2 + 1e-12)  # one antithetic pair costs two features

    gen = torch.Generator().manual_seed(7)
    omega = iid_gaussian_random_matrix(400000, d, generator=gen, dtype=DT)
    emp_fp = _per_sample_estimates("favor_plus", x, y, omega).var(dim=0)  # per feature
    emp_hyp = _per_sample_estimates("hyperbolic", x, y, omega[:200000]).var(dim=0)  # per pair = 2 features
    assert torch.allclose(emp_fp, var_fp, rtol=0.15)
    assert torch.allclose(emp_hyp, var_hyp_pair, rtol=0.15)
    assert torch.all(emp_hyp <= emp_fp / 2)


def test_favor_plus_plus_bounded() -> None:
    d, rho = 5, 0.3
    coef = favor_plus_plus_coefficients(rho, d)
    x = torch.randn(7, d, dtype=DT)
    # sup over ω of -Â‖ω‖² + Bωᵀz: attained at ω = Bz/(2Â), value B²‖z‖²/(4Â).
    bound = torch.exp(coef.b**2 * (x * x).sum(-1) / (4 * coef.a_hat) + coef.c * (x * x).sum(-1) + coef.log_d)
    omega = torch.cat([torch.randn(2000, d, dtype=DT) * scale for scale in (1.0, 10.0, 1000.0)])
    omega = torch.cat([omega, coef.b * x / (2 * coef.a_hat)])  # the maximisers themselves
    feats = favor_plus_plus_features(x, omega, rho) * math.sqrt(omega.shape[0])
    assert torch.all(torch.isfinite(feats))
    assert torch.all(feats <= bound[:, None] * (1 + 1e-9))
    assert torch.allclose(feats.max(dim=-1).values, bound, rtol=1e-9)  # the bound is attained, so it is tight
    # FAVOR+ is unbounded in ω: the same large projections blow up.
    fp = favor_plus_features(x, omega[2000:4000] * 10)
    assert torch.isinf(fp).any() or fp.max() > 1e30


def test_block_orthogonal_rows() -> None:
    d, r = 8, 20
    om = gaussian_orthogonal_random_matrix(r, d, generator=torch.Generator().manual_seed(0), dtype=DT)
    assert om.shape == (r, d)
    for start in range(0, r, d):
        block = om[start : start + d]
        unit = block / block.norm(dim=1, keepdim=True)
        gram = unit @ unit.T
        assert torch.allclose(gram, torch.eye(block.shape[0], dtype=DT), atol=1e-12)
    sq = gaussian_orthogonal_random_matrix(r, d, scaling="sqrt_dim", dtype=DT)
    assert torch.allclose(sq.norm(dim=1), torch.full((r,), math.sqrt(d), dtype=DT))


def test_orthogonal_rows_are_marginally_gaussian() -> None:
    # Without the sign fix of the QR factor the rows have a non-zero mean and the kernel estimates are biased.
    d, r = 6, 60000
    om = gaussian_orthogonal_random_matrix(r, d, generator=torch.Generator().manual_seed(1), dtype=DT)
    assert torch.all(om.mean(0).abs() < 5 / math.sqrt(r))
    cov = om.T @ om / r
    assert torch.allclose(cov, torch.eye(d, dtype=DT), atol=0.03)


def test_stabilised_features_rescale_by_constants() -> None:
    d = 4
    x = torch.randn(3, 5, d, dtype=DT) * 2
    omega = torch.randn(16, d, dtype=DT)
    raw = favor_plus_features(x, omega)
    row = favor_plus_features(x, omega, stabilize="row")
    seq = favor_plus_features(x, omega, stabilize="sequence")
    ratio_row = raw / row
    assert torch.allclose(ratio_row, ratio_row[..., :1].expand_as(ratio_row))
    ratio_seq = (raw / seq).reshape(3, -1)
    assert torch.allclose(ratio_seq, ratio_seq[:, :1].expand_as(ratio_seq))
    assert row.amax(dim=-1).allclose(torch.full((3, 5), 1 / math.sqrt(16), dtype=DT))


def test_rho_star_minimises_variance_objective() -> None:
    # Eq. 9 is the minimiser of the mean log second moment of the FAVOR++ estimator over all (q, k) pairs,
    # log E[(φ(x)φ(y))²] = d log(1-4A) - d/2 log(1-8A) + 2(1-4A)‖x+y‖²/(1-8A) - ‖x‖² - ‖y‖², with A = (1 - 1/ρ)/8.
    d = 7
    q, k = _pairs(d, n=5, scale=0.8, seed=11)
    s2 = ((q[:, None, :] + k[None, :, :]) ** 2).sum(-1).numpy()

    def objective(rho: float) -> float:
        a = (1 - 1 / rho) / 8
        return float(np.mean(d * np.log(1 - 4 * a) - d / 2 * np.log(1 - 8 * a) + 2 * (1 - 4 * a) * s2 / (1 - 8 * a)))

    best = minimize_scalar(objective, bounds=(1e-4, 1 - 1e-9), method="bounded", options={"xatol": 1e-10})
    assert optimal_rho(q, k) == pytest.approx(best.x, abs=1e-5)
    gamma = favor_plus_plus_gamma(q, k)
    assert float(gamma) == pytest.approx(float(s2.mean()), rel=1e-12)
    # Eq. 9 written as printed agrees with our cancellation-free form.
    g = float(gamma)
    printed = (math.sqrt((2 * g + d) ** 2 + 8 * d * g) - 2 * g - d) / (4 * g)
    assert float(rho_star(g, d)) == pytest.approx(printed, rel=1e-10)


def test_empirical_variance_smallest_near_rho_star() -> None:
    d = 6
    x, y = _pairs(d, n=1, scale=1.0, seed=2)
    rs = optimal_rho(x, y)
    omega = iid_gaussian_random_matrix(200000, d, generator=torch.Generator().manual_seed(4), dtype=DT)

    def var(rho: float) -> float:
        return float((favor_plus_plus_features(x, omega, rho) * favor_plus_plus_features(y, omega, rho)).var())

    assert var(rs) < var(min(0.999, rs * 3)) and var(rs) < var(rs / 3)


def test_redraw_changes_projections_and_seed_reproduces() -> None:
    f = make_features("favor_plus", 4, 8, seed=0)
    g = make_features("favor_plus", 4, 8, seed=0)
    assert torch.equal(f.omega, g.omega)
    before = f.omega.clone()
    f.redraw()
    assert not torch.equal(before, f.omega)
    assert "omega" in dict(f.named_buffers())
    h = HyperbolicFeatures(4, 10, seed=0)
    assert h.omega.shape == (5, 4) and h(torch.zeros(2, 3, 4)).shape == (2, 3, 10)
    ff = FavorPlusPlusFeatures(4, 6, rho=0.2, seed=0)
    assert ff(torch.zeros(4)).shape == (6,)


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_features("relu", 4, 8),
        lambda: make_features("favor_plus", 4, 0),
        lambda: HyperbolicFeatures(4, 7),
        lambda: FavorPlusPlusFeatures(4, 8, rho=1.0),
        lambda: favor_plus_features(torch.zeros(3, 5), torch.zeros(8, 4)),
        lambda: favor_plus_features(torch.zeros(3, 4), torch.zeros(8, 4), stabilize="bogus"),
    ],
)
def test_bad_input_raises(call) -> None:
    with pytest.raises(InputError):
        call()

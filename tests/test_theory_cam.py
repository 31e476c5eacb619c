"""Compact associative memory of seed 002 §4: energies (Eq. 10, 14-15), dynamics (Eq. 11-12), Theorem 4.4 math."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.features import (
    favor_plus_features,
    favor_plus_plus_features,
    hyperbolic_features,
    iid_gaussian_random_matrix,
    optimal_rho,
)
from mnemo_mpc.theory import cam

DT = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _reference_features(model: cam.CompactAssociativeMemory, x: torch.Tensor) -> torch.Tensor:
    kind = model.spec.kind
    if kind == "favor_plus":
        return favor_plus_features(x, model.omega)
    if kind == "hyperbolic":
        return hyperbolic_features(x, model.omega)
    return favor_plus_plus_features(x, model.omega, model.spec.rho)


@pytest.mark.parametrize("kind", ["favor_plus", "hyperbolic", "favor_plus_plus"])
def test_energy_eq14_equals_definition(kind: str) -> None:
    g = _gen(1)
    mem = cam.separated_memories(6, 12, 0.25, generator=g)
    model = cam.CompactAssociativeMemory(mem, 64, kind=kind, generator=g)
    x = torch.stack([cam.ball_point(m, 2, generator=g) for m in mem])
    # way 1: the definition, φ(ξ)ᵀ(-Σ_μ φ(ξ^μ)) with the library's feature maps and the same ω
    phi_x, phi_m = _reference_features(model, x), _reference_features(model, mem)
    direct = phi_x @ (-phi_m.sum(0))
    # way 2: the memory's log-domain energy; way 3: the stored vector M of Eq. 15
    assert torch.allclose(model.energy(x), direct, rtol=1e-12)
    assert torch.allclose(model.features(x) @ model.memory_vector, direct, rtol=1e-12)
    assert torch.allclose(model.memory_vector, -phi_m.sum(0), rtol=1e-12)


def test_cam_energy_unbiased_for_exponential_energy() -> None:
    g = _gen(2)
    mem = cam.separated_memories(5, 4, 0.25, generator=g)
    x = cam.ball_point(mem[0], 1, generator=g)[None]
    exact = cam.ExponentialMemory(mem).energy(x)
    estimates = torch.stack(
        [cam.CompactAssociativeMemory(mem, 4096, kind="favor_plus_plus", generator=g).energy(x) for _ in range(60)]
    ).squeeze(1)
    z = (estimates.mean() - exact) / (estimates.std() / math.sqrt(estimates.numel()))
    assert abs(float(z)) < 5.0
    assert torch.allclose(estimates.mean(), exact, rtol=0.05)


def test_expected_delta_energy_matches_brute_force() -> None:
    g = _gen(3)
    mem = cam.separated_memories(7, 10, 0.2, generator=g)
    x = cam.ball_point(mem[2], 2, generator=g)
    model = cam.ExponentialMemory(mem)
    brute = torch.stack([model.energy(cam.flip(x, i)[None]) - model.energy(x[None]) for i in range(10)]).squeeze(1)
    assert torch.allclose(cam.expected_delta_energy(mem, x), brute, rtol=1e-12)


def _gauss_hermite_omega(points: int = 120) -> tuple[torch.Tensor, torch.Tensor]:
    t, w = np.polynomial.hermite.hermgauss(points)
    t1, t2 = np.meshgrid(t, t)
    omega = np.stack([t1.ravel(), t2.ravel()], 1) * math.sqrt(2)
    return torch.tensor(omega), torch.tensor(np.outer(w, w).ravel() / math.pi)


@pytest.mark.parametrize("kind", ["favor_plus", "hyperbolic", "favor_plus_plus"])
def test_closed_form_variance_matches_quadrature(kind: str) -> None:
    # N = 2: E over ω ~ N(0, I_2) is a Gauss-Hermite sum, exact to ~1e-12 here, so the closed forms (Eq. 16-18 for
    # FAVOR++, Â = 0 for FAVOR+, the antithetic covariance for the hyperbolic map) are checked without MC noise.
    mem = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=DT)
    x, i = mem[0].clone(), 0
    rho = optimal_rho(torch.stack([x, cam.flip(x, i)]), mem)
    omega, w = _gauss_hermite_omega()
    terms = cam.delta_energy_terms(mem, x, i, omega, kind=kind, rho=rho)
    mean = (w * terms).sum()
    var = (w * terms * terms).sum() - mean**2
    per_feature = 2 * var if kind == "hyperbolic" else var  # a hyperbolic term spends two features
    assert float(mean) == pytest.approx(float(cam.expected_delta_energy(mem, x)[i]), rel=1e-10)
    closed = cam.variance_delta_energy_by_kind(mem, x, i, kind, 1, rho=rho)
    assert closed == pytest.approx(float(per_feature), rel=1e-8)
    assert cam.variance_delta_energy_by_kind(mem, x, i, kind, 16, rho=rho) == pytest.approx(closed / 16)


def test_printed_eq18_is_not_the_variance() -> None:
    mem = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=DT)
    x = mem[0].clone()
    rho = 0.3
    right = cam.variance_delta_energy(mem, x, 0, rho, 1)
    printed = cam.variance_delta_energy(mem, x, 0, rho, 1, as_printed=True)
    assert right > 0 and abs(printed - right) > 0.5 * right


def test_favor_plus_plus_variance_monte_carlo() -> None:
    g = _gen(4)
    mem = cam.separated_memories(4, 4, 0.25, generator=g)
    x = cam.ball_point(mem[0], 1, generator=g)
    i = int(torch.nonzero(x == mem[0])[0])
    rho = optimal_rho(torch.stack([x, cam.flip(x, i)]), mem)
    omega = iid_gaussian_random_matrix(2**20, 4, generator=g, dtype=DT)
    terms = cam.delta_energy_terms(mem, x, i, omega, kind="favor_plus_plus", rho=rho)
    assert float(terms.var()) == pytest.approx(cam.variance_delta_energy(mem, x, i, rho, 1), rel=0.1)


def test_separated_memories_and_ball_points() -> None:
    g = _gen(5)
    mem = cam.separated_memories(40, 16, 0.25, generator=g)
    d = cam.hamming_distances(mem, mem).fill_diagonal_(99)
    assert int(d.min()) >= 4 and mem.shape == (40, 16)
    x = cam.ball_point(mem[0], 3, generator=g)
    assert int(cam.hamming_distances(x[None], mem[:1])) == 3
    towards = cam.ball_point(mem[0], 2, generator=g, toward=mem[1])
    assert int(cam.hamming_distances(towards[None], mem[1:2])) == int(d[0, 1]) - 2
    with pytest.raises(InputError):
        cam.separated_memories(5, 4, 1.0, generator=g, max_proposals=2000)  # two patterns at distance 4 at most
    few = cam.separated_memories(5, 4, 1.0, generator=g, max_proposals=2000, allow_fewer=True)
    assert few.shape[0] == 2


def test_capacity_bound_formula() -> None:
    assert cam.capacity_bound(32, 0.25, 2 / 32) == pytest.approx(math.exp(8) * (1 - math.exp(-2)) / (2 * math.e**2))
    with pytest.raises(InputError):
        cam.capacity_bound(32, 0.25, 0.2)  # ρ must be < τ/2


@pytest.mark.parametrize("which", ["exponential", "hopfield", "favor_plus_plus", "favor_plus", "hyperbolic"])
def test_preferred_value_is_the_lower_energy(which: str) -> None:
    g = _gen(6)
    mem = cam.separated_memories(5, 8, 0.25, generator=g)
    if which == "exponential":
        model = cam.ExponentialMemory(mem)
    elif which == "hopfield":
        model = cam.HopfieldMemory(mem)
    else:
        model = cam.CompactAssociativeMemory(mem, 32, kind=which, generator=g)
    x = torch.randint(0, 2, (12, 8), generator=g).to(DT) * 2 - 1
    f = model.field(x)
    for j in range(8):
        jj = torch.full((12,), j)
        plus, minus = x.clone(), x.clone()
        plus[:, j], minus[:, j] = 1.0, -1.0
        expect = torch.sign(model.energy(minus) - model.energy(plus))  # Eq. 12
        assert torch.equal(model.preferred(x, f, jj), expect)


def test_hopfield_hebb_recovers_stored_patterns_at_small_load() -> None:
    g = _gen(7)
    mem = cam.separated_memories(3, 100, 0.3, generator=g)
    x0 = torch.stack([cam.ball_point(m, 10, generator=g) for m in mem])
    final, _ = cam.run_dynamics(cam.HopfieldMemory(mem), x0, generator=g)
    assert torch.equal(final, mem)


def test_dynamics_reach_fixed_points_and_descend_energy() -> None:
    g = _gen(8)
    mem = cam.separated_memories(6, 12, 0.25, generator=g)
    x0 = torch.stack([cam.ball_point(m, 1, generator=g) for m in mem])
    exact = cam.ExponentialMemory(mem)
    final, sweeps = cam.run_dynamics(exact, x0, generator=g)
    assert torch.equal(final, mem)  # M = 6 well-separated memories in N = 12: retrieved exactly
    model = cam.CompactAssociativeMemory(mem, 256, generator=g)
    final, sweeps = cam.run_dynamics(model, x0, generator=g, max_sweeps=50)
    assert torch.all(model.energy(final) <= model.energy(x0) + 1e-9 * model.energy(x0).abs())
    f = model.field(final)
    for j in range(12):  # a fixed point of Eq. 12: no coordinate strictly prefers the other value
        want = model.preferred(final, f, torch.full((6,), j))
        assert torch.all((want == 0) | (want == final[:, j]))


def test_bad_patterns_rejected() -> None:
    with pytest.raises(InputError):
        cam.ExponentialMemory(torch.zeros(3, 4))
    with pytest.raises(InputError):
        cam.CompactAssociativeMemory(torch.ones(2, 4), 8, kind="relu")
    with pytest.raises(InputError):
        cam.run_dynamics(cam.HopfieldMemory(torch.ones(2, 4)), torch.ones(3, 5))


def test_study_quick_smoke(tmp_path) -> None:
    from mnemo_mpc.experiments.runner import run_study

    res = run_study("cam_capacity", tmp_path, mode="quick", seeds=1)
    assert set(res["claims"]) >= {"sign_correct_below_bound", "variance_closed_form_matches"}
    assert all(isinstance(v, bool) for v in res["claims"].values())
    for fig in res["figures"]:
        assert (tmp_path / "cam_capacity" / fig).stat().st_size > 1000
    assert res["numbers"]["variance"]["r"]

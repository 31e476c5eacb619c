"""Outer-product, low-rank and MLP associative memories (seed 004 slides) and the capacity machinery."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.theory import assoc


def _injective(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    E, U, f = assoc.random_embeddings(n, d, rng), assoc.random_embeddings(n, d, rng), assoc.injective_map(n, rng)
    return E, U, f


def test_embeddings_are_nearly_orthonormal():
    E = assoc.random_embeddings(200, 512, np.random.default_rng(0)).astype(float)
    norms = np.linalg.norm(E, axis=1)
    assert abs(norms.mean() - 1.0) < 0.02
    off = (E @ E.T)[~np.eye(200, dtype=bool)]
    # eᵀe' ~ N(0, 1/d): the empirical std matches 1/√d to a few percent.
    assert abs(off.std() * np.sqrt(512) - 1.0) < 0.05


def test_outer_product_memory_is_the_explicit_sum():
    rng = np.random.default_rng(1)
    E, U = assoc.random_embeddings(30, 8, rng, np.float64), assoc.random_embeddings(5, 8, rng, np.float64)
    f, q = assoc.random_map(30, 5, rng), rng.random(30)
    explicit = sum(q[z] * np.outer(U[f[z]], E[z]) for z in range(30))
    np.testing.assert_allclose(assoc.outer_product_memory(E, U, f, q), explicit, atol=1e-12)
    unweighted = sum(np.outer(U[f[z]], E[z]) for z in range(30))
    np.testing.assert_allclose(assoc.outer_product_memory(E, U, f), unweighted, atol=1e-12)


def test_orthonormal_embeddings_recall_exactly_any_load():
    # With one-hot embeddings (d ≥ N) there is no interference: every pair is recalled, even for binary f*.
    n = 40
    E, U = np.eye(n), np.eye(n)[:2]
    f = np.random.default_rng(0).integers(0, 2, n)
    assert assoc.recall_accuracy(assoc.outer_product_memory(E, U, f), E, U, f) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_hebbian_recovers_all_pairs_at_small_load(seed):
    d = 256
    E, U, f = _injective(d // 4, d, seed)  # N = d/4 ≪ d²
    assert assoc.recall_accuracy(assoc.outer_product_memory(E, U, f), E, U, f) == 1.0
    rng = np.random.default_rng(seed)
    n = d // 32  # binary f*: noise std √(N/d) ≈ 0.18 against a unit signal
    Eb, Ub, fb = assoc.random_embeddings(n, d, rng), assoc.random_embeddings(2, d, rng), assoc.random_map(n, 2, rng)
    assert assoc.recall_accuracy(assoc.outer_product_memory(Eb, Ub, fb), Eb, Ub, fb) == 1.0


def test_recall_degrades_past_capacity():
    d = 64
    accs = []
    for n in (d // 4, d * d // 8, 2 * d * d):
        E, U, f = _injective(n, d, 7)
        accs.append(assoc.recall_accuracy(assoc.outer_product_memory(E, U, f), E, U, f))
    assert accs[0] > accs[1] > accs[2]
    assert accs[0] >= 0.95 and accs[2] < 0.3


def test_low_rank_is_w1t_w2_and_stores_pairs_when_m_is_large_enough():
    d, m, n = 128, 64, 32
    E, U, f = _injective(n, d, 3)
    mem = assoc.low_rank_memory(E, U, f, m, np.random.default_rng(3))
    assert mem.W1.shape == (m, d) and mem.W2.shape == (m, d)
    np.testing.assert_allclose(mem.W, mem.W1.T @ mem.W1 @ assoc.outer_product_memory(E, U, f), rtol=1e-4, atol=1e-4)
    sv = np.linalg.svd(mem.W.astype(float), compute_uv=False)
    assert sv[m] < 1e-4 * sv[0]  # rank m up to float32 rounding
    assert assoc.recall_accuracy(mem.W, E, U, f) == 1.0
    # Rank m = 4 cannot separate 32 outputs: the projected outputs W₁u_y collide.
    low = assoc.low_rank_memory(E, U, f, 4, np.random.default_rng(3))
    assert assoc.recall_accuracy(low.W, E, U, f) < 0.9


def test_mlp_memory_trains_to_perfect_recall_on_a_small_table():
    rng = np.random.default_rng(0)
    n, d, m, M = 48, 16, 32, 8
    E, U, f = assoc.random_embeddings(n, d, rng), assoc.random_embeddings(M, d, rng), assoc.random_map(n, M, rng)
    mem = assoc.train_mlp_memory(E, U, f, m, steps=300, lr=1e-2, seed=0)
    assert mem.train_accuracy == 1.0
    assert np.mean(mem.predict(E, U) == f) == 1.0  # numpy forward agrees with the torch one


def test_find_capacity_brackets_a_step():
    calls = []

    def acc(n):
        calls.append(n)
        return 1.0 if n <= 137 else 0.5

    cap, seen = assoc.find_capacity(acc, 0.9, n_start=4, rel_tol=0.02)
    assert cap <= 137 < cap * 1.02 + 1
    assert set(seen) == set(calls) and len(calls) < 20
    cap0, _ = assoc.find_capacity(lambda n: 0.0, 0.9, n_start=8)
    assert cap0 == 0


def test_power_law_fit_recovers_exponent_and_rejects_nonpositive():
    x = np.array([16.0, 32, 64, 128])
    fit = assoc.fit_power_law(x, 3.0 * x**1.7)
    assert fit.exponent == pytest.approx(1.7) and fit.prefactor == pytest.approx(3.0) and fit.r2 == pytest.approx(1)
    with pytest.raises(InputError, match="positive"):
        assoc.fit_power_law(x, np.array([1.0, 0.0, 2.0, 3.0]))


def test_bad_inputs_raise_input_error_naming_the_field():
    rng = np.random.default_rng(0)
    E, U = assoc.random_embeddings(5, 4, rng), assoc.random_embeddings(3, 4, rng)
    with pytest.raises(InputError, match="f values"):
        assoc.outer_product_memory(E, U, np.array([0, 1, 2, 3, 4]))
    with pytest.raises(InputError, match="shape"):
        assoc.outer_product_memory(E, U, np.array([0, 1]))
    with pytest.raises(InputError, match="d must"):
        assoc.random_embeddings(3, 0, rng)
    with pytest.raises(InputError, match="threshold"):
        assoc.find_capacity(lambda n: 1.0, 1.5, n_start=2)
    with pytest.raises(InputError, match="activation"):
        assoc.train_mlp_memory(E, U, np.array([0, 1, 2, 0, 1]), 4, activation="swish")


def test_study_pipeline_tiny(tmp_path):
    from mnemo_mpc.experiments import assoc_capacity as study
    from mnemo_mpc.experiments.runner import RunContext

    cfg = dataclasses.replace(
        study.quick_config(),
        seeds=1,
        injective_dims=(8, 16),
        binary_dims=(16, 32),
        low_rank_d=32,
        low_rank_widths=(16, 32),
        mlp_d=8,
        mlp_widths=(4, 8),
        mlp_steps=60,
        min_pairs=200,
    )
    ctx = RunContext(name="assoc_capacity", out_dir=tmp_path, mode="quick")
    per_seed = {0: study.run_seed(cfg, 0, ctx)}
    summary = study.summarize(cfg, per_seed, ctx)
    assert set(summary.claims) == {
        "injective_capacity_exponent_2",
        "binary_capacity_exponent_1",
        "low_rank_capacity_exponent_1_in_m",
        "mlp_capacity_exponent_1_in_m",
    }
    assert all(isinstance(v, bool) for v in summary.claims.values())
    assert summary.numbers["injective"]["capacity_mean"][1] > summary.numbers["injective"]["capacity_mean"][0]
    for fig in summary.figures:
        assert (tmp_path / fig).stat().st_size > 1000


@pytest.mark.slow
def test_quick_study_runs_end_to_end(tmp_path):
    from mnemo_mpc.experiments.runner import run_study

    res = run_study("assoc_capacity", tmp_path, mode="quick")
    assert res["claims"] and res["numbers"]["injective"]["exponent"] > 1.0

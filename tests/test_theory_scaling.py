"""Zipf data, memory schemes and their error, online SGD/Adam on W (seed 004 slides, scaling-law section)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from mnemo_mpc.errors import InputError
from mnemo_mpc.theory import scaling
from mnemo_mpc.theory.assoc import random_embeddings


def test_zipf_probabilities_follow_the_power_law():
    p = scaling.zipf_probabilities(1000, 1.5)
    assert p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p[1:] / p[:-1], (np.arange(2, 1001) / np.arange(1, 1000)) ** -1.5)


def test_zipf_sampler_matches_p_chi_square():
    vocab, n = 30, 50_000
    sampler = scaling.ZipfSampler(vocab, 1.5)
    counts = scaling.token_counts(sampler.sample(n, np.random.default_rng(123)), vocab)
    expected = n * sampler.p
    # Pool the tail so every cell expects ≥ 5 draws (chi-square validity).
    k = int(np.argmax(expected < 5)) if np.any(expected < 5) else vocab
    obs = np.append(counts[:k], counts[k:].sum())
    exp = np.append(expected[:k], expected[k:].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    res = stats.chisquare(obs, exp)
    assert res.pvalue > 1e-3, f"chi-square p={res.pvalue:.2e}"
    # and it is a real test: a wrong exponent is rejected at this sample size
    wrong = scaling.ZipfSampler(vocab, 1.3)
    bad = scaling.token_counts(wrong.sample(n, np.random.default_rng(123)), vocab)
    assert stats.chisquare(np.append(bad[:k], bad[k:].sum())[: len(exp)], exp).pvalue < 1e-6


def test_memory_schemes_from_counts():
    counts = np.array([5, 0, 1, 3, 0, 2])
    np.testing.assert_array_equal(scaling.memory_weights("counts", counts), counts)
    np.testing.assert_array_equal(scaling.memory_weights("seen", counts), [1, 0, 1, 1, 0, 1])
    np.testing.assert_array_equal(scaling.memory_weights("threshold", counts, s=2), [1, 0, 0, 1, 0, 1])
    with pytest.raises(InputError, match="scheme"):
        scaling.memory_weights("lru", counts)
    with pytest.raises(InputError, match="threshold s"):
        scaling.memory_weights("threshold", counts, s=0)


@pytest.mark.parametrize(("scheme", "s"), [("seen", 1), ("counts", 1), ("threshold", 3)])
def test_idealized_error_closed_form_matches_monte_carlo(scheme, s):
    vocab, n, reps = 50, 40, 4000
    sampler = scaling.ZipfSampler(vocab, 1.5)
    rng = np.random.default_rng(7)
    errs = [
        scaling.idealized_error(
            scaling.memory_weights(scheme, scaling.token_counts(sampler.sample(n, rng), vocab), s), sampler.p
        )
        for _ in range(reps)
    ]
    closed = scaling.expected_idealized_error(sampler.p, n, scheme, s)
    se = np.std(errs) / np.sqrt(reps)
    assert abs(np.mean(errs) - closed) < 4 * se


@pytest.mark.parametrize("scheme", scaling.SCHEMES)
def test_recall_error_exact_sum_matches_monte_carlo(scheme):
    # The same random-embedding memory: Σ_z p(z)1{wrong} computed exactly vs estimated on fresh test tokens.
    vocab, d, M = 64, 16, 4
    sampler = scaling.ZipfSampler(vocab, 1.2)
    rng = np.random.default_rng(3)
    f = rng.integers(0, M, vocab)
    U = random_embeddings(M, d, rng)
    q = scaling.memory_weights(scheme, scaling.token_counts(sampler.sample(200, rng), vocab), s=2)
    exact = scaling.recall_errors({scheme: q}, sampler.p, f, U, [11], block=16)[scheme]
    assert exact.total == pytest.approx(exact.stored + exact.unstored)
    test = sampler.sample(40_000, rng)
    mc = scaling.monte_carlo_recall_error(q, f, U, [11], test, block=16)
    sigma = np.sqrt(exact.total * (1 - exact.total) / test.size)
    assert 0.02 < exact.total < 0.98  # not a degenerate case
    assert abs(mc - exact.total) < 4 * sigma


def test_recall_error_vanishes_for_stored_tokens_when_d_is_large():
    vocab, M = 200, 4
    p = scaling.zipf_probabilities(vocab, 2.0)
    f = np.random.default_rng(0).integers(0, M, vocab)
    q = (np.arange(vocab) < 10).astype(float)
    big = scaling.recall_errors({"k": q}, p, f, random_embeddings(M, 1024, np.random.default_rng(1)), [5])["k"]
    small = scaling.recall_errors({"k": q}, p, f, random_embeddings(M, 4, np.random.default_rng(1)), [5])["k"]
    assert big.stored == 0.0 and small.stored > 0.0
    assert big.unstored <= p[10:].sum()


def test_threshold_rule_and_predicted_rates():
    assert scaling.threshold_capacity(1024, 8, 2.0) == int(8 * 1024 / (8 * np.log(1024)))
    p = scaling.zipf_probabilities(100, 2.0)
    s = scaling.threshold_for_capacity(p, 10_000, 10)
    assert s == int(np.ceil(10_000 * p[9]))
    rates = scaling.predicted_exponents(2.0)
    assert rates == {"n": -0.5, "d_counts": -0.25, "d_threshold": -1.0}
    with pytest.raises(InputError, match="alpha"):
        scaling.predicted_exponents(1.0)


def test_one_large_batch_sgd_step_is_the_slides_gradient_memory():
    # From W = 0 the softmax is uniform, so one SGD step on the batch gives
    # W₁ = (η/n) Σ_i Σ_k (1{k = f*(z_i)} − 1/M) u_k e_{z_i}ᵀ (slides, "Gradient associative memories").
    vocab, d, M, n, eta = 40, 12, 5, 64, 0.7
    rng = np.random.default_rng(0)
    p = scaling.zipf_probabilities(vocab, 1.5)
    f = rng.integers(0, M, vocab)
    E, U = random_embeddings(vocab, d, rng), random_embeddings(M, d, rng)
    tokens = scaling.ZipfSampler(vocab, 1.5).sample(n, rng)
    res = scaling.train_online(tokens, p, f, E, U, optimizer="sgd", lr=eta, batch_size=n, checkpoints=[n])
    onehot = np.eye(M)[f[tokens]]
    expected = eta / n * (U.T @ (onehot - 1.0 / M).T @ E[tokens])
    np.testing.assert_allclose(res.W, expected, rtol=1e-4, atol=1e-6)
    # and the written-out gradient equals autograd's cross-entropy gradient at a random W
    import torch

    W = torch.randn(d, d, dtype=torch.float64, requires_grad=True)
    Et, Ut, ft = torch.as_tensor(E[tokens], dtype=torch.float64), torch.as_tensor(U, dtype=torch.float64), f[tokens]
    torch.nn.functional.cross_entropy((Et @ W.T) @ Ut.T, torch.as_tensor(ft)).backward()
    with torch.no_grad():
        resid = torch.softmax((Et @ W.T) @ Ut.T, 1)
        resid[torch.arange(n), torch.as_tensor(ft)] -= 1
        np.testing.assert_allclose(((Ut.T @ resid.T) @ Et / n).numpy(), W.grad.numpy(), atol=1e-12)


def test_online_training_reduces_error():
    vocab, d, M = 128, 64, 4
    rng = np.random.default_rng(2)
    sampler = scaling.ZipfSampler(vocab, 2.0)
    f = rng.integers(0, M, vocab)
    E, U = random_embeddings(vocab, d, rng), random_embeddings(M, d, rng)
    tokens = sampler.sample(2000, rng)
    for opt, lr in (("sgd", 10.0), ("adam", 0.1)):
        r = scaling.train_online(
            tokens, sampler.p, f, E, U, optimizer=opt, lr=lr, batch_size=16, checkpoints=[16, 2000]
        )
        assert r.error[1] < 0.5 * r.error[0]
    with pytest.raises(InputError, match="checkpoints"):
        scaling.train_online(tokens, sampler.p, f, E, U, optimizer="sgd", lr=1.0, batch_size=1, checkpoints=[5000])


def test_study_pipeline_tiny(tmp_path):
    from mnemo_mpc.experiments import scaling_laws as study
    from mnemo_mpc.experiments.runner import RunContext

    cfg = dataclasses.replace(
        study.quick_config(),
        seeds=1,
        ideal_vocab=5000,
        ideal_ns=(10, 100, 1000),
        d_vocab=1024,
        ds=(16, 64, 256),
        d_draws=1,
        grid_vocab=1024,
        grid_ds=(32, 256),
        grid_ns=(10, 100, 1000),
        train_vocab=128,
        train_d=32,
        train_ns=(10, 100, 300),
        sgd_lrs=(1.0, 100.0),
        adam_lrs=(0.1,),
        sgd_batch1_lrs=(10.0,),
        fit_d_min=16,
    )
    ctx = RunContext(name="scaling_laws", out_dir=tmp_path, mode="quick")
    summary = study.summarize(cfg, {0: study.run_seed(cfg, 0, ctx)}, ctx)
    assert "capacity_term_exponent_threshold" in summary.claims
    assert all(isinstance(v, bool) for v in summary.claims.values())
    assert summary.numbers["capacity_term"]["threshold"]["exponent"] < 0
    for fig in summary.figures:
        assert (tmp_path / fig).stat().st_size > 1000


@pytest.mark.slow
def test_quick_study_runs_end_to_end(tmp_path):
    from mnemo_mpc.experiments.runner import run_study

    res = run_study("scaling_laws", tmp_path, mode="quick")
    assert len(res["claims"]) == 10

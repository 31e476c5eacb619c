"""Exactness of the Memformer constructions (seed 000 Lemma 1, Prop. 1, Prop. 2) and the data distribution (§3.3)."""

from __future__ import annotations

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl import classical as C
from mnemo_mpc.icl.data import (
    PAPER_SPECTRUM,
    DataConfig,
    GaussianMixtureTask,
    LinearRegressionTask,
    make_covariance,
    random_orthogonal,
    seed_generator,
    sqrt_psd,
)
from mnemo_mpc.icl.linear_transformer import (
    LinearTransformer,
    in_context_loss,
    linear_attention,
    query_prediction,
)
from mnemo_mpc.icl.memformer import CGDMemformer, LFOMMemformer
from mnemo_mpc.icl.train import ICLTrainConfig, clip_per_matrix_, heldout_loss, train

F64 = torch.float64
TOL = 1e-8


@pytest.fixture(scope="module")
def batch():
    g = seed_generator(3)
    task = LinearRegressionTask.from_config(DataConfig(), g)
    return task.sample(128, g)


def _predict(iterates: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    return torch.einsum("kbd,bd->kb", iterates, x_query)


def test_pgd_fast_path_equals_dense_attention(batch):
    g = seed_generator(5)
    for scalar in (False, True):
        tf = LinearTransformer(5, 3, n_heads=3, scalar_preconditioner=scalar, dtype=F64)
        with torch.no_grad():
            for p in tf.parameters():
                p.normal_(0, 0.5, generator=g)
        Z = batch.Z0
        for layer in range(3):
            P, Q = tf.layer_PQ(layer)
            dense = linear_attention(Z, P, Q)
            X, V = tf.split(Z)
            fast = tf.assemble(X, tf.attention_v(X, V, layer)) - torch.cat([X, torch.zeros_like(V)[:, None]], 1)
            assert torch.allclose(dense[:, -1], fast[:, -1], atol=TOL, rtol=0)
            assert dense[:, :-1].abs().max() == 0  # Eq. 9 with B = 0 never touches the covariates
            Z = Z + dense / 20


def test_lemma1_linear_transformer_is_preconditioned_gd(batch):
    """Lemma 1: with Eq. 9 parameters the ℓ-th layer's query entry is −⟨x(n+1), w_ℓ⟩ for w_{ℓ+1} = w_ℓ − A_ℓᵀ∇R(w_ℓ)."""
    g = seed_generator(7)
    L, H = 4, 2
    tf = LinearTransformer(5, L, n_heads=H, dtype=F64)
    with torch.no_grad():
        tf.A.normal_(0, 0.3, generator=g)  # deliberately non-symmetric
    outs = tf(batch.Z0, return_layers=True)
    iterates = C.preconditioned_gd(batch.X, batch.y, tf.preconditioners().sum(1).mT.detach())
    for layer, Z in enumerate(outs, start=1):
        assert (query_prediction(Z) - _predict(iterates, batch.x_query)[layer]).abs().max() < TOL
        # the context labels follow the same iterate: y_ℓ(i) = y(i) − ⟨w_ℓ, x(i)⟩ (App. A.1)
        ctx = batch.y - torch.einsum("bdn,bd->bn", batch.X, iterates[layer])
        assert (Z[:, -1, :-1] - ctx).abs().max() < TOL


def test_prop1_cgd_memformer_with_per_sample_coefficients_is_cgd(batch):
    """Prop. 1 / App. A.2: A_ℓ = I and the per-prompt CGD α_ℓ, γ_ℓ reproduce CGD's iterates."""
    L = 5
    trace = C.conjugate_gradient(batch.X, batch.y, L)
    mem = CGDMemformer(5, L, dtype=F64)
    mem.set_preconditioners(torch.eye(5, dtype=F64).expand(L, 5, 5))
    outs = mem(batch.Z0, return_layers=True, alpha=trace.alpha, gamma=trace.gamma)
    preds = _predict(trace.iterates, batch.x_query)
    for layer, Z in enumerate(outs, start=1):
        assert (query_prediction(Z) - preds[layer]).abs().max() < TOL
    # CGD solves the noiseless d = 5, n = 20 problem in d steps, so the query is predicted exactly
    assert C.query_losses(trace.iterates, batch.x_query, batch.y_query)[-1] < 1e-16


def test_prop1_shared_scalars_and_scalar_preconditioner_match_memformer_algebra(batch):
    """Learned shared α, γ with A_ℓ = a_ℓ I: the Memformer is the CGD-like recursion s_ℓ = −a_ℓ∇R + γ_ℓ s_{ℓ−1}."""
    L = 3
    mem = CGDMemformer(5, L, scalar_preconditioner=True, dtype=F64)
    with torch.no_grad():
        mem.a.copy_(torch.tensor([[0.7], [0.4], [1.1]], dtype=F64))
        mem.alpha.copy_(torch.tensor([0.9, 1.2, 0.8], dtype=F64))
        mem.gamma.copy_(torch.tensor([0.0, 0.3, -0.2], dtype=F64))
    w = torch.zeros(batch.batch_size, 5, dtype=F64)
    s = torch.zeros_like(w)
    for layer, Z in enumerate(mem(batch.Z0, return_layers=True)):
        s = -mem.a[layer, 0] * C.least_squares_gradient(batch.X, batch.y, w) + mem.gamma[layer] * s
        w = w + mem.alpha[layer] * s
        assert (query_prediction(Z) - torch.einsum("bd,bd->b", w, batch.x_query)).abs().max() < TOL


def test_prop2_lfom_memformer_with_momentum_gammas_is_momentum_gd(batch):
    """Prop. 2: Γ_j^ℓ = ηβ^{ℓ−j} (all-ones Hadamard) with A_ℓ = I reproduces heavy-ball momentum exactly."""
    L, eta, beta = 5, 0.2, 0.9
    mem = LFOMMemformer(5, 20, L, gamma_sharing="general", gamma_form="full", dtype=F64)
    mem.set_preconditioners(torch.eye(5, dtype=F64).expand(L, 5, 5))
    mem.set_gamma(C.momentum_lfom_coefficients(L, eta, beta))
    iterates = C.momentum_gd(batch.X, batch.y, L, eta=eta, beta=beta, objective="mean")
    preds = _predict(iterates, batch.x_query)
    for layer, Z in enumerate(mem(batch.Z0, return_layers=True), start=1):
        assert (query_prediction(Z) - preds[layer]).abs().max() < TOL


def test_prop2_per_layer_sharing_is_an_lfom_with_layer_independent_weights(batch):
    L = 4
    gam = torch.tensor([0.5, -0.2, 0.8, 0.3], dtype=F64)
    mem = LFOMMemformer(5, 20, L, gamma_form="scalar", gamma_sharing="per_layer", dtype=F64)
    mem.set_preconditioners(torch.eye(5, dtype=F64).expand(L, 5, 5))
    mem.set_gamma(gam)
    coeffs = torch.tril(gam.expand(L, L))  # c_{ℓ,j} = Γ_j for every ℓ >= j
    preds = _predict(C.incremental_lfom(batch.X, batch.y, coeffs), batch.x_query)
    for layer, Z in enumerate(mem(batch.Z0, return_layers=True), start=1):
        assert (query_prediction(Z) - preds[layer]).abs().max() < TOL


def test_per_lag_lfom_memformer_is_momentum_and_starts_as_the_transformer(batch):
    L, eta, beta = 4, 0.3, 0.8
    mem = LFOMMemformer(5, 20, L, gamma_sharing="per_lag", gamma_form="scalar", dtype=F64)
    tf = LinearTransformer(5, L, dtype=F64)
    with torch.no_grad():
        tf.A.normal_(0, 0.3, generator=seed_generator(17))
    mem.set_preconditioners(tf.A.detach())
    assert torch.allclose(mem(batch.Z0), tf(batch.Z0), atol=TOL, rtol=0)
    mem.set_preconditioners(torch.eye(5, dtype=F64).expand(L, 5, 5))
    mem.set_gamma(eta * beta ** torch.arange(L, dtype=F64))
    iterates = C.momentum_gd(batch.X, batch.y, L, eta=eta, beta=beta, objective="mean")
    assert (query_prediction(mem(batch.Z0)) - _predict(iterates, batch.x_query)[L]).abs().max() < TOL


def test_general_lfom_memformer_starts_as_the_linear_transformer(batch):
    g = seed_generator(11)
    tf = LinearTransformer(5, 3, dtype=F64)
    with torch.no_grad():
        tf.A.normal_(0, 0.3, generator=g)
    mem = LFOMMemformer(5, 20, 3, gamma_sharing="general", dtype=F64)
    mem.set_preconditioners(tf.A.detach())
    assert torch.allclose(mem(batch.Z0), tf(batch.Z0), atol=TOL, rtol=0)


def test_gdpp_with_zero_b_equals_pgd_and_moves_covariates_otherwise(batch):
    g = seed_generator(13)
    pgd = LinearTransformer(5, 2, dtype=F64)
    gdpp = LinearTransformer(5, 2, parameterization="gdpp", dtype=F64)
    with torch.no_grad():
        pgd.A.normal_(0, 0.3, generator=g)
        gdpp.A.copy_(pgd.A)
        gdpp.B.zero_()
    assert torch.allclose(gdpp(batch.Z0), pgd(batch.Z0), atol=TOL, rtol=0)
    with torch.no_grad():
        gdpp.B.normal_(0, 0.3, generator=g)
    out = gdpp(batch.Z0)
    assert (out[:, :5] - batch.Z0[:, :5]).abs().max() > 1e-3


def test_covariance_and_task_statistics():
    cfg = DataConfig()
    sigma = make_covariance(cfg, seed_generator(0))
    assert torch.allclose(sigma, sigma.T, atol=1e-12)
    evals = torch.linalg.eigvalsh(sigma)
    assert torch.allclose(evals, torch.tensor(sorted(PAPER_SPECTRUM), dtype=F64), atol=1e-12)
    u = random_orthogonal(5, seed_generator(1))
    assert torch.allclose(u @ u.T, torch.eye(5, dtype=F64), atol=1e-12)
    assert not torch.allclose(sigma, make_covariance(cfg, seed_generator(1)))  # a different U per seed

    task = LinearRegressionTask(sigma, n=20)
    b = task.sample(40_000, seed_generator(2))
    x = b.X.permute(0, 2, 1).reshape(-1, 5)
    assert (x.T @ x / x.shape[0] - sigma).abs().max() < 0.02
    w_cov = b.w_star.T @ b.w_star / b.batch_size
    assert (w_cov - torch.linalg.inv(sigma)).abs().max() < 0.15  # Σ⁻¹ has entries up to 4
    assert (b.y - torch.einsum("bdn,bd->bn", b.X, b.w_star)).abs().max() < 1e-12
    assert (b.Z0[:, 5, 20] == 0).all() and torch.equal(b.Z0[:, :5, 20], b.x_query)

    iso = make_covariance(DataConfig(isotropic=True, variance=2.0), seed_generator(0))
    assert torch.allclose(iso, 2 * torch.eye(5, dtype=F64))
    assert torch.allclose(sqrt_psd(sigma) @ sqrt_psd(sigma), sigma, atol=1e-12)


def test_gaussian_mixture_components():
    eye = torch.eye(2, dtype=F64)
    task = GaussianMixtureTask(
        means=[torch.tensor([3.0, 0.0], dtype=F64), torch.tensor([-3.0, 0.0], dtype=F64)],
        covariances=[0.25 * eye, eye],
        weights=[0.25, 0.75],
        n=10,
    )
    b = task.sample(8000, seed_generator(4))
    frac = (b.component == 0).double().mean()
    assert abs(float(frac) - 0.25) < 0.03
    x0 = b.X[b.component == 0].mean(dim=(0, 2))
    assert torch.allclose(x0, torch.tensor([3.0, 0.0], dtype=F64), atol=0.05)
    spread = b.X[b.component == 0].var(dim=2).mean(0)
    assert torch.allclose(spread, torch.full((2,), 0.25, dtype=F64), atol=0.03)


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="spectrum"):
        DataConfig(spectrum=(1.0, 2.0))
    with pytest.raises(InputError, match="variance"):
        DataConfig(variance=0.0)
    with pytest.raises(InputError, match="parameterization"):
        LinearTransformer(5, 2, parameterization="nope")
    with pytest.raises(InputError, match="objective"):
        C.conjugate_gradient(torch.zeros(1, 2, 3), torch.zeros(1, 3), 1, objective="max")
    with pytest.raises(InputError, match="batch_size"):
        ICLTrainConfig(batch_size=0)
    mem = LFOMMemformer(5, 20, 2)
    with pytest.raises(InputError, match="n=20"):
        mem(torch.zeros(3, 6, 11))


def test_clip_per_matrix_caps_each_slice():
    p = torch.nn.Parameter(torch.zeros(3, 2, 4, 4))
    p.grad = torch.randn(3, 2, 4, 4, generator=seed_generator(0)) * 10
    p.grad[0, 0] = 1e-4
    s = torch.nn.Parameter(torch.zeros(3))
    s.grad = torch.tensor([1.0, -0.001, -5.0])
    clip_per_matrix_([(p, 2), (s, 0)], 0.01)
    norms = p.grad.flatten(-2).norm(dim=-1)
    assert (norms <= 0.01 + 1e-9).all() and torch.isclose(norms[0, 0], torch.tensor(1e-4 * 4))
    assert torch.allclose(s.grad, torch.tensor([0.01, -0.001, -0.01]))


def test_training_reduces_in_context_loss():
    g = seed_generator(0)
    task = LinearRegressionTask.from_config(DataConfig(), g).to("cpu", torch.float32)
    test = task.sample(500, seed_generator(1))
    model = LinearTransformer(5, 1)
    before = heldout_loss(model, test)
    res = train(model, task, ICLTrainConfig(steps=150, batch_size=200, lr=0.05, progress=False), seed_generator(2))
    after = heldout_loss(model, test)
    assert after < 0.6 * before and res.steps[0] == 0 and len(res.losses) == 3
    with torch.no_grad():
        assert float(in_context_loss(model(test.Z0), test.y_query)) == pytest.approx(after)

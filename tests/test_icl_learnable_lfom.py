"""Learnable LFOMs (seed 001 §5): exactness against momentum GD / GD in float64, output format, training."""

from __future__ import annotations

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.classical import momentum_gd
from mnemo_mpc.icl.data import DataConfig, LinearRegressionTask, seed_generator
from mnemo_mpc.icl.learnable_lfom import LearnableLFOM, lfom_parameter_count, momentum_gammas, split_prompt
from mnemo_mpc.icl.linear_transformer import in_context_loss
from mnemo_mpc.icl.train import ICLTrainConfig, train


def _batch(batch: int = 16, seed: int = 0, dtype=torch.float64):
    g = seed_generator(seed)
    task = LinearRegressionTask.from_config(DataConfig(), g, dtype)
    return task, task.sample(batch, g)


def _heavy_ball(x, y, steps, eta, beta):
    """Momentum GD written out as seed 000 App. B.2: v <- beta v - eta grad R(w); w <- w + v, from w = v = 0, on
    R(w) = 1/(2n) ||X^T w - y||^2 (Eq. 12). x: (B, d, n)."""
    n = x.shape[2]
    w = torch.zeros(x.shape[0], x.shape[1], dtype=x.dtype)
    v = torch.zeros_like(w)
    out = [w]
    for _ in range(steps):
        grad = torch.einsum("bdn,bn->bd", x, torch.einsum("bdn,bd->bn", x, w) - y) / n
        v = beta * v - eta * grad
        w = w + v
        out.append(w)
    return torch.stack(out)


@pytest.mark.parametrize("kind", ["scalar", "diagonal", "preconditioned"])
def test_momentum_weights_reproduce_momentum_gd_float64(kind):
    _, b = _batch()
    steps, eta, beta = 6, 0.3, 0.9
    model = LearnableLFOM(5, steps, kind=kind, dtype=torch.float64)
    model.set_scalar_weights(momentum_gammas(steps, eta, beta))
    got = model.iterates(b.X, b.y)
    assert torch.max(torch.abs(got - _heavy_ball(b.X, b.y, steps, eta, beta))).item() <= 1e-10
    # and the core library's momentum GD on the same objective (Eq. 12, "mean")
    core = momentum_gd(b.X, b.y, steps, eta=eta, beta=beta, objective="mean")
    assert torch.max(torch.abs(got - core)).item() <= 1e-10


def test_default_init_is_gradient_descent_and_output_is_transformer_format():
    _, b = _batch()
    model = LearnableLFOM(5, 4, kind="diagonal", init_step=0.2, dtype=torch.float64)
    want = _heavy_ball(b.X, b.y, 4, 0.2, 0.0)
    assert torch.allclose(model.iterates(b.X, b.y), want, atol=1e-12)
    layers = model(b.Z0, return_layers=True)
    assert len(layers) == 4
    for k, z in enumerate(layers):
        assert torch.allclose(-z[:, -1, -1], torch.einsum("bd,bd->b", want[k + 1], b.x_query), atol=1e-12)
        assert torch.equal(z[:, :, :-1], b.Z0[:, :, :-1])  # only the query's label slot carries the prediction
    assert torch.equal(model(b.Z0), layers[-1])


def test_split_prompt_inverts_eq2_layout():
    _, b = _batch()
    x, y, xq = split_prompt(b.Z0)
    assert torch.equal(x, b.X) and torch.equal(y, b.y) and torch.equal(xq, b.x_query)


def test_tied_weights_use_one_gamma_per_gradient():
    model = LearnableLFOM(3, 4, kind="diagonal", tie_steps=True, dtype=torch.float64)
    vals = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    with torch.no_grad():
        model.gamma.copy_(vals.reshape(1, 4, 1, 3))
    w = model.weights()
    for k in range(4):
        for i in range(4):
            assert torch.equal(w[k, i], vals[i] if i <= k else torch.zeros(3, dtype=torch.float64))


def test_preconditioner_scales_the_step():
    _, b = _batch()
    model = LearnableLFOM(5, 2, kind="preconditioned", dtype=torch.float64)
    base = model.iterates(b.X, b.y)
    with torch.no_grad():
        model.precond[0].mul_(2.0)
    assert torch.allclose(model.iterates(b.X, b.y)[1], 2 * base[1], atol=1e-12)


def test_core_trainer_lowers_in_context_loss():
    task, test = _batch(batch=500, seed=3, dtype=torch.float32)
    model = LearnableLFOM(5, 3, kind="diagonal")
    with torch.no_grad():
        before = float(in_context_loss(model(test.Z0), test.y_query))
    cfg = ICLTrainConfig(steps=150, batch_size=200, lr=0.01, progress=False)
    train(model, task, cfg, seed_generator(4))
    with torch.no_grad():
        after = float(in_context_loss(model(test.Z0), test.y_query))
    assert after < 0.8 * before


def test_parameter_count_and_errors():
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="scalar")) == 10
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="diagonal")) == 50
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="preconditioned")) == 50 + 4 * 25
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="diagonal", tie_steps=True)) == 20
    with pytest.raises(InputError, match="kind"):
        LearnableLFOM(5, 4, kind="newton")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="gammas"):
        LearnableLFOM(5, 4).set_scalar_weights(torch.zeros(3, 3))
    with pytest.raises(InputError, match="Z0"):
        split_prompt(torch.zeros(4, 5))
    with pytest.raises(InputError, match="x, y"):
        LearnableLFOM(5, 2).iterates(torch.zeros(2, 4, 7), torch.zeros(2, 7))
    with pytest.raises(InputError, match="steps"):
        momentum_gammas(0, 0.1, 0.9)

"""Learnable LFOMs (seed 001 §5): exactness against hand-written momentum GD / GD, gradients, training."""

from __future__ import annotations

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.learnable_lfom import (
    LearnableLFOM,
    least_squares_gradient,
    lfom_parameter_count,
    momentum_gammas,
    split_prompt,
)


def _prompts(batch: int = 16, d: int = 5, n: int = 20, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n + 1, d, generator=g, dtype=dtype)
    w = torch.randn(batch, d, generator=g, dtype=dtype)
    y = torch.einsum("bnd,bd->bn", x, w)
    z0 = torch.zeros(batch, d + 1, n + 1, dtype=dtype)
    z0[:, :d] = x.transpose(1, 2)
    z0[:, d, :n] = y[:, :n]
    return z0


def _heavy_ball(x, y, steps, eta, beta):
    """Momentum GD exactly as seed 000 App. B.2: v <- beta v - eta grad f(w); w <- w + v; from w = v = 0."""
    w = torch.zeros(x.shape[0], x.shape[2], dtype=x.dtype)
    v = torch.zeros_like(w)
    out = [w]
    for _ in range(steps):
        n = x.shape[1]
        grad = torch.einsum("bnd,bn->bd", x, torch.einsum("bnd,bd->bn", x, w) - y) / n
        v = beta * v - eta * grad
        w = w + v
        out.append(w)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("kind", ["scalar", "diagonal", "preconditioned"])
def test_momentum_weights_reproduce_momentum_gd_float64(kind):
    z0 = _prompts()
    x, y, _ = split_prompt(z0)
    steps, eta, beta = 6, 0.3, 0.9
    model = LearnableLFOM(5, steps, kind=kind, dtype=torch.float64)
    model.set_scalar_weights(momentum_gammas(steps, eta, beta))
    got = model.iterates(x, y)
    want = _heavy_ball(x, y, steps, eta, beta)
    assert torch.max(torch.abs(got - want)).item() <= 1e-10


def test_default_init_is_gradient_descent():
    z0 = _prompts()
    x, y, xq = split_prompt(z0)
    model = LearnableLFOM(5, 4, kind="diagonal", init_step=0.2, dtype=torch.float64)
    want = _heavy_ball(x, y, 4, 0.2, 0.0)
    assert torch.allclose(model.iterates(x, y), want, atol=1e-12)
    assert torch.allclose(model(z0), torch.einsum("bkd,bd->bk", want, xq), atol=1e-12)


def test_gradient_matches_autograd():
    z0 = _prompts(batch=3)
    x, y, _ = split_prompt(z0)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    loss = ((torch.einsum("bnd,bd->bn", x, w) - y) ** 2).sum(dim=1) / (2 * x.shape[1])
    (auto,) = torch.autograd.grad(loss.sum(), w)
    assert torch.allclose(least_squares_gradient(x, y, w.detach()), auto, atol=1e-12)


def test_tied_weights_use_one_gamma_per_gradient():
    model = LearnableLFOM(3, 4, kind="diagonal", tie_steps=True, dtype=torch.float64)
    with torch.no_grad():
        model.gamma.copy_(torch.arange(12, dtype=torch.float64).reshape(1, 4, 3))
    w = model.weights()
    for k in range(4):
        for i in range(4):
            expect = torch.arange(12, dtype=torch.float64).reshape(4, 3)[i] if i <= k else torch.zeros(3)
            assert torch.equal(w[k, i], expect.to(w.dtype))


def test_preconditioner_changes_the_iterate():
    z0 = _prompts()
    x, y, _ = split_prompt(z0)
    model = LearnableLFOM(5, 2, kind="preconditioned", dtype=torch.float64)
    base = model.iterates(x, y)
    with torch.no_grad():
        model.precond[0].mul_(2.0)
    moved = model.iterates(x, y)
    # one step of GD with 2x the step: w^1 doubles
    assert torch.allclose(moved[:, 1], 2 * base[:, 1], atol=1e-12)


def test_training_lowers_in_context_loss():
    torch.manual_seed(0)
    z0 = _prompts(batch=256, dtype=torch.float32, seed=1)
    # the query label: the same draws as _prompts(seed=1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 21, 5, generator=g, dtype=torch.float32)
    w = torch.randn(256, 5, generator=g, dtype=torch.float32)
    yq = torch.einsum("bd,bd->b", x[:, 20], w)
    model = LearnableLFOM(5, 3, kind="diagonal")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    first = None
    for _ in range(150):
        loss = ((model(z0)[:, -1] - yq) ** 2).mean()
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.8 * first


def test_parameter_count_and_errors():
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="scalar")) == 10
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="diagonal")) == 50
    assert lfom_parameter_count(LearnableLFOM(5, 4, kind="preconditioned")) == 50 + 4 * 25
    with pytest.raises(InputError, match="kind"):
        LearnableLFOM(5, 4, kind="newton")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="gammas"):
        LearnableLFOM(5, 4).set_scalar_weights(torch.zeros(3, 3))
    with pytest.raises(InputError, match="Z0"):
        split_prompt(torch.zeros(4, 5))
    with pytest.raises(InputError, match="steps"):
        momentum_gammas(0, 0.1, 0.9)

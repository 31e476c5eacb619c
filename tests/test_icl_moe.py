"""MoE soft gating across heads (seed 001 §4.2, Thm 4.1): the gate mixes heads as defined, one-hot gates reduce to a
single head, linear-transformer heads are preconditioned GD (Lemma 1), and the OOD samplers draw what they say."""

from __future__ import annotations

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.moe import GaussianComponent, MoEMemformer, PromptGate, lsa_y_row, sample_mixture_prompts

D, N = 4, 9


def _sigma(d: int = D, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return q.T @ torch.diag(torch.linspace(1.0, 0.25, d, dtype=torch.float64)) @ q


def _z0(batch: int = 7, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z0, _, _ = sample_mixture_prompts(_sigma(), [GaussianComponent()], batch, N, generator=g)
    return z0


def _model(heads: int, memory: bool = True, seed: int = 2, **kw) -> MoEMemformer:
    g = torch.Generator().manual_seed(seed)
    m = MoEMemformer(D, N, layers=3, heads=heads, memory=memory, dtype=torch.float64, generator=g, **kw)
    if m.gamma is not None:
        with torch.no_grad():
            m.gamma.copy_(1 + 0.3 * torch.randn(m.gamma.shape, generator=g, dtype=torch.float64))
    return m


def test_lsa_row_equals_literal_attention():
    """Eq. 5 with P, Q of Eq. 9 (B = 0) built as full matrices, mask of Eq. 4."""
    z = _z0()
    a = torch.randn(2, D, D, dtype=torch.float64)
    mask = torch.eye(N + 1, dtype=torch.float64)
    mask[N, N] = 0
    p = torch.zeros(D + 1, D + 1, dtype=torch.float64)
    p[D, D] = 1
    for h in range(2):
        q = torch.zeros(D + 1, D + 1, dtype=torch.float64)
        q[:D, :D] = -a[h]
        literal = p @ z @ mask @ (z.transpose(1, 2) @ q @ z)
        assert torch.allclose(literal[:, :D], torch.zeros_like(literal[:, :D]))
        assert torch.allclose(lsa_y_row(z, a)[:, h], literal[:, D], atol=1e-12)


def test_gate_mixes_head_updates_as_defined():
    """One layer by hand: Z_1 = Z_0 + sum_h omega_h (1/n) Gamma_0^h (.) R_0^h (Thm 4.1 with Eq. 20)."""
    model = _model(3)
    z0 = _z0()
    omega = torch.tensor([0.2, -0.5, 1.3], dtype=torch.float64)
    pred = model(z0, omega=omega)
    r = lsa_y_row(z0, model.a[:, 0])
    upd = torch.einsum("h,bhn->bn", omega, model.gamma[:, 0, D] * r)
    z1_last = z0[:, D, -1] + upd[:, -1] / N
    assert torch.allclose(pred[:, 1], -z1_last, atol=1e-12)
    assert torch.allclose(pred[:, 0], -z0[:, D, -1])


def test_one_hot_gate_reduces_to_the_single_head():
    moe = _model(3)
    z0 = _z0()
    for h in range(3):
        single = _model(1)
        with torch.no_grad():
            single.a.copy_(moe.a[h : h + 1])
            single.gamma.copy_(moe.gamma[h : h + 1])
        onehot = torch.nn.functional.one_hot(torch.tensor(h), 3).to(torch.float64)
        assert torch.allclose(moe(z0, omega=onehot), single(z0, omega=torch.ones(1, dtype=torch.float64)), atol=1e-12)


def test_softmax_gate_with_large_logit_is_one_hot_limit():
    moe = _model(3, memory=False)
    with torch.no_grad():
        moe.gate.bias.copy_(torch.tensor([0.0, 60.0, 0.0]))
    z0 = _z0()
    onehot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert torch.allclose(moe(z0), moe(z0, omega=onehot), atol=1e-12)


def test_linear_transformer_heads_are_preconditioned_gd():
    """Lemma 1 (seed 000): with omega = e_0 and no memory, -[Z_l]_{d+1,n+1} = <x(n+1), w_l> where
    w_{l+1} = w_l - A_l^T grad R(w_l), R(w) = 1/(2n)||X^T w - y||^2. (Eq. 22 multiplies the row Y_k by X^T A X, so
    the w-space preconditioner is A^T; the paper writes A because its optimum is symmetric.)"""
    moe = _model(2, memory=False)
    z0 = _z0()
    pred = moe(z0, omega=torch.tensor([1.0, 0.0], dtype=torch.float64))
    x = z0[:, :D, :N].transpose(1, 2)
    y = z0[:, D, :N]
    xq = z0[:, :D, N]
    w = torch.zeros(z0.shape[0], D, dtype=torch.float64)
    for layer in range(3):
        grad = torch.einsum("bnd,bn->bd", x, torch.einsum("bnd,bd->bn", x, w) - y) / N
        w = w - grad @ moe.a[0, layer]
        assert torch.allclose(pred[:, layer + 1], torch.einsum("bd,bd->b", w, xq), atol=1e-10)


def test_prompt_gate_reads_the_prompt_and_sums_to_one():
    gate = PromptGate(D, 3, condition="prompt").double()
    with torch.no_grad():
        gate.weight.normal_()
    z0 = _z0()
    om = gate(z0)
    assert torch.allclose(om.sum(dim=1), torch.ones(z0.shape[0], dtype=torch.float64))
    assert not torch.allclose(om[0], om[1])
    glob = PromptGate(D, 3, condition="global").double()
    assert torch.allclose(glob(z0), torch.full((z0.shape[0], 3), 1 / 3, dtype=torch.float64))
    free = PromptGate(D, 3, condition="global", simplex=False).double()
    assert torch.allclose(free(z0), torch.full((z0.shape[0], 3), 1 / 3, dtype=torch.float64))


def test_mixture_sampler_draws_components_per_prompt():
    g = torch.Generator().manual_seed(3)
    comps = [GaussianComponent(mean=-2.0, scale=0.5, weight=1.0), GaussianComponent(mean=3.0, scale=4.0, weight=3.0)]
    z0, yq, comp = sample_mixture_prompts(_sigma(), comps, 4000, N, generator=g)
    assert z0.shape == (4000, D + 1, N + 1) and yq.shape == (4000,)
    frac = comp.float().mean().item()
    assert 0.72 < frac < 0.78  # weight 3/4 on component 1
    xs = z0[:, :D, :]
    for k, c in enumerate(comps):
        sel = xs[comp == k]
        assert abs(sel.mean().item() - c.mean) < 0.05
        cov = torch.einsum("bdn,ben->de", sel - c.mean, sel - c.mean) / (sel.shape[0] * (N + 1))
        assert torch.allclose(cov, c.scale * _sigma(), atol=0.08 * c.scale)
    # w* ~ N(0, (scale Sigma)^{-1}) (seed 001 §3.3): Var y(n+1) = d + mean^2 1^T (scale Sigma)^{-1} 1
    for k, c in enumerate(comps):
        ones = torch.ones(D, dtype=torch.float64)
        want = D + c.mean**2 * ones @ torch.linalg.solve(c.scale * _sigma(), ones)
        assert abs(yq[comp == k].var().item() / want.item() - 1) < 0.15
    # responses are the linear model of their own prompt: y(i) are reproduced by least squares on the prompt
    x = xs[:5, :, :N].transpose(1, 2)
    w = torch.linalg.lstsq(x, z0[:5, D, :N, None]).solution[..., 0]
    assert torch.allclose(torch.einsum("bd,bd->b", w, xs[:5, :, N]), yq[:5], atol=1e-8)


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="condition"):
        PromptGate(D, 3, condition="router")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="Z0"):
        _model(2)(torch.zeros(3, D, N))
    with pytest.raises(InputError, match="omega"):
        _model(2)(_z0(), omega=torch.ones(3, dtype=torch.float64))
    with pytest.raises(InputError, match="components"):
        sample_mixture_prompts(_sigma(), [], 4, N)
    with pytest.raises(InputError, match="components"):
        sample_mixture_prompts(_sigma(), [GaussianComponent(scale=-1.0)], 4, N)

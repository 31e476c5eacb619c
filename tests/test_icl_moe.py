"""MoE soft gating across heads (seed 001 §4.2, Thm 4.1): the gate mixes the heads' layerwise updates as defined,
one-hot gates reduce to a single head, and the OOD mixture draws what it says."""

from __future__ import annotations

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.data import DataConfig, make_covariance, seed_generator
from mnemo_mpc.icl.linear_transformer import LinearTransformer, in_context_loss, linear_attention
from mnemo_mpc.icl.memformer import CGDMemformer, LFOMMemformer
from mnemo_mpc.icl.moe import GaussianComponent, MoEMemformer, PromptGate, mixture_task
from mnemo_mpc.icl.train import ICLTrainConfig, train

D, N, L = 4, 9, 3
F64 = torch.float64


def _sigma(seed: int = 0) -> torch.Tensor:
    return make_covariance(DataConfig(d=D, n=N, spectrum=(1.0, 1.0, 0.5, 0.25)), seed_generator(seed), F64)


def _batch(batch: int = 7, seed: int = 1, comps=None):
    comps = [GaussianComponent()] if comps is None else list(comps)
    return mixture_task(_sigma(), comps, N).sample(batch, seed_generator(seed))


def _lfom(seed: int) -> LFOMMemformer:
    torch.manual_seed(seed)
    m = LFOMMemformer(D, N, L, init_std=0.3, dtype=F64)
    with torch.no_grad():
        m.Gamma.copy_(1 + 0.3 * torch.randn_like(m.Gamma))
    return m


def _experts() -> list:
    torch.manual_seed(7)
    cgd = CGDMemformer(D, L, init_std=0.3, dtype=F64)
    with torch.no_grad():
        cgd.alpha.copy_(torch.tensor([0.9, 1.1, 0.7]))
        cgd.gamma.copy_(torch.tensor([0.0, 0.4, -0.2]))
    return [_lfom(1), _lfom(2), LinearTransformer(D, L, init_std=0.3, dtype=F64), cgd]


def test_one_hot_gate_reduces_to_the_single_head():
    experts = _experts()
    moe = MoEMemformer(experts).double()
    b = _batch()
    for h, expert in enumerate(experts):
        onehot = torch.nn.functional.one_hot(torch.tensor(h), len(experts)).to(F64)
        got = moe(b.Z0, return_layers=True, omega=onehot)
        want = expert(b.Z0, return_layers=True)
        for zg, zw in zip(got, want, strict=True):
            assert torch.max(torch.abs(zg - zw)).item() <= 1e-12


def test_gate_mixes_head_updates_as_defined():
    """Two layers by hand: Z_{l+1} = Z_l + (1/n) sum_h omega_h sum_{j<=l} Gamma_j^h (.) R_j^h (Thm 4.1 with Eq. 20)."""
    experts = [_lfom(1), _lfom(2), _lfom(3)]
    moe = MoEMemformer(experts).double()
    b = _batch()
    omega = torch.tensor([0.2, -0.5, 1.3], dtype=F64)
    got = moe(b.Z0, return_layers=True, omega=omega)
    z = b.Z0
    regs = [[], [], []]
    for layer in range(2):
        step = torch.zeros_like(z)
        for h, e in enumerate(experts):
            P, Q = e.layer_PQ(layer)
            regs[h].append(linear_attention(z, P[0], Q[0]))
            step = step + omega[h] * sum(e.Gamma[j] * regs[h][j] for j in range(layer + 1))
        z = z + step / N
        assert torch.allclose(got[layer], z, atol=1e-12)


def test_softmax_gate_with_dominant_logit_is_the_one_hot_limit():
    moe = MoEMemformer(_experts()[:3]).double()
    with torch.no_grad():
        moe.gate.bias.copy_(torch.tensor([0.0, 60.0, 0.0]))
    b = _batch()
    assert torch.allclose(moe(b.Z0), moe(b.Z0, omega=torch.tensor([0.0, 1.0, 0.0])), atol=1e-12)


def test_uniform_gate_is_the_mean_of_heads_after_one_layer():
    experts = [_lfom(1), _lfom(2)]
    moe = MoEMemformer(experts).double()
    b = _batch()
    z1 = moe(b.Z0, return_layers=True)[0]
    singles = [e(b.Z0, return_layers=True)[0] for e in experts]
    assert torch.allclose(z1, 0.5 * (singles[0] + singles[1]), atol=1e-12)


def test_prompt_gate_reads_the_prompt_and_sums_to_one():
    gate = PromptGate(D, 3, condition="prompt").double()
    with torch.no_grad():
        gate.weight.normal_()
    b = _batch()
    om = gate(b.Z0)
    assert torch.allclose(om.sum(dim=1), torch.ones(b.Z0.shape[0], dtype=F64))
    assert not torch.allclose(om[0], om[1])
    assert torch.allclose(PromptGate(D, 3).double()(b.Z0), torch.full((7, 3), 1 / 3, dtype=F64))
    free = PromptGate(D, 3, simplex=False).double()
    assert torch.allclose(free(b.Z0), torch.full((7, 3), 1 / 3, dtype=F64))


def test_prompt_gate_learns_to_route_components():
    """Thm 4.1's premise made concrete: heads tuned to two variance scales, a prompt-conditioned gate trained on the
    mixture routes each prompt to its head and beats the uniform mixture."""
    comps = [GaussianComponent(variance=0.25), GaussianComponent(variance=4.0)]
    experts = []
    for c in comps:
        e = LinearTransformer(D, 1, scalar_preconditioner=True, dtype=F64)
        e.set_preconditioners(torch.tensor([1.0 / c.variance], dtype=F64))  # A = Sigma-scale^{-1}: tuned step size
        experts.append(e)
    moe = MoEMemformer(experts, PromptGate(D, 2, condition="prompt")).double()
    task = mixture_task(_sigma(), comps, N)
    test = task.sample(2000, seed_generator(5))
    with torch.no_grad():
        uniform = float(in_context_loss(moe(test.Z0), test.y_query))
    cfg = ICLTrainConfig(steps=300, batch_size=500, lr=0.05, clip=0.0, dtype="float64", progress=False)
    train(moe, task, cfg, seed_generator(6), params=list(moe.gate.parameters()))
    with torch.no_grad():
        routed = float(in_context_loss(moe(test.Z0), test.y_query))
        om = moe.gate(test.Z0)
    assert routed < uniform
    for k in range(2):
        assert om[test.component == k, k].mean().item() > 0.8


def test_mixture_task_components():
    comps = [
        GaussianComponent(mean=-2.0, variance=0.5, weight=1.0),
        GaussianComponent(mean=3.0, variance=4.0, weight=3.0),
    ]
    b = _batch(batch=4000, seed=3, comps=comps)
    assert 0.72 < b.component.double().mean().item() < 0.78  # weight 3/4 on component 1
    xs = b.Z0[:, :D, :]
    for k, c in enumerate(comps):
        sel = xs[b.component == k]
        assert abs(sel.mean().item() - c.mean) < 0.05
        cov = torch.einsum("bdn,ben->de", sel - c.mean, sel - c.mean) / (sel.shape[0] * (N + 1))
        assert torch.allclose(cov, c.variance * _sigma(), atol=0.08 * c.variance)


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="condition"):
        PromptGate(D, 3, condition="router")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="expert"):
        MoEMemformer([])
    with pytest.raises(InputError, match="depth"):
        MoEMemformer([LinearTransformer(D, 2), LinearTransformer(D, 3)])
    moe = MoEMemformer([_lfom(1), _lfom(2)]).double()
    with pytest.raises(InputError, match="Z0"):
        moe(torch.zeros(3, D, N))
    with pytest.raises(InputError, match="omega"):
        moe(_batch().Z0, omega=torch.ones(3, dtype=F64))
    with pytest.raises(InputError, match="component"):
        mixture_task(_sigma(), [], N)
    with pytest.raises(InputError, match="variance"):
        mixture_task(_sigma(), [GaussianComponent(variance=-1.0)], N)

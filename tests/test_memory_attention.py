"""Linear / causal / thickened attention of seed 002 §3 against exact quadratic forms."""

from __future__ import annotations

import math

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.attention import (
    CompactMemory,
    ThickenedMemory,
    causal_linear_attention,
    discount_weights,
    linear_attention,
    make_fast_softmax_attention,
    performer_attention,
    softmax_attention,
    thickened_causal_attention,
    thickening_grid,
)
from mnemo_mpc.memory.features import (
    favor_plus_features,
    favor_plus_plus_features,
    iid_gaussian_random_matrix,
    make_features,
    optimal_rho,
)

DT = torch.float64


def _qkv(b: int = 2, h: int = 3, length: int = 23, d: int = 8, dv: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, length, d, generator=g, dtype=DT),
        torch.randn(b, h, length, d, generator=g, dtype=DT),
        torch.randn(b, h, length, dv, generator=g, dtype=DT),
    )


def _masked_quadratic(q_feat, k_feat, v, discount):
    """The definition: Σ_{μ<=t} λ_t(μ) φ(q^t)ᵀφ(k^μ) v^μ / Σ_{μ<=t} λ_t(μ) φ(q^t)ᵀφ(k^μ)."""
    lam = discount_weights(q_feat.shape[-2], discount, dtype=q_feat.dtype)
    a = (q_feat @ k_feat.transpose(-1, -2)) * lam
    return (a @ v) / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("kind", ["favor_plus", "hyperbolic", "favor_plus_plus"])
def test_linear_attention_converges_to_softmax(kind: str) -> None:
    q, k, v = _qkv(b=1, h=2, length=12, d=8)
    q, k = 0.6 * q, 0.6 * k  # logits of order 1, the regime Performer features are built for
    exact = softmax_attention(q, k, v)
    errors = []
    for r in (16, 256, 8192):
        torch.manual_seed(0)
        errs = []
        for seed in range(3):
            rho = optimal_rho(q / 8**0.25, k / 8**0.25)
            f = make_features(kind, 8, r, seed=seed, dtype=DT, rho=rho)
            errs.append((performer_attention(q, k, v, f, stabilize=False) - exact).abs().mean().item())
        errors.append(sum(errs) / len(errs))
    assert errors[2] < errors[0] / 5, errors
    assert errors[2] < 0.03, errors


def test_stabilisation_does_not_change_attention() -> None:
    q, k, v = _qkv(length=10)
    f = make_features("favor_plus", 8, 64, seed=1, dtype=DT)
    plain = performer_attention(q, k, v, f, stabilize=False)
    stab = performer_attention(q, k, v, f, stabilize=True, eps=0.0)
    assert torch.allclose(plain, stab, rtol=1e-9)  # the shifts cancel exactly without Performer's additive eps
    causal_plain = performer_attention(q, k, v, f, causal=True, stabilize=False)
    causal_stab = performer_attention(q, k, v, f, causal=True, stabilize=True, eps=0.0)
    assert torch.allclose(causal_plain, causal_stab, rtol=1e-9)
    with_eps = performer_attention(q, k, v, f, stabilize=True)
    assert torch.allclose(plain, with_eps, atol=1e-2)
    # Large logits: unstabilised features overflow, stabilised ones stay finite.
    big = make_fast_softmax_attention(f, stabilize=True, scale=1.0)(q * 30, k * 30, v)
    assert torch.all(torch.isfinite(big))


@pytest.mark.parametrize("discount", [0.0, 0.1, 2.0])
@pytest.mark.parametrize("chunk", [1, 4, 64])
def test_causal_prefix_sum_equals_masked_quadratic(discount: float, chunk: int) -> None:
    q, k, v = _qkv(length=23)
    omega = torch.randn(16, 8, dtype=DT)
    qf, kf = favor_plus_features(q / 3, omega), favor_plus_features(k / 3, omega)
    fast = causal_linear_attention(qf, kf, v, discount=discount, chunk_size=chunk)
    assert torch.allclose(fast, _masked_quadratic(qf, kf, v, discount), rtol=1e-10, atol=1e-12)


def test_several_discount_factors_per_head() -> None:
    q, k, v = _qkv(b=2, h=3, length=17)
    omega = torch.randn(16, 8, dtype=DT)
    qf, kf = favor_plus_features(q / 3, omega), favor_plus_features(k / 3, omega)
    taus = torch.tensor([0.0, 0.3, 1.5], dtype=DT)[:, None]  # (h, 1): broadcasts against (b, h)
    out = causal_linear_attention(qf, kf, v, discount=taus.squeeze(-1), chunk_size=5)
    for i, tau in enumerate(taus.squeeze(-1).tolist()):
        ref = _masked_quadratic(qf[:, i], kf[:, i], v[:, i], tau)
        assert torch.allclose(out[:, i], ref, rtol=1e-10)


def test_causal_softmax_reference_and_causal_performer_limit() -> None:
    q, k, v = _qkv(b=1, h=1, length=9, d=4)
    q, k = 0.6 * q, 0.6 * k
    ref = softmax_attention(q, k, v, causal=True, discount=0.2)
    s = 0.5
    logits = s * q @ k.transpose(-1, -2)
    lam = discount_weights(9, 0.2, dtype=DT)
    w = torch.exp(logits) * lam
    assert torch.allclose(ref, (w @ v) / w.sum(-1, keepdim=True))
    f = make_features("hyperbolic", 4, 20000, seed=0, dtype=DT)
    approx = performer_attention(q, k, v, f, causal=True, discount=0.2, stabilize=False)
    assert (approx - ref).abs().max() < 0.05


def test_bidirectional_linear_attention_definition() -> None:
    q, k, v = _qkv(length=7)
    omega = torch.randn(10, 8, dtype=DT)
    qf, kf = favor_plus_features(q / 3, omega), favor_plus_features(k / 3, omega)
    a = qf @ kf.transpose(-1, -2)
    assert torch.allclose(linear_attention(qf, kf, v), (a @ v) / a.sum(-1, keepdim=True))


def test_compact_memory_stream_matches_sequence() -> None:
    q, k, v = _qkv(b=2, h=1, length=11)
    omega = torch.randn(12, 8, dtype=DT)
    qf, kf = favor_plus_features(q[:, 0] / 3, omega), favor_plus_features(k[:, 0] / 3, omega)
    mem = CompactMemory.empty(12, 5, batch_shape=(2,), discount=0.1, dtype=DT)
    outs = []
    for t in range(11):
        mem = mem.update(kf[:, t], v[:, 0, t])
        outs.append(mem.read(qf[:, t]))
    stream = torch.stack(outs, dim=1)
    assert torch.allclose(stream, causal_linear_attention(qf, kf, v[:, 0], discount=0.1), rtol=1e-10)
    with pytest.raises(InputError):
        mem.update(kf[:, 0, :5], v[:, 0, 0])


def test_thickened_memory_stream_matches_sequence_and_selects_rho_star() -> None:
    torch.manual_seed(0)
    length, d = 9, 4
    q, k, v = (0.5 * t for t in _qkv(b=1, h=1, length=length, d=d, dv=3))
    q, k, v = q[0, 0], k[0, 0], v[0, 0]
    omega = iid_gaussian_random_matrix(32, d, generator=torch.Generator().manual_seed(2), dtype=DT)
    seq = thickened_causal_attention(q, k, v, omega, num_chunks=6, discount=0.05, stabilize=True)
    state = ThickenedMemory.empty(omega, 3, num_chunks=6, discount=0.05)
    rhos = thickening_grid(6)
    for t in range(length):
        state = state.update(k[t], v[t])
        out = state.read(q[t], stabilize=True)
        assert torch.allclose(out, seq[t], rtol=1e-9)
        # the chosen slice is the ρ ∈ Ω nearest ρ* of Eq. 9 for this query against the keys so far
        rho = optimal_rho(q[t : t + 1], k[: t + 1])
        assert int(state.rho_index(q[t])) == int((rhos - rho).abs().argmin())
        # and its output is the plain discounted causal memory evaluated with that ρ
        rho_sel = float(rhos[int(state.rho_index(q[t]))])
        qf = favor_plus_plus_features(q[: t + 1], omega, rho_sel)
        kf = favor_plus_plus_features(k[: t + 1], omega, rho_sel)
        ref = causal_linear_attention(qf, kf, v[: t + 1], discount=0.05)[t]
        assert torch.allclose(out, ref, rtol=1e-9)


def test_bad_inputs() -> None:
    q, k, v = _qkv(length=5)
    with pytest.raises(InputError):
        causal_linear_attention(q, k[..., :4, :], v[..., :4, :])
    with pytest.raises(InputError):
        causal_linear_attention(q, k, v, discount=-1.0)
    with pytest.raises(InputError):
        softmax_attention(q, k[..., :3], v)
    with pytest.raises(InputError):
        thickening_grid(0)
    with pytest.raises(InputError):
        ThickenedMemory.empty(torch.randn(4, 3, dtype=DT), 2).read(torch.zeros(3, dtype=DT))


def test_gradients_flow_through_causal_attention() -> None:
    q, k, v = _qkv(b=1, h=1, length=6, d=4, dv=2)
    q.requires_grad_(True)
    f = make_features("favor_plus", 4, 8, seed=0, dtype=DT)
    out = performer_attention(q, k, v, f, causal=True, discount=0.1)
    out.sum().backward()
    assert q.grad is not None and torch.all(torch.isfinite(q.grad)) and q.grad.abs().sum() > 0
    assert math.isfinite(float(out.detach().sum()))

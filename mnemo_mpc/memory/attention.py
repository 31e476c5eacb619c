"""Linear (Performer) attention and Mnemosyne's compact associative memory (seed 002 §3, Eq. 4-6).

Shapes: q (..., L, d_qk), k (..., S, d_qk), v (..., S, d_v) -> (..., L, d_v); leading axes (batch, heads) are
broadcast. Feature maps come from `mnemo_mpc.memory.features`; the kernel they estimate is exp(xᵀy), so the usual
Transformer temperature 1/√d is applied by scaling q and k by d^{-1/4} before the features (`scale`).

- `softmax_attention`: exact reference, optionally causal with the exponential discount λ_t(μ) = exp(-τ(t-μ)).
- `linear_attention`: bidirectional Performer attention, Eq. 4 + Eq. 6 with t = M.
- `causal_linear_attention`: uni-directional Mnemosyne memory with exponential discount: the recurrence of Eq. 5
  evaluated exactly in chunks (intra-chunk masked quadratic form + inter-chunk state carried with decay), so long
  sequences need neither a Python loop per step nor exp(τt) prefix sums that overflow. `discount` may be a tensor
  broadcast over the leading axes: several discount factors (e.g. one per head) in one call.
- `CompactMemory`: the streaming hidden state h_Mne(t) = (N_t, Ψ_t) with `update` (Eq. 5) and `read` (Eq. 6).
- `ThickenedMemory` / `thickened_causal_attention`: FAVOR++ in the uni-directional setting via the "thickened"
  state H_Mne(t) = ({N_t^ρ}, {Ψ_t^ρ}, Σ_t, Λ_t), ρ ∈ Ω (§3.2.1): at each step γ_t and ρ*_t (Eq. 9) are computed
  from Σ_t, Λ_t and q^t, and the slice with the ρ ∈ Ω closest to ρ*_t answers the query.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.features import RandomFeatures, favor_plus_plus_features, rho_star

__all__ = [
    "CompactMemory",
    "ThickenedMemory",
    "causal_linear_attention",
    "discount_weights",
    "linear_attention",
    "make_fast_softmax_attention",
    "performer_attention",
    "softmax_attention",
    "thickened_causal_attention",
    "thickening_grid",
]


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise InputError(f"q, k, v must be at least 2-D (..., length, dim); got {q.ndim}, {k.ndim}, {v.ndim} dims")
    if q.shape[-1] != k.shape[-1]:
        raise InputError(f"q and k must share the last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise InputError(f"k and v must have the same length, got {k.shape[-2]} and {v.shape[-2]}")


def _discount_tensor(discount: float | Tensor, like: Tensor) -> Tensor:
    tau = torch.as_tensor(discount, dtype=like.dtype, device=like.device)
    if torch.any(tau < 0) or not torch.all(torch.isfinite(tau)):
        raise InputError(f"discount τ must be finite and >= 0 (λ_t(μ) = exp(-τ(t-μ))), got {discount!r}")
    return tau


def discount_weights(length: int, discount: float | Tensor, *, dtype: torch.dtype | None = None) -> Tensor:
    """Causal weights λ_t(μ) = exp(-τ(t - μ)) for μ <= t, 0 otherwise (Eq. 4-5, seed 002): (..., L, L).

    A tensor `discount` of shape (...) gives one matrix per discount factor.
    """
    dtype = dtype or torch.get_default_dtype()
    tau = _discount_tensor(discount, torch.empty((), dtype=dtype))
    t = torch.arange(length, dtype=dtype)
    lag = t[:, None] - t[None, :]
    mask = lag >= 0
    w = torch.exp(-tau[..., None, None] * lag.clamp(min=0))
    return torch.where(mask, w, torch.zeros((), dtype=dtype))


def softmax_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    discount: float | Tensor = 0.0,
    scale: float | None = None,
) -> Tensor:
    """Exact attention Σ_μ λ(μ) exp(s qᵀk^μ) v^μ / Σ_μ λ(μ) exp(s qᵀk^μ) (reference for Eq. 6, seed 002).

    `scale` s defaults to 1/√d; pass 1.0 for the raw softmax kernel exp(qᵀk) of the associative-memory view.
    """
    _check_qkv(q, k, v)
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = s * (q @ k.transpose(-1, -2))
    if causal:
        if q.shape[-2] != k.shape[-2]:
            raise InputError(f"causal attention needs len(q) == len(k), got {q.shape[-2]} and {k.shape[-2]}")
        lam = discount_weights(q.shape[-2], discount, dtype=q.dtype).to(q.device)
        # log λ is -inf above the diagonal, which removes the future from the softmax.
        logits = logits + torch.log(lam)
    return torch.softmax(logits, dim=-1) @ v


def linear_attention(q_feat: Tensor, k_feat: Tensor, v: Tensor, *, eps: float = 0.0) -> Tensor:
    """Bidirectional compact associative memory, Eq. 4 and 6 with t = M and λ ≡ 1 (seed 002).

    N = Σ φ(k^μ) v^μᵀ, Ψ = Σ φ(k^μ); output φ(q)ᵀN / φ(q)ᵀΨ. q_feat (..., L, r), k_feat (..., S, r), v (..., S, d_v).
    """
    _check_qkv(q_feat, k_feat, v)
    memory = k_feat.transpose(-1, -2) @ v  # N: (..., r, d_v)
    normaliser = k_feat.sum(dim=-2)  # Ψ: (..., r)
    num = q_feat @ memory
    den = (q_feat * normaliser.unsqueeze(-2)).sum(dim=-1, keepdim=True)
    return num / (den + eps)


def causal_linear_attention(
    q_feat: Tensor,
    k_feat: Tensor,
    v: Tensor,
    *,
    discount: float | Tensor = 0.0,
    chunk_size: int = 64,
    eps: float = 0.0,
) -> Tensor:
    """Uni-directional compact associative memory with exponential discount (Eq. 4-6, seed 002).

    out_t = φ(q^t)ᵀN_t / φ(q^t)ᵀΨ_t with N_t = Σ_{μ<=t} exp(-τ(t-μ)) φ(k^μ) v^μᵀ and Ψ_t likewise, i.e. the
    recurrence N_{t+1} = e^{-τ} N_t + φ(k^{t+1}) v^{t+1}ᵀ of Eq. 5. `discount` τ is a float or a tensor broadcast
    against the leading axes of the inputs (one τ per head gives a multi-timescale memory).

    Evaluated chunk by chunk: inside a chunk the masked, discounted quadratic form; across chunks the state decays
    by exp(-τ · chunk). Exact (no approximation beyond the features) and differentiable.
    """
    _check_qkv(q_feat, k_feat, v)
    if q_feat.shape[-2] != k_feat.shape[-2]:
        raise InputError(f"causal attention needs len(q) == len(k), got {q_feat.shape[-2]} and {k_feat.shape[-2]}")
    if chunk_size < 1:
        raise InputError(f"chunk_size must be >= 1, got {chunk_size}")
    tau = _discount_tensor(discount, q_feat)
    length = q_feat.shape[-2]
    # Carry the normaliser Ψ as an extra value column so one pass computes numerator and denominator.
    ones = torch.ones((*v.shape[:-1], 1), dtype=v.dtype, device=v.device)
    v_aug = torch.cat((v, ones), dim=-1)
    batch = torch.broadcast_shapes(q_feat.shape[:-2], k_feat.shape[:-2], v.shape[:-2], tau.shape)
    state = torch.zeros((*batch, q_feat.shape[-1], v_aug.shape[-1]), dtype=q_feat.dtype, device=q_feat.device)
    tau_b = tau.reshape(*tau.shape, 1, 1)  # broadcast over (chunk, ·)
    outs = []
    for start in range(0, length, chunk_size):
        stop = min(start + chunk_size, length)
        c = stop - start
        qc, kc, vc = q_feat[..., start:stop, :], k_feat[..., start:stop, :], v_aug[..., start:stop, :]
        pos = torch.arange(c, dtype=q_feat.dtype, device=q_feat.device)
        lag = pos[:, None] - pos[None, :]
        intra = torch.where(lag >= 0, torch.exp(-tau_b * lag.clamp(min=0)), torch.zeros((), dtype=q_feat.dtype))
        scores = (qc @ kc.transpose(-1, -2)) * intra
        # Position j inside the chunk sees the state left by the previous chunk decayed by (j + 1) steps.
        decay_in = torch.exp(-tau_b * (pos[:, None] + 1.0))
        out = scores @ vc + decay_in * (qc @ state)
        outs.append(out)
        decay_keys = torch.exp(-tau_b * (c - 1 - pos)[:, None])  # weight of key j at the chunk's last step
        state = torch.exp(-tau_b * c) * state + kc.transpose(-1, -2) @ (decay_keys * vc)
    out = torch.cat(outs, dim=-2)
    return out[..., :-1] / (out[..., -1:] + eps)


def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    features: RandomFeatures,
    *,
    causal: bool = False,
    discount: float | Tensor = 0.0,
    scale: float | None = None,
    stabilize: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Performer attention: features of s^{1/2} q and s^{1/2} k (so φ(q)ᵀφ(k) ≈ exp(s qᵀk), s = 1/√d by default),
    then `linear_attention` or `causal_linear_attention`.

    With `stabilize` the exponents are max-shifted as in the Performer code: per query row, and by one shift over
    the whole key sequence for keys (also in the causal case: a single constant cancels exactly, whereas a per-key
    shift would reweight the keys). FAVOR++ modules use their own ρ; for Eq. 9 pass features whose ρ is
    `optimal_rho(q, k)`.
    """
    _check_qkv(q, k, v)
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    root = math.sqrt(s)
    q_feat = features(q * root, stabilize="row" if stabilize else None, eps=eps if stabilize else 0.0)
    key_mode = "sequence" if stabilize else None
    k_feat = features(k * root, stabilize=key_mode, eps=eps if stabilize else 0.0)
    if causal:
        return causal_linear_attention(q_feat, k_feat, v, discount=discount)
    return linear_attention(q_feat, k_feat, v)


def make_fast_softmax_attention(
    features: RandomFeatures,
    *,
    causal: bool = False,
    discount: float | Tensor = 0.0,
    scale: float | None = None,
    stabilize: bool = True,
) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """Factory in the style of Performer's `make_fast_softmax_attention`: returns attention(q, k, v)."""

    def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return performer_attention(
            q, k, v, features, causal=causal, discount=discount, scale=scale, stabilize=stabilize
        )

    return attention


# --------------------------------------------------------------------------------------------------------------
# streaming memory cells


@dataclass
class CompactMemory:
    """Mnemosyne's hidden state h_Mne(t) = (N_t, Ψ_t) of Eq. 4 with exponential discount (seed 002 §3.1).

    Size is independent of the number of stored patterns. `memory` N: (..., r, d_v); `normaliser` Ψ: (..., r).
    """

    memory: Tensor
    normaliser: Tensor
    discount: float = 0.0

    @classmethod
    def empty(
        cls,
        num_features: int,
        value_dim: int,
        *,
        batch_shape: tuple[int, ...] = (),
        discount: float = 0.0,
        dtype: torch.dtype | None = None,
    ) -> CompactMemory:
        _discount_tensor(discount, torch.empty(()))
        dtype = dtype or torch.get_default_dtype()
        return cls(
            memory=torch.zeros((*batch_shape, num_features, value_dim), dtype=dtype),
            normaliser=torch.zeros((*batch_shape, num_features), dtype=dtype),
            discount=float(discount),
        )

    def update(self, k_feat: Tensor, v: Tensor) -> CompactMemory:
        """Eq. 5: N_{t+1} = e^{-τ} N_t + φ(k^{t+1}) v^{t+1}ᵀ, Ψ_{t+1} = e^{-τ} Ψ_t + φ(k^{t+1}). Returns a new state."""
        if k_feat.shape[-1] != self.memory.shape[-2] or v.shape[-1] != self.memory.shape[-1]:
            raise InputError(
                f"update expects k_feat (..., {self.memory.shape[-2]}) and v (..., {self.memory.shape[-1]}), "
                f"got {tuple(k_feat.shape)} and {tuple(v.shape)}"
            )
        decay = math.exp(-self.discount)
        return CompactMemory(
            memory=decay * self.memory + k_feat.unsqueeze(-1) * v.unsqueeze(-2),
            normaliser=decay * self.normaliser + k_feat,
            discount=self.discount,
        )

    def read(self, q_feat: Tensor, eps: float = 0.0) -> Tensor:
        """Eq. 6: Δξ = N_tᵀφ(q) / φ(q)ᵀΨ_t (the caller adds it to ξ for the residual update ξ' = ξ + Δξ)."""
        num = (q_feat.unsqueeze(-1) * self.memory).sum(dim=-2)
        den = (q_feat * self.normaliser).sum(dim=-1, keepdim=True)
        return num / (den + eps)


def thickening_grid(num_chunks: int) -> Tensor:
    """Ω: midpoints of `num_chunks` equal chunks of (0, 1), the quantised ρ values of the thickened state (§3.2.1)."""
    if num_chunks < 1:
        raise InputError(f"num_chunks (c) must be >= 1, got {num_chunks}")
    return (torch.arange(num_chunks, dtype=torch.float64) + 0.5) / num_chunks


@dataclass
class ThickenedMemory:
    """Thickened hidden state H_Mne(t) = ({N_t^ρ}_{ρ∈Ω}, {Ψ_t^ρ}_{ρ∈Ω}, Σ_t, Λ_t) for FAVOR++ (§3.2.1, seed 002).

    One (N^ρ, Ψ^ρ) slice per ρ ∈ Ω, all with the same projections ω; Σ_t = Σ k^j and Λ_t = Σ ‖k^j‖² give
    γ_t = (1/t) Σ_j ‖q^t + k^j‖² = ‖q^t‖² + (Λ_t + 2 q^tᵀΣ_t)/t in O(d) per query (the paper's rewriting drops the
    factor t on ‖q^t‖²). Shapes: memory (c, ..., r, d_v), normaliser (c, ..., r), key_sum (..., d), key_sq (...).
    """

    omega: Tensor
    rhos: Tensor
    memory: Tensor
    normaliser: Tensor
    key_sum: Tensor
    key_sq: Tensor
    count: int = 0
    discount: float = 0.0

    @classmethod
    def empty(
        cls,
        omega: Tensor,
        value_dim: int,
        *,
        num_chunks: int = 8,
        batch_shape: tuple[int, ...] = (),
        discount: float = 0.0,
    ) -> ThickenedMemory:
        _discount_tensor(discount, torch.empty(()))
        rhos = thickening_grid(num_chunks)
        r, d = omega.shape
        dt = omega.dtype
        return cls(
            omega=omega,
            rhos=rhos,
            memory=torch.zeros((num_chunks, *batch_shape, r, value_dim), dtype=dt),
            normaliser=torch.zeros((num_chunks, *batch_shape, r), dtype=dt),
            key_sum=torch.zeros((*batch_shape, d), dtype=dt),
            key_sq=torch.zeros(batch_shape, dtype=dt),
            count=0,
            discount=float(discount),
        )

    def _features_all_rhos(self, x: Tensor, stabilize: bool) -> Tensor:
        mode = "row" if stabilize else None
        return torch.stack([favor_plus_plus_features(x, self.omega, float(rho), stabilize=mode) for rho in self.rhos])

    def update(self, k: Tensor, v: Tensor) -> ThickenedMemory:
        """Eq. 5 applied to every slice ρ ∈ Ω, plus Σ_t and Λ_t. Returns a new state.

        Keys are not max-shifted: in a stream no shift common to all keys is known in advance."""
        feats = self._features_all_rhos(k, stabilize=False)  # (c, ..., r)
        decay = math.exp(-self.discount)
        return ThickenedMemory(
            omega=self.omega,
            rhos=self.rhos,
            memory=decay * self.memory + feats.unsqueeze(-1) * v.unsqueeze(-2),
            normaliser=decay * self.normaliser + feats,
            key_sum=self.key_sum + k,
            key_sq=self.key_sq + (k * k).sum(dim=-1),
            count=self.count + 1,
            discount=self.discount,
        )

    def rho_index(self, q: Tensor) -> Tensor:
        """Index into Ω of the ρ closest to ρ*_t (Eq. 9 with γ_t), per query: (...)."""
        if self.count == 0:
            raise InputError("ThickenedMemory.read called before any update (t = 0, γ_t undefined)")
        gamma = (q * q).sum(dim=-1) + (self.key_sq + 2.0 * (q * self.key_sum).sum(dim=-1)) / self.count
        rho = rho_star(gamma.clamp(min=0.0), q.shape[-1])
        return (rho.unsqueeze(-1) - self.rhos.to(rho.dtype)).abs().argmin(dim=-1)

    def read(self, q: Tensor, *, stabilize: bool = False, eps: float = 0.0) -> Tensor:
        """Eq. 6 with the slice ρ ∈ Ω nearest ρ*_t; q: (..., d) raw query (features are taken inside)."""
        idx = self.rho_index(q)
        feats = self._features_all_rhos(q, stabilize)  # (c, ..., r)
        num = (feats.unsqueeze(-1) * self.memory).sum(dim=-2)  # (c, ..., d_v)
        den = (feats * self.normaliser).sum(dim=-1, keepdim=True)
        out_all = num / (den + eps)
        gather = idx.reshape(1, *idx.shape, 1).expand(1, *out_all.shape[1:])
        return out_all.gather(0, gather).squeeze(0)


def thickened_causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    omega: Tensor,
    *,
    num_chunks: int = 8,
    discount: float = 0.0,
    stabilize: bool = True,
    eps: float = 0.0,
) -> Tensor:
    """Uni-directional FAVOR++ attention with the thickened state (§3.2.1, seed 002), whole sequence at once.

    For every ρ ∈ Ω the discounted causal memory is evaluated (`causal_linear_attention`); at step t the output of
    the ρ closest to ρ*_t (Eq. 9 with γ_t from Σ_t, Λ_t) is kept. Equals stepping `ThickenedMemory` through t.
    Raw kernel exp(qᵀk): scale q and k beforehand for a temperature. q, k: (..., L, d); v: (..., L, d_v).
    """
    _check_qkv(q, k, v)
    if q.shape[-2] != k.shape[-2]:
        raise InputError(f"causal attention needs len(q) == len(k), got {q.shape[-2]} and {k.shape[-2]}")
    rhos = thickening_grid(num_chunks)
    q_mode, k_mode = ("row", "sequence") if stabilize else (None, None)
    outs = torch.stack(
        [
            causal_linear_attention(
                favor_plus_plus_features(q, omega, float(rho), stabilize=q_mode),
                favor_plus_plus_features(k, omega, float(rho), stabilize=k_mode),
                v,
                discount=discount,
                eps=eps,
            )
            for rho in rhos
        ]
    )  # (c, ..., L, d_v)
    t = torch.arange(1, q.shape[-2] + 1, dtype=q.dtype, device=q.device)
    key_sum = torch.cumsum(k, dim=-2)
    key_sq = torch.cumsum((k * k).sum(dim=-1), dim=-1)
    gamma = (q * q).sum(dim=-1) + (key_sq + 2.0 * (q * key_sum).sum(dim=-1)) / t
    rho = rho_star(gamma.clamp(min=0.0), q.shape[-1])
    idx = (rho.unsqueeze(-1) - rhos).abs().argmin(dim=-1)  # (..., L)
    idx = idx.expand(outs.shape[1:-1])
    gather = idx.unsqueeze(0).unsqueeze(-1).expand(1, *outs.shape[1:])
    return outs.gather(0, gather).squeeze(0)

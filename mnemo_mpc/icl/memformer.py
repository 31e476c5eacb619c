"""Memformers: linear transformers with memory registers that carry attention outputs across layers (seed 000 §3).

- `CGDMemformer` (Proposition 1, Eq. 17–18): one register, R_ℓ = Attn_ℓ(Z_ℓ) + γ_ℓ R_{ℓ−1},
  Z_{ℓ+1} = Z_ℓ + α_ℓ (1/n) R_ℓ. With A_ℓ = I and the per-prompt CGD line-search α_ℓ and Fletcher–Reeves γ_ℓ this
  is exactly CGD on Eq. 12 (App. A.2); with learned shared scalars it is the "CGD-like" Memformer of Fig. 1a, and with
  general A_ℓ the preconditioned variant of Fig. 1b.
- `LFOMMemformer` (Proposition 2, Eq. 19–20): one register per layer, R_ℓ = Attn_ℓ(Z_ℓ),
  Z_{ℓ+1} = Z_ℓ + (1/n) Σ_{j≤ℓ} Γ_j^ℓ ⊙ R_j with Γ_j^ℓ ∈ R^{(d+1)×(n+1)} (Hadamard). The paper's experiments use
  Γ_j^ℓ = Γ_j (``gamma_sharing="per_layer"``); ``"general"`` keeps every Γ_j^ℓ, which is what an arbitrary LFOM
  (Eq. 16, e.g. heavy-ball momentum with Γ_j^ℓ = ηβ^{ℓ−j}) needs; ``"per_lag"`` (Γ_j^ℓ = Γ_{ℓ−j}, our addition,
  not the paper's) is the stationary middle ground: momentum is in it and it starts exactly at the transformer.
  ``gamma_form="scalar"`` restricts each Γ to a multiple of the all-ones matrix ("Γ_ℓ restricted to scalar
  multiples of the identity", §4 Fig. 4, §5 Fig. 5). With ``parameterization="gdpp"`` it is the LFOM Memformer with
  GD++ of Fig. 3.

  Note on "per_layer": the step w_{ℓ+1} − w_ℓ = −Σ_{j≤ℓ} Γ_j A_j ∇R(w_j) re-applies every old register at every
  later layer, so with scalar Γ it cannot express even the 2-layer transformer (matching both steps requires
  2b̃₀ + b̃₁ = b₀ + b₁ and b̃₀b̃₁ = b₀b₁, which has no real solution when b₀ ≈ b₁).

All heads of a layer are summed into that layer's register (§5).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.linear_transformer import LinearAttentionStack, Parameterization

GammaForm = Literal["full", "scalar"]
GammaSharing = Literal["per_layer", "general", "per_lag"]


def _per_layer_scalar(value: torch.Tensor, layer: int, batch: int, name: str) -> torch.Tensor:
    """Row `layer` of an (L,) or (L, B) tensor: a scalar, or one value per prompt."""
    v = value[layer]
    if v.ndim == 0:
        return v
    if v.shape != (batch,):
        raise InputError(f"{name} must have shape (L,) or (L, B={batch}), got {tuple(value.shape)}")
    return v


class CGDMemformer(LinearAttentionStack):
    """Eq. 17–18. α_ℓ, γ_ℓ are learned scalars, initialised to α = 1, γ = 0 (the plain linear transformer of Eq. 6),
    so a Memformer fine-tuned from a trained transformer starts where the transformer ended."""

    def __init__(
        self,
        d: int,
        n_layers: int,
        n_heads: int = 1,
        parameterization: Parameterization = "pgd",
        scalar_preconditioner: bool = False,
        init_std: float = 0.01,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(d, n_layers, n_heads, parameterization, scalar_preconditioner, init_std, dtype)
        self.alpha = nn.Parameter(torch.ones(n_layers, dtype=dtype))
        self.gamma = nn.Parameter(torch.zeros(n_layers, dtype=dtype))

    def forward(
        self,
        Z0: torch.Tensor,
        return_layers: bool = False,
        alpha: torch.Tensor | None = None,
        gamma: torch.Tensor | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        """Z_L (or [Z_1..Z_L]). `alpha`/`gamma` override the learned scalars, shape (L,) or per prompt (L, B), e.g. the
        per-sample CGD coefficients for App. A.2's exact correspondence. γ_0 multiplies R_{−1} = 0 and has no
        effect (CGD's first step is steepest descent)."""
        alpha = self.alpha if alpha is None else alpha
        gamma = self.gamma if gamma is None else gamma
        if alpha.shape[0] != self.n_layers or gamma.shape[0] != self.n_layers:
            raise InputError(f"alpha/gamma need {self.n_layers} rows, got {tuple(alpha.shape)}, {tuple(gamma.shape)}")
        n = Z0.shape[-1] - 1
        b = Z0.shape[0]
        X, V = self.split(Z0)
        R = None
        outs = []
        for layer in range(self.n_layers):
            attn = self.attention_v(X, V, layer)
            g = _per_layer_scalar(gamma, layer, b, "gamma")
            R = attn if R is None else attn + (g.view(-1, *[1] * (attn.ndim - 1)) if g.ndim else g) * R
            a = _per_layer_scalar(alpha, layer, b, "alpha")
            V = V + (a.view(-1, *[1] * (V.ndim - 1)) if a.ndim else a) * R / n
            if return_layers:
                outs.append(self.assemble(X, V))
        return outs if return_layers else self.assemble(X, V)


class LFOMMemformer(LinearAttentionStack):
    """Eq. 19–20 with Hadamard weights Γ (see module docstring for `gamma_form` and `gamma_sharing`).

    Initialisation: "general" and "per_lag" start at Γ_j^ℓ = δ_{jℓ} (exactly the linear transformer); "per_layer"
    cannot express the transformer (Γ_j also weighs R_j at every later layer), so it starts at `gamma_init`
    everywhere (default 1, a heavy-ball-like sum of past registers) and training moves it."""

    def __init__(
        self,
        d: int,
        n: int,
        n_layers: int,
        n_heads: int = 1,
        parameterization: Parameterization = "pgd",
        scalar_preconditioner: bool = False,
        gamma_form: GammaForm = "full",
        gamma_sharing: GammaSharing = "per_layer",
        gamma_init: float = 1.0,
        init_std: float = 0.01,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(d, n_layers, n_heads, parameterization, scalar_preconditioner, init_std, dtype)
        if gamma_form not in ("full", "scalar"):
            raise InputError(f"gamma_form must be 'full' or 'scalar', got {gamma_form!r}")
        if gamma_sharing not in ("per_layer", "general", "per_lag"):
            raise InputError(f"gamma_sharing must be 'per_layer', 'general' or 'per_lag', got {gamma_sharing!r}")
        self.n = n
        self.gamma_form = gamma_form
        self.gamma_sharing = gamma_sharing
        shape = (d + 1, n + 1) if gamma_form == "full" else ()
        L = n_layers
        if gamma_sharing == "per_layer":
            self.Gamma = nn.Parameter(torch.full((L, *shape), float(gamma_init), dtype=dtype))
        elif gamma_sharing == "per_lag":
            lag0 = torch.zeros((L, *shape), dtype=dtype)
            lag0[0] = 1.0  # Γ_0 = 1, older lags 0: the linear transformer
            self.Gamma = nn.Parameter(lag0)
        else:
            eye = torch.eye(L, dtype=dtype).reshape(L, L, *([1] * len(shape)))
            self.Gamma = nn.Parameter(eye.expand(L, L, *shape).clone())

    def _matrix_names(self) -> set[str]:
        names = super()._matrix_names()
        if self.gamma_form == "full":
            names = names | {"Gamma"}
        return names

    def gamma_weight(self, layer: int, j: int) -> torch.Tensor:
        """Γ_j^ℓ (a (d+1)×(n+1) matrix, or a scalar for gamma_form='scalar')."""
        if j > layer:
            raise InputError(f"Γ_j^ℓ is defined for j <= ℓ, got j={j}, ℓ={layer}")
        if self.gamma_sharing == "per_layer":
            return self.Gamma[j]
        if self.gamma_sharing == "per_lag":
            return self.Gamma[layer - j]
        return self.Gamma[layer, j]

    @torch.no_grad()
    def set_gamma(self, gamma: torch.Tensor) -> None:
        """Load Γ: 'general' takes (L, L[, d+1, n+1]) with [ℓ, j] = Γ_j^ℓ; 'per_layer' takes (L[, d+1, n+1]) indexed
        by j, 'per_lag' the same shape indexed by the lag ℓ − j.
        A scalar-per-(ℓ, j) tensor is broadcast over the Hadamard entries when gamma_form='full'."""
        gamma = torch.as_tensor(gamma, dtype=self.Gamma.dtype, device=self.Gamma.device)
        lead = self.Gamma.ndim - (2 if self.gamma_form == "full" else 0)
        if self.gamma_form == "full" and gamma.ndim == lead:
            gamma = gamma.reshape(*gamma.shape, 1, 1).expand(*gamma.shape, *self.Gamma.shape[-2:])
        if gamma.shape != self.Gamma.shape:
            raise InputError(f"set_gamma: expected shape {tuple(self.Gamma.shape)}, got {tuple(gamma.shape)}")
        self.Gamma.copy_(gamma)

    def forward(self, Z0: torch.Tensor, return_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """Z_L (or [Z_1..Z_L]) of Eq. 20."""
        n = Z0.shape[-1] - 1
        if self.gamma_form == "full" and n != self.n:
            raise InputError(f"LFOMMemformer was built for n={self.n} context tokens, got prompts with n={n}")
        X, V = self.split(Z0)
        registers: list[torch.Tensor] = []
        outs = []
        for layer in range(self.n_layers):
            registers.append(self.attention_v(X, V, layer))
            update = sum(self.gamma_v(self.gamma_weight(layer, j)) * registers[j] for j in range(layer + 1))
            V = V + update / n
            if return_layers:
                outs.append(self.assemble(X, V))
        return outs if return_layers else self.assemble(X, V)

"""Linear self-attention and the L-layer linear transformer of seed 000 §2.1 (Eq. 4–9).

Attn_{P,Q}(Z) = P Z M (Zᵀ Q Z) (Eq. 5) with the mask M = diag(I_n, 0) (Eq. 4) that hides the query's (zero) label;
layers are residual, Z_{ℓ+1} = Z_ℓ + (1/n) Attn_{P_ℓ,Q_ℓ}(Z_ℓ) (Eq. 6); the output is TF_L(Z₀) = −[Z_L]_{d+1,n+1}
(Eq. 7). Heads are summed (§5: "attention values from each head are summed").

Parameterisations of each head's (P, Q):
- ``"pgd"``  (Eq. 9, B_ℓ = 0): P = [[0, 0], [0, 1]], Q = −[[A_ℓ, 0], [0, 0]]. Lemma 1: the query prediction after ℓ
  layers is ⟨x(n+1), w_ℓ⟩ for preconditioned GD w_{ℓ+1} = w_ℓ − A_ℓᵀ ∇R(w_ℓ) on Eq. 12 from w₀ = 0. (The proof in
  App. A.1 writes A_ℓ; working Eq. 22 through for a non-symmetric A_ℓ gives its transpose. Summed heads act as
  Σ_h A_{ℓ,h}ᵀ.) ``scalar_preconditioner=True`` restricts A_ℓ = a_ℓ I (the "CGD-like" setting of Fig. 1a).
- ``"gdpp"`` (GD++, §3.3 Fig. 3): as "pgd" but P's top-left block B_ℓ is learned too, so the covariates are
  transformed across layers (a truncated Neumann series of (XXᵀ)⁻¹ in von Oswald et al. 2023).
- ``"full"``: P and Q unconstrained (d+1)×(d+1).

Loss (Eq. 8): E[(TF_L(Z₀) − ⟨w*, x(n+1)⟩)²] = E[([Z_L]_{d+1,n+1} + ⟨w*, x(n+1)⟩)²]. The paper prints
"(TF_L + w*ᵀx)²", which with Eq. 7's minus sign would reward predicting −y; we follow Ahn et al. (2024), whose loss
is the right-hand form, and which is what Lemma 1 (y_ℓ^{(n+1)} = −⟨x, w_ℓ⟩) needs.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from mnemo_mpc.errors import InputError

Parameterization = Literal["pgd", "gdpp", "full"]
PARAMETERIZATIONS: tuple[str, ...] = ("pgd", "gdpp", "full")


def linear_attention(Z: torch.Tensor, P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """Attn_{P,Q}(Z) = P Z M (Zᵀ Q Z) (Eq. 5), summed over heads.

    Z: (B, d+1, n+1). P, Q: (d+1, d+1) for one head, (H, d+1, d+1) for H heads, or (B, H, d+1, d+1) per prompt.
    Evaluated as P (Z M Zᵀ) Q Z, which is the same product re-associated: (d+1)² work per token instead of (n+1)².
    """
    if Z.ndim != 3:
        raise InputError(f"linear_attention: Z must be (B, d+1, n+1), got shape {tuple(Z.shape)}")
    D = Z.shape[1]
    if P.shape[-2:] != (D, D) or Q.shape[-2:] != (D, D):
        raise InputError(f"linear_attention: P and Q must end in ({D}, {D}), got {tuple(P.shape)} and {tuple(Q.shape)}")
    if P.ndim == 2:
        P, Q = P.unsqueeze(0), Q.unsqueeze(0)
    Zc = Z[:, :, :-1]  # Z M: the query column is masked out of the keys/values
    S = Zc @ Zc.mT  # (B, D, D)
    if P.ndim == 3:
        PSQ = torch.einsum("hij,bjk,hkl->bil", P, S, Q)
    else:
        PSQ = torch.einsum("bhij,bjk,bhkl->bil", P, S, Q)
    return PSQ @ Z


def query_prediction(Z: torch.Tensor) -> torch.Tensor:
    """TF(Z₀) = −[Z]_{d+1,n+1} (Eq. 7), for a layer output Z of shape (B, d+1, n+1)."""
    return -Z[:, -1, -1]


def in_context_loss(Z: torch.Tensor, y_query: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of (TF(Z₀) − ⟨w*, x(n+1)⟩)² (Eq. 8, sign as in Ahn et al. 2024; see module docstring)."""
    return ((Z[:, -1, -1] + y_query) ** 2).mean()


class LinearAttentionStack(nn.Module):
    """Per-layer, per-head (P_ℓ,h, Q_ℓ,h) in one of the parameterisations of Eq. 9 (see module docstring).

    Subclasses decide how layer outputs combine (plain residual, Eq. 6; memory registers, Eq. 17–20).
    """

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
        super().__init__()
        if d < 1 or n_layers < 1 or n_heads < 1:
            raise InputError(f"d, n_layers and n_heads must be >= 1, got d={d}, L={n_layers}, H={n_heads}")
        if parameterization not in PARAMETERIZATIONS:
            raise InputError(f"parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}")
        if scalar_preconditioner and parameterization == "full":
            raise InputError("scalar_preconditioner applies to 'pgd'/'gdpp' (Eq. 9 A_ℓ = a_ℓ I), not to 'full'")
        self.d, self.n_layers, self.n_heads = d, n_layers, n_heads
        self.parameterization = parameterization
        self.scalar_preconditioner = scalar_preconditioner
        L, H, D = n_layers, n_heads, d + 1
        if parameterization == "full":
            self.P = nn.Parameter(torch.randn(L, H, D, D, dtype=dtype) * init_std)
            self.Q = nn.Parameter(torch.randn(L, H, D, D, dtype=dtype) * init_std)
        else:
            if scalar_preconditioner:
                self.a = nn.Parameter(torch.randn(L, H, dtype=dtype) * init_std)
            else:
                self.A = nn.Parameter(torch.randn(L, H, d, d, dtype=dtype) * init_std)
            if parameterization == "gdpp":
                self.B = nn.Parameter(torch.randn(L, H, d, d, dtype=dtype) * init_std)

    # ---- parameters -------------------------------------------------------------------------------------------
    def preconditioners(self) -> torch.Tensor:
        """A_ℓ,h of Eq. 9, shape (L, H, d, d) ('pgd'/'gdpp' only)."""
        if self.parameterization == "full":
            raise InputError("preconditioners(): the 'full' parameterisation has no A_ℓ block structure")
        if self.scalar_preconditioner:
            eye = torch.eye(self.d, dtype=self.a.dtype, device=self.a.device)
            return self.a[..., None, None] * eye
        return self.A

    @torch.no_grad()
    def set_preconditioners(self, A: torch.Tensor) -> None:
        """Load A_ℓ (shape (L, d, d), or (L, H, d, d); for the scalar form (L,) or (L, H) scalars)."""
        if self.parameterization == "full":
            raise InputError("set_preconditioners(): not available for the 'full' parameterisation")
        A = torch.as_tensor(A)
        if self.scalar_preconditioner:
            target = self.a
            if A.shape == (self.n_layers,):
                A = A[:, None].expand(-1, self.n_heads)
        else:
            target = self.A
            if A.shape == (self.n_layers, self.d, self.d):
                A = A[:, None].expand(-1, self.n_heads, -1, -1)
        if A.shape != target.shape:
            raise InputError(f"set_preconditioners: expected shape {tuple(target.shape)}, got {tuple(A.shape)}")
        target.copy_(A.to(target.dtype))

    def layer_PQ(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(P_ℓ, Q_ℓ) stacked over heads, each (H, d+1, d+1), assembled per Eq. 9."""
        if self.parameterization == "full":
            return self.P[layer], self.Q[layer]
        d, H = self.d, self.n_heads
        A = self.preconditioners()[layer]
        dtype, dev = A.dtype, A.device
        P = torch.zeros(H, d + 1, d + 1, dtype=dtype, device=dev)
        P[:, d, d] = 1.0
        if self.parameterization == "gdpp":
            P = P.clone()
            P[:, :d, :d] = self.B[layer]
        Q = torch.zeros(H, d + 1, d + 1, dtype=dtype, device=dev)
        Q[:, :d, :d] = -A
        return P, Q

    def attention(self, Z: torch.Tensor, layer: int) -> torch.Tensor:
        """Σ_h Attn_{P_ℓ,h, Q_ℓ,h}(Z_ℓ) (Eq. 5, heads summed), dense."""
        P, Q = self.layer_PQ(layer)
        return linear_attention(Z, P, Q)

    # ---- the evolving part of Z ----------------------------------------------------------------------------------
    # Under "pgd" (B_ℓ = 0) the covariate rows of Z never change and every attention output is zero outside the label
    # row, so the layers only need to carry that row: V = Z[:, d, :]. The other parameterisations carry all of Z.
    # Forward passes work on V and re-assemble Z with `assemble`; the numbers are those of the dense Eq. 5–6
    # (tested against `linear_attention`), at a sixth of the memory traffic.

    def split(self, Z0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(X, V): the fixed covariate rows and the evolving part of Z₀."""
        if Z0.ndim != 3 or Z0.shape[1] != self.d + 1:
            raise InputError(f"expected Z of shape (B, {self.d + 1}, n+1), got {tuple(Z0.shape)}")
        if self.parameterization == "pgd":
            return Z0[:, : self.d, :], Z0[:, self.d, :]
        return Z0[:, : self.d, :], Z0

    def assemble(self, X: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """Z from (X, V) (inverse of `split`)."""
        if self.parameterization == "pgd":
            return torch.cat([X, V.unsqueeze(1)], dim=1)
        return V

    def attention_v(self, X: torch.Tensor, V: torch.Tensor, layer: int) -> torch.Tensor:
        """The evolving part of Σ_h Attn(Z_ℓ). For "pgd": the label row −(Ȳ X̄ᵀ)(Σ_h A_h) X (Eq. 5 under Eq. 9's
        block structure, P = e_{d+1}e_{d+1}ᵀ; heads collapse to ΣA_h because Eq. 5 is linear in Q)."""
        if self.parameterization != "pgd":
            return self.attention(V, layer)
        n = V.shape[-1] - 1
        A = self.preconditioners()[layer].sum(0)
        # Broadcast-and-sum rather than einsum: einsum lowers these batched mat-vecs to B tiny bmm calls.
        u = (V[:, :n].unsqueeze(1) * X[:, :, :n]).sum(-1) @ A  # Ȳ X̄ᵀ A, (B, d)
        return -(u.unsqueeze(-1) * X).sum(1)

    def gamma_v(self, gamma: torch.Tensor) -> torch.Tensor:
        """A Hadamard weight Γ ∈ R^{(d+1)×(n+1)} restricted to the evolving part (its label row under "pgd")."""
        if self.parameterization == "pgd" and gamma.ndim >= 2:
            return gamma[..., self.d, :]
        return gamma

    def clip_groups(self) -> list[tuple[torch.Tensor, int]]:
        """(parameter, matrix_dims) pairs for per-matrix gradient clipping (§3.3): matrix_dims=2 clips each trailing
        2-D slice, 0 clips each scalar entry (α_ℓ, γ_ℓ, a_ℓ are 1×1 "matrices")."""
        groups: list[tuple[torch.Tensor, int]] = []
        for name, p in self.named_parameters():
            groups.append((p, 2 if name in self._matrix_names() else 0))
        return groups

    def _matrix_names(self) -> set[str]:
        return {"P", "Q", "A", "B"}


class LinearTransformer(LinearAttentionStack):
    """L layers of Eq. 6: Z_{ℓ+1} = Z_ℓ + (1/n) Σ_h Attn_{P_ℓ,h, Q_ℓ,h}(Z_ℓ)."""

    def forward(self, Z0: torch.Tensor, return_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """Z_L, or [Z_1, …, Z_L] when `return_layers` (per-layer predictions for the loss-vs-layer plots)."""
        n = Z0.shape[-1] - 1
        X, V = self.split(Z0)
        outs = []
        for layer in range(self.n_layers):
            V = V + self.attention_v(X, V, layer) / n
            if return_layers:
                outs.append(self.assemble(X, V))
        return outs if return_layers else self.assemble(X, V)


def layer_losses(layers: list[torch.Tensor], y_query: torch.Tensor) -> list[float]:
    """Eq. 8's loss after each layer (for evaluating a stack's intermediate outputs)."""
    return [float(in_context_loss(Z, y_query)) for Z in layers]


def log_loss(loss: float) -> float:
    """Natural log of a loss, as plotted in Fig. 1–5 ("log(Loss)"); −inf for an exact 0."""
    return math.log(loss) if loss > 0 else float("-inf")

"""The causal compact-associative-memory (CAM) cell and the Mnemosyne learned optimizer (seed 002 §3, §5.1).

`CausalMnemosyneCell` is Eq. 3-6 in the uni-directional setting, one pattern per optimisation step:

    ξ_t = W_in x_t                                  (input embedding into the 16 hidden dimensions)
    q_t = W_Q ξ_t,  k_t = W_K ξ_t,  v_t = W_V ξ_t    (Eq. 3; q and k also scaled by d^{-1/4}, the 1/√d temperature)
    N_t = e^{-τ} N_{t-1} + φ(k_t) v_tᵀ,  Ψ_t = e^{-τ} Ψ_{t-1} + φ(k_t)      (Eq. 5, exponential discount)
    ξ'_t = ξ_t + N_tᵀ φ(q_t) / φ(q_t)ᵀ Ψ_t                                  (Eq. 6, residual update)

φ is FAVOR+ (Eq. 7), hyperbolic FAVOR+ (Eq. 8) or FAVOR++ with the thickened state (§3.2.1) from
`mnemo_mpc.memory`; the state is `CompactMemory` / `ThickenedMemory`, so its size per coordinate is fixed by r and
the hidden size, not by the number of steps. `forward_sequence` evaluates the same cell over a whole gradient
sequence in the parallel causal form (`causal_linear_attention` / `thickened_causal_attention`): equal to stepping,
which the tests check.

Keys are never max-shifted (in a stream no shift common to all keys is known in advance); FAVOR+ features are
bounded above by exp(‖ω‖²/2)/√r in their input, so they cannot overflow. Queries are max-shifted per row (a
per-query constant that cancels in Eq. 6's ratio up to `eps`) for FAVOR+ and hyperbolic features.

`MnemosyneLearnedOptimizer`: gradient preprocessing (Andrychowicz et al., p = 10) -> `num_cells` stacked cells ->
linear layer -> update (seed 002 §5.1: "given to 2 compact Mnemosyne's memory cells sequentially ... The memory cell
output is fed to a fully connected layer which returns the update").
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.attention import (
    CompactMemory,
    ThickenedMemory,
    causal_linear_attention,
    thickened_causal_attention,
    thickening_grid,
)
from mnemo_mpc.memory.features import make_features
from mnemo_mpc.optimizers.base import LearnedOptimizer, LearnedOptimizerConfig, State, check_grad
from mnemo_mpc.optimizers.preprocess import PREPROCESSED_DIM, preprocess_gradients

__all__ = ["CausalMnemosyneCell", "MnemosyneLearnedOptimizer"]


class CausalMnemosyneCell(nn.Module):
    """One causal CAM cell (module docstring), batched over coordinates: x (B, input_dim) -> ξ' (B, hidden_dim).

    State (first axis B): FAVOR+/hyperbolic {"memory": (B, r, d), "normaliser": (B, r)}; FAVOR++ adds the
    thickening axis c and the key statistics {"memory": (B, c, r, d), "normaliser": (B, c, r), "key_sum": (B, d),
    "key_sq": (B,), "count": (B,)} (Σ_t, Λ_t and t of §3.2.1; t is the same for every coordinate).
    """

    def __init__(
        self,
        input_dim: int,
        *,
        hidden_dim: int = 16,
        num_features: int = 16,
        discount: float = 0.1,
        features: str = "favor_plus",
        num_chunks: int = 8,
        eps: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if input_dim < 1 or hidden_dim < 1:
            raise InputError(f"input_dim and hidden_dim must be >= 1, got {input_dim}, {hidden_dim}")
        if not discount >= 0:
            raise InputError(f"discount τ must be >= 0, got {discount!r}")
        self.input_dim, self.hidden_dim = int(input_dim), int(hidden_dim)
        self.discount, self.eps, self.num_chunks = float(discount), float(eps), int(num_chunks)
        self.kind = features
        self.embed = nn.Linear(input_dim, hidden_dim)
        self.w_q = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.w_k = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, hidden_dim, bias=False)
        # ω is a fixed buffer (saved with the weights): the learned weights are meta-trained against this draw.
        self.features = make_features(features, hidden_dim, num_features, seed=seed)
        self.num_features = int(num_features)
        self.scale = hidden_dim**-0.25

    def init_state(self, batch: int, *, device: torch.device | str | None = None) -> State:
        dtype = self.embed.weight.dtype
        r, d = self.num_features, self.hidden_dim
        if self.kind != "favor_plus_plus":
            return {
                "memory": torch.zeros(batch, r, d, dtype=dtype, device=device),
                "normaliser": torch.zeros(batch, r, dtype=dtype, device=device),
            }
        c = self.num_chunks
        return {
            "memory": torch.zeros(batch, c, r, d, dtype=dtype, device=device),
            "normaliser": torch.zeros(batch, c, r, dtype=dtype, device=device),
            "key_sum": torch.zeros(batch, d, dtype=dtype, device=device),
            "key_sq": torch.zeros(batch, dtype=dtype, device=device),
            "count": torch.zeros(batch, dtype=dtype, device=device),
        }

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        xi = self.embed(x)
        return xi, self.w_q(xi) * self.scale, self.w_k(xi) * self.scale, self.w_v(xi)

    def forward(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """One step: write (k_t, v_t) into the memory (Eq. 5), then read it with q_t (Eq. 6). O(r·d) per row."""
        xi, q, k, v = self._qkv(x)
        if self.kind != "favor_plus_plus":
            mem = CompactMemory(state["memory"], state["normaliser"], self.discount)
            mem = mem.update(self.features(k), v)
            delta = mem.read(self.features(q, stabilize="row"), eps=self.eps)
            return xi + delta, {"memory": mem.memory, "normaliser": mem.normaliser}
        count = int(state["count"][0].item()) if state["count"].numel() else 0
        thick = ThickenedMemory(
            omega=self.features.omega,
            rhos=thickening_grid(self.num_chunks),
            memory=state["memory"].movedim(1, 0),
            normaliser=state["normaliser"].movedim(1, 0),
            key_sum=state["key_sum"],
            key_sq=state["key_sq"],
            count=count,
            discount=self.discount,
        ).update(k, v)
        delta = thick.read(q, stabilize=False, eps=self.eps)
        new = {
            "memory": thick.memory.movedim(0, 1),
            "normaliser": thick.normaliser.movedim(0, 1),
            "key_sum": thick.key_sum,
            "key_sq": thick.key_sq,
            "count": state["count"] + 1.0,
        }
        return xi + delta, new

    def forward_sequence(self, x: Tensor) -> Tensor:
        """The whole causal sequence at once: x (B, L, input_dim) -> (B, L, hidden_dim), from an empty state.

        Parallel form of stepping `forward` L times (prefix sums in chunks instead of a loop over t)."""
        xi, q, k, v = self._qkv(x)
        if self.kind != "favor_plus_plus":
            q_feat, k_feat = self.features(q, stabilize="row"), self.features(k)
            return xi + causal_linear_attention(q_feat, k_feat, v, discount=self.discount, eps=self.eps)
        delta = thickened_causal_attention(
            q,
            k,
            v,
            self.features.omega,
            num_chunks=self.num_chunks,
            discount=self.discount,
            stabilize=False,
            eps=self.eps,
        )
        return xi + delta


class MnemosyneLearnedOptimizer(LearnedOptimizer):
    """Coordinate-wise Mnemosyne optimizer of seed 002 §5.1 (module docstring): gradient (n,) -> update (n,)."""

    def __init__(self, config: LearnedOptimizerConfig | None = None) -> None:
        super().__init__()
        config = config or LearnedOptimizerConfig()
        if config.kind != "mnemosyne":
            raise InputError(f"MnemosyneLearnedOptimizer needs config.kind='mnemosyne', got {config.kind!r}")
        self.config = config
        # Weights from config.seed without touching the caller's global RNG; ω has its own seeded generators.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self._build(config)

    def _build(self, config: LearnedOptimizerConfig) -> None:
        self.cells = nn.ModuleList(
            CausalMnemosyneCell(
                PREPROCESSED_DIM if i == 0 else config.hidden_dim,
                hidden_dim=config.hidden_dim,
                num_features=config.num_features,
                discount=config.discount,
                features=config.features,
                num_chunks=config.num_chunks,
                eps=config.eps,
                seed=config.seed * 1009 + i,
            )
            for i in range(config.num_cells)
        )
        self.head = nn.Linear(config.hidden_dim, 1)

    def init_state(self, n: int, *, device: torch.device | str | None = None) -> State:
        state: State = {}
        for i, cell in enumerate(self.cells):
            state.update({f"cell{i}.{k}": v for k, v in cell.init_state(n, device=device).items()})
        return state

    def forward(self, grad: Tensor, state: State) -> tuple[Tensor, State]:
        check_grad(grad)
        h = preprocess_gradients(grad.to(self.dtype), self.config.preprocess_p)
        new: State = {}
        for i, cell in enumerate(self.cells):
            prefix = f"cell{i}."
            h, s = cell(h, {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
            new.update({prefix + k: v for k, v in s.items()})
        update = self.head(h).squeeze(-1) * self.config.output_scale
        return update, new

    def forward_sequence(self, grads: Tensor) -> Tensor:
        """Updates for a whole gradient sequence (B, L) at once, from an empty state: the parallel causal form.

        Only for a FIXED gradient sequence (in training, each gradient depends on the previous update)."""
        h = preprocess_gradients(grads.to(self.dtype), self.config.preprocess_p)
        for cell in self.cells:
            h = cell.forward_sequence(h)
        return self.head(h).squeeze(-1) * self.config.output_scale

"""Small Transformers for the associative-memory toys of seed 004 (Bietti, *Associative Memories as a Building
Block in Transformers*, slides "Transformer language models" and "Induction head with associative memories").

Residual stream (seed 004, slide "Residual streams"): x_t = e_{z_t} + p_t, then per layer
x_t += MHSA(x_t, x_{1:t}) with beta_s ∝ exp(x_s^T W_K^T W_Q x_t), x_t += MLP(x_t) = V^T relu(U x_t), and the logits
u_y^T x_t. As in the slides (and Bietti et al. 2023, "Birth of a Transformer"), input, positional and output
embeddings can be frozen at their random N(0, 1/d) initialisation, so every trained matrix is an associative
memory between (near-orthonormal) random vectors, which the recall probes of `mnemo_mpc.theory.bigram` read out
through `w_kq` / `w_ov`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from mnemo_mpc.errors import InputError


@dataclass(frozen=True)
class TransformerConfig:
    """One model of the toys. Defaults are the slides' setup: frozen random embeddings, softmax attention."""

    vocab_size: int
    dim: int = 128
    n_layers: int = 2
    n_heads: int = 1
    head_dim: int = 0  # 0: dim // n_heads
    max_len: int = 0  # > 0: absolute positional embeddings p_t for t < max_len (induction); 0: none (factual)
    mlp_width: int = 0  # 0: attention-only
    mlp_layers: tuple[int, ...] | None = None  # layers that carry an MLP (None: all, when mlp_width > 0)
    mlp_in_std: float = 0.0  # std of U's entries; 0: LeCun 1/sqrt(d). 1.0 gives unit-scale pre-activations on
    # unit-norm embeddings (random features in the kernel regime of Nichani et al.'s MLP memory construction)
    out_size: int = 0  # number of output classes u_y (0: vocab_size)
    freeze_embeddings: bool = True  # e_z, p_t, u_y fixed at N(0, 1/d) (seed 004: "fixed to random init")
    identity_query: bool = False  # W_Q = I, so W_KQ = W_K^T is the only key-query memory (Birth §4.2)
    ov_init_scale: float = 1.0  # multiplies the initial W_V and W_O (small: the "W_OV ~ alpha" init of the
    # factual-recall dynamics theorem, seed 004 "Training dynamics")
    scaled_scores: bool = True  # divide scores by sqrt(d_h); False: beta ∝ exp(x_s^T W_KQ x_t) as on the slides
    frozen: tuple[str, ...] = field(default_factory=tuple)  # parameters kept at init, e.g. "layers.0.attn.wv"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise InputError(f"TransformerConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("head_dim", "max_len", "mlp_width", "out_size"):
            if getattr(self, name) < 0:
                raise InputError(f"TransformerConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.head_dim == 0 and self.dim % self.n_heads:
            raise InputError(f"TransformerConfig.dim={self.dim} is not divisible by n_heads={self.n_heads}")
        if self.identity_query and self.n_heads * self.d_head != self.dim:
            raise InputError("TransformerConfig.identity_query needs n_heads * head_dim == dim")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def n_out(self) -> int:
        return self.out_size or self.vocab_size

    def has_mlp(self, layer: int) -> bool:
        return self.mlp_width > 0 and (self.mlp_layers is None or layer in self.mlp_layers)


def _gaussian(*shape: int, std: float, generator: torch.Generator | None) -> Tensor:
    return torch.randn(*shape, generator=generator) * std


class Attention(nn.Module):
    """Causal multi-head softmax attention (seed 004, MHSA slide). Weights are stored per head-stacked rows:
    wq, wk, wv: (H*d_h, d); wo: (d, H*d_h). N(0, 1/d) init for wq/wk/wv and N(0, 1/(H d_h)) for wo so that a
    frozen W_OV = W_O W_V is a norm-preserving random "remapping" (slide "Random embeddings in high dimension")."""

    def __init__(self, cfg: TransformerConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.scale = cfg.d_head**-0.5 if cfg.scaled_scores else 1.0
        inner, d = cfg.n_heads * cfg.d_head, cfg.dim
        self.wq = None if cfg.identity_query else nn.Parameter(_gaussian(inner, d, std=d**-0.5, generator=generator))
        self.wk = nn.Parameter(_gaussian(inner, d, std=d**-0.5, generator=generator))
        a = cfg.ov_init_scale
        self.wv = nn.Parameter(_gaussian(inner, d, std=a * d**-0.5, generator=generator))
        self.wo = nn.Parameter(_gaussian(d, inner, std=a * inner**-0.5, generator=generator))

    def forward(
        self, x: Tensor, last_only: bool = False, table: Tensor | None = None, tokens: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """x: (B, T, d) -> (update (B, T', d), attention (B, H, T', T)); T' = 1 when only the last query is needed.

        When the stream is a pure token embedding (x = table[tokens], first layer, no positions), keys and
        values are projected once per vocabulary row and gathered: the same numbers for ~T times less work."""
        b, t, _ = x.shape
        xq = x[:, -1:] if last_only else x
        h, e = self.n_heads, self.d_head
        q = (xq if self.wq is None else xq @ self.wq.T).view(b, xq.shape[1], h, e).transpose(1, 2)  # (B, H, T', e)
        if table is not None and tokens is not None:
            k, v = (table @ self.wk.T)[tokens], (table @ self.wv.T)[tokens]
        else:
            k, v = x @ self.wk.T, x @ self.wv.T
        k, v = k.view(b, t, h, e).transpose(1, 2), v.view(b, t, h, e).transpose(1, 2)  # (B, H, T, e)
        if last_only:  # one query per sequence: a broadcast product is much cheaper than tiny batched matmuls
            scores = (k * q).sum(-1, keepdim=True).transpose(-1, -2) * self.scale  # (B, H, 1, T)
            attn = scores.softmax(dim=-1)
            out = (attn.transpose(-1, -2) * v).sum(-2, keepdim=True)  # (B, H, 1, e)
        else:
            scores = q @ k.transpose(-1, -2) * self.scale  # (B, H, T, T)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            attn = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
            out = attn @ v  # (B, H, T, e)
        out = out.transpose(1, 2).reshape(b, xq.shape[1], h * e)
        return out @ self.wo.T, attn


class MLP(nn.Module):
    """MLP(x) = V^T relu(U x + b) (seed 004, "feed-forward" slide); LeCun-normal init unless `in_std` > 0."""

    def __init__(self, dim: int, width: int, generator: torch.Generator | None = None, in_std: float = 0.0) -> None:
        super().__init__()
        self.w1 = nn.Parameter(_gaussian(width, dim, std=in_std or dim**-0.5, generator=generator))
        self.b1 = nn.Parameter(torch.zeros(width))
        self.w2 = nn.Parameter(_gaussian(dim, width, std=width**-0.5, generator=generator))

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x @ self.w1.T + self.b1) @ self.w2.T


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.attn = Attention(cfg, generator)
        self.mlp = MLP(cfg.dim, cfg.mlp_width, generator, cfg.mlp_in_std) if cfg.has_mlp(layer) else None

    def forward(
        self, x: Tensor, last_only: bool = False, table: Tensor | None = None, tokens: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        h, attn = self.attn(x, last_only, table, tokens)
        x = (x[:, -1:] if last_only else x) + h
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x, attn


class Transformer(nn.Module):
    """Embeddings -> `n_layers` blocks -> logits u_y^T x_t. `forward(tokens)` gives (B, T, n_out) next-token logits;
    `forward(tokens, last_only=True)` gives (B, n_out) from the last position (factual recall reads the answer at
    the final EOS token, so earlier queries are skipped; only valid for the last layer's queries, hence 1 layer)."""

    def __init__(self, cfg: TransformerConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)
        d = cfg.dim
        emb = {
            "tok_emb": _gaussian(cfg.vocab_size, d, std=d**-0.5, generator=g),
            "unembed": _gaussian(cfg.n_out, d, std=d**-0.5, generator=g),
        }
        if cfg.max_len:
            emb["pos_emb"] = _gaussian(cfg.max_len, d, std=d**-0.5, generator=g)
        for name, value in emb.items():
            if cfg.freeze_embeddings:
                self.register_buffer(name, value)
            else:
                setattr(self, name, nn.Parameter(value))
        if not cfg.max_len:
            self.pos_emb = None
        self.layers = nn.ModuleList(Block(cfg, i, g) for i in range(cfg.n_layers))
        params = dict(self.named_parameters())
        for name in cfg.frozen:
            if name not in params:
                raise InputError(
                    f"TransformerConfig.frozen: unknown parameter {name!r}; expected one of {sorted(params)}"
                )
            params[name].requires_grad_(False)

    def embed(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise InputError(f"tokens must be (batch, length), got shape {tuple(tokens.shape)}")
        x = self.tok_emb[tokens]
        if self.pos_emb is not None:
            if tokens.shape[1] > self.pos_emb.shape[0]:
                raise InputError(f"sequence length {tokens.shape[1]} exceeds max_len={self.pos_emb.shape[0]}")
            x = x + self.pos_emb[: tokens.shape[1]]
        return x

    def forward(
        self, tokens: Tensor, last_only: bool = False, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        if last_only and self.cfg.n_layers != 1:
            raise InputError("last_only=True needs a 1-layer model (deeper layers need every position)")
        x = self.embed(tokens)
        # Without positions, the first layer sees pure token embeddings: project per vocabulary row, then gather.
        table = self.tok_emb if self.pos_emb is None else None
        attns = []
        for i, block in enumerate(self.layers):
            x, a = block(x, last_only, table if i == 0 else None, tokens if i == 0 else None)
            attns.append(a)
        logits = x @ self.unembed.T
        logits = logits[:, -1] if last_only else logits
        return (logits, attns) if return_attn else logits

    # Associative-memory read-outs (seed 004, slide "Induction head with associative memories").
    def w_kq(self, layer: int, head: int = 0) -> Tensor:
        """W_KQ = W_K^T W_Q (d x d) of one head: the pre-softmax score of key x_s for query x_t is
        x_s^T W_KQ x_t (divided by sqrt(d_h) when `scaled_scores`)."""
        attn = self.layers[layer].attn
        sl = slice(head * attn.d_head, (head + 1) * attn.d_head)
        wq = torch.eye(self.cfg.dim)[sl] if attn.wq is None else attn.wq[sl]
        return attn.wk[sl].T @ wq

    def w_ov(self, layer: int, head: int = 0) -> Tensor:
        """W_OV = W_O W_V (d x d) of one head: what attending to x_s writes into the residual stream."""
        attn = self.layers[layer].attn
        sl = slice(head * attn.d_head, (head + 1) * attn.d_head)
        return attn.wo[:, sl] @ attn.wv[sl]

    def n_trainable(self, prefix: str = "") -> int:
        """Number of trained scalars (frozen embeddings and frozen matrices excluded), optionally under `prefix`."""
        return sum(p.numel() for n, p in self.named_parameters() if p.requires_grad and n.startswith(prefix))

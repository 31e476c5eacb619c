"""The in-context bigram task and memory-recall probes (seed 004, slides "The bigram data model for in-context
reasoning", "Induction head with associative memories", "Empirically probing the dynamics"; Bietti et al. 2023,
"Birth of a Transformer: a Memory Viewpoint", §3 and §6).

Each sequence z_{1:T} is drawn from a sequence-specific Markov chain: K fixed trigger tokens q_k (the K most
frequent characters), outputs o_k ~ pi_o(.|q_k) drawn afresh per sequence, z_1 ~ pi_1 (the unigram
distribution) and z_t | z_{t-1} = o_k if z_{t-1} = q_k, else pi_b(.|z_{t-1}) (the global character bigrams).

The paper estimates pi_b on Karpathy's tiny Shakespeare; we must stay offline, so `load_english_text` uses the
English documentation bundled with CPython itself: `pydoc_data.topics.topics` (the Python Language Reference
topics that `help()` shows), all topics joined in sorted-key order, restricted to ASCII characters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mnemo_mpc.errors import InputError
from mnemo_mpc.theory.transformer import Transformer

TEXT_SOURCE = "CPython stdlib pydoc_data.topics.topics (help() topics, sorted keys, joined by blank lines, ASCII only)"


def load_english_text() -> str:
    """The offline English corpus for pi_b: every `pydoc_data.topics.topics` entry in sorted-key order joined by
    blank lines, with non-ASCII characters dropped (typographic quotes would add rare one-off tokens)."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distro builds strip pydoc_data
        raise InputError("the bigram text source pydoc_data.topics is missing from this Python install") from exc
    text = "\n\n".join(topics[k] for k in sorted(topics))
    return text.encode("ascii", errors="ignore").decode("ascii")


@dataclass(frozen=True)
class BigramModel:
    """Character unigram pi_1 and bigram pi_b(j|i) estimated by counting (seed 004: "global bigrams model")."""

    chars: str  # token id -> character
    unigram: np.ndarray  # (N,)
    cond: np.ndarray  # (N, N), rows sum to 1
    source: str

    @property
    def n_tokens(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        lookup = {c: i for i, c in enumerate(self.chars)}
        return np.array([lookup[c] for c in text], dtype=np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def bigram_model_from_text(text: str, source: str = "text") -> BigramModel:
    """Count unigrams and bigrams of `text` with numpy (the maximum-likelihood pi_1, pi_b)."""
    if len(text) < 2:
        raise InputError(f"bigram text must have at least 2 characters, got {len(text)}")
    chars = "".join(sorted(set(text)))
    lookup = np.full(max(map(ord, chars)) + 1, -1, dtype=np.int64)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars))
    ids = lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)]
    n = len(chars)
    unigram = np.bincount(ids, minlength=n).astype(np.float64)
    counts = np.bincount(ids[:-1] * n + ids[1:], minlength=n * n).reshape(n, n).astype(np.float64)
    rows = counts.sum(1, keepdims=True)
    # A character seen only as the very last one has no successor; give it the unigram as its next-token law.
    cond = np.where(rows > 0, counts / np.maximum(rows, 1), unigram / unigram.sum())
    return BigramModel(chars=chars, unigram=unigram / unigram.sum(), cond=cond, source=source)


def default_bigram_model() -> BigramModel:
    return bigram_model_from_text(load_english_text(), source=TEXT_SOURCE)


@dataclass(frozen=True)
class BigramBatch:
    """tokens: (B, T+1) int64; occurrence[b, t] = n >= 1 when z_t is a trigger seen for the n-th time in the
    sequence (so z_{t+1} is its in-context output o_k), else 0; outputs: (B, K) the o_k of each sequence."""

    tokens: np.ndarray
    occurrence: np.ndarray
    outputs: np.ndarray

    def torch(self, device: str = "cpu") -> tuple[Tensor, Tensor, Tensor]:
        """(inputs z_{1:T}, targets z_{2:T+1}, occurrence of each input position) as tensors."""
        t = torch.from_numpy(self.tokens).to(device)
        return t[:, :-1], t[:, 1:], torch.from_numpy(self.occurrence[:, :-1]).to(device)


class InContextBigramTask:
    """Sampler of the bigram task (seed 004 slide "The bigram data model"; Birth §3 with fixed triggers).

    `output_law`: "uniform" draws o_k uniformly among the non-trigger tokens (Birth's default pi_o), "bigram"
    draws o_k ~ pi_b(.|q_k) restricted to non-triggers. Outputs exclude the triggers so that no sequence locks
    into a deterministic trigger cycle (q_1 -> q_2 -> q_1 ...)."""

    def __init__(self, model: BigramModel, n_triggers: int = 5, seq_len: int = 256, output_law: str = "uniform"):
        if not 1 <= n_triggers < model.n_tokens:
            raise InputError(f"n_triggers must be in [1, {model.n_tokens - 1}], got {n_triggers}")
        if seq_len < 2:
            raise InputError(f"seq_len must be >= 2, got {seq_len}")
        if output_law not in ("uniform", "bigram"):
            raise InputError(f"output_law must be 'uniform' or 'bigram', got {output_law!r}")
        self.model, self.seq_len, self.output_law = model, seq_len, output_law
        # Fixed triggers: the K most frequent tokens (Birth: fixed_special_toks, "most frequent tokens").
        self.triggers = np.argsort(-model.unigram, kind="stable")[:n_triggers].astype(np.int64)
        self.trigger_index = np.full(model.n_tokens, -1, dtype=np.int64)
        self.trigger_index[self.triggers] = np.arange(n_triggers)
        self.non_triggers = np.setdiff1d(np.arange(model.n_tokens), self.triggers)
        self._cdf = np.cumsum(model.cond, axis=1)
        self._cdf[:, -1] = 1.0
        self._unigram_cdf = np.cumsum(model.unigram)
        self._unigram_cdf[-1] = 1.0

    @property
    def n_triggers(self) -> int:
        return len(self.triggers)

    def sample_outputs(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """o_k ~ pi_o(.|q_k) for each sequence: (batch, K)."""
        nt = self.non_triggers
        if self.output_law == "uniform":
            return nt[rng.integers(0, len(nt), size=(batch, self.n_triggers))]
        out = np.empty((batch, self.n_triggers), dtype=np.int64)
        for k, q in enumerate(self.triggers):
            p = self.model.cond[q, nt]
            p = p / p.sum() if p.sum() > 0 else np.full(len(nt), 1.0 / len(nt))
            out[:, k] = rng.choice(nt, size=batch, p=p)
        return out

    def sample(self, batch: int, rng: np.random.Generator) -> BigramBatch:
        """`batch` sequences of length T+1, all rows advanced together (one vectorised draw per position)."""
        if batch < 1:
            raise InputError(f"batch must be >= 1, got {batch}")
        n_pos = self.seq_len + 1
        outputs = self.sample_outputs(batch, rng)
        tokens = np.empty((batch, n_pos), dtype=np.int64)
        occurrence = np.zeros((batch, n_pos), dtype=np.int64)
        counts = np.zeros((batch, self.n_triggers), dtype=np.int64)
        rows = np.arange(batch)
        tokens[:, 0] = np.searchsorted(self._unigram_cdf, rng.random(batch), side="right")
        for t in range(1, n_pos):
            prev = tokens[:, t - 1]
            nxt = (self._cdf[prev] <= rng.random(batch)[:, None]).sum(1)
            k = self.trigger_index[prev]
            hit = k >= 0
            nxt[hit] = outputs[rows[hit], k[hit]]
            counts[rows[hit], k[hit]] += 1
            occurrence[rows[hit], t - 1] = counts[rows[hit], k[hit]]
            tokens[:, t] = np.minimum(nxt, self.model.n_tokens - 1)
        return BigramBatch(tokens=tokens, occurrence=occurrence, outputs=outputs)


def in_context_accuracy(logits: Tensor, targets: Tensor, occurrence: Tensor, min_occurrence: int = 2) -> float:
    """Accuracy of argmax predictions on in-context outputs: positions whose input is a trigger seen for at least
    the `min_occurrence`-th time (the first o_k cannot be inferred from the context). NaN if there are none."""
    mask = occurrence >= min_occurrence
    if not bool(mask.any()):
        return float("nan")
    return (logits.argmax(-1)[mask] == targets[mask]).float().mean().item()


def memory_recall(w_hat: Tensor, inputs: Tensor, outputs: Tensor, targets: Tensor) -> float:
    """Memory-recall probe R(W_hat, W_*) = (1/M) sum_i 1{target_i = argmax_j u_j^T W_hat e_i} (seed 004, slide
    "Empirically probing the dynamics", for W_* = sum_i u_{target_i} e_i^T).

    inputs: (M, d) the e_i; outputs: (C, d) candidate u_j; targets: (M,) index of the right u_j for each e_i."""
    if inputs.shape[0] != targets.shape[0]:
        raise InputError(f"memory_recall: {inputs.shape[0]} inputs but {targets.shape[0]} targets")
    scores = inputs @ w_hat.T @ outputs.T  # (M, C): e_i^T W_hat^T u_j = u_j^T W_hat e_i
    return (scores.argmax(-1) == targets).float().mean().item()


@torch.no_grad()
def induction_probes(
    model: Transformer, triggers: np.ndarray, seq_len: int, outputs: np.ndarray | None = None
) -> dict[str, float]:
    """The three probes of the induction-head construction (seed 004, slide "Induction head with associative
    memories") on a 2-layer `mnemo_mpc.theory.transformer.Transformer`, head 0 of each layer:

    - W_OV^2 vs sum_k u_k e_k^T over the tokens that can be in-context outputs (`outputs`, default all N): the
      second-layer head copies the attended token;
    - W_KQ^2 vs sum_{k in Q} e_k tilde-e_k^T with tilde-e_k = W_OV^1 e_k: the query e_q of a trigger must score the
      key tilde-e_q highest. `wkq2` takes all N remapped tokens as candidate keys (any earlier token can sit before
      a position); `wkq2_triggers` takes only the K triggers as candidates, as in Birth's released probe;
    - W_KQ^1 vs sum_t p_t p_{t-1}^T: query p_t must score key p_{t-1} highest among the keys p_s, s <= t, that the
      causal mask lets it see (t = 1..T-1); `wkq1_first_half` restricts to t < T/2.

    The read-outs are argmax comparisons, so the 1/sqrt(d_h) score scale is irrelevant."""
    e, u = model.tok_emb, model.unembed
    idx = torch.arange(e.shape[0]) if outputs is None else torch.as_tensor(outputs, dtype=torch.long)
    out = {"wov2": memory_recall(model.w_ov(1), e[idx], u, idx)}
    q = torch.as_tensor(triggers, dtype=torch.long)
    remapped = e @ model.w_ov(0).T  # tilde-e_k = W_OV^1 e_k
    w_kq2 = model.w_kq(1)
    # Score of key tilde-e_j for query e_i is tilde-e_j^T W_KQ e_i: a memory read with W_hat = W_KQ, u = tilde-e.
    out["wkq2"] = memory_recall(w_kq2, e[q], remapped, q)
    out["wkq2_triggers"] = memory_recall(w_kq2, e[q], remapped[q], torch.arange(len(q)))
    p = model.pos_emb[:seq_len]
    scores = (p @ model.w_kq(0).T @ p.T)[1:]  # (T-1, T): row t-1 holds query p_t against keys p_s
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)[1:]
    scores = scores.masked_fill(causal, float("-inf"))
    hit = (scores.argmax(-1) == torch.arange(seq_len - 1)).float()
    out["wkq1"] = hit.mean().item()
    # Late positions are rarely keys of a later induction query, so they get little gradient; Birth's released
    # code also reports this probe on a prefix of the positions (wk0_64 of T = 256). Here: the first half.
    out["wkq1_first_half"] = hit[: (seq_len - 1) // 2].mean().item()
    return out

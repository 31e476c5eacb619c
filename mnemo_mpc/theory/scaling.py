"""Scaling laws of associative memories under Zipf-distributed inputs (seed 004, slides "Setup with heavy-tailed
data", "Scaling laws with finite capacity", "Scaling laws with optimization algorithms"; Cabannes, Dohmatob and
Bietti 2024).

Setting: z ~ p(z) ∝ z^−α on a vocabulary [N], y = f*(z) ∈ [M], n samples S_n; the estimator is
f̂(z) = argmax_y u_yᵀ W e_z with W = Σ_z q(z) u_{f*(z)} e_zᵀ and random embeddings N(0, I/d). Its error is the
0/1 loss L = P_{z~p}(f̂(z) ≠ f*(z)). The memory schemes q of the slides' theorem:

1. q(z) = #{i: z_i = z} (counts):     L ≲ n^−(α−1)/α + d^−(α−1)/(2α)
2. q(z) = 1{z ∈ S_n} (seen), d ≫ N:   L ≲ n^−(α−1)/α + d^−k for any k
3. q(z) = 1{z seen ≥ s times}:        L ≲ n^−(α−1)/α + d^−(α−1)

and W trained on the cross-entropy by SGD or Adam (``train_online``), which the slides relate to these schemes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from mnemo_mpc.errors import InputError

log = logging.getLogger(__name__)

SCHEMES = ("counts", "seen", "threshold")


def _check_alpha(alpha: float) -> None:
    if not (np.isfinite(alpha) and alpha > 1.0):
        raise InputError(f"Zipf exponent alpha must be > 1 (normalisable tail, finite rates), got {alpha}")


def zipf_probabilities(vocab: int, alpha: float) -> np.ndarray:
    """p(z) ∝ z^−α for z = 1..vocab (index z−1), normalised on the finite vocabulary (slides, "Setup with
    heavy-tailed data")."""
    if not isinstance(vocab, (int, np.integer)) or vocab < 1:
        raise InputError(f"vocab must be a positive integer, got {vocab!r}")
    _check_alpha(alpha)
    w = np.arange(1, vocab + 1, dtype=float) ** (-alpha)
    return w / w.sum()


class ZipfSampler:
    """i.i.d. draws z ~ p by inverse-CDF lookup (O(log N) per draw, no per-draw Python)."""

    def __init__(self, vocab: int, alpha: float) -> None:
        self.p = zipf_probabilities(vocab, alpha)
        self.alpha = alpha
        self._cdf = np.cumsum(self.p)
        self._cdf[-1] = 1.0  # rounding must not leave a gap above the last token

    @property
    def vocab(self) -> int:
        return self.p.size

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n token indices in [0, vocab)."""
        if n < 0:
            raise InputError(f"number of samples n must be ≥ 0, got {n}")
        return np.searchsorted(self._cdf, rng.random(n), side="right")


def token_counts(samples: np.ndarray, vocab: int) -> np.ndarray:
    """#{i: z_i = z} for every z."""
    return np.bincount(samples, minlength=vocab)


def memory_weights(scheme: str, counts: np.ndarray, s: int = 1) -> np.ndarray:
    """q(z) of the theorem's schemes from the sample counts: "counts" q = #occurrences (①), "seen" q = 1{z ∈ S_n}
    (②), "threshold" q = 1{z seen ≥ s times} (③)."""
    if scheme == "counts":
        return counts.astype(float)
    if scheme == "seen":
        return (counts > 0).astype(float)
    if scheme == "threshold":
        if s < 1:
            raise InputError(f"threshold s must be ≥ 1, got {s}")
        return (counts >= s).astype(float)
    raise InputError(f"memory scheme must be one of {SCHEMES}, got {scheme!r}")


def threshold_capacity(d: int, n_outputs: int, alpha: float) -> int:
    """How many memories K the thresholding scheme should keep at dimension d. Storing K tokens with M outputs
    leaves logit noise of variance ≈ 2K/(Md) (slides, Var γ ≲ |{f*(z') = y}|/d), so a stored token fails with
    probability ≈ exp(−Md/(4K)); keeping that below d^−α (the tail it must beat) gives K = Md/(4α ln d). This
    is our choice of the theorem's s: s = n·p(K) stores the K most frequent tokens."""
    _check_alpha(alpha)
    if d < 2 or n_outputs < 1:
        raise InputError(f"need d ≥ 2 and n_outputs ≥ 1, got d={d}, n_outputs={n_outputs}")
    return max(1, int(n_outputs * d / (4.0 * alpha * math.log(d))))


def threshold_for_capacity(p: np.ndarray, n: int, k: int) -> int:
    """The count threshold s that keeps (in expectation) the k most frequent tokens: s = max(1, ⌈n·p(k)⌉)."""
    k = int(np.clip(k, 1, p.size))
    return max(1, math.ceil(n * p[k - 1]))


def predicted_exponents(alpha: float) -> dict[str, float]:
    """The slides' rates as log-log slopes: the sample term n^−(α−1)/α (Hutter 2021, all schemes), and the
    capacity terms d^−(α−1)/(2α) for counts and d^−(α−1) for thresholding."""
    _check_alpha(alpha)
    return {
        "n": -(alpha - 1.0) / alpha,
        "d_counts": -(alpha - 1.0) / (2.0 * alpha),
        "d_threshold": -(alpha - 1.0),
    }


def idealized_error(q: np.ndarray, p: np.ndarray) -> float:
    """L for d = ∞ (orthonormal embeddings): recall is exact iff z is stored, so L = Σ_z p(z) 1{q(z) = 0}; an
    unstored token counts as an error (Hutter's estimator with infinite memory)."""
    return float(np.sum(p[q <= 0]))


def expected_idealized_error(p: np.ndarray, n: int, scheme: str, s: int = 1) -> float:
    """Closed form of E_{S_n}[idealized_error]: a token is unstored with probability (1 − p)^n for counts and seen,
    and P(Binomial(n, p) < s) for thresholding."""
    if scheme in ("counts", "seen"):
        return float(np.sum(p * np.exp(n * np.log1p(-p))))
    if scheme == "threshold":
        return float(np.sum(p * stats.binom.cdf(s - 1, n, p)))
    raise InputError(f"memory scheme must be one of {SCHEMES}, got {scheme!r}")


def embedding_blocks(num: int, d: int, seed: Sequence[int], block: int = 4096) -> Iterator[tuple[int, np.ndarray]]:
    """(start, E[start:start+block]) with N(0, 1/d) entries, each block from its own seeded generator: the same
    embeddings can be streamed twice without holding the (num, d) matrix."""
    for b, start in enumerate(range(0, num, block)):
        rng = np.random.default_rng([*seed, b])
        rows = min(block, num - start)
        yield start, rng.standard_normal((rows, d), dtype=np.float32) / np.float32(math.sqrt(d))


@dataclass
class RecallError:
    """L split by whether the token is stored (q(z) > 0): `stored` is the capacity error (interference between
    memories), `unstored` the sample error (tokens the memory never got; recalled only by chance)."""

    total: float
    stored: float
    unstored: float


def _stored_sums(q: np.ndarray, f: np.ndarray, Eb: np.ndarray, M: int) -> np.ndarray:
    # Σ_{z in block, f*(z)=y} q(z) e_z for every y, as one BLAS product with the one-hot map instead of np.add.at.
    nz = np.flatnonzero(q > 0)
    onehot = np.zeros((M, nz.size), dtype=np.float32)
    onehot[f[nz], np.arange(nz.size)] = q[nz]
    return onehot @ Eb[nz]


def recall_errors(
    qs: dict[str, np.ndarray],
    p: np.ndarray,
    f: np.ndarray,
    U: np.ndarray,
    embed_seed: Sequence[int],
    *,
    block: int = 4096,
) -> dict[str, RecallError]:
    """Exact L = Σ_z p(z) 1{f̂(z) ≠ f*(z)} for several memory schemes q sharing the same random embeddings
    (slides, "Scaling laws with finite capacity"). W = Σ_z q(z) u_{f*(z)} e_zᵀ is kept factored as Uᵀ V with
    V_y = Σ_{f*(z)=y} q(z) e_z, so the logits of every z are (E Vᵀ)(U Uᵀ) at cost N·d·M, and the input
    embeddings are streamed (``embedding_blocks``) rather than stored."""
    vocab, d = p.size, U.shape[1]
    if f.shape != (vocab,):
        raise InputError(f"f must map each of the {vocab} tokens, shape ({vocab},), got {f.shape}")
    for k, q in qs.items():
        if q.shape != (vocab,):
            raise InputError(f"q[{k!r}] must have one weight per token, shape ({vocab},), got {q.shape}")
    M = U.shape[0]
    # q is rescaled to max 1 so float32 sums keep precision for raw counts in the millions (argmax is scale-free).
    qn = {k: (q / q.max() if q.max() > 0 else q).astype(np.float32) for k, q in qs.items()}
    V = {k: np.zeros((M, d), dtype=np.float32) for k in qs}
    for start, Eb in embedding_blocks(vocab, d, embed_seed, block):
        sl = slice(start, start + Eb.shape[0])
        for k, q in qn.items():
            V[k] += _stored_sums(q[sl], f[sl], Eb, M)
    G = U @ U.T
    stored = dict.fromkeys(qs, 0.0)
    unstored = dict.fromkeys(qs, 0.0)
    for start, Eb in embedding_blocks(vocab, d, embed_seed, block):
        sl = slice(start, start + Eb.shape[0])
        for k in qs:
            wrong = np.argmax((Eb @ V[k].T) @ G, axis=1) != f[sl]
            is_stored = qn[k][sl] > 0
            stored[k] += float(np.sum(p[sl][wrong & is_stored]))
            unstored[k] += float(np.sum(p[sl][wrong & ~is_stored]))
    return {k: RecallError(total=stored[k] + unstored[k], stored=stored[k], unstored=unstored[k]) for k in qs}


def monte_carlo_recall_error(
    q: np.ndarray,
    f: np.ndarray,
    U: np.ndarray,
    embed_seed: Sequence[int],
    test_tokens: np.ndarray,
    *,
    block: int = 4096,
) -> float:
    """L estimated as the fraction of wrong recalls on fresh test tokens z ~ p, with W materialised as the
    explicit sum Σ_z q(z) u_{f*(z)} e_zᵀ: the Monte Carlo counterpart of ``recall_errors`` (same embeddings),
    used to check it."""
    vocab, d = q.size, U.shape[1]
    E = np.concatenate([Eb for _, Eb in embedding_blocks(vocab, d, embed_seed, block)]).astype(np.float64)
    W = np.einsum("z,zi,zj->ij", q, U[f].astype(np.float64), E)
    logits = (E[test_tokens] @ W.T) @ U.T
    return float(np.mean(np.argmax(logits, axis=1) != f[test_tokens]))


@dataclass
class OnlineTrainingResult:
    """Error L after n samples for each checkpoint n, the settings, and the final W (d_out × d_in)."""

    n: list[int]
    error: list[float]
    optimizer: str
    lr: float
    batch_size: int
    W: np.ndarray


def train_online(
    tokens: np.ndarray,
    p: np.ndarray,
    f: np.ndarray,
    E: np.ndarray,
    U: np.ndarray,
    *,
    optimizer: str,
    lr: float,
    batch_size: int,
    checkpoints: Sequence[int],
) -> OnlineTrainingResult:
    """Train W ∈ R^{d×d} from W = 0 on L(W) = E_z[ℓ(f*(z), U W e_z)] (cross-entropy, fixed random embeddings;
    slides, "Scaling laws with optimization algorithms") by one pass of "sgd" or "adam" over the sample stream
    `tokens` (z_1, z_2, ... ~ p) in mini-batches, recording the exact 0/1 error Σ_z p(z) 1{f̂(z) ≠ f*(z)} once
    n samples have been used, for each n in `checkpoints`. One pass: n is both the sample size and the number of
    per-sample gradients. The gradient is the slides' lemma ("Gradients as memories"),
    ∇L = Σ_k E_z[(p̂_W(k|z) − 1{k = f*(z)}) u_k e_zᵀ], written out instead of back-propagated (same value, a
    fraction of the per-step overhead for batch size one)."""
    import torch

    if optimizer not in ("sgd", "adam"):
        raise InputError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if batch_size < 1 or not lr > 0:
        raise InputError(f"need batch_size ≥ 1 and lr > 0, got batch_size={batch_size}, lr={lr}")
    checkpoints = sorted(int(c) for c in checkpoints)
    if not checkpoints or checkpoints[0] < 1 or checkpoints[-1] > len(tokens):
        raise InputError(f"checkpoints must be sample counts in [1, len(tokens)={len(tokens)}], got {checkpoints}")
    Et = torch.as_tensor(E, dtype=torch.float32)
    Ut = torch.as_tensor(U, dtype=torch.float32)
    ft = torch.as_tensor(f, dtype=torch.long)
    pt = torch.as_tensor(p, dtype=torch.float64)
    zt = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    W = torch.zeros(U.shape[1], E.shape[1])
    opt = torch.optim.SGD([W], lr=lr) if optimizer == "sgd" else torch.optim.Adam([W], lr=lr)
    errors: list[float] = []
    used = 0
    for target in checkpoints:
        while used < target:
            b = min(batch_size, target - used)
            z = zt[used : used + b]
            ez = Et[z]
            with torch.no_grad():
                resid = torch.softmax((ez @ W.T) @ Ut.T, dim=1)
                resid[torch.arange(b), ft[z]] -= 1.0
                W.grad = (Ut.T @ resid.T) @ ez / b
                opt.step()
            used += b
        with torch.no_grad():
            wrong = ((Et @ W.T) @ Ut.T).argmax(1).ne(ft)
            errors.append(float(pt[wrong].sum()))
    return OnlineTrainingResult(
        n=checkpoints, error=errors, optimizer=optimizer, lr=lr, batch_size=batch_size, W=W.numpy().copy()
    )

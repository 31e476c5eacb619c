"""Outer-product associative memories with random embeddings and their storage capacity (seed 004, slides
"Transformer weights as associative memories", "Capacity: Intuition", "Capacity ≈ number of parameters").

Inputs z ∈ [N] and outputs y ∈ [M] are embedded by fixed random vectors e_z, u_y ~ N(0, I/d). A memory stores the
map f*: [N] -> [M] and recalls f̂(z) = argmax_y u_yᵀ W e_z. Three ways to build the weights, as on the slides:

- full rank, one gradient step: W = Σ_z q(z) u_{f*(z)} e_zᵀ (``outer_product_memory``);
- low rank W = W₁ᵀW₂ with W₁, W₂ ∈ R^{m×d}: random W₁, one gradient step on W₂ (``low_rank_memory``);
- one-hidden-layer MLP f̂(z) = argmax_y u_yᵀ W₁ σ(W₂ᵀ e_z), W₁, W₂ ∈ R^{d×m}, trained by cross-entropy
  (``train_mlp_memory``; the slides' Hermite-polynomial construction is a proof device, training is what a
  Transformer does).

Capacity is the largest N whose mean recall accuracy stays above a threshold (``find_capacity``), and scaling
exponents come from a log-log least-squares fit (``fit_power_law``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from mnemo_mpc.errors import InputError

log = logging.getLogger(__name__)

# Rows of logits evaluated at once: bounds memory to ~64 MB of float32 for any number of outputs.
_LOGIT_BUDGET = 1 << 24


def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")


def random_embeddings(num: int, d: int, rng: np.random.Generator, dtype: type = np.float32) -> np.ndarray:
    """`num` embeddings in R^d with i.i.d. N(0, 1/d) entries, so ‖e‖ ≈ 1 and eᵀe' ≈ N(0, 1/d) (slides: "fixed to
    random init N(0, 1/d)"). Returns shape (num, d)."""
    _check_positive_int("num", num)
    _check_positive_int("d", d)
    return (rng.standard_normal((num, d)) / math.sqrt(d)).astype(dtype)


def injective_map(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random injective f*: [n] -> [n] (a permutation): every output has one pre-image."""
    _check_positive_int("n", n)
    return rng.permutation(n)


def random_map(n: int, n_outputs: int, rng: np.random.Generator) -> np.ndarray:
    """f*: [n] -> [n_outputs] with i.i.d. uniform values; n_outputs = 2 is the slides' binary f*(z) ∈ {0, 1}."""
    _check_positive_int("n", n)
    _check_positive_int("n_outputs", n_outputs)
    return rng.integers(0, n_outputs, size=n)


def _check_memory_inputs(E: np.ndarray, U: np.ndarray, f: np.ndarray) -> None:
    if E.ndim != 2 or U.ndim != 2:
        raise InputError(f"embeddings must be 2-D (num, d), got E {E.shape} and U {U.shape}")
    if f.shape != (E.shape[0],):
        raise InputError(f"f must have one output per input embedding, shape ({E.shape[0]},), got {f.shape}")
    if f.size and (f.min() < 0 or f.max() >= U.shape[0]):
        raise InputError(f"f values must index the {U.shape[0]} output embeddings, got range [{f.min()}, {f.max()}]")


def outer_product_memory(E: np.ndarray, U: np.ndarray, f: np.ndarray, q: np.ndarray | None = None) -> np.ndarray:
    """W = Σ_z q(z) u_{f*(z)} e_zᵀ ∈ R^{d_out×d_in} (seed 004, "Capacity: Intuition" with q ≡ 1, and "Scaling laws
    with finite capacity" for a general memory scheme q). It is one gradient step on the correlation/cross-entropy
    loss from W = 0 (slides, "Gradient associative memories"). E: (N, d_in), U: (M, d_out), f: (N,) ints."""
    _check_memory_inputs(E, U, f)
    if q is None:
        weighted = E
    else:
        q = np.asarray(q, dtype=E.dtype)
        if q.shape != (E.shape[0],):
            raise InputError(f"q must have one weight per input, shape ({E.shape[0]},), got {q.shape}")
        weighted = E * q[:, None]
    # Group inputs by output first: W = Uᵀ V with V_y = Σ_{z: f*(z)=y} q(z) e_z, so the cost is N·d + M·d².
    V = np.zeros((U.shape[0], E.shape[1]), dtype=E.dtype)
    np.add.at(V, f, weighted)
    return U.T @ V


def recall(W: np.ndarray, E: np.ndarray, U: np.ndarray) -> np.ndarray:
    """f̂(z) = argmax_y u_yᵀ W e_z for every row e_z of E (slides, "Scaling laws with finite capacity"). Logits are
    evaluated in row blocks so N·M need not fit in memory."""
    if W.shape != (U.shape[1], E.shape[1]):
        raise InputError(f"W must be (d_out, d_in) = ({U.shape[1]}, {E.shape[1]}), got {W.shape}")
    keys = E @ W.T  # (N, d_out): W e_z for every z
    block = max(1, _LOGIT_BUDGET // max(1, U.shape[0]))
    out = np.empty(E.shape[0], dtype=np.int64)
    for start in range(0, E.shape[0], block):
        out[start : start + block] = np.argmax(keys[start : start + block] @ U.T, axis=1)
    return out


def recall_accuracy(W: np.ndarray, E: np.ndarray, U: np.ndarray, f: np.ndarray) -> float:
    """Fraction of the stored pairs (z, f*(z)) recalled exactly."""
    _check_memory_inputs(E, U, f)
    return float(np.mean(recall(W, E, U) == f))


@dataclass
class LowRankMemory:
    """W = W₁ᵀW₂ with W₁, W₂ ∈ R^{m×d} (slides, "Capacity ≈ number of parameters", low rank)."""

    W1: np.ndarray
    W2: np.ndarray

    @property
    def W(self) -> np.ndarray:
        return self.W1.T @ self.W2


def low_rank_memory(E: np.ndarray, U: np.ndarray, f: np.ndarray, m: int, rng: np.random.Generator) -> LowRankMemory:
    """The slides' construction "random W₁, one step on W₂": W₁ ~ N(0, 1/m) entries and W₂ = Σ_z W₁u_{f*(z)} e_zᵀ,
    the gradient of Σ_z u_{f*(z)}ᵀ W₁ᵀ W₂ e_z in W₂. Then u_yᵀ W e_z = (W₁u_y)ᵀ(W₂e_z): outputs are projected to
    m nearly-orthogonal directions, so interference scales as N/(md) and N ≈ md pairs fit when m ≤ d."""
    _check_memory_inputs(E, U, f)
    _check_positive_int("m", m)
    d_out = U.shape[1]
    W1 = (rng.standard_normal((m, d_out)) / math.sqrt(m)).astype(E.dtype)
    W2 = outer_product_memory(E, U @ W1.T, f)  # Σ_z (W₁u_{f(z)}) e_zᵀ, shape (m, d_in)
    return LowRankMemory(W1=W1, W2=W2)


@dataclass
class MLPMemory:
    """f̂(z) = argmax_y u_yᵀ W₁ σ(W₂ᵀ e_z) with W₁, W₂ ∈ R^{d×m} (slides, non-linear MLP)."""

    W1: np.ndarray
    W2: np.ndarray
    activation: str
    train_accuracy: float
    final_loss: float

    def predict(self, E: np.ndarray, U: np.ndarray) -> np.ndarray:
        hidden = _activation_np(self.activation)(E @ self.W2)
        return np.argmax((hidden @ self.W1.T) @ U.T, axis=1)


_ACTIVATIONS = ("relu", "gelu", "tanh")


def _activation_np(name: str) -> Callable[[np.ndarray], np.ndarray]:
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    if name == "tanh":
        return np.tanh
    if name == "gelu":
        from scipy.special import erf

        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    raise InputError(f"activation must be one of {_ACTIVATIONS}, got {name!r}")


def train_mlp_memory(
    E: np.ndarray,
    U: np.ndarray,
    f: np.ndarray,
    width: int,
    *,
    steps: int = 2000,
    lr: float = 1e-2,
    activation: str = "relu",
    seed: int = 0,
) -> MLPMemory:
    """Train W₁, W₂ ∈ R^{d×m} of f̂(z) = argmax_y u_yᵀ W₁ σ(W₂ᵀ e_z) by full-batch Adam on the cross-entropy over
    the N stored pairs, z uniform (slides: L(W) = E_(z,y)[ℓ(y, F_W(z))], embeddings fixed). A cosine learning-rate
    decay lets the last steps settle the hardest pairs; the budget `steps` is part of what "capacity" means here."""
    import torch

    _check_memory_inputs(E, U, f)
    _check_positive_int("width", width)
    _check_positive_int("steps", steps)
    if activation not in _ACTIVATIONS:
        raise InputError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
    if not lr > 0:
        raise InputError(f"lr must be > 0, got {lr}")
    gen = torch.Generator().manual_seed(seed)
    d_in, d_out = E.shape[1], U.shape[1]
    Et = torch.as_tensor(E, dtype=torch.float32)
    Ut = torch.as_tensor(U, dtype=torch.float32)
    ft = torch.as_tensor(f, dtype=torch.long)
    # Pre-activations W₂ᵀe_z ~ N(0, 1) for unit-norm e_z; W₁σ(·) starts at norm O(1).
    W2 = torch.randn(d_in, width, generator=gen).requires_grad_()
    W1 = (torch.randn(d_out, width, generator=gen) / math.sqrt(width)).requires_grad_()
    act = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "tanh": torch.tanh}[activation]
    opt = torch.optim.Adam([W1, W2], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = (act(Et @ W2) @ W1.T) @ Ut.T
        loss = torch.nn.functional.cross_entropy(logits, ft)
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        acc = float(((act(Et @ W2) @ W1.T) @ Ut.T).argmax(1).eq(ft).float().mean())
    return MLPMemory(
        W1=W1.detach().numpy(),
        W2=W2.detach().numpy(),
        activation=activation,
        train_accuracy=acc,
        final_loss=float(loss.detach()),
    )


def find_capacity(
    accuracy_at: Callable[[int], float],
    threshold: float,
    n_start: int,
    *,
    rel_tol: float = 0.05,
    n_max: int = 1 << 22,
) -> tuple[int, dict[int, float]]:
    """Largest N with accuracy_at(N) ≥ threshold, by doubling to bracket and bisection in log N until the bracket
    is within a factor (1 + rel_tol). Assumes accuracy decreases with N (true in expectation for every memory
    here); with one random draw per N the answer is accurate to the noise of the draw. Returns (N, all
    evaluations {N: accuracy}) so callers can plot the curve the search saw."""
    if not 0.0 < threshold <= 1.0:
        raise InputError(f"threshold must be in (0, 1], got {threshold}")
    _check_positive_int("n_start", n_start)
    if not rel_tol > 0:
        raise InputError(f"rel_tol must be > 0, got {rel_tol}")
    seen: dict[int, float] = {}

    def acc(n: int) -> float:
        if n not in seen:
            seen[n] = float(accuracy_at(n))
            log.debug("N=%d accuracy=%.4f", n, seen[n])
        return seen[n]

    lo, hi = n_start, n_start
    if acc(n_start) >= threshold:
        while acc(hi) >= threshold:
            lo, hi = hi, hi * 2
            if hi > n_max:
                log.warning("capacity search reached n_max=%d without dropping below %.3f", n_max, threshold)
                return lo, seen
    else:
        while acc(lo) < threshold:
            hi, lo = lo, lo // 2
            if lo < 1:
                return 0, seen
    while hi > lo * (1.0 + rel_tol) and hi - lo > 1:
        mid = int(round(math.sqrt(lo * hi)))
        mid = min(max(mid, lo + 1), hi - 1)
        if acc(mid) >= threshold:
            lo = mid
        else:
            hi = mid
    return lo, seen


@dataclass
class PowerLawFit:
    """y ≈ prefactor · x^exponent fitted in log-log space; stderr is the slope's standard error."""

    exponent: float
    prefactor: float
    stderr: float
    r2: float


def fit_power_law(x: np.ndarray, y: np.ndarray) -> PowerLawFit:
    """Least-squares line through (log x, log y) (scipy.stats.linregress). Points with y ≤ 0 are rejected
    with an error rather than dropped, since a silent drop changes the fitted range."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise InputError(f"x and y must be 1-D of equal length ≥ 2, got {x.shape} and {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise InputError("power-law fit needs strictly positive x and y (log-log regression)")
    res = stats.linregress(np.log(x), np.log(y))
    return PowerLawFit(
        exponent=float(res.slope),
        prefactor=float(math.exp(res.intercept)),
        stderr=float(res.stderr) if x.size > 2 else float("nan"),
        r2=float(res.rvalue**2),
    )

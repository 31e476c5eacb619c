"""Study `assoc_capacity`: how many associations a memory with random embeddings stores (seed 004, slides
"Capacity: Intuition" and "Capacity ≈ number of parameters").

For each memory we find, per seed, the largest N whose mean recall accuracy is ≥ `threshold` (bisection in log N,
``mnemo_mpc.theory.assoc.find_capacity``), then fit log N_cap against log d (or log m):

- full-rank W = Σ_z u_{f*(z)} e_zᵀ, f* injective: slides N ≈ d²;
- full-rank, f* binary (f*(z) ∈ {0, 1}): slides N ≈ d;
- low rank W = W₁ᵀW₂ (random W₁, one step on W₂), f* injective, d fixed: slides N ≈ md for m ≤ d;
- one-hidden-layer MLP trained by cross-entropy, f* uniform into M outputs: slides N ≈ md for any width m.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.theory import assoc

log = logging.getLogger(__name__)

TITLE = "Associative-memory capacity: N ≈ d² (injective), d (binary), md (low rank, MLP)"
PAPER = "seed 004 (Bietti slides): Capacity: Intuition; Capacity ≈ number of parameters"

# A fitted exponent "matches" the slides when within this absolute distance of the claim. Fixed before running:
# the slides' ≈ hides log factors (top-1 recall among N outputs costs a log N, Cabannes et al. 2024), which over
# a decade of d move the exponent by about 2/ln N ≈ 0.2-0.3 at our sizes.
EXPONENT_TOL = 0.3


@dataclass
class Config:
    seeds: int = 3
    threshold: float = 0.9  # mean recall accuracy that counts as "stored"
    trials: int = 3  # independent embedding draws averaged per N (Hebbian memories; the MLP uses 1)
    min_pairs: int = 2000  # ... and at least this many recalled pairs per N, so small-N accuracies are not noise
    rel_tol: float = 0.05  # bisection stops when the bracket is within this factor
    injective_dims: tuple[int, ...] = (16, 32, 64, 128, 256)
    binary_dims: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    low_rank_d: int = 256
    low_rank_widths: tuple[int, ...] = (32, 64, 128, 256)
    mlp_d: int = 32
    mlp_widths: tuple[int, ...] = (8, 16, 32, 64, 128)
    mlp_dims: tuple[int, ...] = (16, 32, 64)  # d sweep of the MLP at width mlp_dim_width
    mlp_dim_width: int = 16
    mlp_outputs: int = 32  # M: f* uniform into [M] (keeps logits N×M cheap; capacity ∝ md/log M)
    mlp_steps: int = 1500
    mlp_lr: float = 1e-2
    mlp_activation: str = "relu"
    mlp_rel_tol: float = 0.1


def quick_config() -> Config:
    return Config(
        seeds=2,
        trials=2,
        rel_tol=0.08,
        injective_dims=(16, 32, 64),
        binary_dims=(32, 64, 128, 256),
        low_rank_d=128,
        low_rank_widths=(32, 64, 128),
        mlp_d=16,
        mlp_widths=(8, 16, 32),
        mlp_dims=(),
        mlp_steps=1000,
        mlp_rel_tol=0.15,
    )


def _mean_accuracy(score, n: int, key: list[int], cfg: Config) -> float:
    """Mean over independent draws at load n (at least cfg.trials, and enough for cfg.min_pairs recalls); draw t
    uses the generator seeded by (*key, n, t)."""
    trials = max(cfg.trials, math.ceil(cfg.min_pairs / n))
    return float(np.mean([score(np.random.default_rng([*key, n, t]), n) for t in range(trials)]))


def _hebbian_capacity(cfg: Config, d: int, kind: str, seed: int) -> tuple[int, dict[int, float]]:
    def score(rng: np.random.Generator, n: int) -> float:
        E = assoc.random_embeddings(n, d, rng)
        if kind == "injective":
            U, f = assoc.random_embeddings(n, d, rng), assoc.injective_map(n, rng)
        else:
            U, f = assoc.random_embeddings(2, d, rng), assoc.random_map(n, 2, rng)
        return assoc.recall_accuracy(assoc.outer_product_memory(E, U, f), E, U, f)

    tag = 0 if kind == "injective" else 1
    return assoc.find_capacity(
        lambda n: _mean_accuracy(score, n, [seed, tag, d], cfg),
        cfg.threshold,
        n_start=max(2, d // 4),
        rel_tol=cfg.rel_tol,
    )


def _low_rank_capacity(cfg: Config, m: int, seed: int) -> tuple[int, dict[int, float]]:
    d = cfg.low_rank_d

    def score(rng: np.random.Generator, n: int) -> float:
        E, U, f = assoc.random_embeddings(n, d, rng), assoc.random_embeddings(n, d, rng), assoc.injective_map(n, rng)
        mem = assoc.low_rank_memory(E, U, f, m, rng)
        return assoc.recall_accuracy(mem.W, E, U, f)

    return assoc.find_capacity(
        lambda n: _mean_accuracy(score, n, [seed, 2, m], cfg),
        cfg.threshold,
        n_start=max(2, m),
        rel_tol=cfg.rel_tol,
    )


def _mlp_capacity(cfg: Config, d: int, m: int, seed: int) -> tuple[int, dict[int, float]]:
    def accuracy(n: int) -> float:
        rng = np.random.default_rng([seed, 3, d, m, n])
        E = assoc.random_embeddings(n, d, rng)
        U = assoc.random_embeddings(cfg.mlp_outputs, d, rng)
        f = assoc.random_map(n, cfg.mlp_outputs, rng)
        mem = assoc.train_mlp_memory(
            E, U, f, m, steps=cfg.mlp_steps, lr=cfg.mlp_lr, activation=cfg.mlp_activation, seed=seed
        )
        return mem.train_accuracy

    return assoc.find_capacity(accuracy, cfg.threshold, n_start=max(2, m * d // 4), rel_tol=cfg.mlp_rel_tol)


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    import torch

    torch.manual_seed(seed)
    out: dict = {"injective": {}, "binary": {}, "low_rank": {}, "mlp_width": {}, "mlp_dim": {}}
    for d in cfg.injective_dims:
        cap, curve = _hebbian_capacity(cfg, d, "injective", seed)
        out["injective"][str(d)] = {"capacity": cap, "curve": {str(k): v for k, v in sorted(curve.items())}}
        log.info("seed %d injective d=%d: N_cap=%d", seed, d, cap)
    for d in cfg.binary_dims:
        cap, curve = _hebbian_capacity(cfg, d, "binary", seed)
        out["binary"][str(d)] = {"capacity": cap, "curve": {str(k): v for k, v in sorted(curve.items())}}
        log.info("seed %d binary d=%d: N_cap=%d", seed, d, cap)
    for m in cfg.low_rank_widths:
        cap, curve = _low_rank_capacity(cfg, m, seed)
        out["low_rank"][str(m)] = {"capacity": cap, "curve": {str(k): v for k, v in sorted(curve.items())}}
        log.info("seed %d low rank d=%d m=%d: N_cap=%d", seed, cfg.low_rank_d, m, cap)
    for m in cfg.mlp_widths:
        cap, curve = _mlp_capacity(cfg, cfg.mlp_d, m, seed)
        out["mlp_width"][str(m)] = {"capacity": cap, "curve": {str(k): v for k, v in sorted(curve.items())}}
        log.info("seed %d MLP d=%d m=%d: N_cap=%d", seed, cfg.mlp_d, m, cap)
    for d in cfg.mlp_dims:
        cap, curve = _mlp_capacity(cfg, d, cfg.mlp_dim_width, seed)
        out["mlp_dim"][str(d)] = {"capacity": cap, "curve": {str(k): v for k, v in sorted(curve.items())}}
        log.info("seed %d MLP d=%d m=%d: N_cap=%d", seed, d, cfg.mlp_dim_width, cap)
    return out


# (key in per-seed numbers, x-axis name, slides' exponent, what is fixed, claim name)
_SWEEPS = (
    ("injective", "d", 2.0, "f* injective, full-rank W", "injective_capacity_exponent_2"),
    ("binary", "d", 1.0, "f* binary, full-rank W", "binary_capacity_exponent_1"),
    ("low_rank", "m", 1.0, "W = W1^T W2, f* injective, d fixed", "low_rank_capacity_exponent_1_in_m"),
    ("mlp_width", "m", 1.0, "trained MLP, d fixed", "mlp_capacity_exponent_1_in_m"),
    ("mlp_dim", "d", 1.0, "trained MLP, m fixed", "mlp_capacity_exponent_1_in_d"),
)


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    numbers: dict = {"threshold": cfg.threshold, "exponent_tolerance": EXPONENT_TOL}
    claims: dict[str, bool] = {}
    notes: dict[str, str] = {}
    rows = [
        "| memory | sweep | x values | mean N_cap | fitted exponent (± s.e.) | slides | holds |",
        "|---|---|---|---|---|---|---|",
    ]
    fits: dict[str, tuple[np.ndarray, np.ndarray, assoc.PowerLawFit, float]] = {}
    for key, xname, predicted, what, claim in _SWEEPS:
        xs = sorted({int(x) for s in per_seed.values() for x in s.get(key, {})})
        if len(xs) < 2:
            continue
        caps = np.array([[per_seed[s][key][str(x)]["capacity"] for x in xs] for s in sorted(per_seed)], dtype=float)
        mean_cap = caps.mean(axis=0)
        if np.any(mean_cap <= 0):
            claims[claim] = False
            notes[claim] = f"capacity 0 at some {xname} (nothing stored at threshold {cfg.threshold}); no fit"
            continue
        fit = assoc.fit_power_law(np.array(xs, float), mean_cap)
        per_seed_exp = [
            assoc.fit_power_law(np.array(xs, float), np.maximum(c, 1.0)).exponent for c in caps if np.all(c > 0)
        ]
        ok = abs(fit.exponent - predicted) <= EXPONENT_TOL
        claims[claim] = bool(ok)
        entry = {
            "x_name": xname,
            "x": xs,
            "capacity_per_seed": caps.tolist(),
            "capacity_mean": mean_cap.tolist(),
            "exponent": fit.exponent,
            "exponent_stderr": fit.stderr,
            "exponent_per_seed": per_seed_exp,
            "r2": fit.r2,
            "predicted_exponent": predicted,
        }
        if key == "injective":
            # The log-corrected law N·ln N ∝ d² of top-1 recall among N candidates (Cabannes et al. 2024).
            corr = assoc.fit_power_law(np.array(xs, float), mean_cap * np.log(mean_cap))
            entry["exponent_of_N_lnN"] = corr.exponent
        if key in ("low_rank", "mlp_width"):
            fixed = cfg.low_rank_d if key == "low_rank" else cfg.mlp_d
            entry["capacity_over_md"] = (mean_cap / (np.array(xs) * fixed)).tolist()
        numbers[key] = entry
        fits[key] = (np.array(xs, float), mean_cap, fit, predicted)
        notes[claim] = (
            f"{what}: N_cap ∝ {xname}^{fit.exponent:.2f} ± {fit.stderr:.2f} (slides {predicted:g}, tol ±{EXPONENT_TOL})"
        )
        if not ok:
            notes[claim] += "; does NOT reproduce within tolerance"
        rows.append(
            f"| {what} | {xname} | {', '.join(map(str, xs))} | {', '.join(f'{c:.0f}' for c in mean_cap)} | "
            f"{fit.exponent:.2f} ± {fit.stderr:.2f} | {predicted:g} | {'yes' if ok else '**no**'} |"
        )
    figures = _figures(cfg, per_seed, fits, ctx)
    statement = (
        "Outer-product memories with random N(0,1/d) embeddings store N ≈ d² associations when f* is injective and "
        "N ≈ d when f* is binary; a rank-m factorisation (random W1, one step on W2) and a trained one-hidden-layer "
        f"MLP store N ≈ md. Capacity = largest N with mean recall accuracy ≥ {cfg.threshold}; a fitted log-log "
        f"exponent holds if within ±{EXPONENT_TOL} of the slides' value."
    )
    return Summary(
        numbers=numbers,
        claims=claims,
        claim_notes=notes,
        figures=figures,
        table_md="\n".join(rows),
        statement=statement,
    )


def _figures(cfg: Config, per_seed: dict[int, dict], fits: dict, ctx: RunContext) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    panels = [("injective", "binary"), ("low_rank", "mlp_width", "mlp_dim")]
    labels = {
        "injective": "injective f*, W = Σ u e^T",
        "binary": "binary f*, W = Σ u e^T",
        "low_rank": f"low rank W1^T W2 (d={cfg.low_rank_d})",
        "mlp_width": f"trained MLP (d={cfg.mlp_d}, M={cfg.mlp_outputs})",
        "mlp_dim": f"trained MLP (m={cfg.mlp_dim_width}, M={cfg.mlp_outputs})",
    }
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, keys, xlabel in zip(
        axes, panels, ("embedding dimension d", "width m (or d for the MLP d-sweep)"), strict=True
    ):
        for i, key in enumerate(keys):
            if key not in fits:
                continue
            x, y, fit, pred = fits[key]
            color = f"C{i}"
            ax.loglog(x, y, "o-", color=color, label=f"{labels[key]}: slope {fit.exponent:.2f}")
            # The slides' law drawn through the geometric centre of our points.
            xc, yc = math.exp(np.mean(np.log(x))), math.exp(np.mean(np.log(y)))
            ax.loglog(x, yc * (x / xc) ** pred, "--", color=color, alpha=0.6, label=f"slides: slope {pred:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"capacity N (recall accuracy ≥ {cfg.threshold})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("Full-rank associative memory")
    axes[1].set_title("Low-rank and MLP memories")
    fig.tight_layout()
    names.append(ctx.save_figure(fig, "capacity_scaling"))

    # Accuracy against load N/d^k: curves collapse when the scaling law holds.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, k in zip(axes, ("injective", "binary"), (2, 1), strict=True):
        dims = sorted({int(x) for s in per_seed.values() for x in s.get(key, {})})
        for i, d in enumerate(dims):
            pts = sorted(
                (int(n), a) for s in per_seed.values() for n, a in s[key].get(str(d), {}).get("curve", {}).items()
            )
            if pts:
                n_arr, acc = np.array(pts, dtype=float).T
                ax.semilogx(n_arr / d**k, acc, "o", ms=3, color=f"C{i}", label=f"d={d}")
        ax.axhline(cfg.threshold, color="k", lw=0.8, ls=":")
        ax.set_xlabel(f"load N / d^{k}")
        ax.set_ylabel("mean recall accuracy")
        ax.set_title(f"{key} f*: points the capacity search evaluated")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    names.append(ctx.save_figure(fig, "accuracy_vs_load"))
    return names

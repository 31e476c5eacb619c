"""Study `ahn_theorem3`: the trained preconditioners of a 3-layer linear transformer converge to multiples of Σ⁻¹
(seed 000 App. D, checking Theorem 3 of Ahn et al. 2024).

Theorem 3 (Ahn et al.): for x(i) ~ N(0, Σ), w* ~ N(0, Σ⁻¹), the in-context loss (Eq. 8) of an L-layer transformer
in the parameterisation of Eq. 9 has stationary points with A_i = a_i Σ⁻¹. App. D trains a three-layer transformer
(d = 5, n = 20, Σ = UᵀDU with D = diag(1, 1, 1/4, 1/16, 1) — `mnemo_mpc.icl.data.PAPER_SPECTRUM`, the covariance
every study uses, see that module — A_i i.i.d. Gaussian at start, Adam, batches of 20 000
resampled every 100 steps, gradients clipped to 0.01, 5 runs with independent U) and tracks

    Dist(M, I) := min_α ‖M − αI‖_F / ‖M‖_F,   α := (1/d) Σ_i M[i, i],

for M = Σ^½ A_i Σ^½, which is 0 exactly when A_i is a multiple of Σ⁻¹. (The minimising α of ‖M − αI‖_F is the mean
diagonal entry, so the paper's two definitions of α agree.) We also record Dist(A_i, I) itself: if the Σ^½ transform
is what makes the distance small, A_i has learned Σ, not merely a scaled identity.

Training is `mnemo_mpc.icl.train.train` (the shared loop: Adam, per-matrix clipping, the plateau criterion of
`_icl_common.full_train`); Dist is read between steps through its per-step callback.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.icl.data import DataConfig, LinearRegressionTask, seed_generator, sqrt_psd
from mnemo_mpc.icl.linear_transformer import LinearTransformer, in_context_loss
from mnemo_mpc.icl.train import ICLTrainConfig, train

log = logging.getLogger(__name__)

TITLE = "Ahn et al. Thm 3 check: Dist(Σ^½ A_i Σ^½, I) → 0 during training (3-layer linear transformer)"
PAPER = "seed 000 App. D, Fig. 8a–c (seed 001 App. D, Fig. 19–21)"
# Enters the seed digest (runner.config_digest): issue 12 changed Σ's spectrum, the training length (plateau) and
# added the nested-model guard without necessarily changing this config.
PROTOCOL = "issue-12"

# "Small" fixed before running: a preconditioner within 10 % (relative Frobenius distance) of a multiple of Σ⁻¹.
SMALL_DIST = 0.1


@dataclass
class Config:
    seeds: int = 5
    layers: int = 3
    # App. D: d = 5, n = 20, D = diag(1, 1, 1/4, 1/16, 1): the shared definition (`DataConfig`'s defaults).
    data: DataConfig = field(default_factory=DataConfig)
    # App. D: "minibatches of size 20,000, resampled every 100 steps, and gradients were clipped to 0.01"; the step
    # count and learning-rate schedule are not given, so they are the other §3.3 studies' (`_icl_common.full_train`,
    # trained to its plateau criterion).
    train: ICLTrainConfig = field(
        default_factory=lambda: dataclasses.replace(common.full_train(), batch_size=20000, progress=False)
    )
    # "A_0, A_1, A_2 initialized as i.i.d. Gaussian matrices": scale unstated; the core's §3.3 value (Dist is
    # scale-free, so it starts near 1 either way)
    init_std: float = 0.01
    record_every: int = 100
    test_batch: int = 10000


def quick_config() -> Config:
    return Config(
        seeds=2,
        train=ICLTrainConfig(steps=600, batch_size=1000, lr_halve_every=200, progress=False),
        record_every=50,
        test_batch=2000,
    )


def dist_to_identity(m: torch.Tensor) -> float:
    """Dist(M, I) = ‖M − αI‖_F / ‖M‖_F with α = tr(M)/d (App. D, seed 000). 0 iff M is a multiple of I."""
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise InputError(f"dist_to_identity: expected a square matrix, got shape {tuple(m.shape)}")
    norm = torch.linalg.matrix_norm(m)
    if not float(norm) > 0:
        raise InputError("dist_to_identity: M = 0 has no direction; Dist is undefined")
    alpha = torch.diagonal(m).mean()
    return float(torch.linalg.matrix_norm(m - alpha * torch.eye(m.shape[0], dtype=m.dtype, device=m.device)) / norm)


def sigma_distances(a: torch.Tensor, sigma: torch.Tensor) -> tuple[list[float], list[float]]:
    """Dist(Σ^½ A_i Σ^½, I) and Dist(A_i, I) for each layer's A_i (a: (L, d, d))."""
    root = sqrt_psd(sigma.to(torch.float64))
    a64 = a.detach().to(torch.float64)
    return [dist_to_identity(root @ ai @ root) for ai in a64], [dist_to_identity(ai) for ai in a64]


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    tcfg = dataclasses.replace(cfg.train, device=ctx.device)
    dtype = tcfg.torch_dtype
    sigma = common.seed_sigma(cfg.data, seed)  # the seed's Σ, as every other study draws it
    task = LinearRegressionTask(sigma, cfg.data.n).to(ctx.device, dtype)
    data_gen = seed_generator(10_007 * (seed + 1), ctx.device)
    torch.manual_seed(seed)
    model = LinearTransformer(cfg.data.d, cfg.layers, init_std=cfg.init_std, dtype=dtype).to(ctx.device)
    steps, dists, raws = [], [], []

    def record(step: int, m: torch.nn.Module) -> None:
        # App. D's Fig. 8 x-axis: Dist every `record_every` training iterations
        if step % cfg.record_every == 0:
            d_sig, d_raw = sigma_distances(m.A[:, 0], sigma)
            steps.append(step)
            dists.append(d_sig)
            raws.append(d_raw)

    res = train(model, task, tcfg, data_gen, desc=f"{ctx.name} s{seed}", record_every=cfg.record_every, callback=record)
    if not steps or steps[-1] != res.steps_done:
        # the end of training (a plateau stop need not fall on the grid): the kept parameters' Dist
        d_sig, d_raw = sigma_distances(model.A[:, 0], sigma)
        steps.append(res.steps_done)
        dists.append(d_sig)
        raws.append(d_raw)
    test = task.sample(cfg.test_batch, seed_generator(20_011 * (seed + 1), ctx.device))
    with torch.no_grad():
        layer_losses = [float(in_context_loss(z, test.y_query)) for z in model(test.Z0, return_layers=True)]
    return {
        "steps": steps,
        "dist": dists,  # [record][layer]
        "dist_raw": raws,
        "train_loss": res.losses,
        "steps_done": res.steps_done,
        "stopped_by": res.stopped_by,
        "test_loss_per_layer": layer_losses,
    }


def _on_grid(steps: list[int], values: list[list[float]], grid: list[int]) -> list[list[float]]:
    """values[k] recorded at steps[k], read at every grid step as the latest record at or before it."""
    idx = np.searchsorted(np.asarray(steps), np.asarray(grid), side="right") - 1
    return [values[max(int(i), 0)] for i in idx]


def _mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    seeds = sorted(per_seed)
    # Seeds stop at their own plateau: put them on one step grid, a stopped seed keeping its final value.
    steps = sorted({t for s in seeds for t in per_seed[s]["steps"]})
    dist = np.array([_on_grid(per_seed[s]["steps"], per_seed[s]["dist"], steps) for s in seeds])  # (S, T, L)
    raw = np.array([_on_grid(per_seed[s]["steps"], per_seed[s]["dist_raw"], steps) for s in seeds])
    first, last = dist[:, 0, :], dist[:, -1, :]
    rows = [
        "| layer i | Dist(Σ^½A_iΣ^½, I) at start | at end (mean ± std) | Dist(A_i, I) at end |",
        "|---|---|---|---|",
    ]
    per_layer = []
    for i in range(cfg.layers):
        s_mean, _ = _mean_std(first[:, i].tolist())
        e_mean, e_std = _mean_std(last[:, i].tolist())
        r_mean, r_std = _mean_std(raw[:, -1, i].tolist())
        per_layer.append({"layer": i, "start": s_mean, "end_mean": e_mean, "end_std": e_std, "raw_end": r_mean})
        rows.append(f"| {i} | {s_mean:.3f} | {e_mean:.4f} ± {e_std:.4f} | {r_mean:.3f} ± {r_std:.3f} |")
    losses = np.log(np.array([per_seed[s]["test_loss_per_layer"] for s in seeds]))
    loss_rows = ["| layer | log test loss (mean ± std) |", "|---|---|"]
    for i in range(cfg.layers):
        m, sd = _mean_std(losses[:, i].tolist())
        loss_rows.append(f"| {i + 1} | {m:.3f} ± {sd:.3f} |")
    end = last.mean(axis=0)
    claims = {
        "dist_decreases_every_layer": bool(np.all(end < first.mean(axis=0))),
        f"dist_below_{SMALL_DIST}_every_layer": bool(np.all(end <= SMALL_DIST)),
        "sigma_transform_explains_preconditioner": bool(np.all(end < raw[:, -1, :].mean(axis=0))),
    }
    notes = {
        "dist_decreases_every_layer": "final mean Dist < initial mean Dist for each of the 3 layers: "
        + ", ".join(f"{a:.3f}→{b:.4f}" for a, b in zip(first.mean(axis=0), end, strict=True)),
        f"dist_below_{SMALL_DIST}_every_layer": f"threshold {SMALL_DIST} fixed before running (App. D's figures show "
        "Dist approaching 0 but give no number); final means " + ", ".join(f"{v:.4f}" for v in end),
        "sigma_transform_explains_preconditioner": "Dist(Σ^½AΣ^½, I) < Dist(A, I) at the end: A_i is a multiple of Σ⁻¹ "
        "rather than of I; raw final means " + ", ".join(f"{v:.3f}" for v in raw[:, -1, :].mean(axis=0)),
    }
    # How the end was reached: the change of each seed's Dist over its last fifth of training (negative: still
    # falling when the plateau criterion stopped) and the steps each seed took
    tail = []
    for s in seeds:
        st, dd = np.asarray(per_seed[s]["steps"]), np.asarray(per_seed[s]["dist"])
        k = int(np.searchsorted(st, 0.8 * st[-1]))
        tail.append(dd[-1] - dd[min(k, len(st) - 1)])
    tail_mean = np.mean(tail, axis=0)
    took = [int(per_seed[s].get("steps_done", per_seed[s]["steps"][-1])) for s in seeds]
    name = f"dist_below_{SMALL_DIST}_every_layer"
    notes[name] += (
        "; end mean ± std over seeds "
        + ", ".join(f"{m:.3f} ± {sd:.3f}" for m, sd in zip(end, _std0(last), strict=True))
        + f"; change over the last fifth of training {', '.join(f'{v:+.3f}' for v in tail_mean)}; steps {took}"
    )
    if not claims[name] and ctx.mode != "quick":
        notes[name] += (
            ". Measured: "
            + (
                "Dist was still falling when training stopped (training-limited)"
                if np.any(tail_mean < -0.01)
                else "Dist had levelled off: the trained A_i sit at this distance from a multiple of Σ⁻¹"
            )
            + "; Thm 3 asserts a stationary point with A_i ∝ Σ⁻¹ exists, not that training reaches it from a "
            "Gaussian start with finite batches."
        )
    notes = common.explain_failures(claims, notes, ctx.mode)
    figures = [_figure(steps, dist, raw, ctx)]
    return Summary(
        numbers={
            "steps": steps,
            "dist_mean": dist.mean(axis=0).tolist(),
            "dist_std": dist.std(axis=0, ddof=1).tolist() if len(seeds) > 1 else np.zeros_like(dist[0]).tolist(),
            "dist_raw_mean": raw.mean(axis=0).tolist(),
            "steps_done": took,
            "per_layer": per_layer,
            "log_test_loss_per_layer": {"mean": losses.mean(axis=0).tolist(), "std": _std0(losses)},
        },
        claims=claims,
        claim_notes=notes,
        figures=figures,
        table_md="\n".join(rows) + "\n\n" + "\n".join(loss_rows),
        statement="Training a 3-layer linear transformer (Eq. 9, B = 0) on x ~ N(0, Σ), w* ~ N(0, Σ⁻¹) drives each "
        "A_i towards a multiple of Σ⁻¹: Dist(Σ^½ A_i Σ^½, I) decreases to near 0 (Ahn et al. Thm 3).",
    )


def _std0(arr: np.ndarray) -> list[float]:
    return (arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1:])).tolist()


def _figure(steps: list[int], dist: np.ndarray, raw: np.ndarray, ctx: RunContext) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = dist.shape[2]
    fig, axes = plt.subplots(1, layers, figsize=(4 * layers, 3.4), sharey=True)
    axes = np.atleast_1d(axes)
    x = np.asarray(steps)
    for i, ax in enumerate(axes):
        for vals, label, color in ((dist, "Dist(Σ^½ A_i Σ^½, I)", "C0"), (raw, "Dist(A_i, I)", "C7")):
            m = vals[:, :, i].mean(axis=0)
            s = vals[:, :, i].std(axis=0) if vals.shape[0] > 1 else np.zeros_like(m)
            ax.plot(x, m, color=color, label=label)
            ax.fill_between(x, np.maximum(m - s, 1e-6), m + s, color=color, alpha=0.2)
        ax.axhline(SMALL_DIST, color="k", ls=":", lw=0.8, label=f"'small' = {SMALL_DIST}")
        ax.set_yscale("log")
        ax.set_xlabel("training iteration")
        ax.set_title(f"layer i = {i}")
        if i == 0:
            ax.set_ylabel("normalised Frobenius distance")
            ax.legend(fontsize=8)
    fig.suptitle(f"App. D: convergence of Σ^½ A_i Σ^½ to a scaled identity ({dist.shape[0]} seeds, mean ± std)")
    fig.tight_layout()
    return ctx.save_figure(fig, "dist_sigma_identity")

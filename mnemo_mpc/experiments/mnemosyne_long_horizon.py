"""Study `mnemosyne_long_horizon`: learned optimizers meta-trained on 100-step rollouts, run for 2000+ steps
(seed 002 §5.1, Fig. 4), with and without the on-policy imitation loss, and the LSTM optimizer.

The paper's claims: "Mnemosyne can train NNs for long horizons of thousands of steps while baseline LSTM optimizer
(Andrychowicz et al., 2016) struggles to minimize classification loss beyond a few hundred steps" and "Fig. 4 shows
the benefit of using expert imitation-loss for long-horizon stability of the Mnemosyne's optimizer. All variants were
trained only on length 100 rollouts."

Per seed s: Mnemosyne (FAVOR+) meta-trained with the imitation loss (weight 1, `MetaTrainConfig` default) and
without it (weight 0), and the LSTM optimizer with it (as Mnemosyne is trained) and without it (Andrychowicz et al.'s
own objective, the paper's baseline), all on the 1×20 sigmoid MLP with 100-step rollouts and the
same budget (`mnemosyne_common.ensure_meta_run`, shared with `mnemosyne_mlp`). Each trains `eval_seeds` fresh
optimizees for `horizon` steps; Adam, tuned at the horizon over `adam_lrs`, is the reference.

Per run, on the loss over the whole TRAINING set (what the optimizer minimises; the validation loss of a 1,510-
parameter MLP on 1,437 digits can rise from overfitting under any optimizer, which is not the optimizer's failure):
diverged = a non-finite loss or gradient, or a final training loss above the untrained model's (step 0); stalled =
no progress after step `stall_after` (final training loss >= the loss at that step). Both are counted per run;
the training- and validation-loss curves are drawn with ± std bands over the runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from mnemo_mpc.experiments import mnemosyne_common as mc
from mnemo_mpc.experiments.runner import RunContext, Summary

TITLE = "Long-horizon (2000-step) optimisation with learned optimizers meta-trained on 100 steps"
PAPER = "seed 002 §5.1, Fig. 4 (imitation loss gives long-horizon stability; the LSTM optimizer stalls)"

# curve name -> (learned optimizer kind, imitation weight)
LEARNED = {
    "mnemosyne (imitation)": ("mnemosyne", 1.0),
    "mnemosyne (no imitation)": ("mnemosyne", 0.0),
    "lstm (imitation)": ("lstm", 1.0),
    "lstm (no imitation)": ("lstm", 0.0),
}
WITH, WITHOUT, LSTM_IMIT, LSTM = LEARNED
ADAM = "adam (tuned at the horizon)"


@dataclass
class Config:
    # 5 meta-training seeds (as mnemosyne_mlp), each evaluated on 2 optimizees of 2000 steps.
    seeds: int = 5
    rollouts: int = 200
    rollout_steps: int = 100
    task: str = "mlp_1x20_sigmoid"
    horizon: int = 2000
    eval_every: int = 50
    eval_seeds: int = 2
    stall_after: int = 200
    adam_lrs: tuple[float, ...] = (0.01, 0.03, 0.1)


def quick_config() -> Config:
    return Config(seeds=1, rollouts=5, horizon=400, eval_every=50, eval_seeds=1, stall_after=100, adam_lrs=(0.1,))


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    from mnemo_mpc.optimizers.factory import load_learned_optimizer
    from mnemo_mpc.optimizers.tasks import MLPTask, load_dataset

    root = ctx.out_dir.parent
    data = load_dataset("digits", seed=seed)
    task = MLPTask(cfg.task, data.num_inputs, data.num_classes)
    kw = {"eval_seeds": cfg.eval_seeds, "steps": cfg.horizon, "every": cfg.eval_every}
    runs: dict[str, list[list[float]]] = {}
    train: dict[str, list[list[float]]] = {}
    meta_wall: dict[str, float] = {}
    for name, (kind, weight) in LEARNED.items():
        mcfg = mc.meta_config(kind, seed, cfg.rollouts, imitation_weight=weight, rollout_steps=cfg.rollout_steps)
        run_dir, history = mc.ensure_meta_run(root, mcfg)
        net = load_learned_optimizer(run_dir).eval()
        meta_wall[name] = sum(h["wall_s"] for h in history)
        train[name] = []
        runs[name] = mc.optimizee_curves(
            lambda n, net=net: mc.learned_stepper(net, n), task, data, seed, train_out=train[name], **kw
        )
    adam, adam_train = {}, {}
    for lr in cfg.adam_lrs:
        adam_train[f"{lr:g}"] = []
        adam[f"{lr:g}"] = mc.optimizee_curves(
            lambda n, lr=lr: mc.torch_stepper("adam", lr, n), task, data, seed, train_out=adam_train[f"{lr:g}"], **kw
        )
    # Adam's learning rate is picked by the final TRAINING loss, the quantity the stall/divergence test is about.
    best = min(adam, key=lambda k: mc.mean_curve(adam_train[k])[-1])
    runs[ADAM], train[ADAM] = adam[best], adam_train[best]
    return mc.to_json(
        {
            "steps": mc.curve_marks(cfg.horizon, cfg.eval_every),
            "runs": runs,
            "train_runs": train,
            "adam_lr": float(best),
            "adam_grid_final_train_loss": {k: mc.mean_curve(v)[-1] for k, v in adam_train.items()},
            "meta_train_wall_s": meta_wall,
        }
    )


def classify(curve: list[float], steps: list[int], stall_after: int) -> dict[str, Any]:
    """Divergence and stall of one training-loss curve (module docstring)."""
    finite = all(math.isfinite(v) for v in curve)
    final = curve[-1]
    at = curve[max(i for i, s in enumerate(steps) if s <= stall_after)]
    return {
        "diverged": (not finite) or final > curve[0],
        "stalled": finite and final >= at,
        "final": final,
        "min": min(curve),
        "at_stall_after": at,
    }


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    seeds = sorted(per_seed)
    steps = per_seed[seeds[0]]["steps"]
    names = list(per_seed[seeds[0]]["runs"])
    runs = {n: [mc.from_json_curve(c) for s in seeds for c in per_seed[s]["runs"][n]] for n in names}
    train = {n: [mc.from_json_curve(c) for s in seeds for c in per_seed[s]["train_runs"][n]] for n in names}
    rows: dict[str, dict[str, Any]] = {}
    for n in names:
        cls = [classify(c, steps, cfg.stall_after) for c in train[n]]
        finals = [c["final"] for c in cls]
        val_final = [c[-1] for c in runs[n]]
        rows[n] = {
            "runs": len(cls),
            "diverged": sum(c["diverged"] for c in cls),
            "stalled": sum(c["stalled"] for c in cls),
            "final_mean": float(np.mean(finals)),
            "final_std": float(np.std(finals)),
            "min_mean": float(np.mean([c["min"] for c in cls])),
            f"at_{cfg.stall_after}_mean": float(np.mean([c["at_stall_after"] for c in cls])),
            "val_final_mean": float(np.mean(val_final)),
            "val_final_std": float(np.std(val_final)),
            "val_min_mean": float(np.mean([min(c) for c in runs[n]])),
        }
    w, wo = rows[WITH], rows[WITHOUT]

    def fails(r: dict[str, Any]) -> bool:
        return r["stalled"] + r["diverged"] > r["runs"] / 2

    claims = {
        "mnemosyne_with_imitation_does_not_diverge": w["diverged"] == 0,
        "lstm_stalls_or_diverges": fails(rows[LSTM]),
        "lstm_with_imitation_stalls_or_diverges": fails(rows[LSTM_IMIT]),
        "imitation_loss_improves_long_horizon": (w["diverged"], w["final_mean"]) < (wo["diverged"], wo["final_mean"]),
    }
    a = f"at_{cfg.stall_after}_mean"
    desc = {
        n: f"{n}: training loss final {r['final_mean']:.3f} ± {r['final_std']:.3f}, step {cfg.stall_after} "
        f"{r[a]:.3f}, diverged {r['diverged']}/{r['runs']}, stalled {r['stalled']}/{r['runs']}; validation loss "
        f"final {r['val_final_mean']:.3f}"
        for n, r in rows.items()
    }
    notes = {
        "mnemosyne_with_imitation_does_not_diverge": desc[WITH] + f" (horizon {cfg.horizon} steps, meta-trained on "
        f"{cfg.rollout_steps}-step rollouts)",
        "lstm_stalls_or_diverges": desc[LSTM] + f"; stalled = no lower training loss at step {cfg.horizon} than at "
        f"step {cfg.stall_after}; holds if more than half the runs stall or diverge (paper: 'struggles to minimize "
        "classification loss beyond a few hundred steps'; its LSTM baseline is Andrychowicz et al.'s, trained without "
        "the imitation loss)",
        "lstm_with_imitation_stalls_or_diverges": desc[LSTM_IMIT] + " (ours: the LSTM given Mnemosyne's imitation "
        "loss, as in mnemosyne_mlp)",
        "imitation_loss_improves_long_horizon": f"{desc[WITH]}; {desc[WITHOUT]} (fewer divergences, then a lower "
        "final loss; paper Fig. 4: 'the benefit of using expert imitation-loss for long-horizon stability')",
    }
    lines = [
        f"{cfg.task}, {cfg.horizon} steps, {len(seeds)} meta-training seeds × {cfg.eval_seeds} optimizees; "
        "training-set and validation losses (nats).",
        "",
        f"| optimizer | train loss final (mean ± std) | train min | train at step {cfg.stall_after} | diverged | "
        "stalled | val loss final (mean ± std) | val min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, r in rows.items():
        lines.append(
            f"| {n} | {r['final_mean']:.4f} ± {r['final_std']:.4f} | {r['min_mean']:.4f} | {r[a]:.4f} | "
            f"{r['diverged']}/{r['runs']} | {r['stalled']}/{r['runs']} | {r['val_final_mean']:.4f} ± "
            f"{r['val_final_std']:.4f} | {r['val_min_mean']:.4f} |"
        )
    lrs = sorted({per_seed[s]["adam_lr"] for s in seeds})
    grid = per_seed[seeds[0]]["adam_grid_final_train_loss"]
    lines += [
        "",
        f"Adam lr tuned by the training loss at step {cfg.horizon}: {lrs} (grid, seed {seeds[0]}: "
        + ", ".join(f"lr {k}: {mc.from_json_curve([v])[0]:.4f}" for k, v in grid.items())
        + ")",
        "",
    ]

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, (what, data) in zip(axes, (("training-set", train), ("validation", runs)), strict=True):
        for n in names:
            arr = np.array(data[n])
            with np.errstate(invalid="ignore"):
                mean, std = arr.mean(axis=0), arr.std(axis=0)
            ax.plot(steps, mean, label=mc.plot_label(n, arr))
            ax.fill_between(steps, mean - std, mean + std, alpha=0.15)
        ax.axvline(cfg.rollout_steps, color="grey", ls=":", lw=1, label="meta-training horizon")
        ax.set_yscale("log")
        ax.set_xlabel("optimizee step")
        ax.set_ylabel(f"{what} loss (cross-entropy, nats)")
        ax.set_title(f"{cfg.task}, {what} loss (mean ± std over {len(runs[names[0]])} runs)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    figure = ctx.save_figure(fig, "mnemosyne_long_horizon")
    return Summary(
        numbers=mc.to_json({"rows": rows, "adam_lr": lrs, "config": dataclasses.asdict(cfg)}),
        claims=claims,
        claim_notes=notes,
        figures=[figure],
        table_md="\n".join(lines),
        statement=f"Meta-trained on {cfg.rollout_steps}-step rollouts, Mnemosyne with the imitation loss trains for "
        f"{cfg.horizon} steps without diverging, better than without the imitation loss, while the LSTM optimizer "
        "stalls or diverges.",
    )

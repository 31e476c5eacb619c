"""Factual recall with one-layer Transformers (seed 004, slides "Toy model of factual recall", "How many parameters
do we need?", "Training dynamics"; Nichani, Lee & Bietti 2024, Thm. 3-4 and §5).

Part A (capacity): for a growing number of facts S*R (R, D fixed, S growing), train one-layer Transformers of
growing size and find the smallest size reaching the accuracy threshold, for two families:
  - attention + MLP: MLP width m grows (slides: m d >~ S R). The attention (H d_h = d) keeps W_Q, W_K trainable
    to find s and r among the noise but its W_V, W_O stay at their random init: a full-rank random remapping
    that routes e_s + e_r to the MLP and cannot itself store facts, so the MLP is the only fact memory;
  - attention-only: H heads of fixed d_h grow, all of W_Q, W_K, W_V, W_O trained (slides: H d_h >~ S with
    d >~ R + A_max).
The fitted exponent of (parameters needed) vs (number of facts) should be ~1 ("total parameters scale with number
of facts SR").
Part B (dynamics): one model trained on a fixed fact set, with accuracy on facts and agreement with the relation-
only predictor p(a|r) logged over steps; the slides' "intermediate phase ... predicts with p(a|r) instead of
p(a|s,r)" (hallucination) is checked on our softmax model (the theorem is for linear attention, one-hot
embeddings).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.theory.factual import (
    FactualTask,
    make_factual_task,
    recall_metrics,
    relation_prior,
    sample_prompts,
)
from mnemo_mpc.theory.transformer import Transformer, TransformerConfig

log = logging.getLogger(__name__)

TITLE = "Factual recall: parameters needed vs number of facts, and the p(a|r) hallucination phase"
PAPER = "seed 004 (Bietti slides: factual recall toy model, Nichani et al. 2024 Thm. + training dynamics)"

PAPER_EXPONENT = 1.0  # "Total parameters scale with number of facts SR"


@dataclass
class Config:
    """Full protocol, Nichani et al.'s task (|N| = S + R noise tokens, frozen N(0, 1/d) embeddings, Adam 1e-2,
    accuracy threshold 0.99) scaled to a shared CPU: R = 8, D = 8, S = 8..64, d = 32, d_h = 8, and prompts of
    T = 8 (s, r, 5 noise tokens, EOS) instead of 32; the slides: "noise is negligible (log factors)"."""

    seeds: int = 1
    n_relations: int = 8
    answers_per_relation: int = 8
    subjects: tuple[int, ...] = (8, 16, 32, 64)
    seq_len: int = 8
    dim: int = 32
    head_dim: int = 8
    mlp_heads: int = 4  # attention of the attention+MLP family: H d_h = d, W_V and W_O frozen
    mlp_in_std: float = 1.0  # unit-scale MLP pre-activations (see TransformerConfig.mlp_in_std)
    # Factor-2 grids; the size needed is interpolated in log(parameters) between the last failure and first success.
    mlp_widths: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)
    attn_heads: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    steps: int = 1500
    batch: int = 256
    lr: float = 1e-2
    eval_every: int = 50
    acc_threshold: float = 0.99
    # Part B: dynamics
    dyn_subjects: int = 32
    dyn_heads: int = 16  # attention-only, as in the theorem's model (H d_h = 4 S: room to spare)
    dyn_ov_init_scale: float = 0.1  # small W_V, W_O at init, as the theorem's W_OV ~ alpha
    dyn_steps: int = 1500
    dyn_lr: float = 3e-3
    dyn_batch: int = 256
    dyn_eval_every: int = 10
    # Claims, fixed before running
    exponent_tolerance: float = 0.3  # fitted exponent within 1 +- 0.3
    relation_mass_min: float = 0.8  # hallucination: >= 80 % of the mass on A_r ...
    hallucination_acc_max: float = 0.5  # ... while at most half of the facts are recalled
    parts: tuple[str, ...] = ("exponent", "hallucination")  # which parts to run


def quick_config() -> Config:
    return Config(
        subjects=(8, 16),
        mlp_widths=(4, 16, 64),
        attn_heads=(1, 2, 4, 8),
        steps=250,
        eval_every=25,
        dyn_subjects=16,
        dyn_heads=8,
        dyn_steps=250,
        dyn_eval_every=25,
    )


def _model(
    task: FactualTask, cfg: Config, family: str, size: int, seed: int, ov_init_scale: float = 1.0
) -> Transformer:
    mlp = family == "attn_mlp"
    mcfg = TransformerConfig(
        vocab_size=task.vocab_size,
        dim=cfg.dim,
        n_layers=1,
        n_heads=cfg.mlp_heads if mlp else size,
        head_dim=cfg.head_dim,
        mlp_width=size if mlp else 0,
        mlp_in_std=cfg.mlp_in_std,
        out_size=task.n_answers,
        frozen=("layers.0.attn.wv", "layers.0.attn.wo") if mlp else (),
        ov_init_scale=ov_init_scale,
    )
    return Transformer(mcfg, seed=seed)


def _eval_prompts(task: FactualTask, seed: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Every fact once, in a fresh random noise context: accuracy is over the whole fact table."""
    s, r = np.meshgrid(np.arange(task.n_subjects), np.arange(task.n_relations), indexing="ij")
    tokens, _, s, r = sample_prompts(task, s.size, np.random.default_rng([seed, 31]), s.ravel(), r.ravel())
    return torch.from_numpy(tokens), s, r


def train(
    task: FactualTask,
    model: Transformer,
    steps: int,
    batch: int,
    lr: float,
    eval_every: int,
    seed: int,
    stop_at: float | None = None,
) -> dict:
    """Adam on the cross-entropy of a*(s, r) at the EOS position; metrics on the full fact table every
    `eval_every` steps; stops early once accuracy reaches `stop_at` (as Nichani et al.'s sweeps do)."""
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = np.random.default_rng([seed, 5])
    x_eval, s_eval, r_eval = _eval_prompts(task, seed)
    curve: dict[str, list] = {"step": []}
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                m = recall_metrics(model(x_eval, last_only=True), task, s_eval, r_eval)
            curve["step"].append(step)
            for k, v in m.items():
                curve.setdefault(k, []).append(v)
            if stop_at is not None and m["acc"] >= stop_at:
                break
        if step == steps:
            break
        tokens, answers, _, _ = sample_prompts(task, batch, rng)
        loss = F.cross_entropy(model(torch.from_numpy(tokens), last_only=True), torch.from_numpy(answers))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {
        "final_acc": curve["acc"][-1],
        "best_acc": max(curve["acc"]),
        "steps_run": curve["step"][-1],
        "curve": curve,
    }


def component_params(model: Transformer, family: str) -> int:
    """Parameters of the memory the theorem scales: the MLP (m d) for attention+MLP, the attention for
    attention-only."""
    return model.n_trainable("layers.0.mlp" if family == "attn_mlp" else "layers.0.attn")


def capacity_sweep(cfg: Config, seed: int) -> dict:
    """Part A: for each S and family, sizes in increasing order until one reaches the threshold (+1 beyond)."""
    out: dict[str, dict] = {}
    for family, sizes in (("attn_mlp", cfg.mlp_widths), ("attn_only", cfg.attn_heads)):
        fam = out[family] = {}
        for n_subjects in cfg.subjects:
            task = make_factual_task(
                n_subjects,
                cfg.n_relations,
                cfg.answers_per_relation,
                seq_len=cfg.seq_len,
                rng=np.random.default_rng([seed, n_subjects]),
            )
            rows = []
            passed = 0
            for size in sizes:
                model = _model(task, cfg, family, size, seed)
                res = train(task, model, cfg.steps, cfg.batch, cfg.lr, cfg.eval_every, seed, stop_at=cfg.acc_threshold)
                rows.append(
                    {
                        "size": size,
                        "params_total": model.n_trainable(),
                        "params_component": component_params(model, family),
                        "acc": res["best_acc"],
                        "steps_run": res["steps_run"],
                    }
                )
                log.info("%s S=%d size=%d: acc %.3f", family, n_subjects, size, res["best_acc"])
                passed += res["best_acc"] >= cfg.acc_threshold
                if passed >= 2:  # one size beyond the first success confirms it was not a lucky run
                    break
            fam[str(n_subjects)] = {
                "n_facts": task.n_facts,
                # The smallest size already succeeds: the need is only bounded above, so it stays out of the fit.
                "at_grid_floor": bool(rows[0]["acc"] >= cfg.acc_threshold),
                "rows": rows,
                "params_needed": params_needed(rows, cfg.acc_threshold, "params_component"),
                "params_needed_total": params_needed(rows, cfg.acc_threshold, "params_total"),
            }
    return out


def params_needed(rows: list[dict], threshold: float, key: str) -> float | None:
    """Parameter count at which accuracy crosses `threshold`: linear interpolation in (log params, accuracy)
    between the last size below it and the first size reaching it; None if no size reaches it."""
    prev = None
    for row in rows:
        if row["acc"] >= threshold:
            if prev is None:
                return float(row[key])
            lo, hi = np.log(prev[key]), np.log(row[key])
            frac = (threshold - prev["acc"]) / max(row["acc"] - prev["acc"], 1e-12)
            return float(np.exp(lo + frac * (hi - lo)))
        prev = row
    return None


def fit_exponent(n_facts: list[int], params: list[float | None]) -> float | None:
    """Least-squares slope of log(params needed) vs log(number of facts), over the points that reached it."""
    pts = [(np.log(n), np.log(p)) for n, p in zip(n_facts, params, strict=True) if p is not None]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def dynamics(cfg: Config, seed: int) -> dict:
    """Part B: one attention-only model with room to spare (the dynamics theorem's model is attention-only, with
    linear attention and one-hot embeddings; ours keeps softmax and random embeddings), slow Adam."""
    task = make_factual_task(
        cfg.dyn_subjects,
        cfg.n_relations,
        cfg.answers_per_relation,
        seq_len=cfg.seq_len,
        rng=np.random.default_rng([seed, 77]),
    )
    model = _model(task, cfg, "attn_only", cfg.dyn_heads, seed, cfg.dyn_ov_init_scale)
    res = train(task, model, cfg.dyn_steps, cfg.dyn_batch, cfg.dyn_lr, cfg.dyn_eval_every, seed)
    c = res["curve"]
    # Hallucination: the prediction knows r (mass on A_r) and is closer to p(.|r) than to the truth, while most
    # facts are not yet recalled.
    phase = [
        i
        for i in range(len(c["step"]))
        if c["mass_relation"][i] >= cfg.relation_mass_min
        and c["tv_prior"][i] < c["tv_truth"][i]
        and c["acc"][i] <= cfg.hallucination_acc_max
    ]
    return {
        "n_facts": task.n_facts,
        "final_acc": res["final_acc"],
        "hallucination_steps": [c["step"][i] for i in phase],
        "hallucination_max_prior_agreement": max((c["prior_agreement"][i] for i in phase), default=None),
        "hallucination_acc_at_start": c["acc"][phase[0]] if phase else None,
        "chance_acc_prior": float(np.mean(np.max(relation_prior(task), axis=1))),
        "curve": c,
    }


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    torch.manual_seed(seed)
    out = {}
    if "exponent" in cfg.parts:
        out["capacity"] = capacity_sweep(cfg, seed)
    if "hallucination" in cfg.parts:
        out["dynamics"] = dynamics(cfg, seed)
    return out


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    seeds = sorted(per_seed)
    numbers: dict = {"paper_exponent": PAPER_EXPONENT, "acc_threshold": cfg.acc_threshold}
    claims: dict[str, bool] = {}
    notes: dict[str, str] = {}
    figures = []
    table = []
    if "exponent" in cfg.parts:
        for family in ("attn_mlp", "attn_only"):
            exps, exps_total = [], []
            for s in seeds:
                fam = per_seed[s]["capacity"][family]
                keep = [k for k in fam if not fam[k]["at_grid_floor"]]
                n_fit = [fam[k]["n_facts"] for k in keep]
                exps.append(fit_exponent(n_fit, [fam[k]["params_needed"] for k in keep]))
                exps_total.append(fit_exponent(n_fit, [fam[k]["params_needed_total"] for k in keep]))
            fam0 = per_seed[seeds[0]]["capacity"][family]
            numbers[family] = {
                "n_facts": [fam0[k]["n_facts"] for k in fam0],
                "params_needed_component": {
                    s: [per_seed[s]["capacity"][family][k]["params_needed"] for k in fam0] for s in seeds
                },
                "params_needed_total": {
                    s: [per_seed[s]["capacity"][family][k]["params_needed_total"] for k in fam0] for s in seeds
                },
                "exponent_component": exps,
                "exponent_total": exps_total,
            }
            # The claim is on the memory the theorem scales (m d >~ S R; H d_h d >~ S d): the MLP for attn_mlp,
            # the attention for attn_only (there it is also the total).
            ok = [e is not None and abs(e - PAPER_EXPONENT) <= cfg.exponent_tolerance for e in exps]
            claims[f"params_linear_in_facts_{family}"] = bool(all(ok))
            unreached = [int(k) for k in fam0 if fam0[k]["params_needed"] is None]
            floor = [int(k) for k in fam0 if fam0[k]["at_grid_floor"]]
            what = "MLP" if family == "attn_mlp" else "attention"
            notes[f"params_linear_in_facts_{family}"] = (
                f"fitted exponent of {what} parameters needed for {cfg.acc_threshold:.0%} accuracy vs S*R: "
                f"{', '.join(_fmt(e) for e in exps)} (slides: 1, tolerance +-{cfg.exponent_tolerance}); "
                f"total trained parameters: {', '.join(_fmt(e) for e in exps_total)}"
                + (f"; S={unreached} never reached the threshold in the size grid" if unreached else "")
                + (f"; S={floor} solved by the smallest size (upper bound only, left out of the fit)" if floor else "")
            )
            table += [
                f"| {family} | "
                + ", ".join(
                    f"{fam0[k]['n_facts']}: {'<=' * fam0[k]['at_grid_floor']}{_fmt(fam0[k]['params_needed'], 0)}"
                    for k in fam0
                )
                + f" | {_fmt(exps[0])} | {_fmt(exps_total[0])} | 1 |"
            ]
        table = [
            "| family | facts S*R: MLP/attention params needed | exponent, MLP/attention | exponent, total | slides |",
            "|---|---|---|---|---|",
            *table,
            "",
        ]
        figures.append(_plot_capacity(cfg, per_seed, ctx))
    if "hallucination" in cfg.parts:
        dyn = [per_seed[s]["dynamics"] for s in seeds]
        has_phase = [len(d["hallucination_steps"]) > 0 for d in dyn]
        solved = [d["final_acc"] >= cfg.acc_threshold for d in dyn]
        numbers["dynamics"] = {
            "n_facts": dyn[0]["n_facts"],
            "final_acc": [d["final_acc"] for d in dyn],
            "hallucination_steps": [d["hallucination_steps"] for d in dyn],
            "hallucination_max_prior_agreement": [d["hallucination_max_prior_agreement"] for d in dyn],
            "hallucination_acc_at_start": [d["hallucination_acc_at_start"] for d in dyn],
            "acc_of_prior_predictor": [d["chance_acc_prior"] for d in dyn],
        }
        claims["hallucination_phase"] = bool(all(has_phase))
        claims["converges_to_facts"] = bool(all(solved))
        d0 = dyn[0]
        span = f"steps {d0['hallucination_steps'][0]}-{d0['hallucination_steps'][-1]}" if has_phase[0] else "none"
        notes["hallucination_phase"] = (
            f"eval steps with mass on A_r >= {cfg.relation_mass_min}, TV(p_hat, p(.|r)) < TV(p_hat, truth) and "
            f"accuracy <= {cfg.hallucination_acc_max}: {span}"
            f" (seed 0; {len(d0['hallucination_steps'])} evals); fact accuracy entering it "
            f"{_fmt(d0['hallucination_acc_at_start'])}, best agreement 1-TV with p(a|r) "
            f"{_fmt(d0['hallucination_max_prior_agreement'])}"
        )
        notes["converges_to_facts"] = "final fact accuracy " + ", ".join(f"{d['final_acc']:.3f}" for d in dyn)
        figures.append(_plot_dynamics(cfg, per_seed, ctx))
    return Summary(
        numbers=numbers,
        claims=claims,
        claim_notes=notes,
        figures=figures,
        table_md="\n".join(table),
        statement="One-layer Transformers store S*R facts with a number of parameters proportional to S*R (MLP "
        "width for attention+MLP, heads for attention-only), and training passes through an intermediate phase "
        "that predicts with p(a|r), ignoring the subject (hallucination), before recalling the facts.",
    )


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _plot_capacity(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    res = per_seed[min(per_seed)]["capacity"]
    for ax, family, label in ((axes[0], "attn_mlp", "attention + MLP"), (axes[1], "attn_only", "attention-only")):
        for v in res[family].values():
            ax.plot(
                [r["params_component"] for r in v["rows"]],
                [r["acc"] for r in v["rows"]],
                "o-",
                label=f"S*R={v['n_facts']}",
            )
        ax.axhline(cfg.acc_threshold, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor-tick labels overlap on short log ranges
        ax.set_xlabel("MLP parameters" if family == "attn_mlp" else "attention parameters")
        ax.set_ylabel("fact accuracy")
        ax.set_title(label)
        ax.legend(fontsize=8)
    ax = axes[2]
    for family, color in (("attn_mlp", "tab:blue"), ("attn_only", "tab:orange")):
        fam = res[family]
        pts = [(v["n_facts"], v["params_needed"]) for v in fam.values() if v["params_needed"] is not None]
        if pts:
            n, p = np.array(pts).T
            ax.plot(n, p, "o-", color=color, label=f"{family} (ours)")
            ax.plot(n, p[0] * n / n[0], "--", color=color, alpha=0.6, label=f"{family}: slope 1 (slides)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("number of facts S*R")
    ax.set_ylabel(f"MLP / attention parameters needed for {cfg.acc_threshold:.0%}")
    ax.set_title("capacity ~ parameters")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "factual_capacity")


def _plot_dynamics(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = per_seed[min(per_seed)]["dynamics"]
    c = d["curve"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(c["step"], c["acc"], label="accuracy on facts a*(s,r)")
    ax.plot(c["step"], c["prior_agreement"], label="agreement with p(a|r): 1 - TV")
    ax.plot(c["step"], c["mass_relation"], label="mass on A_r")
    ax.axhline(d["chance_acc_prior"], color="grey", ls=":", lw=1, label="accuracy of predicting with p(a|r)")
    if d["hallucination_steps"]:
        ax.axvspan(
            d["hallucination_steps"][0],
            d["hallucination_steps"][-1],
            color="tab:red",
            alpha=0.1,
            label="hallucination phase (ours)",
        )
    ax.set_xlabel("training step (Adam)")
    ax.set_ylabel("fraction")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"S*R={d['n_facts']} facts; slides: intermediate phase predicts p(a|r)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return ctx.save_figure(fig, "factual_hallucination")

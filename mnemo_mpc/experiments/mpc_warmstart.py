"""Study `mpc_warmstart`: the spatial Mnemosyne ViT as the SQP MPC's warm start (seed 002 §5.2, Table/§5.2 text).

The paper: "the average number of SQP iterations for the optimization is reduced from 4.78 to 1 iteration [...]
the average execution time of the SQP solver reduced from 0.12 s to 0.048 s [...] including the 0.011 s inference
time". Here each seed runs `bench pipeline` (`mnemo_mpc.bench.pipeline`) on its own block of held-out worlds with
the shipped model (`models/`, `warmstart.runtime.find_model`): every recorded step's problem is solved from the cold
start (hold the pose), the learned start (the model's prediction) and, on steady steps, from the shifted previous
solution and the hybrid choice. Our SQP's cold start already needs fewer iterations than the paper's (4.78), so the
claims compare modes measured in the same run, not our milliseconds with the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.warmstart import MODES

TITLE = "Learned warm start of the SQP MPC (spatial Mnemosyne ViT)"
PAPER = "seed 002 §5.2 (4.78 → 1 SQP iterations; 0.12 s → 0.048 s incl. 0.011 s inference)"

# issue-25b: the prefetched start is made for the next step's sub-goal and reference (`Controller.next_problem`), and
# its velocity is the plan's first control; issue-25c: the worker solves the predicted problem from the model's start
# (nav.prefetch "Solved ahead"; `learned_model` is the model's start alone) and each step is solved at its own margin:
# what a seed computes changed, with the config unchanged
PROTOCOL = "issue-25c"

PAPER_ROWS = {"cold": (4.78, 120.0, None), "learned": (1.0, 48.0, 11.0)}  # iterations, total ms, inference ms


@dataclass
class Config:
    seeds: int = 1
    worlds: int = 20  # per seed; seed s uses worlds base_seed + s * 1000 + i
    base_seed: int = 2000
    stride: int = 3
    model: str | None = None  # default: the shipped model for the robot


def quick_config() -> Config:
    return Config(worlds=2, stride=6)


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    from mnemo_mpc.bench.pipeline import PipelineConfig, run

    result = run(
        PipelineConfig(worlds=cfg.worlds, seed=cfg.base_seed + 1000 * seed, stride=cfg.stride, model=cfg.model),
        progress=False,
    )
    keep = ("iterations", "time_ms", "inference_ms", "total_ms", "success_rate", "feasible_rate")
    keep += ("where_cold_needs_4_or_more",)
    modes = {m: {k: {x: s[x] for x in keep if x in s} for k, s in by.items()} for m, by in result["modes"].items()}
    return {
        "modes": modes,
        "recorded_steps": result["config"]["recorded_steps"],
        "model": result["config"]["model"]["path"],
        "prediction_rms_error": result["modes"]["learned"]["fresh"].get("prediction_rms_error"),
    }


def _mean(per_seed: dict[int, dict], mode: str, kind: str, key: str, stat: str) -> float:
    import numpy as np

    return float(np.mean([r["modes"][mode][kind][key][stat] for r in per_seed.values()]))


def _hard(per_seed: dict[int, dict], mode: str) -> tuple[int, float]:
    """(count, mean iterations) over the fresh steps where the cold start needs >= 4 iterations, all seeds."""
    n, total = 0, 0.0
    for r in per_seed.values():
        h = r["modes"][mode]["fresh"].get("where_cold_needs_4_or_more") or {"n": 0}
        if h["n"]:
            n, total = n + h["n"], total + h["n"] * h["iterations_mean"]
    return n, (total / n if n else float("nan"))


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {}
    for mode in (*MODES, "learned_model", "learned_in_step"):
        for kind in ("fresh", "steady"):
            if all(kind in r["modes"][mode] for r in per_seed.values()):
                rows[(mode, kind)] = {
                    "iterations": _mean(per_seed, mode, kind, "iterations", "mean"),
                    "solve_p50": _mean(per_seed, mode, kind, "time_ms", "p50"),
                    "inference_p50": _mean(per_seed, mode, kind, "inference_ms", "p50"),
                    "total_p50": _mean(per_seed, mode, kind, "total_ms", "p50"),
                    "total_p95": _mean(per_seed, mode, kind, "total_ms", "p95"),
                    "feasible": min(r["modes"][mode][kind]["feasible_rate"] for r in per_seed.values()),
                }
    cold, learned = rows[("cold", "fresh")], rows[("learned", "fresh")]
    in_step, model_only = rows[("learned_in_step", "fresh")], rows[("learned_model", "fresh")]
    hard = {m: _hard(per_seed, m) for m in ("cold", "learned", "learned_model")}
    claims = {
        "learned_start_cuts_iterations": learned["iterations"] < cold["iterations"],
        "learned_start_about_one_iteration": learned["iterations"] <= 1.5 and hard["learned"][1] <= 1.5,
        "learned_pipeline_faster_than_cold": learned["total_p50"] < cold["total_p50"],
    }
    ratio = cold["iterations"] / max(learned["iterations"], 1e-9)
    notes = {
        "learned_start_cuts_iterations": f"fresh steps: cold {cold['iterations']:.2f} → learned "
        f"{learned['iterations']:.2f} iterations (÷{ratio:.2f}; paper 4.78 → 1, ÷4.78)",
        "learned_start_about_one_iteration": f"learned {learned['iterations']:.2f} mean iterations on all fresh "
        f"steps and {hard['learned'][1]:.2f} on the {hard['learned'][0]} where cold needs ≥ 4 (cold there: "
        f"{hard['cold'][1]:.2f}); criterion ≤ 1.5 on both. The built-in robot is ideal: the problem predicted one "
        f"period early is the step's own, so the start solved ahead is its optimum; the model's start alone needs "
        f"{model_only['iterations']:.2f} ({hard['learned_model'][1]:.2f} on those). A realistic drive: "
        "`bench pipeline --params config/robots/jackal.yaml` (docs/learned_start.md)",
        "learned_pipeline_faster_than_cold": f"critical-path total p50: cold {cold['total_p50']:.2f} ms, learned "
        f"{learned['total_p50']:.2f} ms; p95 {cold['total_p95']:.2f} vs {learned['total_p95']:.2f} ms (paper 120 → "
        f"48 ms). The learned start is predicted during the previous control period for the start that step "
        f"predicted (nav.prefetch), and that predicted problem is solved from it there: its "
        f"{learned['inference_p50']:.2f} ms of features, network, rollout and solve ahead run off the step, which "
        f"pays only for taking it (a rollout from its own start). The model's start alone, not solved ahead: "
        f"{model_only['iterations']:.2f} iterations, {model_only['total_p50']:.2f} ms. Run on the step, as before "
        f"issue 25, the same model's start costs {in_step['total_p50']:.2f} ms p50 in total (cold solve "
        f"{cold['solve_p50']:.2f} ms): the paper's 11 ms inference paid for itself against a 120 ms cold solve; ours "
        "only does off the critical path",
    }
    if ("hybrid", "steady") in rows:
        hyb, shift = rows[("hybrid", "steady")], rows[("shift", "steady")]
        claims["hybrid_never_worse_than_shift"] = hyb["iterations"] <= shift["iterations"] + 1e-9
        notes["hybrid_never_worse_than_shift"] = (
            f"steady steps: shift {shift['iterations']:.2f}, hybrid {hyb['iterations']:.2f} mean iterations "
            "(ours: the product's steady-state start; not in the paper)"
        )
    lines = [
        "| start | steps | SQP iterations (mean) | solve p50 ms | inference p50 ms | total p50 ms | feasible |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, (it, total, inf) in PAPER_ROWS.items():
        lines.append(f"| paper: {mode} | — | {it:.2f} | — | {inf if inf else '—'} | {total:.0f} | — |")
    for (mode, kind), r in rows.items():
        lines.append(
            f"| {mode} | {kind} | {r['iterations']:.2f} | {r['solve_p50']:.3f} | {r['inference_p50']:.3f} | "
            f"{r['total_p50']:.3f} | {r['feasible']:.3f} |"
        )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [f"{m}\n{k}" for m, k in rows]
    axes[0].bar(labels, [r["iterations"] for r in rows.values()], color="tab:blue")
    axes[0].axhline(4.78, color="tab:red", ls="--", label="paper cold (4.78)")
    axes[0].axhline(1.0, color="tab:green", ls="--", label="paper learned (1)")
    axes[0].set_ylabel("mean SQP iterations")
    axes[0].legend(fontsize=8)
    solve = [r["solve_p50"] for r in rows.values()]
    infer = [r["inference_p50"] for r in rows.values()]
    axes[1].bar(labels, solve, label="solve p50", color="tab:blue")
    axes[1].bar(labels, infer, bottom=solve, label="inference p50", color="tab:orange")
    axes[1].set_ylabel("ms (paper: 120 cold, 48 learned)")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"warm starts on held-out worlds ({cfg.worlds} per seed, {len(per_seed)} seed(s))")
    fig.tight_layout()
    figure = ctx.save_figure(fig, "mpc_warmstart")
    return Summary(
        numbers={f"{m}/{k}": r for (m, k), r in rows.items()}
        | {"fresh_where_cold_needs_4_or_more": {m: {"n": h[0], "iterations_mean": h[1]} for m, h in hard.items()}}
        | {"paper": PAPER_ROWS},
        claims=claims,
        claim_notes=notes,
        figures=[figure],
        table_md="\n".join(lines),
        statement="A learned (spatial Mnemosyne ViT) warm start brings the SQP MPC to about one iteration and cuts "
        "its total time, inference included.",
    )

"""Study `memformer_lfom`: the LFOM Memformer (Eq. 19–20, Γ_j^ℓ = Γ_j Hadamard) on non-isotropic vs isotropic data
(seed 000 Fig. 2a/2b).

The paper: on non-isotropic data the LFOM Memformer with non-trivial preconditioners ("Pre") behaves like Fig. 1b's
Memformer and outperforms CGD; on isotropic data it "does not perform better than a linear transformer", because
with no variation of curvature across directions past gradients (momentum) add little.

Curves per data variant: CGD (per prompt), the linear transformer (general A_ℓ), the LFOM Memformer with
A_ℓ = a_ℓ I (an LFOM proper, Prop. 2's Note) and with general A_ℓ ("Pre"). All trained from scratch for the same
number of steps (§3.3 protocol).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.icl.data import DataConfig
from mnemo_mpc.icl.linear_transformer import LinearTransformer
from mnemo_mpc.icl.memformer import LFOMMemformer
from mnemo_mpc.icl.train import TrainConfig

TITLE = "LFOM Memformer on non-isotropic vs isotropic data"
PAPER = "seed 000 §3.2/§3.3, Fig. 2a/2b (Eq. 19-20)"

TF, LFOM, LFOM_PRE = "Linear TF (general A)", "LFOM Memformer (A=aI)", "LFOM Memformer Pre (general A)"
VARIANTS = ("non-isotropic", "isotropic")


def key(variant: str, curve: str) -> str:
    return f"{variant} | {curve}"


@dataclass
class Config:
    seeds: int = 5
    max_layers: int = 4
    data: DataConfig = field(default_factory=DataConfig)  # non-isotropic; the isotropic variant sets isotropic=True
    train: TrainConfig = field(default_factory=lambda: common.full_train())
    test_size: int = 1000


def quick_config() -> Config:
    # two data variants per seed: half the quick steps keep it near the other studies' quick wall time
    return Config(seeds=2, max_layers=3, train=dataclasses.replace(common.quick_train(), steps=150), test_size=500)


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    tcfg = dataclasses.replace(cfg.train, device=ctx.device)
    d, n = cfg.data.d, cfg.data.n
    builds = {
        TF: lambda L: LinearTransformer(d, L),
        LFOM: lambda L: LFOMMemformer(d, n, L, scalar_preconditioner=True),
        LFOM_PRE: lambda L: LFOMMemformer(d, n, L),
    }
    curves: dict[str, list[float]] = {}
    for variant in VARIANTS:
        data = dataclasses.replace(cfg.data, isotropic=variant == "isotropic")
        desc = f"{ctx.name} s{seed} {variant}"
        per_variant = common.cgd_and_fitted_log_losses(
            data, seed, ctx.device, tcfg, cfg.max_layers, cfg.test_size, builds, desc
        )
        curves.update({key(variant, name): vals for name, vals in per_variant.items()})
    return {"log_loss": curves}


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    stats = common.aggregate(per_seed)
    L = cfg.max_layers
    ge3 = common.layers_from(min(3, L), L)
    later = common.layers_from(2, L)
    tol = common.COMPARABLE_TOL
    ni, iso = "non-isotropic", "isotropic"
    gap_ni = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, TF), later)
    gap_iso = common.mean_gap(stats, key(iso, LFOM_PRE), key(iso, TF), later)
    gap_cgd = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, "CGD"), common.layers_from(1, L))
    claims = {
        "lfom_pre_beats_cgd_layers_ge_3_noniso": common.mean_below(stats, key(ni, LFOM_PRE), key(ni, "CGD"), ge3),
        "lfom_not_better_than_tf_isotropic": all(g <= tol for g in gap_iso),
        "momentum_gain_larger_on_noniso_than_iso": sum(gap_ni) > sum(gap_iso),
    }
    notes = {
        "lfom_pre_beats_cgd_layers_ge_3_noniso": f"mean log-loss below CGD at layers {ge3}; CGD minus LFOM Pre "
        f"(layers 1..{L}): {common.fmt_list(gap_cgd)}. CGD terminates in d = {cfg.data.d} steps on these noiseless "
        "problems, so its last steps drop steeply; a shared-parameter method has to beat that.",
        "lfom_not_better_than_tf_isotropic": f"TF minus LFOM Pre on isotropic data, layers 2..{L}: "
        f"{common.fmt_list(gap_iso)} (claim: no gain above {tol} nats at any layer)",
        "momentum_gain_larger_on_noniso_than_iso": f"summed TF-minus-LFOM-Pre gain over layers 2..{L}: non-isotropic "
        f"{sum(gap_ni):+.3f} vs isotropic {sum(gap_iso):+.3f} nats",
    }
    if ctx.mode != "quick":
        notes = _why_not(claims, notes, stats, cfg)
    notes = common.explain_failures(claims, notes, ctx.mode)
    panels = {
        f"Fig. 2{'ab'[i]}: {v} data": {c: stats[key(v, c)] for c in ("CGD", TF, LFOM, LFOM_PRE)}
        for i, v in enumerate(VARIANTS)
    }
    fig = common.plot_log_loss(
        ctx.figure_path("fig2_memformer_lfom"),
        panels,
        f"LFOM Memformer (Eq. 20, Γ_j^ℓ = Γ_j), d={cfg.data.d}, n={cfg.data.n}, {len(per_seed)} seeds",
        "2a (non-isotropic): LFOM Memformer Pre ≈ Fig. 1b, below CGD; "
        "2b (isotropic): Memformer no better than the linear transformer.",
    )
    tables = "\n\n".join(common.layers_table_md(panels[p], p) for p in panels)
    return Summary(
        numbers={"log_loss": stats, "gain_over_tf": {ni: gap_ni, iso: gap_iso}, "cgd_minus_lfom_pre": gap_cgd},
        claims=claims,
        claim_notes=notes,
        figures=[fig.name],
        table_md=tables,
        statement="The LFOM Memformer (per-layer registers, Hadamard weights Γ_j) outperforms CGD on non-isotropic "
        "data; on isotropic data it is no better than a linear transformer.",
    )


def _why_not(claims: dict[str, bool], notes: dict[str, str], stats: dict, cfg: Config) -> dict[str, str]:
    """Our explanation beside each claim that did not reproduce."""
    out = dict(notes)
    d, n = cfg.data.d, cfg.data.n
    spread = f"[{(1 - (d / n) ** 0.5) ** 2:.2f}, {(1 + (d / n) ** 0.5) ** 2:.2f}]"
    if not claims["lfom_pre_beats_cgd_layers_ge_3_noniso"]:
        out["lfom_pre_beats_cgd_layers_ge_3_noniso"] += (
            " The Memformer's Γ_j and A_ℓ are shared by all prompts, while CGD's line search adapts to each one."
        )
    ni = "non-isotropic"
    later = common.layers_from(2, cfg.max_layers)
    gap_ni = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, TF), later)
    worse = [k for k, g in zip(later, gap_ni, strict=True) if g < 0]
    for name in ("lfom_not_better_than_tf_isotropic", "momentum_gain_larger_on_noniso_than_iso"):
        if claims[name]:
            continue
        if name == "momentum_gain_larger_on_noniso_than_iso" and sum(gap_ni) <= 0:
            out[name] += (
                f". Why: there is no gain on non-isotropic data to compare — LFOM Pre does worse than the linear TF at "
                f"layers {worse}. With Γ_j^ℓ = Γ_j every old register is re-applied at every later layer, which the "
                "trained Γ_j can damp but not switch off per layer (see LFOMMemformer's docstring)."
            )
        else:
            out[name] += (
                f". Why (our reading): with n = {n}, d = {d} each prompt's sample Hessian X̄X̄ᵀ/n is far from "
                f"isotropic even when Σ = I (Marchenko–Pastur eigenvalue range ≈ {spread}), so past gradients still "
                "have curvature variation to exploit on 'isotropic' data; the paper's argument is about Σ only."
            )
    return out

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
from mnemo_mpc.icl.train import ICLTrainConfig

TITLE = "LFOM Memformer on non-isotropic vs isotropic data"
PAPER = "seed 000 §3.2/§3.3, Fig. 2a/2b (Eq. 19-20)"
# Enters the seed digest (runner.config_digest): issue 12 changed Σ's spectrum, the training length (plateau) and
# added the nested-model guard without necessarily changing this config.
PROTOCOL = "issue-12b"  # 12b: the linear TF with A = aI added as the TF's guarded special case

TF, LFOM, LFOM_PRE = "Linear TF (general A)", "LFOM Memformer (A=aI)", "LFOM Memformer Pre (general A)"
TF_SCALAR = "Linear TF (A=aI)"
# Eq. 20 without the paper's Γ_j^ℓ = Γ_j restriction: it contains both the transformer (Γ_j^ℓ = δ_jℓ) and the
# restricted Memformer, so "does memory help over the transformer" is measured on a model that can at least match it
LFOM_GEN = "LFOM Memformer Pre, general Γ_j^ℓ"
BOUND = "Best shared polynomial (any A=aI TF)"
VARIANTS = ("non-isotropic", "isotropic")
# general A_ℓ contains A_ℓ = a_ℓ I (same Γ sharing; same for the transformer). The per-layer-Γ Memformer does not
# contain the transformer (see LFOMMemformer's docstring), so LFOM and TF curves are not guarded against each other.
NESTED_IN_VARIANT = {TF: (TF_SCALAR,), LFOM_PRE: (LFOM,), LFOM_GEN: (TF, LFOM_PRE)}


def key(variant: str, curve: str) -> str:
    return f"{variant} | {curve}"


@dataclass
class Config:
    seeds: int = 5
    max_layers: int = 4
    data: DataConfig = field(default_factory=DataConfig)  # non-isotropic; the isotropic variant sets isotropic=True
    train: ICLTrainConfig = field(default_factory=lambda: common.full_train())
    test_size: int = 1000


def quick_config() -> Config:
    # two data variants × five curves per seed: a third of the quick steps keeps it near the other studies' quick
    # wall time
    return Config(seeds=2, max_layers=3, train=dataclasses.replace(common.quick_train(), steps=100), test_size=500)


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    tcfg = dataclasses.replace(cfg.train, device=ctx.device)
    d, n = cfg.data.d, cfg.data.n
    builds = {
        TF_SCALAR: lambda L: LinearTransformer(d, L, scalar_preconditioner=True),
        TF: lambda L: LinearTransformer(d, L),
        LFOM: lambda L: LFOMMemformer(d, n, L, scalar_preconditioner=True),
        LFOM_PRE: lambda L: LFOMMemformer(d, n, L),
        LFOM_GEN: lambda L: LFOMMemformer(d, n, L, gamma_sharing="general"),
    }
    curves: dict[str, list[float]] = {}
    guard: dict = {}
    for variant in VARIANTS:
        data = dataclasses.replace(cfg.data, isotropic=variant == "isotropic")
        desc = f"{ctx.name} s{seed} {variant}"
        g: dict = {}
        per_variant = common.cgd_and_fitted_log_losses(
            data, seed, ctx.device, tcfg, cfg.max_layers, cfg.test_size, builds, desc, NESTED_IN_VARIANT, g
        )
        curves.update({key(variant, name): vals for name, vals in per_variant.items()})
        guard.update({key(variant, name): info for name, info in g.items()})
    return {"log_loss": curves, "guard": guard}


def nested_pairs() -> dict[str, tuple[str, ...]]:
    return {key(v, r): tuple(key(v, q) for q in qs) for v in VARIANTS for r, qs in NESTED_IN_VARIANT.items()}


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    stats = common.aggregate(per_seed)
    # the measured ceiling of every A_ℓ = a_ℓ I transformer (`_icl_common.best_shared_polynomial_log_losses`)
    for v in VARIANTS:
        data = dataclasses.replace(cfg.data, isotropic=v == "isotropic")
        bound = {
            s: {
                "log_loss": {
                    key(v, BOUND): common.best_shared_polynomial_log_losses(data, s, cfg.max_layers, cfg.test_size)
                }
            }
            for s in per_seed
        }
        stats.update(common.aggregate(bound))
    guard = common.nested_guard_summary(per_seed, nested_pairs())
    guard["retrained"] = common.guard_retrain_counts(per_seed)
    L = cfg.max_layers
    ge3 = common.layers_from(min(3, L), L)
    later = common.layers_from(2, L)
    tol = common.COMPARABLE_TOL
    ni, iso = "non-isotropic", "isotropic"
    gap_ni = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, TF), later)
    gap_iso = common.mean_gap(stats, key(iso, LFOM_PRE), key(iso, TF), later)
    gap_cgd = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, "CGD"), common.layers_from(1, L))
    # the same comparisons with the unrestricted Eq. 20 Memformer, which contains the transformer
    gen_ni = common.mean_gap(stats, key(ni, LFOM_GEN), key(ni, TF), later)
    gen_iso = common.mean_gap(stats, key(iso, LFOM_GEN), key(iso, TF), later)
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
        f"{common.fmt_list(gap_iso)} (claim: no gain above {tol} nats at any layer); with general Γ_j^ℓ: "
        f"{common.fmt_list(gen_iso)}",
        "momentum_gain_larger_on_noniso_than_iso": f"summed TF-minus-LFOM-Pre gain over layers 2..{L}: non-isotropic "
        f"{sum(gap_ni):+.3f} vs isotropic {sum(gap_iso):+.3f} nats; with the unrestricted Eq. 20 (general Γ_j^ℓ, "
        f"contains the TF): non-isotropic {sum(gen_ni):+.3f} ({common.fmt_list(gen_ni)}) vs isotropic "
        f"{sum(gen_iso):+.3f} ({common.fmt_list(gen_iso)})",
    }
    if ctx.mode != "quick":
        notes = _why_not(claims, notes, stats, cfg, guard, _gain_difference(per_seed, later))
    notes = common.explain_failures(claims, notes, ctx.mode)
    panels = {
        f"Fig. 2{'ab'[i]}: {v} data": {
            c: stats[key(v, c)] for c in ("CGD", TF_SCALAR, TF, LFOM, LFOM_PRE, LFOM_GEN, BOUND)
        }
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
        numbers={
            "log_loss": stats,
            "gain_over_tf": {ni: gap_ni, iso: gap_iso},
            "gain_over_tf_general_gamma": {ni: gen_ni, iso: gen_iso},
            "cgd_minus_lfom_pre": gap_cgd,
            "nested_guard": guard,
        },
        claims=claims,
        claim_notes=notes,
        figures=[fig.name],
        table_md=tables + "\n\n" + common.nested_guard_note(guard),
        statement="The LFOM Memformer (per-layer registers, Hadamard weights Γ_j) outperforms CGD on non-isotropic "
        "data; on isotropic data it is no better than a linear transformer.",
    )


def _gain_difference(per_seed: dict[int, dict], layers: list[int]) -> tuple[float, float]:
    """Per seed, the unrestricted Memformer's summed gain over the TF on non-isotropic minus isotropic data: mean and
    standard error over seeds (is the difference beyond seed noise?)."""
    import math

    vals = []
    for s in per_seed:
        ll = per_seed[s]["log_loss"]
        gain = {v: sum(ll[key(v, TF)][k - 1] - ll[key(v, LFOM_GEN)][k - 1] for k in layers) for v in VARIANTS}
        vals.append(gain["non-isotropic"] - gain["isotropic"])
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else float("nan")
    return m, sd / math.sqrt(len(vals))


def _why_not(
    claims: dict[str, bool],
    notes: dict[str, str],
    stats: dict,
    cfg: Config,
    guard: dict,
    gain_diff: tuple[float, float],
) -> dict[str, str]:
    """Our explanation beside each claim that did not reproduce, from this run's measurements."""
    out = dict(notes)
    L = cfg.max_layers
    later = common.layers_from(2, L)
    ni, iso = "non-isotropic", "isotropic"
    if not claims["lfom_pre_beats_cgd_layers_ge_3_noniso"]:
        out["lfom_pre_beats_cgd_layers_ge_3_noniso"] += (
            " The Memformer's Γ_j and A_ℓ are shared by all prompts, while CGD's line search adapts to each one."
        )
    gap_ni = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, TF), later)
    worse = [k for k, g in zip(later, gap_ni, strict=True) if g < 0]
    gen_ni = common.mean_gap(stats, key(ni, LFOM_GEN), key(ni, TF), later)
    gen_iso = common.mean_gap(stats, key(iso, LFOM_GEN), key(iso, TF), later)
    pre_vs_scalar = common.mean_gap(stats, key(ni, LFOM_PRE), key(ni, LFOM), later)
    if not claims["momentum_gain_larger_on_noniso_than_iso"]:
        out["momentum_gain_larger_on_noniso_than_iso"] += (
            f". Measured: on non-isotropic data the paper's restricted Memformer (Γ_j^ℓ = Γ_j) is worse than the "
            f"linear TF at layers {worse or 'none'}, although its preconditioners work (it beats its own A = aI "
            f"special case by {common.fmt_list(pre_vs_scalar)}). The restriction excludes the transformer (Γ_j also "
            "weighs R_j at every later layer; LFOMMemformer's docstring), so that comparison is not memory vs no "
            "memory. The unrestricted Eq. 20 Memformer, which contains the TF and is guarded against it, gains "
            f"{sum(gen_ni):+.3f} nats over the TF on non-isotropic data vs {sum(gen_iso):+.3f} on isotropic data "
            f"(layers 2..{L}; difference per seed {gain_diff[0]:+.3f} ± {gain_diff[1]:.3f} s.e.): "
            + (
                "the paper's direction holds for the unrestricted architecture, beyond seed noise."
                if gain_diff[0] > 2 * gain_diff[1]
                else (
                    "the paper's direction, but within seed noise: memory adds little over the transformer on "
                    "either data set."
                    if gain_diff[0] > 0
                    else "memory does not help more on non-isotropic data here either."
                )
            )
        )
    if not claims["lfom_not_better_than_tf_isotropic"]:
        out["lfom_not_better_than_tf_isotropic"] += (
            ". Measured: the TF (general A) is guarded against its A = aI special case, and the best shared "
            "polynomial (the ceiling of any A = aI transformer) is in the table; a gain above it is memory's."
        )
    return out

"""Study `memformer_cgd`: the CGD-like Memformer (Eq. 17–18) against CGD and the linear transformer (seed 000 Fig. 1).

Fig. 1a: A_ℓ = a_ℓ I (so the only difference from CGD is that α_ℓ, γ_ℓ are learned once and shared by all prompts);
the paper finds it "comparable to, if not competitive with" CGD run separately on every prompt, and — by the role of
γ_ℓ — better than the memory-less linear transformer with the same scalar preconditioners.
Fig. 1b: general A_ℓ; "a Memformer implements a certain LFOM-like algorithm that distinctly outperforms CGD".

Every model is trained from scratch for the same number of steps (§3.3 protocol). The Memformer starts at α = 1,
γ = 0, i.e. at the transformer it extends. (The paper's App. D trains A_ℓ first and fine-tunes the memory weights;
training jointly from that starting point gives both models the same budget, which a fine-tuning stage would not.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.icl.data import DataConfig
from mnemo_mpc.icl.linear_transformer import LinearTransformer
from mnemo_mpc.icl.memformer import CGDMemformer
from mnemo_mpc.icl.train import ICLTrainConfig

TITLE = "CGD-like Memformer vs CGD and linear transformer"
PAPER = "seed 000 §3.1/§3.3, Fig. 1a/1b (Eq. 17-18)"
# Enters the seed digest (runner.config_digest): issue 12 changed Σ's spectrum, the training length (plateau) and
# added the nested-model guard without necessarily changing this config.
PROTOCOL = "issue-12"

TF_SCALAR, MEM_SCALAR = "Linear TF (A=aI)", "CGD Memformer (A=aI)"
TF_PRE, MEM_PRE = "Linear TF (general A)", "CGD Memformer (general A)"
# richer model -> the special cases it contains (α = 1, γ = 0 is the transformer; A = aI is a general A)
BOUND = "Best shared polynomial (any A=aI model)"
NESTED: dict[str, tuple[str, ...]] = {
    MEM_SCALAR: (TF_SCALAR,),
    TF_PRE: (TF_SCALAR,),
    MEM_PRE: (MEM_SCALAR, TF_PRE),
}


@dataclass
class Config:
    seeds: int = 5
    max_layers: int = 4  # Fig. 1's x-axis: 1..4 layers/steps
    data: DataConfig = field(default_factory=DataConfig)
    train: ICLTrainConfig = field(default_factory=lambda: common.full_train())
    test_size: int = 1000


def quick_config() -> Config:
    return Config(seeds=2, max_layers=3, train=common.quick_train(), test_size=500)


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    tcfg = dataclasses.replace(cfg.train, device=ctx.device)
    d = cfg.data.d
    builds = {
        TF_SCALAR: lambda L: LinearTransformer(d, L, scalar_preconditioner=True),
        MEM_SCALAR: lambda L: CGDMemformer(d, L, scalar_preconditioner=True),
        TF_PRE: lambda L: LinearTransformer(d, L),
        MEM_PRE: lambda L: CGDMemformer(d, L),
    }
    guard: dict = {}
    curves = common.cgd_and_fitted_log_losses(
        cfg.data,
        seed,
        ctx.device,
        tcfg,
        cfg.max_layers,
        cfg.test_size,
        builds,
        f"{ctx.name} s{seed}",
        nested=NESTED,
        guard_log=guard,
    )
    return {"log_loss": curves, "guard": guard}


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    stats = common.aggregate(per_seed)
    # The measured ceiling of every A_ℓ = a_ℓ I model on the same test prompts (a least-squares fit, cheap enough to
    # recompute here from the seeds' deterministic data rather than store per seed)
    bound = {
        s: {"log_loss": {BOUND: common.best_shared_polynomial_log_losses(cfg.data, s, cfg.max_layers, cfg.test_size)}}
        for s in per_seed
    }
    stats.update(common.aggregate(bound))
    guard = common.nested_guard_summary(per_seed, NESTED)
    guard["retrained"] = common.guard_retrain_counts(per_seed)
    L = cfg.max_layers
    all_layers = common.layers_from(1, L)
    later = common.layers_from(2, L)
    tol = common.COMPARABLE_TOL
    claims = {
        # Fig. 1a: learned shared α, γ keep up with per-prompt CGD
        "cgd_like_memformer_comparable_to_cgd": common.mean_close(stats, MEM_SCALAR, "CGD", all_layers, tol)
        or common.mean_below(stats, MEM_SCALAR, "CGD", all_layers),
        # the memory register helps over the same transformer without it (γ_ℓ = 0)
        "cgd_like_memformer_beats_linear_tf": common.mean_below(stats, MEM_SCALAR, TF_SCALAR, later),
        # Fig. 1b: with general preconditioners the Memformer outperforms CGD
        "preconditioned_memformer_beats_cgd": common.mean_below(stats, MEM_PRE, "CGD", all_layers),
    }
    gaps = {
        "cgd_minus_memformer_scalar": common.mean_gap(stats, MEM_SCALAR, "CGD", all_layers),
        "tf_minus_memformer_scalar": common.mean_gap(stats, MEM_SCALAR, TF_SCALAR, all_layers),
        "cgd_minus_memformer_pre": common.mean_gap(stats, MEM_PRE, "CGD", all_layers),
        "tf_minus_memformer_pre": common.mean_gap(stats, MEM_PRE, TF_PRE, all_layers),
        "cgd_minus_best_shared_polynomial": common.mean_gap(stats, BOUND, "CGD", all_layers),
        "memformer_scalar_minus_best_shared_polynomial": common.mean_gap(stats, BOUND, MEM_SCALAR, all_layers),
        "tf_scalar_minus_best_shared_polynomial": common.mean_gap(stats, BOUND, TF_SCALAR, all_layers),
    }
    notes = {
        "cgd_like_memformer_comparable_to_cgd": f"mean log-loss within {tol} nats of CGD (or below it) at every "
        f"layer 1..{L}; CGD minus Memformer per layer: {common.fmt_list(gaps['cgd_minus_memformer_scalar'])}",
        "cgd_like_memformer_beats_linear_tf": f"layers 2..{L} (at L=1 the two coincide up to α); TF minus "
        f"Memformer: {common.fmt_list(gaps['tf_minus_memformer_scalar'])}",
        "preconditioned_memformer_beats_cgd": f"every layer 1..{L}; CGD minus Memformer: "
        f"{common.fmt_list(gaps['cgd_minus_memformer_pre'])}",
    }
    if ctx.mode != "quick":
        notes = _why_not(claims, notes, stats, gaps, cfg)
    notes = common.explain_failures(claims, notes, ctx.mode)
    panels = {
        "Fig. 1a: A_ℓ = a_ℓ I": {k: stats[k] for k in ("CGD", TF_SCALAR, MEM_SCALAR, BOUND)},
        "Fig. 1b: general A_ℓ": {k: stats[k] for k in ("CGD", TF_PRE, MEM_PRE)},
    }
    fig = common.plot_log_loss(
        ctx.figure_path("fig1_memformer_cgd"),
        panels,
        f"CGD-like Memformer (Eq. 17-18), d={cfg.data.d}, n={cfg.data.n}, {len(per_seed)} seeds",
        "1a: Memformer (shared α, γ) comparable to per-prompt CGD and below the linear TF; "
        "1b: with general A_ℓ the Memformer distinctly outperforms CGD.",
    )
    return Summary(
        numbers={"log_loss": stats, "gaps": gaps, "nested_guard": guard},
        claims=claims,
        claim_notes=notes,
        figures=[fig.name],
        table_md=common.layers_table_md(stats, "Fig. 1 (non-isotropic data)")
        + "\n\n"
        + common.nested_guard_note(guard),
        statement="A Memformer with one memory register and learned, shared α_ℓ, γ_ℓ performs CGD-like iterations "
        "competitive with CGD run per prompt; with general preconditioners A_ℓ it beats CGD.",
    )


def _why_not(claims: dict[str, bool], notes: dict[str, str], stats: dict, gaps: dict, cfg: Config) -> dict[str, str]:
    """Our explanation beside each claim that did not reproduce (numbers from this run, reasoning from the maths)."""
    out = dict(notes)
    d, L = cfg.data.d, cfg.max_layers
    cgd_last = stats["CGD"]["mean"][-1]
    if not claims["cgd_like_memformer_comparable_to_cgd"]:
        out["cgd_like_memformer_comparable_to_cgd"] += (
            ". Measured cause: with A_ℓ = a_ℓ I every model of depth L (transformer or Memformer, any α_ℓ, γ_ℓ) "
            "predicts x_qᵀq(H)g with one polynomial q of degree L−1 shared by all prompts; the best such q, fitted "
            "by least squares on 20 000 fresh prompts and scored on the same test prompts, is itself behind CGD by "
            f"{common.fmt_list(gaps['cgd_minus_best_shared_polynomial'])} nats (CGD minus bound), while the trained "
            f"Memformer sits within {common.fmt_list(gaps['memformer_scalar_minus_best_shared_polynomial'])} of that "
            f"bound. CGD chooses its polynomial per prompt (exact line search, finite termination in d = {d} steps; "
            f"log-loss {cgd_last:.2f} at step {L}); with Σ's condition number 16 no shared polynomial keeps up. So "
            "the claim fails for the architecture, not for our training."
        )
    if not claims["cgd_like_memformer_beats_linear_tf"]:
        worst = max(abs(g) for g in gaps["tf_minus_memformer_scalar"])
        out["cgd_like_memformer_beats_linear_tf"] += (
            ". Measured cause: both models are bounded by the same best shared polynomial (see the claim above), and "
            "the transformer already reaches it (TF minus bound "
            f"{common.fmt_list(gaps['tf_scalar_minus_best_shared_polynomial'])}), so the register has nothing left "
            "to add. Why the bound is reachable without memory: the loss is a positive quadratic form in the "
            "residual polynomial p(λ) = 1 − λq(λ), minimised by an orthogonal polynomial, whose roots are real — "
            f"the transformer's products Π(1 − a_ℓλ). Trained models differ by at most {worst:.3f} nats."
        )
    if not claims["preconditioned_memformer_beats_cgd"]:
        wins = [k + 1 for k, g in enumerate(gaps["cgd_minus_memformer_pre"]) if g > 0]
        out["preconditioned_memformer_beats_cgd"] += (
            f". Holds at layers {wins or 'none'}; beyond, CGD's finite termination in d = {d} steps on noiseless "
            f"prompts (log-loss {cgd_last:.2f} at step {L}) outruns any shared-parameter method. Against the linear "
            f"TF with the same general A_ℓ (what the register adds): TF minus Memformer "
            f"{common.fmt_list(gaps['tf_minus_memformer_pre'])}."
        )
    return out

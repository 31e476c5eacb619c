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
from mnemo_mpc.icl.train import TrainConfig

TITLE = "CGD-like Memformer vs CGD and linear transformer"
PAPER = "seed 000 §3.1/§3.3, Fig. 1a/1b (Eq. 17-18)"

TF_SCALAR, MEM_SCALAR = "Linear TF (A=aI)", "CGD Memformer (A=aI)"
TF_PRE, MEM_PRE = "Linear TF (general A)", "CGD Memformer (general A)"


@dataclass
class Config:
    seeds: int = 5
    max_layers: int = 4  # Fig. 1's x-axis: 1..4 layers/steps
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=lambda: common.full_train())
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
    curves = common.cgd_and_fitted_log_losses(
        cfg.data, seed, ctx.device, tcfg, cfg.max_layers, cfg.test_size, builds, f"{ctx.name} s{seed}"
    )
    return {"log_loss": curves}


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    stats = common.aggregate(per_seed)
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
        "Fig. 1a: A_ℓ = a_ℓ I": {k: stats[k] for k in ("CGD", TF_SCALAR, MEM_SCALAR)},
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
        numbers={"log_loss": stats, "gaps": gaps},
        claims=claims,
        claim_notes=notes,
        figures=[fig.name],
        table_md=common.layers_table_md(stats, "Fig. 1 (non-isotropic data)"),
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
            f". Why: CGD picks α_k, γ_k per prompt and on these noiseless d = {d} problems terminates in {d} steps "
            f"(log-loss {cgd_last:.2f} at step {L}); shared α_ℓ, γ_ℓ apply one fixed polynomial in the prompt's "
            "Hessian to every prompt, which cannot follow each prompt's spectrum, so the gap grows with depth."
        )
    if not claims["cgd_like_memformer_beats_linear_tf"]:
        worst = max(abs(g) for g in gaps["tf_minus_memformer_scalar"])
        out["cgd_like_memformer_beats_linear_tf"] += (
            f". Why: with A_ℓ = a_ℓ I both models map w* through one fixed residual polynomial p(H), p(0) = 1; the "
            "transformer's are products Π(1 − a_ℓλ) (real roots), the Memformer's any degree-L polynomial. The loss "
            "is a positive quadratic form in p's values at H's eigenvalues (for isotropic Σ exactly E Σ_i p(λ_i)²), "
            "whose minimiser is an orthogonal polynomial, and those have real roots: the register adds nothing at "
            f"the optimum. Trained models agree to {worst:.3f} nats."
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

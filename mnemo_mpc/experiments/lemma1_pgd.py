"""Study `lemma1_pgd`: an L-layer linear transformer with Eq. 9's parameters is preconditioned GD (seed 000 Lemma 1,
after Ahn et al. 2024, proof in App. A.1).

Three checks per seed: (1) with random, non-symmetric A_ℓ (two heads), the transformer's query prediction after each
layer equals ⟨x(n+1), w_ℓ⟩ for w_{ℓ+1} = w_ℓ − (Σ_h A_ℓ,h)ᵀ ∇R(w_ℓ) from w₀ = 0, in float64; (2) the same holds for the
transformer *trained* by the §3.3 protocol, evaluated with its learned A_ℓ; (3) the learned preconditioners beat
plain GD whose constant step is tuned per depth on separate prompts (the point of preconditioning on non-isotropic
data: Ahn et al.'s Thm 3 puts A_ℓ ∝ Σ⁻¹).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments.runner import RunContext, Summary
from mnemo_mpc.icl import classical
from mnemo_mpc.icl.data import DataConfig, seed_generator
from mnemo_mpc.icl.linear_transformer import LinearTransformer, linear_attention, query_prediction
from mnemo_mpc.icl.train import ICLTrainConfig, heldout_loss, train_per_depth

TITLE = "Linear transformer = preconditioned GD (Lemma 1)"
PAPER = "seed 000 Lemma 1 (Eq. 9-12), App. A.1"
# Enters the seed digest (runner.config_digest): issue 12 changed Σ's spectrum, the training length (plateau) and
# added the nested-model guard without necessarily changing this config.
PROTOCOL = "issue-12"

TF, PGD, GD = "Linear TF (trained)", "Preconditioned GD with the TF's A_ℓ", "GD, step tuned per depth"
EXACT_TOL = 1e-8
GD_STEPS = tuple(0.05 * 1.25**k for k in range(20))  # 0.05 .. 3.5, a log grid over the stable range


@dataclass
class Config:
    seeds: int = 5
    max_layers: int = 4
    data: DataConfig = field(default_factory=DataConfig)
    train: ICLTrainConfig = field(default_factory=lambda: common.full_train())
    test_size: int = 1000


def quick_config() -> Config:
    return Config(seeds=2, max_layers=3, train=common.quick_train(), test_size=500)


def _max_pred_gap(tf: LinearTransformer, batch, A_eff: torch.Tensor) -> float:
    outs = tf(batch.Z0, return_layers=True)
    its = classical.preconditioned_gd(batch.X, batch.y, A_eff)
    pred = torch.einsum("kbd,bd->kb", its[1:], batch.x_query)
    return max(float((query_prediction(Z) - pred[k]).abs().max()) for k, Z in enumerate(outs))


def run_seed(cfg: Config, seed: int, ctx: RunContext) -> dict:
    tcfg = dataclasses.replace(cfg.train, device=ctx.device)
    d, L = cfg.data.d, cfg.max_layers
    sd = common.seed_data(cfg.data, seed, ctx.device, tcfg.dtype, cfg.test_size)
    t64 = sd.test64

    # (1) random parameters, float64, two heads, non-symmetric A; also the dense Eq. 5 against the structured path
    g = seed_generator(31 * (seed + 1))
    rnd = LinearTransformer(d, L, n_heads=2, dtype=torch.float64)
    with torch.no_grad():
        rnd.A.normal_(0, 0.3, generator=g)
        random_gap = _max_pred_gap(rnd, t64, rnd.A.sum(1).mT)
        Z, dense_gap = t64.Z0, 0.0
        for layer in range(L):
            dense = linear_attention(Z, *rnd.layer_PQ(layer))
            X, V = rnd.split(Z)
            dense_gap = max(dense_gap, float((dense[:, -1] - rnd.attention_v(X, V, layer)).abs().max()))
            Z = Z + dense / cfg.data.n

    # (2) trained transformers, one per depth, re-evaluated in float64 against PGD with their learned A_ℓ
    run = train_per_depth(
        lambda k: LinearTransformer(d, k), L, sd.task, tcfg, seed, sd.test, desc=f"{ctx.name} s{seed}"
    )
    trained_gap, pgd_losses = 0.0, []
    for model in run.models:
        m64 = LinearTransformer(d, model.n_layers, dtype=torch.float64)
        m64.set_preconditioners(model.A.detach().to("cpu", torch.float64))
        with torch.no_grad():
            A_eff = m64.A.sum(1).mT
            trained_gap = max(trained_gap, _max_pred_gap(m64, t64, A_eff))
            its = classical.preconditioned_gd(t64.X, t64.y, A_eff)
        pgd_losses.append(float(classical.query_losses(its, t64.x_query, t64.y_query)[-1]))

    # (3) GD with one constant step per depth, tuned on separate prompts of the same task
    val = sd.task.to("cpu", torch.float64).sample(cfg.test_size, seed_generator(104_729 * (seed + 1)))
    eye = torch.eye(d, dtype=torch.float64)
    gd_losses, gd_steps = [], []
    for k in range(1, L + 1):

        def loss_at(eta: float, batch, k=k) -> float:
            its = classical.preconditioned_gd(batch.X, batch.y, (eta * eye).expand(k, d, d))
            v = float(classical.query_losses(its, batch.x_query, batch.y_query)[-1])
            return v if v == v else float("inf")  # a diverging step scores +inf, not NaN

        best = min(GD_STEPS, key=lambda eta: loss_at(eta, val))
        gd_steps.append(best)
        gd_losses.append(loss_at(best, t64))
    return {
        "log_loss": {
            TF: common.log_list(run.test_losses),
            PGD: common.log_list(pgd_losses),
            GD: common.log_list(gd_losses),
            **common.classical_log_losses(t64, L, ("CGD",)),
        },
        "random_params_max_abs_gap": random_gap,
        "dense_vs_structured_max_abs_gap": dense_gap,
        "trained_params_max_abs_gap": trained_gap,
        "trained_tf_float32_heldout": [heldout_loss(m, sd.test) for m in run.models],
        "gd_tuned_steps": gd_steps,
    }


def summarize(cfg: Config, per_seed: dict[int, dict], ctx: RunContext) -> Summary:
    stats = common.aggregate(per_seed)
    L = cfg.max_layers
    rnd = max(v["random_params_max_abs_gap"] for v in per_seed.values())
    dense = max(v["dense_vs_structured_max_abs_gap"] for v in per_seed.values())
    trained = max(v["trained_params_max_abs_gap"] for v in per_seed.values())
    gap = common.mean_gap(stats, TF, GD, common.layers_from(1, L))
    claims = {
        "tf_equals_pgd_random_params": rnd <= EXACT_TOL and dense <= EXACT_TOL,
        "trained_tf_equals_pgd_with_learned_A": trained <= EXACT_TOL,
        "trained_tf_beats_tuned_gd": common.mean_below(stats, TF, GD, common.layers_from(1, L)),
    }
    notes = {
        "tf_equals_pgd_random_params": f"max |TF − PGD| query prediction over seeds, layers, prompts: {rnd:.2e} "
        f"(dense Eq. 5 vs structured path: {dense:.2e}); tolerance {EXACT_TOL:g}, float64",
        "trained_tf_equals_pgd_with_learned_A": f"max gap {trained:.2e} with the trained A_ℓ in float64",
        "trained_tf_beats_tuned_gd": f"GD minus TF mean log-loss, layers 1..{L}: {common.fmt_list(gap)}; GD step "
        "chosen per depth from a log grid on separate prompts",
    }
    notes = common.explain_failures(claims, notes, ctx.mode)
    fig = common.plot_log_loss(
        ctx.figure_path("lemma1_pgd"),
        {"non-isotropic data": stats},
        f"Lemma 1: trained linear TF vs preconditioned GD with its A_ℓ, {len(per_seed)} seeds",
        "the TF's prediction is exactly preconditioned GD's (the two curves coincide); learned A_ℓ beat tuned GD.",
    )
    return Summary(
        numbers={
            "log_loss": stats,
            "max_abs_gap": {"random": rnd, "dense_vs_structured": dense, "trained": trained},
            "gd_minus_tf": gap,
            "gd_tuned_steps": {str(s): v["gd_tuned_steps"] for s, v in per_seed.items()},
        },
        claims=claims,
        claim_notes=notes,
        figures=[fig.name],
        table_md=common.layers_table_md(stats, "Lemma 1 (non-isotropic data)"),
        statement="With P_ℓ, Q_ℓ as in Eq. 9 the L-layer linear transformer's prediction is ⟨x(n+1), w_L⟩ for "
        "preconditioned GD w_{ℓ+1} = w_ℓ − A_ℓ∇R(w_ℓ) (A_ℓᵀ for non-symmetric A_ℓ) on the prompt's least squares.",
    )

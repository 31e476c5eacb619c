"""Issue 12: one covariance definition for every study, the shared training loop's callback and plateau criterion,
and the nested-model guard (a richer model never ends worse than a special case it contains)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments import get_study
from mnemo_mpc.experiments.runner import config_digest
from mnemo_mpc.icl.data import (
    PAPER_SCALES,
    PAPER_SPECTRUM,
    DataConfig,
    LinearRegressionTask,
    seed_generator,
    tiled_spectrum,
)
from mnemo_mpc.icl.learnable_lfom import LearnableLFOM
from mnemo_mpc.icl.linear_transformer import LinearTransformer
from mnemo_mpc.icl.memformer import CGDMemformer, LFOMMemformer
from mnemo_mpc.icl.train import ICLTrainConfig, heldout_loss, train, train_per_depth

F64 = torch.float64
STUDIES_WITH_SIGMA = ("memformer_cgd", "memformer_lfom", "memformer_gdpp", "nag_mgd", "heads", "ahn_theorem3")


def test_paper_spectrum_is_the_square_of_section_3_3_scales():
    # App. D's D = diag(1, 1, 1/4, 1/16, 1) = (§3.3's D)²: covariates x = U·D·z have Σ = U D² Uᵀ
    assert PAPER_SPECTRUM == (1.0, 1.0, 0.25, 0.0625, 1.0)
    assert PAPER_SPECTRUM == tuple(s * s for s in PAPER_SCALES)
    assert DataConfig().spectrum == PAPER_SPECTRUM
    assert tiled_spectrum(5) == PAPER_SPECTRUM and len(tiled_spectrum(10)) == 10
    sigma = common.seed_sigma(DataConfig(), 3)
    assert torch.allclose(torch.linalg.eigvalsh(sigma), torch.tensor(sorted(PAPER_SPECTRUM), dtype=F64), atol=1e-12)
    # the prompts' empirical covariance is Σ (not Σ^½ or Σ²)
    task = LinearRegressionTask(sigma, 20)
    b = task.sample(4000, seed_generator(9))
    x = b.X.permute(0, 2, 1).reshape(-1, 5)
    assert torch.allclose(x.T @ x / x.shape[0], sigma, atol=0.02)


def test_studies_draw_the_same_sigma():
    """Every §3.3 study takes Σ from one definition: same seed -> bit-identical Σ across studies."""
    sigmas = {}
    for name in STUDIES_WITH_SIGMA:
        cfg = get_study(name).Config()
        sigmas[name] = common.seed_sigma(cfg.data, 2)
        assert cfg.data.spectrum == PAPER_SPECTRUM
    ref = sigmas["memformer_cgd"]
    assert all(torch.equal(ref, s) for s in sigmas.values())
    # and it is the Σ the shared seed data (test prompts, training task) is drawn from
    sd = common.seed_data(get_study("ahn_theorem3").Config().data, 2, "cpu", "float64", 8)
    assert torch.equal(sd.task.sigma, ref)
    from mnemo_mpc.experiments.deeper import spectrum

    assert spectrum(5) == PAPER_SPECTRUM


def test_train_callback_sees_every_step_and_the_end():
    task = LinearRegressionTask.from_config(DataConfig(), seed_generator(0), torch.float32)
    seen = []
    cfg = ICLTrainConfig(steps=7, batch_size=32, lr_halve_every=0, progress=False)
    res = train(LinearTransformer(5, 1), task, cfg, seed_generator(1), callback=lambda k, m: seen.append(k))
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7] and res.steps_done == 7 and res.stopped_by == "steps"


def test_plateau_criterion_stops_and_keeps_the_best_validation_parameters():
    task = LinearRegressionTask.from_config(DataConfig(), seed_generator(0), torch.float32)
    val = task.sample(500, seed_generator(5))
    cfg = ICLTrainConfig(
        steps=5000,
        batch_size=200,
        plateau_every=20,
        plateau_tol=0.01,
        plateau_patience=1,
        plateau_stalls=2,
        progress=False,
    )
    torch.manual_seed(0)
    model = LinearTransformer(5, 1, scalar_preconditioner=True)
    res = train(model, task, cfg, seed_generator(1), val_batch=val)
    assert res.stopped_by == "plateau" and res.steps_done < 5000
    assert res.val_log_losses[0] > res.best_val_log_loss  # it learned something
    assert math.log(heldout_loss(model, val)) == pytest.approx(res.best_val_log_loss, abs=1e-6)
    assert res.best_val_log_loss == min(res.val_log_losses)
    with pytest.raises(InputError, match="plateau"):
        ICLTrainConfig(plateau_every=-1)


def _probe():
    task = LinearRegressionTask.from_config(DataConfig(), seed_generator(0), F64)
    return task.sample(64, seed_generator(2))


@pytest.mark.parametrize(
    "special, richer",
    [
        (lambda: LinearTransformer(5, 3, scalar_preconditioner=True), lambda: LinearTransformer(5, 3)),
        (
            lambda: LinearTransformer(5, 3, scalar_preconditioner=True),
            lambda: CGDMemformer(5, 3, scalar_preconditioner=True),
        ),
        (lambda: CGDMemformer(5, 3, scalar_preconditioner=True), lambda: CGDMemformer(5, 3)),
        (lambda: LinearTransformer(5, 3), lambda: CGDMemformer(5, 3)),
        (lambda: LFOMMemformer(5, 20, 3, scalar_preconditioner=True), lambda: LFOMMemformer(5, 20, 3)),
        (
            lambda: LFOMMemformer(5, 20, 3, gamma_form="scalar"),
            lambda: LFOMMemformer(5, 20, 3, n_heads=5, gamma_form="scalar"),
        ),
        (lambda: LFOMMemformer(5, 20, 3), lambda: LFOMMemformer(5, 20, 3, parameterization="gdpp")),
        (lambda: LinearTransformer(5, 3), lambda: LFOMMemformer(5, 20, 3, gamma_sharing="general")),
        (lambda: LinearTransformer(5, 3), lambda: LFOMMemformer(5, 20, 3, gamma_sharing="per_lag")),
        (lambda: LFOMMemformer(5, 20, 3), lambda: LFOMMemformer(5, 20, 3, gamma_sharing="general")),
        # lfom_learnable's chain: scalar γ_i^k ⊂ diagonal Γ_i^k ⊂ diagonal Γ_i^k on A_k-preconditioned gradients
        (lambda: LearnableLFOM(5, 3, kind="scalar"), lambda: LearnableLFOM(5, 3, kind="diagonal")),
        (lambda: LearnableLFOM(5, 3, kind="diagonal"), lambda: LearnableLFOM(5, 3, kind="preconditioned")),
    ],
)
def test_embed_nested_reproduces_the_special_case(special, richer):
    torch.manual_seed(0)
    s, r = special().to(F64), richer().to(F64)
    with torch.no_grad():  # a non-trivial special case (away from its small initialisation)
        for p in s.parameters():
            p.add_(0.3 * torch.randn_like(p))
    probe = _probe()
    common.embed_nested(s, r, probe)  # raises if the outputs differ
    assert torch.allclose(s(probe.Z0)[:, -1, -1], r(probe.Z0)[:, -1, -1], atol=1e-10)


def test_embed_nested_refuses_a_pair_that_is_not_nested():
    # Γ_j^ℓ = Γ_j re-applies old registers, so the per-layer LFOM Memformer does not contain the transformer
    with pytest.raises(InputError):
        common.embed_nested(LinearTransformer(5, 2).double(), LFOMMemformer(5, 20, 2).double(), _probe())


def test_run_time_guard_repairs_an_untrained_richer_model():
    """A richer model left untrained (2 steps) is worse than its trained special case; the guard retrains it from the
    special case and it ends no worse than NESTED_TOL above it on the validation prompts."""
    sd = common.seed_data(DataConfig(), 0, "cpu", "float32", 300)
    good = ICLTrainConfig(steps=300, batch_size=200, lr_halve_every=100, progress=False)
    special = train_per_depth(
        lambda L: LinearTransformer(5, L, scalar_preconditioner=True), 2, sd.task, good, 0, sd.test, val_batch=sd.val
    )
    bad = dataclasses.replace(good, steps=2)
    richer = train_per_depth(lambda L: LinearTransformer(5, L), 2, sd.task, bad, 0, sd.test, val_batch=sd.val)
    info = common.guard_nested(richer, [special], lambda L: LinearTransformer(5, L), sd, bad, "t")
    assert info["retrained"] == [True, True]
    assert all(e <= common.NESTED_TOL for e in info["val_excess_after"])
    assert all(e > common.NESTED_TOL for e in info["val_excess_before"])
    for i in range(2):
        assert heldout_loss(richer.models[i], sd.test) <= heldout_loss(special.models[i], sd.test) * 1.2


def test_nested_guard_summary():
    per_seed = {s: {"log_loss": {"rich": [-1.0 + 0.01 * s, -2.0], "sub": [-1.0, -1.0]}} for s in range(3)}
    g = common.nested_guard_summary(per_seed, {"rich": ("sub",)})
    assert g["holds"] and g["pairs"]["rich ⊇ sub"]["excess_mean"] == pytest.approx([0.01, -1.0])
    per_seed[0]["log_loss"]["rich"] = [0.0, -2.0]
    per_seed[1]["log_loss"]["rich"] = [0.0, -2.0]
    per_seed[2]["log_loss"]["rich"] = [0.0, -2.0]
    assert not common.nested_guard_summary(per_seed, {"rich": ("sub",)})["holds"]
    assert "VIOLATED" in common.nested_guard_note(common.nested_guard_summary(per_seed, {"rich": ("sub",)}))
    # with run-time guard logs, the validation excess decides and the test reading is reported beside it
    for s in per_seed:
        per_seed[s]["guard"] = {"rich": {"val_excess_after": [0.0, -0.5], "retrained": [True, False]}}
    g = common.nested_guard_summary(per_seed, {"rich": ("sub",)})
    assert g["holds"] and not g["test_holds"]
    assert common.guard_retrain_counts(per_seed)["rich"] == {"models": 6, "retrained": 3, "kept_special_case": 3}


def test_protocol_enters_the_seed_digest_only_when_given():
    cfg = get_study("memformer_cgd").Config()
    assert config_digest(cfg) == config_digest(cfg, "")
    assert config_digest(cfg, "issue-12") != config_digest(cfg)
    assert get_study("memformer_cgd").PROTOCOL == "issue-12"

"""Studies nag_mgd, deeper, ahn_theorem3, moe_ood, lfom_learnable: their metrics and tiny end-to-end runs (the same
code path as --quick/--full with a few steps)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from scipy.optimize import minimize_scalar

from mnemo_mpc.errors import InputError
from mnemo_mpc.experiments import get_study
from mnemo_mpc.experiments.ahn_theorem3 import dist_to_identity, sigma_distances
from mnemo_mpc.experiments.runner import run_study
from mnemo_mpc.icl.data import DataConfig, make_covariance, seed_generator


def _sigma() -> torch.Tensor:
    return make_covariance(DataConfig(spectrum=(1.0, 1.0, 0.25, 0.0625, 1.0)), seed_generator(0))


def test_dist_is_zero_exactly_for_multiples_of_sigma_inverse():
    sigma = _sigma()
    inv = torch.linalg.inv(sigma)
    a = torch.stack([inv, 3.0 * inv, -0.5 * inv])
    d_sig, d_raw = sigma_distances(a, sigma)
    assert max(d_sig) < 1e-12
    assert min(d_raw) > 0.1  # Σ⁻¹ itself is far from a multiple of I for this spectrum
    d_sig, _ = sigma_distances(torch.eye(5, dtype=torch.float64)[None], sigma)
    assert d_sig[0] > 0.1


def test_dist_matches_its_definition_as_a_minimum_over_alpha():
    g = torch.Generator().manual_seed(1)
    m = torch.randn(5, 5, dtype=torch.float64, generator=g)
    eye = torch.eye(5, dtype=torch.float64)
    best = minimize_scalar(lambda a: float(torch.linalg.matrix_norm(m - a * eye)), bracket=(-3, 3), tol=1e-12)
    assert dist_to_identity(m) == pytest.approx(best.fun / float(torch.linalg.matrix_norm(m)), abs=1e-8)
    assert dist_to_identity(7.0 * m) == pytest.approx(dist_to_identity(m), abs=1e-12)
    assert dist_to_identity(2.0 * eye) == 0.0
    with pytest.raises(InputError, match="square"):
        dist_to_identity(torch.zeros(2, 3))
    with pytest.raises(InputError, match="M = 0"):
        dist_to_identity(torch.zeros(3, 3))


def _tiny(name: str):
    """The study's quick config shrunk to a few steps: exercises run_seed + summarize + figures end to end."""
    study = get_study(name)
    cfg = study.quick_config()
    return study, cfg


def test_ahn_theorem3_tiny_run(tmp_path, monkeypatch):
    study, cfg = _tiny("ahn_theorem3")
    small = dataclasses.replace(
        cfg, seeds=2, train=dataclasses.replace(cfg.train, steps=30, batch_size=200), record_every=10, test_batch=200
    )
    monkeypatch.setattr(study, "quick_config", lambda: small)
    res = run_study("ahn_theorem3", tmp_path, mode="quick")
    assert set(res["claims"]) == {
        "dist_decreases_every_layer",
        "dist_below_0.1_every_layer",
        "sigma_transform_explains_preconditioner",
    }
    assert all(isinstance(v, bool) for v in res["claims"].values())
    saved = json.loads((tmp_path / "ahn_theorem3" / "results.json").read_text())
    assert len(saved["numbers"]["dist_mean"]) == 4 and len(saved["numbers"]["dist_mean"][0]) == 3
    assert (tmp_path / "ahn_theorem3" / "dist_sigma_identity.png").stat().st_size > 1000


def _tiny_run(name: str, tmp_path, monkeypatch, **overrides) -> dict:
    study = get_study(name)
    small = dataclasses.replace(study.quick_config(), **overrides)
    monkeypatch.setattr(study, "quick_config", lambda: small)
    res = run_study(name, tmp_path, mode="quick")
    assert res["claims"] and all(isinstance(v, bool) for v in res["claims"].values())
    assert set(res["claim_notes"]) == set(res["claims"])
    for fig in res["figures"]:
        assert (tmp_path / name / fig).stat().st_size > 1000
    json.loads((tmp_path / name / "results.json").read_text())  # valid JSON (no NaN/inf)
    return res


def _tiny_train(steps: int = 8, batch: int = 64):
    from mnemo_mpc.icl.train import ICLTrainConfig

    return ICLTrainConfig(steps=steps, batch_size=batch, lr_halve_every=0, progress=False)


def test_nag_mgd_tiny_run(tmp_path, monkeypatch):
    res = _tiny_run(
        "nag_mgd", tmp_path, monkeypatch, seeds=1, max_layers=2, train=_tiny_train(), test_size=100, val_size=100
    )
    curves = res["numbers"]["log_loss"]
    assert {"CGD", "NAG", "MGD", "NAG tuned", "MGD tuned"} <= set(curves)
    assert all(len(c["mean"]) == 2 for c in curves.values())
    # tuning searches a grid that contains the paper's (η, β) neighbourhood, so it can only help on validation data
    assert res["numbers"]["tuned"]["NAG tuned"][0]["eta"] > 0


def test_deeper_tiny_run(tmp_path, monkeypatch):
    from mnemo_mpc.experiments.deeper import Setting, spectrum

    assert spectrum(10) == (1.0, 1.0, 0.25, 0.0625, 1.0, 1.0, 1.0, 0.25, 0.0625, 1.0)
    res = _tiny_run(
        "deeper",
        tmp_path,
        monkeypatch,
        seeds=1,
        settings=(Setting(3, 3, 2), Setting(4, 2, 1)),
        train=_tiny_train(),
        test_size=100,
    )
    # CGD on a noiseless 3-dimensional quadratic with n = 20 > d is exact after 3 steps
    assert res["claims"]["cgd_converges_at_step_d3"]


def test_lfom_learnable_tiny_run(tmp_path, monkeypatch):
    res = _tiny_run(
        "lfom_learnable",
        tmp_path,
        monkeypatch,
        seeds=1,
        max_layers=2,
        train=_tiny_train(),
        test_size=100,
        train_sizes=(5, 50),
    )
    gen = res["numbers"]["generalisation"]
    assert gen["N"] == [5, 50] and len(gen["gap_mean"]) == 2
    assert res["numbers"]["parameters_at_K_max"]["learned LFOM (diagonal Γ)"] == 3 * 5


def test_moe_ood_tiny_run(tmp_path, monkeypatch):
    from mnemo_mpc.icl.train import ICLTrainConfig

    res = _tiny_run(
        "moe_ood",
        tmp_path,
        monkeypatch,
        seeds=1,
        layers=2,
        test_variances=(0.5, 3.0),
        train=_tiny_train(),
        gate_train=ICLTrainConfig(steps=4, batch_size=64, lr=0.1, lr_halve_every=0, clip=0.0, progress=False),
        test_size=100,
    )
    assert set(res["numbers"]["unseen_variance"]) == {"0.5", "3"}
    gate = res["numbers"]["fitted_gate_mean"]["3"]
    assert len(gate) == 3 and abs(sum(gate) - 1) < 1e-5  # a softmax gate over the 3 heads
    with pytest.raises(InputError, match="train_variances"):
        get_study("moe_ood").Config(train_variances=(0.5, 2.0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nag_mgd", "deeper", "ahn_theorem3", "moe_ood", "lfom_learnable"])
def test_quick_config_runs(name, tmp_path):
    res = run_study(name, tmp_path, mode="quick")
    assert res["claims"]

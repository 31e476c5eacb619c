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

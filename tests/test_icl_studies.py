"""The in-context-optimisation studies run end to end through the runner (quick mode, one seed)."""

from __future__ import annotations

import json

import pytest

from mnemo_mpc.experiments import _icl_common as common
from mnemo_mpc.experiments.runner import run_study
from mnemo_mpc.icl.data import DataConfig


def test_lemma1_study_smoke(tmp_path):
    res = run_study("lemma1_pgd", tmp_path, mode="quick", seeds=1)
    # the exactness claims are mode-independent: they must hold even for an under-trained transformer
    assert res["claims"]["tf_equals_pgd_random_params"] is True
    assert res["claims"]["trained_tf_equals_pgd_with_learned_A"] is True
    assert res["numbers"]["max_abs_gap"]["trained"] < 1e-8
    saved = json.loads((tmp_path / "lemma1_pgd" / "results.json").read_text())
    assert saved["seeds"] == [0] and (tmp_path / "lemma1_pgd" / "lemma1_pgd.png").stat().st_size > 1000
    curves = saved["numbers"]["log_loss"]
    tf = curves["Linear TF (trained)"]["mean"]
    pgd = curves["Preconditioned GD with the TF's A_ℓ"]["mean"]
    # float32 transformer vs the same A_ℓ in float64: equal up to float32 rounding of the loss
    assert len(tf) == 3 and all(abs(a - b) < 1e-4 for a, b in zip(tf, pgd, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["memformer_cgd", "memformer_lfom", "memformer_gdpp", "batch_size", "heads"])
def test_memformer_studies_smoke(tmp_path, name):
    res = run_study(name, tmp_path, mode="quick", seeds=1)
    assert res["claims"] and all(isinstance(v, bool) for v in res["claims"].values())
    assert all((tmp_path / name / f).exists() for f in res["figures"])
    for curve in res["numbers"]["log_loss"].values():
        assert len(curve["mean"]) == 3 and all(v == v for v in curve["mean"])


def test_aggregate_and_claim_helpers():
    per_seed = {
        0: {"log_loss": {"a": [0.0, -1.0], "b": [0.5, -0.5]}},
        1: {"log_loss": {"a": [0.2, -1.2], "b": [0.5, -0.7]}},
    }
    stats = common.aggregate(per_seed)
    assert stats["a"]["mean"] == pytest.approx([0.1, -1.1]) and stats["a"]["std"] == pytest.approx([0.1, 0.1])
    assert common.mean_below(stats, "a", "b", [1, 2])
    assert not common.mean_below(stats, "b", "a", [1, 2])
    assert not common.mean_below(stats, "a", "b", [1], margin=0.5)
    assert common.mean_gap(stats, "a", "b", [2]) == pytest.approx([0.5])
    assert common.mean_close(stats, "a", "b", [1, 2], tol=0.51) and not common.mean_close(stats, "a", "b", [2], 0.4)
    md = common.layers_table_md({"x | y": stats["a"]}, "t")
    assert "| x · y | 0.100 ± 0.100 | -1.100 ± 0.100 |" in md


def test_seed_data_differs_per_seed_and_matches_dtype():
    a = common.seed_data(DataConfig(), 0, "cpu", "float32", 16)
    b = common.seed_data(DataConfig(), 1, "cpu", "float32", 16)
    assert not a.task.sigma.allclose(b.task.sigma)
    assert a.test.Z0.dtype.is_floating_point and str(a.test.Z0.dtype) == "torch.float32"
    assert (a.test.Z0.double() - a.test64.Z0).abs().max() < 1e-5
    cl = common.classical_log_losses(a.test64, 3, ("CGD", "NAG", "MGD"))
    assert set(cl) == {"CGD", "NAG", "MGD"} and all(len(v) == 3 for v in cl.values())

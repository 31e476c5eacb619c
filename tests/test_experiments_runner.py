"""The experiments runner: results.json, resume after interruption, shared seeds, REPORT.md."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass

import pytest

from mnemo_mpc import experiments
from mnemo_mpc.experiments.__main__ import main as experiments_main
from mnemo_mpc.experiments.runner import Summary, run_study, write_report


@pytest.fixture
def toy_study(monkeypatch):
    calls: list[int] = []
    mod = types.ModuleType("toy_study")
    mod.TITLE, mod.PAPER = "toy", "none"

    @dataclass
    class Config:
        seeds: int = 3
        scale: float = 2.0

    def run_seed(cfg, seed, ctx):
        import random

        calls.append(seed)
        mod.draws.append((seed, random.random()))
        if seed == 2 and getattr(mod, "interrupt", False):
            raise KeyboardInterrupt
        return {"value": cfg.scale * seed}

    def summarize(cfg, per_seed, ctx):
        total = sum(r["value"] for r in per_seed.values())
        return Summary(numbers={"total": total}, claims={"positive": total > 0}, statement="toy")

    mod.Config, mod.quick_config, mod.run_seed, mod.summarize = Config, lambda: Config(seeds=2), run_seed, summarize
    mod.draws = []
    monkeypatch.setitem(sys.modules, "toy_study", mod)
    monkeypatch.setitem(experiments.STUDIES, "toy", "toy_study")
    return mod, calls


def test_interrupted_run_resumes_and_shares_seeds(toy_study, tmp_path):
    mod, calls = toy_study
    mod.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        run_study("toy", tmp_path, mode="full")
    assert sorted(p.name for p in (tmp_path / "toy" / "seeds").iterdir()) == ["seed_0.json", "seed_1.json"]
    mod.interrupt = False
    calls.clear()
    res = run_study("toy", tmp_path, mode="full")
    assert calls == [2]  # seeds 0 and 1 were kept
    assert res["numbers"] == {"total": 6.0} and res["claims"] == {"positive": True}
    assert res["wall_time_s"] >= sum(res["seed_wall_time_s"].values())
    calls.clear()
    run_study("toy", tmp_path, mode="full", seeds=5)  # a larger --seeds reuses the common seeds
    assert calls == [3, 4]
    saved = json.loads((tmp_path / "toy" / "results.json").read_text())
    assert saved["seeds"] == [0, 1, 2, 3, 4] and saved["config"]["seeds"] == 5
    run_study("toy", tmp_path / "again", mode="full", seeds=2)
    by_seed: dict[int, set[float]] = {}
    for seed, draw in mod.draws:
        by_seed.setdefault(seed, set()).add(draw)
    # the runner seeds the global generators per seed: the same seed draws the same numbers in every run
    assert all(len(d) == 1 for d in by_seed.values()) and len({d.pop() for d in by_seed.values()}) == 5
    report = write_report(tmp_path).read_text()
    assert "| toy | full | 1/1 |" in report


def test_cli_rejects_bad_arguments(toy_study, tmp_path, capsys):
    assert experiments_main(["run", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown study 'nope'" in capsys.readouterr().err
    assert experiments_main(["run", "toy", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert experiments_main(["run", "toy", "--quick", "--out", str(tmp_path)]) == 0
    assert "toy: 1/1 claims hold" in capsys.readouterr().out


def test_a_run_says_which_study_runs_on_one_thread_without_info_lines(toy_study, tmp_path, capsys, monkeypatch):
    """Issue 27: `run all` says `study k/K: NAME` as each study starts; the studies' INFO notes show only with -v;
    without OMP_NUM_THREADS the studies run on one torch / BLAS thread (threads made `lemma1_pgd --quick` 4.6x
    slower on a busy machine), and the caller's settings are back afterwards."""
    import logging
    import os

    import torch

    mod, _ = toy_study
    seen = []
    run_seed = mod.run_seed

    def recording(cfg, seed, ctx):
        seen.append((os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()))
        return run_seed(cfg, seed, ctx)

    mod.run_seed = recording
    levels = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: levels.append(kw["level"]))
    monkeypatch.setitem(experiments.STUDIES, "toy2", "toy_study")
    monkeypatch.setattr(sys.modules["mnemo_mpc.experiments.__main__"], "available", lambda: ["toy", "toy2"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert experiments_main(["run", "all", "--quick", "--out", str(tmp_path)]) == 0
        assert seen and all(s == ("1", 1) for s in seen)
        assert "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert out.index("study 1/2: toy\n") < out.index("toy: 1/1 claims hold") < out.index("study 2/2: toy2\n")
    assert levels == [logging.WARNING]
    seen.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    assert experiments_main(["run", "toy", "-v", "--out", str(tmp_path / "v")]) == 0
    assert seen[0][0] == "3" and levels[-1] == logging.INFO

"""The top-level sim/ data folder: found by `mnemo_mpc.resources` from the source checkout, regenerated exactly by
its script, and its scenarios file is what `mnemo-mpc eval --scenarios` reads. (Pip and colcon installs:
tests/test_packaging.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.resources import candidate_dirs, share_dir, share_dirs, share_file

ROOT = Path(__file__).resolve().parents[1]


def test_checkout_folders_are_found_first(monkeypatch):
    monkeypatch.delenv("MNEMO_MPC_SIM", raising=False)
    monkeypatch.delenv("MNEMO_MPC_MODELS", raising=False)
    assert share_dir("sim") == ROOT / "sim"
    assert share_file("sim", "urdf/diff_drive.urdf") == ROOT / "sim" / "urdf" / "diff_drive.urdf"
    assert share_dirs("models")[0] == ROOT / "models"
    from mnemo_mpc.sim.robot import URDF_PATH, default_urdf_path
    from mnemo_mpc.warmstart.runtime import model_dirs

    assert URDF_PATH == default_urdf_path() == ROOT / "sim" / "urdf" / "diff_drive.urdf"
    assert model_dirs()[0] == ROOT / "models"


def test_environment_override_and_errors(monkeypatch, tmp_path):
    (tmp_path / "urdf").mkdir()
    monkeypatch.setenv("MNEMO_MPC_SIM", str(tmp_path))
    assert share_dir("sim") == tmp_path
    # A file the override lacks still comes from the next folder.
    assert share_file("sim", "urdf/diff_drive.urdf") == ROOT / "sim" / "urdf" / "diff_drive.urdf"
    with pytest.raises(InputError, match="share folder kind: expected one of"):
        share_dir("maps")
    with pytest.raises(InputError, match="'sim/urdf/nope.urdf' not found; searched .*nope.urdf"):
        share_file("sim", "urdf/nope.urdf")
    assert candidate_dirs("sim")[0] == tmp_path


def test_sample_worlds_regenerate_exactly(tmp_path):
    from mnemo_mpc.sim.sample_worlds import SCENARIOS_FILE, write_sample_worlds

    written = write_sample_worlds(tmp_path)
    assert len(written) == 7
    for path in written:
        rel = path.relative_to(tmp_path)
        assert path.read_bytes() == (ROOT / "sim" / rel).read_bytes(), f"sim/{rel} differs from its generator"
    assert (tmp_path / SCENARIOS_FILE).is_file()


def test_scenarios_load_as_the_generated_worlds():
    from mnemo_mpc.commands.eval import load_scenarios
    from mnemo_mpc.sim.sample_worlds import SAMPLES
    from mnemo_mpc.sim.world import load_map_world
    from mnemo_mpc.sim.worlds import generate_world

    path = ROOT / "sim" / "scenarios" / "sample_worlds.json"
    scenarios = load_scenarios(path)
    names = [item["name"] for item in json.loads(path.read_text())]
    assert names == [s.name for s in SAMPLES]
    for sc, sample in zip(scenarios, SAMPLES, strict=True):
        world = load_map_world(sc["map"], np.array(sc["start"]), np.array(sc["goal"]))
        gen = generate_world(sample.seed)
        assert np.array_equal(world.grid.data, gen.grid.data) and world.grid.resolution == gen.grid.resolution
        assert np.allclose(world.start, gen.start, atol=1e-6) and np.allclose(world.goal, gen.goal, atol=1e-6)

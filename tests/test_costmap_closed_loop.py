"""`eval --costmap inflated` (issue 29): the simulator publishes a Nav2 local costmap, the planner reads it as one
(soft cost on), and the result says so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.errors import InputError
from mnemo_mpc.planning import costmap
from mnemo_mpc.profile import NavParams

pytest.importorskip("pybullet")


def test_eval_inflated_costmap_is_read_as_a_nav2_costmap_and_recorded(tmp_path):
    out = tmp_path / "eval.json"
    argv = ["eval", "--worlds", "1", "--seed", "1000", "--costmap", "inflated", "--out", str(out), "--no-progress"]
    assert main([*argv, "--time-limit", "3.0"]) == 0
    res = json.loads(out.read_text())
    src = res["source"]
    assert src["costmap"] == "inflated" and src["costmap_semantics"] == costmap.NAV2
    assert res["config"]["mpc"]["costmap_cost_weight"] == NavParams().costmap_cost_weight > 0
    grid = res["config"]["sim"]["local_grid"]
    assert grid["costmap"] == "inflated" and grid["inflation_radius_m"] == costmap.NAV2_INFLATION_RADIUS_M
    assert grid["inscribed_radius_m"] == pytest.approx(0.2)  # the generic robot's disc
    assert res["collision_rate"] == 0.0 and res["episodes"][0]["steps"] == 30


def test_simulated_costmap_values_are_nav2s():
    """The inflated window from one scan: lethal where the raw grid is occupied, inscribed and inflation around it,
    unknown where the raw grid has not seen (beyond the inscribed band)."""
    from mnemo_mpc.sim.lidar import LidarScan
    from mnemo_mpc.sim.local_grid import LocalGrid, LocalGridConfig

    beams = 360
    angles = np.linspace(-np.pi, np.pi, beams, endpoint=False)
    ranges = np.where(np.abs(angles) < 0.6, 1.0, np.nan)  # a wall ahead, nothing seen elsewhere
    seen = np.isfinite(ranges)
    scan = LidarScan(angles=angles, ranges=ranges, hit=seen, pose=np.zeros(3), range_max=5.0, valid=seen)
    raw = LocalGrid(LocalGridConfig()).update(scan)
    inflated = LocalGrid(LocalGridConfig(costmap="inflated")).update(scan)
    assert raw.semantics == costmap.OCCUPANCY and inflated.semantics == costmap.NAV2
    np.testing.assert_array_equal(inflated.data == costmap.LETHAL, raw.occupied_mask())
    values = set(np.unique(inflated.data).tolist())
    assert {costmap.LETHAL, costmap.INSCRIBED, costmap.UNKNOWN, 0} <= values
    assert any(1 <= v <= costmap.MAX_INFLATION for v in values)
    assert not inflated.unknown_mask()[raw.free_mask()].any()  # what was seen free stays known
    with pytest.raises(InputError, match="LocalGridConfig.costmap"):
        LocalGridConfig(costmap="nav2")


def test_closed_loop_setup_matches_the_profile_to_the_published_grid():
    """The planner reads the grid as what the simulator publishes: raw -> occupancy (whatever the profile says),
    inflated -> the profile's Nav2 semantics (default nav2_costmap) with its weight in the MPC."""
    from mnemo_mpc.sim.profile import closed_loop_setup

    raw = closed_loop_setup(NavParams(costmap_semantics=costmap.NAV2), costmap="raw")
    assert raw.profile.params.costmap_semantics == costmap.OCCUPANCY and raw.mpc.costmap_cost_weight == 0.0
    strict = closed_loop_setup(NavParams(costmap_semantics=costmap.NAV2_INSCRIBED_AS_OBSTACLE), costmap="inflated")
    assert strict.sim.local_grid.costmap_semantics == costmap.NAV2_INSCRIBED_AS_OBSTACLE
    assert strict.mpc.costmap_cost_weight == NavParams().costmap_cost_weight > 0
    with pytest.raises(InputError, match="closed_loop_setup.costmap: expected one of"):
        closed_loop_setup(None, costmap="nav2")

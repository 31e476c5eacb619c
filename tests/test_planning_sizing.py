"""Horizon and window sized from the robot profile: the robot can stop within the horizon, the horizon stays inside
the window, and the default robot keeps the package's standard MPC."""

from pathlib import Path

import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.planning.sizing import size_horizon
from mnemo_mpc.profile import NavParams

PROFILES = sorted((Path(__file__).resolve().parents[1] / "config" / "robots").glob("*.yaml"))


def test_default_robot_keeps_the_standard_mpc():
    s = size_horizon(RobotModel(), 30)
    assert (s.dt, s.window_cells) == (0.1, 80)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_profile_stops_within_the_horizon_and_the_horizon_fits_the_window(path):
    robot = NavParams.from_yaml(path).robot_model()
    s = size_horizon(robot, 30)
    assert s.lookahead_m >= s.stopping_m
    assert s.lookahead_m + robot.radius <= 0.5 * s.window_m + 1e-9
    assert 80 <= s.window_cells <= 120 and s.window_cells % 2 == 0 and 0 < s.dt <= 0.1


def test_jackal_at_two_metres_per_second_needs_a_twenty_hertz_loop():
    robot = NavParams.from_yaml(next(p for p in PROFILES if p.stem == "jackal")).robot_model()
    s = size_horizon(robot, 30)
    assert robot.v_max == 2.0 and s.window_cells == 120
    assert s.min_control_rate_hz >= 20.0


def test_a_robot_that_cannot_stop_within_the_largest_window_is_refused():
    with pytest.raises(InputError, match="short of"):
        size_horizon(RobotModel(v_max=3.0, a_max=0.5), 30)


@pytest.mark.parametrize("profile", ["generic_disc", "turtlebot3_burger", "turtlebot3_waffle", "jackal"])
def test_shipped_profiles_run_the_node_at_the_sized_step(profile):
    """The node reads dt, control rate and window from the profile file: they must be what the sizing asks for (a
    Jackal at 2 m/s planned with the default 0.1 s step sees 6 m of horizon in a 6 m window and stops short of it)."""
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.resources import share_dir

    params = NavParams.from_yaml(share_dir("config") / "robots" / f"{profile}.yaml")
    sized = size_horizon(params.robot_model(), params.horizon_steps)
    assert params.dt <= sized.dt + 1e-12
    assert params.control_rate_hz * params.dt >= 1.0 - 1e-9
    assert params.grid_window_m >= sized.window_m - 1e-9

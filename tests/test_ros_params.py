"""Node parameters: config/nav.yaml, the NavParams dataclass and the core's defaults agree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NODE_NAME, NavParams, write_default_yaml

CONFIG = Path(__file__).resolve().parents[1] / "config" / "nav.yaml"


def test_shipped_yaml_sets_every_parameter_to_its_default():
    params = NavParams.from_yaml(CONFIG)
    assert params == NavParams()
    import yaml

    from mnemo_mpc.profile import flatten_sections

    names = set(flatten_sections(yaml.safe_load(CONFIG.read_text())["/**"]["ros__parameters"], "nav.yaml"))
    assert names == {f.name for f in dataclasses.fields(NavParams)}


def test_shipped_yaml_is_the_generated_one(tmp_path):
    write_default_yaml(tmp_path / "nav.yaml")
    assert (tmp_path / "nav.yaml").read_text() == CONFIG.read_text()


def test_every_parameter_is_described():
    assert all(len(d) > 10 for d in NavParams().descriptions().values())


def test_robot_defaults_match_the_core():
    assert NavParams().robot_model() == RobotModel()


def test_unknown_and_mistyped_parameters_are_named(tmp_path):
    with pytest.raises(InputError, match="unknown parameter.*horizon"):
        NavParams.from_dict({"horizon": 30})
    with pytest.raises(InputError, match="max_iter expected int"):
        NavParams.from_dict({"max_iter": "10"})
    assert NavParams.from_dict({"dt": 1}).dt == 1.0  # YAML ints are accepted where floats are expected
    with pytest.raises(InputError, match="dt: expected > 0"):
        NavParams.from_dict({"dt": 0.0})
    with pytest.raises(InputError, match="unknown_policy"):
        NavParams.from_dict({"unknown_policy": "maybe"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("other_node:\n  ros__parameters: {}\n")
    with pytest.raises(InputError, match="ros__parameters"):
        NavParams.from_yaml(bad)
    bad.write_text("mnemo_mpc_nav: [unclosed\n")
    with pytest.raises(InputError, match="parameter file is not valid YAML"):
        NavParams.from_yaml(bad)
    # An alias bomb is refused at the first alias, not expanded.
    bad.write_text("a: &a [x, x]\nb: &b [*a, *a]\nmnemo_mpc_nav: {ros__parameters: {dt: *b}}\n")
    with pytest.raises(InputError, match="aliases"):
        NavParams.from_yaml(bad)
    with pytest.raises(InputError, match="must be a regular file"):
        NavParams.from_yaml(tmp_path)


def test_wildcard_and_named_entries_apply_the_named_one_wins(tmp_path):
    # Defect: a file keyed by the node name was silently ignored under a namespace; '/**' matches any namespace.
    f = tmp_path / "p.yaml"
    f.write_text(
        "/**:\n  ros__parameters:\n    control_rate_hz: 20\n    v_max: 0.4\n"
        f"/robot1/{NODE_NAME}:\n  ros__parameters:\n    v_max: 0.3\n"
    )
    params = NavParams.from_yaml(f)
    assert params.control_rate_hz == 20.0 and isinstance(params.control_rate_hz, float)  # an integer is accepted
    assert params.v_max == 0.3
    f.write_text(f"{NODE_NAME}:\n  ros__parameters:\n    max_iter: 5\n")
    assert NavParams.from_yaml(f).max_iter == 5


def test_sqp_mode_is_full_or_rti_and_reaches_the_controller():
    with pytest.raises(InputError, match="sqp_mode"):
        NavParams(sqp_mode="two")
    assert NavParams(sqp_mode="rti").controller_config().sqp_mode == "rti"


def test_nav2_names_are_accepted_for_ours_and_both_at_odds_are_refused(tmp_path):
    p = NavParams.from_dict({"controller_frequency": 20, "xy_goal_tolerance": 0.15})
    assert p.control_rate_hz == 20.0 and p.goal_tolerance_m == 0.15
    assert NavParams.from_dict({"controller_frequency": 20, "control_rate_hz": 20.0}).control_rate_hz == 20.0
    with pytest.raises(InputError, match="controller_frequency = 20 and control_rate_hz = 10.0 are the same setting"):
        NavParams.from_dict({"controller_frequency": 20, "control_rate_hz": 10.0})
    f = tmp_path / "nav2.yaml"
    f.write_text("controller_server:\n  ros__parameters:\n    controller_frequency: 25.0\n    yaw_goal_tolerance: 0.25")
    p = NavParams.from_yaml(f, node_name="controller_server")
    assert p.control_rate_hz == 25.0 and p.yaw_goal_tolerance == 0.25
    assert p.controller_config().yaw_goal_tolerance == 0.25


def test_the_node_reads_nav2_names_as_parameters():
    rclpy = pytest.importorskip("rclpy", reason="the node's parameter reading needs rclpy")
    from rclpy.parameter import Parameter

    from mnemo_mpc.ros.node import read_params

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        overrides = [Parameter("controller_frequency", value=20), Parameter("xy_goal_tolerance", value=0.1)]
        node = rclpy.create_node("nav2_names", context=ctx, parameter_overrides=overrides)
        p = read_params(node, NavParams, "config/nav.yaml")
        assert p.control_rate_hz == 20.0 and p.goal_tolerance_m == 0.1
        node.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


def test_nav2_progress_checker_parameters_reach_the_controller_and_are_bounded():
    config = NavParams(required_movement_radius=0.3, movement_time_allowance=5).controller_config()
    assert (config.required_movement_m, config.progress_timeout_s) == (0.3, 5.0)
    with pytest.raises(InputError, match="parameter movement_time_allowance: expected at most 3,600"):
        NavParams(movement_time_allowance=1e5)
    with pytest.raises(InputError, match="parameter required_movement_radius: expected > 0"):
        NavParams(required_movement_radius=0.0)

"""One robot file, read once (issue 24 item 4): the node and the commands build the same robot, MPC and controller from
every shipped profile, and the profile's `dynamics:` / `sensor:` sections are read as ROS would."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from mnemo_mpc.errors import InputError
from mnemo_mpc.profile import NavParams, build, ros_name
from mnemo_mpc.sim.profile import closed_loop_setup

PROFILES = sorted((Path(__file__).resolve().parents[1] / "config" / "robots").glob("*.yaml"))


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_node_and_eval_build_the_same_robot_mpc_and_controller(path):
    from mnemo_mpc.ros.adapter import NavAdapter
    from mnemo_mpc.ros.convert import MessageTypes

    params = NavParams.from_yaml(path)
    node = NavAdapter(params, MessageTypes.from_rosbags()).controller
    setup = closed_loop_setup(params, real_time=True, realism="profile")
    cli = setup.controller()  # what demo / eval build (their --warmstart / --model left out)
    assert node.robot == cli.robot == params.robot_model()
    assert node.mpc_config == cli.mpc_config == setup.mpc
    assert node.config == cli.config
    # the profile's own values, not defaults: horizon, step, iteration cap, unknown policy, the drive's model
    assert cli.mpc_config.N == params.horizon_steps and cli.mpc_config.dt == params.dt
    assert cli.mpc_config.max_iter == params.max_iter and cli.config.unknown_policy == params.unknown_policy
    assert cli.config.actuation == params.actuation()
    # and the simulator is the profile's: period dt, lidar range, planning window, the stated realism
    assert setup.sim.control_dt == params.dt and setup.sim.lidar.range_max_m == params.sensor_range_m
    assert setup.sim.local_grid.size_m == params.grid_window_m
    assert setup.realism == params.realism("profile")


def test_collect_keeps_the_iteration_cap_alone():
    params = NavParams.from_yaml(PROFILES[0])
    rt, batch = build(params, real_time=True).mpc, build(params, real_time=False).mpc
    assert rt.max_time_s is not None and batch.max_time_s is None
    assert dataclasses.replace(batch, max_time_s=rt.max_time_s, fallback=rt.fallback, fallback_max_time_s=None) == (
        dataclasses.replace(rt, fallback_max_time_s=None)
    )


def test_sections_nested_or_dotted_read_the_same(tmp_path):
    nested = {
        "/**": {"ros__parameters": {"dynamics": {"latency_s": 0.07, "lag_v_s": 0.2}, "sensor": {"fov_deg": 270.0}}}
    }
    dotted = {
        "/**": {"ros__parameters": {"dynamics.latency_s": 0.07, "dynamics.lag_v_s": 0.2, "sensor.fov_deg": 270.0}}
    }
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(nested))
    b.write_text(yaml.safe_dump(dotted))
    pa, pb = NavParams.from_yaml(a), NavParams.from_yaml(b)
    assert pa == pb and pa.dynamics_latency_s == 0.07 and pa.sensor_fov_deg == 270.0
    names = {ros_name(f) for f in dataclasses.fields(NavParams)}
    assert {"dynamics.latency_s", "sensor.fov_deg", "sensor_range_m", "compensate_dynamics"} <= names


@pytest.mark.parametrize(
    "values, match",
    [
        ({"dynamics": {"latency": 0.05}}, "dynamics_latency"),
        ({"dynamics": {"latency_s": -0.05}}, "latency_s"),
        ({"dynamics": {"lag_v_s": "fast"}}, "dynamics_lag_v_s"),
        ({"dynamics": 0.05}, "section dynamics"),
        ({"sensor": {"fov_deg": 400.0}}, "fov_deg"),
        ({"sensor": {"dropout": 1.0}}, "dropout"),
        ({"dt": 0.5, "control_rate_hz": 2.0}, "horizon_steps / dt / grid_window_m"),
    ],
)
def test_bad_sections_name_the_parameter(tmp_path, values, match):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    with pytest.raises(InputError, match=match):
        build(NavParams.from_yaml(f))


def test_a_bare_robot_becomes_a_profile():
    from mnemo_mpc.planning.robot import RobotModel

    setup = closed_loop_setup(RobotModel(v_max=1.0))
    assert setup.robot == RobotModel(v_max=1.0) and setup.realism.is_ideal
    assert setup.mpc.dt < 0.1  # sized so the horizon stays on the window

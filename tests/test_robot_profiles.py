"""Robot profiles (issue 10): the shipped config/robots/*.yaml load, the RobotModel keeps its defaults and stored-config
JSON, and profile -> URDF -> footprint/limits round-trips (PyBullet loads the generated chassis)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NavParams, build
from mnemo_mpc.sim.robot import (
    URDF_PATH,
    DiffDriveRobot,
    diff_drive_config,
    robot_urdf,
    urdf_footprint,
    write_robot_urdf,
)

PROFILES = Path(__file__).resolve().parents[1] / "config" / "robots"
NAMES = ("generic_disc", "turtlebot3_burger", "turtlebot3_waffle", "jackal")
LIMITS = ("safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max", "footprint_tolerance")
# Spec-sheet figures the profiles must carry: v_max [m/s], w_max [rad/s] where published, footprint L x W [m].
SPEC = {
    "turtlebot3_burger": (0.22, 2.84, 0.138, 0.178),
    "turtlebot3_waffle": (0.26, 1.82, 0.281, 0.306),
    "jackal": (2.0, None, 0.508, 0.430),
}


def _values(name: str) -> dict:
    return yaml.safe_load((PROFILES / f"{name}.yaml").read_text())["/**"]["ros__parameters"]


def test_the_shipped_profiles_are_the_four_named():
    assert sorted(p.stem for p in PROFILES.glob("*.yaml")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_profile_loads_with_its_spec_sheet_figures(name):
    params = NavParams.from_yaml(PROFILES / f"{name}.yaml")
    robot = params.robot_model()
    values = _values(name)
    for key in LIMITS:
        assert getattr(robot, key) == pytest.approx(values[key]), key
    assert params.sensor_range_m == pytest.approx(values["sensor_range_m"])
    if name in SPEC:
        v_max, w_max, length, width = SPEC[name]
        assert robot.v_max == v_max and (w_max is None or robot.w_max == w_max)
        x0, x1, y0, y1 = robot.shape.bounds
        assert (x1 - x0, y1 - y0) == pytest.approx((length, width))
        assert robot.radius == pytest.approx(robot.shape.circumscribed_radius)
    cover = robot.disc_cover
    assert cover.error <= robot.footprint_tolerance and robot.discs.shape == (cover.count, 3)


def test_generic_profile_is_the_default_robot():
    assert NavParams.from_yaml(PROFILES / "generic_disc.yaml").robot_model() == RobotModel()
    assert NavParams().robot_model() == RobotModel()
    np.testing.assert_array_equal(RobotModel().discs, [[0.0, 0.0, 0.2]])
    assert RobotModel().clearance == 0.25


def test_robot_model_json_round_trip_and_old_configs():
    jackal = NavParams.from_yaml(PROFILES / "jackal.yaml").robot_model()
    stored = json.loads(json.dumps(dataclasses.asdict(jackal)))  # as CollectConfig.to_dict / manifests keep it
    back = RobotModel(**stored)
    assert back == jackal and hash(back) == hash(jackal)
    np.testing.assert_array_equal(back.discs, jackal.discs)
    # A config stored before footprints existed (no footprint keys) is still the default disc robot.
    old = {k: v for k, v in dataclasses.asdict(RobotModel()).items() if k not in ("footprint", "footprint_tolerance")}
    assert RobotModel(**old) == RobotModel()
    with pytest.raises(InputError, match="circumscribed radius"):
        RobotModel(footprint=jackal.footprint)  # radius 0.2 is not the box's 0.333 m
    with pytest.raises(InputError, match="RobotModel.footprint: expected a convex"):
        RobotModel(radius=0.3, footprint=((-0.2, -0.2), (0.0, -0.05), (0.2, -0.2), (0.2, 0.2), (-0.2, 0.2)))


def test_bad_footprint_parameters_are_named(tmp_path):
    with pytest.raises(InputError, match="parameter footprint: expected a convex"):
        NavParams.from_dict({"footprint": "[[-0.2, -0.2], [0.0, -0.05], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]"})
    with pytest.raises(InputError, match="parameter footprint: expected"):
        NavParams.from_dict({"footprint": "[[1, 2], [3]]"})
    with pytest.raises(InputError, match="footprint_tolerance: expected > 0"):
        NavParams.from_dict({"footprint_tolerance": 0.0})


def test_default_urdf_is_the_shipped_file():
    assert robot_urdf() == URDF_PATH.read_text()


@pytest.mark.parametrize("name", NAMES)
def test_profile_urdf_round_trip(name, tmp_path):
    robot = NavParams.from_yaml(PROFILES / f"{name}.yaml").robot_model()
    back = urdf_footprint(write_robot_urdf(robot, tmp_path))
    assert back.is_circle == robot.shape.is_circle
    if back.is_circle:
        assert back.radius == robot.radius
    else:
        np.testing.assert_allclose(back.points, robot.shape.points, atol=1e-9)
    # The URDF's footprint and the profile's limits make the profile's robot again.
    rebuilt = RobotModel.from_footprint(back, **{k: _values(name)[k] for k in LIMITS})
    assert rebuilt.radius == pytest.approx(robot.radius, abs=1e-12)
    assert all(getattr(rebuilt, k) == getattr(robot, k) for k in LIMITS)


def test_pybullet_loads_the_generated_chassis(tmp_path):
    p = pytest.importorskip("pybullet")
    pentagon = Footprint.polygon([(-0.2, -0.15), (0.1, -0.2), (0.3, 0.0), (0.1, 0.2), (-0.2, 0.15)])
    robots = [NavParams.from_yaml(PROFILES / f"{n}.yaml").robot_model() for n in NAMES]
    robots.append(RobotModel.from_footprint(pentagon))
    client = p.connect(p.DIRECT)
    try:
        for i, robot in enumerate(robots):
            path = write_robot_urdf(robot, tmp_path / str(i))
            np.testing.assert_allclose(urdf_footprint(path).points, robot.shape.points, atol=1e-6)
            body = DiffDriveRobot(client, diff_drive_config(robot), urdf_path=path)
            lo, hi = p.getAABB(body.body, body.chassis_link, physicsClientId=client)
            x0, x1, y0, y1 = robot.shape.bounds
            # PyBullet pads meshes by a ~4 mm collision margin; primitives are exact.
            np.testing.assert_allclose([lo[0], hi[0], lo[1], hi[1]], [x0, x1, y0, y1], atol=5e-3)
        # The chassis check names a URDF that does not match the configured footprint.
        disc_urdf = write_robot_urdf(RobotModel(), tmp_path / "disc")
        with pytest.raises(InputError, match="box"):
            DiffDriveRobot(client, diff_drive_config(robots[3]), urdf_path=disc_urdf)
    finally:
        p.disconnect(client)


def test_a_round_robot_model_is_not_used_for_a_polygon_robot_of_the_same_radius_and_limits():
    """The shipped warm-start model was trained on the round robot: a box whose circumscribed radius and limits
    happen to match must not get it (its trajectories would be trained for another collision shape)."""
    from mnemo_mpc.planning.mpc import MPCConfig
    from mnemo_mpc.warmstart.runtime import check_compatible, find_model, read_metadata

    cfg, round_robot = MPCConfig(), RobotModel()
    path = find_model(round_robot, cfg.N, cfg.dt)
    assert path is not None
    _, info = read_metadata(path)
    check_compatible(info, round_robot, cfg.N, cfg.dt)
    side = 2 * round_robot.radius / math.sqrt(2)  # a square inscribed in the 0.2 m circle: same radius
    box = RobotModel.from_footprint(Footprint.rectangle(side, side))
    assert box.radius == pytest.approx(round_robot.radius)
    with pytest.raises(InputError, match="footprint"):
        check_compatible(info, box, cfg.N, cfg.dt)
    assert find_model(box, cfg.N, cfg.dt) is None


# The model trained for each shipped profile (issue 25: one model per shipped profile); `auto` must pick it.
MODEL_FOR = {
    "generic_disc": "mnemo_vit_favor_plus_n30.onnx",
    "turtlebot3_burger": "mnemo_vit_favor_plus_turtlebot3_burger_n30.onnx",
    "turtlebot3_waffle": "mnemo_vit_favor_plus_turtlebot3_waffle_n30.onnx",
    "jackal": "mnemo_vit_favor_plus_jackal_n30.onnx",
}


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_profile_gets_the_model_trained_for_it(name, monkeypatch):
    """`auto` on each shipped profile finds the model collected and trained with that profile (metadata: robot,
    horizon, step), in the checkout's models/ alone, and no other robot's model fits it."""
    from mnemo_mpc.warmstart.runtime import check_compatible, find_model, read_metadata

    models = PROFILES.parents[1] / "models"
    monkeypatch.setenv("MNEMO_MPC_MODELS", str(models))
    profile = build(NavParams.from_yaml(PROFILES / f"{name}.yaml"))
    robot, n, dt = profile.robot, profile.mpc.N, profile.mpc.dt
    path = find_model(robot, n, dt)
    assert path is not None and path.name == MODEL_FOR[name]
    for other in set(MODEL_FOR.values()) - {MODEL_FOR[name]}:
        with pytest.raises(InputError):
            check_compatible(read_metadata(models / other)[1], robot, n, dt)


def test_the_passage_margin_floor_is_a_profile_value_within_the_safety_margin():
    """`min_margin_m` reaches the controller from the profile (a drifting robot's grid error, say), and a floor above
    the safety margin or below 0 is refused by name."""
    assert NavParams.from_dict({"min_margin_m": 0.03}).controller_config().min_margin_m == 0.03
    assert NavParams().controller_config().min_margin_m == 0.01
    for bad in (-0.01, 0.06):
        with pytest.raises(InputError, match="parameter min_margin_m: expected metres in"):
            NavParams.from_dict({"min_margin_m": bad})

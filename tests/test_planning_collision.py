"""The public footprint check (`planning.collision.FootprintChecker`): the MPC, the controller and the recoveries
use it."""

import math

import numpy as np

from mnemo_mpc.planning.collision import FootprintChecker
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel

BOX = RobotModel.from_footprint(Footprint.rectangle(0.5, 0.4))


def wall_north(y_wall: float = 1.5) -> DistanceField:
    data = np.zeros((60, 60), np.int8)
    data[int(y_wall / 0.05) :, :] = 100  # everything north of y_wall is obstacle
    return DistanceField(OccupancyGrid(data, 0.05))


def test_disc_centres_turn_with_the_body():
    check = FootprintChecker(BOX, 0.1, 10)
    front = int(np.argmax(check.discs[:, 0]))  # the disc furthest forward in the body frame
    pose = np.array([1.0, 1.0, math.pi / 2])  # facing +y: forward is north
    c = check.disc_centres(pose)
    np.testing.assert_allclose(c[front], [1.0 - check.discs[front, 1], 1.0 + check.discs[front, 0]], atol=1e-12)
    assert check.disc_centres(np.tile(pose, (4, 1))).shape == (4, len(check.discs), 2)


def test_facing_the_wall_has_less_clearance_than_along_it():
    """The box is longer than wide: turned towards the wall its front discs come closer."""
    check, field_ = FootprintChecker(BOX, 0.1, 10), wall_north()
    along, facing = check.pose_margins(field_, np.array([[1.5, 1.0, 0.0], [1.5, 1.0, math.pi / 2]]))
    assert facing < along - 0.03
    assert check.pose_margins(field_, np.array([1.5, 1.0, 0.0]), exact=True) > 0


def test_trajectory_clearance_is_the_least_along_the_arcs():
    """A plan that drives north towards the wall ends closest to it; for a round robot it is the field's clearance of
    the densified centre path less the radius."""
    round_robot = RobotModel()
    field_ = wall_north()
    n, dt = 10, 0.1
    controls = np.tile([0.5, 0.0], (n, 1))
    for robot in (round_robot, BOX):
        check = FootprintChecker(robot, dt, 10)
        states = robot.rollout(np.array([1.5, 0.5, math.pi / 2]), controls, dt)
        got = check.trajectory_clearance(field_, states, controls)
        np.testing.assert_allclose(got, check.pose_margins(field_, states[-1]), atol=0.02)
        assert got < check.pose_margins(field_, states[0])
    check = FootprintChecker(round_robot, dt, 10)
    states = round_robot.rollout(np.array([1.5, 0.5, math.pi / 2]), controls, dt)
    pts = round_robot.densify(states, controls, dt, 10)
    assert check.trajectory_clearance(field_, states, controls) == field_.min_clearance(pts) - round_robot.radius


def test_bad_covering_discs_are_refused():
    """The checker and the MPC take their discs from one validated place (`robot_discs`)."""
    import pytest

    from mnemo_mpc.errors import InputError

    class Broken(RobotModel):
        @property
        def discs(self) -> np.ndarray:
            return np.array([[0.0, 0.0, float("nan")]])

    with pytest.raises(InputError, match="robot discs"):
        FootprintChecker(Broken(), 0.1, 10)

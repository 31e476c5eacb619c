"""Speed regulated by the room ahead (issue 10 item 3; `nav.reference.regulated_speed`): the reference slows to
`regulated_min_speed` in a passage, brakes towards it at the stated deceleration, stays at top speed in the open, and
the MPC's reference points are spaced by the profile."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.reference import passage_room, regulated_speed
from mnemo_mpc.planning.global_path import local_reference
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel

RES = 0.05
HALF, MARGIN, V_TOP, V_SLOW, FULL, DECEL = 0.2, 0.05, 1.6, 0.25, 0.3, 1.0


def passage(width_m: float | None) -> OccupancyGrid:
    """10 m x 4 m room; from x = 6 m on, a passage `width_m` wide centred on y = 2 m (None: open)."""
    data = np.zeros((80, 200), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    if width_m is not None:
        half = int(round(width_m / RES / 2))
        data[:, 120:] = 100
        data[40 - half : 40 + half, 120:] = 0
    return OccupancyGrid(data, RES)


PATH = np.column_stack([np.linspace(0.5, 9.5, 181), np.full(181, 2.0)])


def profile(grid: OccupancyGrid, x0: float, horizon_s: float = 10.0):
    return regulated_speed(
        PATH, np.array([x0, 2.0, 0.0]), x0 - 0.5, grid, HALF, MARGIN, V_TOP, V_SLOW, FULL, DECEL, horizon_s
    )


def test_open_space_keeps_the_top_speed():
    assert profile(passage(None), 2.0, horizon_s=2.0) is None  # 3.2 m ahead, 1.75 m of room


def test_a_passage_slows_to_its_room_and_is_approached_braking():
    s, v = profile(passage(0.6), 1.0)
    x = 0.5 + s
    half = passage_room(passage(0.6), np.array([[7.0, 2.0]]), np.zeros(1), 1.0)[0]
    assert half == pytest.approx(0.3, abs=RES / 4 + 1e-9)  # half the 0.6 m passage, to a quarter cell
    room = half - HALF - MARGIN
    inside = v[(x > 6.2) & (x < 9.0)]
    assert np.allclose(inside, V_SLOW + (V_TOP - V_SLOW) * room / FULL, atol=1e-3)
    # braking towards it, never faster than decel allows, and at top speed far before it
    ds = np.diff(s)
    assert np.all(v[:-1] ** 2 <= v[1:] ** 2 + 2 * DECEL * ds + 1e-9)
    assert v[0] == pytest.approx(V_TOP) and np.all(np.diff(v[x < 6.0]) <= 1e-9)


def test_an_obstacle_on_one_side_only_does_not_slow_the_robot():
    """Regulation is for passages: a box 0.1 m beside the path with the room open on the other side (perhaps a moving
    one) leaves the speed alone; its mirror on the other side makes a passage."""
    grid = passage(None)
    grid.data[44:50, 80:90] = 100  # a box from y = 2.2 m up, x 4.0-4.5 m
    assert profile(grid, 3.0, horizon_s=2.0) is None
    grid.data[30:36, 80:90] = 100  # and below, up to y = 1.8 m: a 0.4 m passage
    s, v = profile(grid, 3.0, horizon_s=2.0)
    assert v.min() == pytest.approx(V_SLOW)  # 0.2 m half-width: no room beyond the body and margin


def test_reference_points_follow_the_profile():
    prof = profile(passage(0.6), 5.5, horizon_s=2.0)
    dt = 0.05
    ref = local_reference(PATH, np.array([5.5, 2.0, 0.0]), 30, dt, V_TOP, progress=5.0, profile=prof)
    s_k = ref.points[:, 0] - 0.5
    # s_{k+1} = s_k + v(s_k) dt: spaced by the profile, slower and slower into the passage
    assert np.allclose(np.diff(s_k), np.interp(s_k[:-1], *prof) * dt, atol=1e-9)
    assert np.all(np.diff(s_k) < V_TOP * dt) and np.all(np.diff(np.diff(s_k)) <= 1e-9)
    plain = local_reference(PATH, np.array([5.5, 2.0, 0.0]), 30, dt, V_TOP, progress=5.0)
    assert np.allclose(np.diff(plain.points[:, 0]), V_TOP * dt)


def test_the_controller_spaces_its_reference_by_the_room_ahead():
    data = np.zeros((80, 200), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    data[:, 60:] = 100
    data[34:46, 60:] = 0  # a 0.6 m passage from x = 3 m, the robot 0.2 m before it
    grid = OccupancyGrid(data, RES)
    robot = RobotModel(v_max=2.0, a_max=2.0)
    pose, goal = np.array([2.8, 2.0, 0.0]), np.array([9.0, 2.0, 0.0])
    path = np.array([pose[:2], goal[:2]])
    ctl = Controller(robot, MPCConfig(fallback=None))
    out = ctl.step(grid.window(pose[:2], (120, 120)), pose, np.zeros(2), goal, global_path=path)
    gaps = np.hypot(*np.diff(out.reference[1:], axis=0).T)
    assert gaps.max() < 0.5 * 0.8 * robot.v_max * ctl.mpc_config.dt  # well under the top speed's spacing
    # ... and in the open the same controller spaces them at v_ref_fraction * v_max
    open_grid = OccupancyGrid(np.zeros((120, 200), np.int8), RES)
    out = Controller(robot, MPCConfig(fallback=None)).step(
        open_grid.window(np.array([2.0, 3.0]), (120, 120)),
        np.array([2.0, 3.0, 0.0]),
        np.zeros(2),
        np.array([9.0, 3.0, 0.0]),
        global_path=np.array([[2.0, 3.0], [9.0, 3.0]]),
    )
    gaps = np.hypot(*np.diff(out.reference[1:], axis=0).T)
    assert np.allclose(gaps, 0.8 * robot.v_max * ctl.mpc_config.dt)


@pytest.mark.parametrize("name", ["regulated_min_speed", "regulated_full_room_m"])
def test_regulation_settings_are_checked(name):
    with pytest.raises(InputError, match=name):
        ControllerConfig(**{name: 0.0})

"""The people-and-carts family of moving obstacles (issue 28, `WorldConfig.moving_kind`): the original family is the
same world for the same seed; the new ones are deterministic and move as they say -- crossing pedestrians at
0.5-1.4 m/s get onto the start -> goal path, head-on carts come along it towards the robot and overtaking ones go
ahead of it, stop-go obstacles stand part of the time."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.sim.worlds import MOVING_KINDS, MovingObstacle, WorldConfig, _start_goal_path, generate_world

# What `generate_world(seed, WorldConfig(moving_obstacles=3))` placed before the new family existed (main at 6f8c98e):
# shape, a, b, speed, phase
PATROL = {
    1000: [
        ("cylinder", 6.825, 2.475, 3.35, 2.475, 0.258201, 0.905128),
        ("box", 10.125, 6.425, 7.475, 6.425, 0.492505, 0.206706),
        ("cylinder", 4.675, 5.775, 4.675, 2.475, 0.313282, 0.302407),
    ],
    1003: [
        ("cylinder", 8.175, 5.825, 9.281437, 7.430708, 0.248421, 0.327786),
        ("box", 8.225, 0.875, 11.475, 0.875, 0.242023, 0.13614),
        ("cylinder", 9.175, 5.175, 9.175, 3.45, 0.408611, 0.247484),
    ],
}
TIMES = np.arange(0.0, 60.0, 0.05)


def _path_distance(path: np.ndarray, p: np.ndarray) -> float:
    """Distance from p to the polyline `path`."""
    a, b = path[:-1], path[1:]
    ab = b - a
    u = np.clip(np.einsum("ij,ij->i", p - a, ab) / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12), 0.0, 1.0)
    return float(np.min(np.hypot(*(a + u[:, None] * ab - p).T)))


@pytest.mark.parametrize("seed", sorted(PATROL))
def test_the_patrol_family_is_unchanged_for_the_same_seed(seed):
    for kind in (None, "patrol"):
        cfg = WorldConfig(moving_obstacles=3) if kind is None else WorldConfig(moving_obstacles=3, moving_kind=kind)
        got = [
            (o.shape, *np.round([*o.a, *o.b, o.speed, o.phase], 6).tolist()) for o in generate_world(seed, cfg).moving
        ]
        assert got == [tuple(row) for row in PATROL[seed]]


def test_the_new_family_is_deterministic_and_leaves_the_static_world_alone():
    cfg = WorldConfig(moving_obstacles=3, moving_kind="mixed")
    a, b = generate_world(1004, cfg), generate_world(1004, cfg)
    assert a.moving == b.moving and len(a.moving) == 3
    assert np.array_equal(a.grid.data, generate_world(1004).grid.data)
    assert {o.kind for o in a.moving} <= set(MOVING_KINDS) - {"patrol", "mixed"}


@pytest.mark.parametrize("seed", [1000, 1003])
def test_crossing_pedestrians_walk_across_the_path_at_walking_speed(seed):
    cfg = WorldConfig(moving_obstacles=2, moving_kind="crossing")
    world = generate_world(seed, cfg)
    path = _start_goal_path(world.grid, world.start, world.goal, cfg)
    assert len(world.moving) == 2
    for ob in world.moving:
        assert ob.kind == "crossing" and ob.shape == "cylinder"
        assert 0.5 <= ob.speed <= 1.4
        speeds = np.hypot(*np.array([ob.velocity(t) for t in TIMES]).T)
        assert np.allclose(speeds, ob.speed)  # constant speed, never standing
        # both ends off the path, and it gets onto the path (within a cell of it)
        assert min(_path_distance(path, np.asarray(ob.a)), _path_distance(path, np.asarray(ob.b))) > 0.5
        assert min(_path_distance(path, ob.position(t)) for t in TIMES) <= cfg.resolution


def test_head_on_and_overtaking_carts_move_along_the_path():
    for kind, towards_start in (("head_on", True), ("overtaking", False)):
        cfg = WorldConfig(moving_obstacles=2, moving_kind=kind)
        world = generate_world(1001, cfg)
        path = _start_goal_path(world.grid, world.start, world.goal, cfg)
        arc = np.r_[0.0, np.cumsum(np.hypot(*np.diff(path, axis=0).T))]
        assert len(world.moving) == 2
        for ob in world.moving:
            assert ob.kind == kind and ob.shape == "box" and 0.2 <= ob.speed <= 0.8
            ends = [np.asarray(ob.a), np.asarray(ob.b)]
            assert max(_path_distance(path, e) for e in ends) <= 2 * cfg.resolution  # a stretch of the path
            # a -> b runs back towards the start (head-on) or on towards the goal (overtaking)
            s_a, s_b = (arc[np.argmin(np.hypot(*(path - e).T))] for e in ends)
            assert (s_b < s_a) == towards_start
            # timed: it leaves a when a robot at timing_speed_m_s reaches the stretch (head-on) or is 1.5 m behind
            s_near = min(s_a, s_b)
            meet = (s_near if kind == "head_on" else max(s_near - 1.5, 0.0)) / cfg.timing_speed_m_s
            assert np.hypot(*(ob.position(meet) - ends[0])) <= 0.05
            assert np.dot(ob.velocity(meet + 0.1), ends[1] - ends[0]) > 0


def test_stop_go_obstacles_stand_part_of_the_time():
    world = generate_world(1002, WorldConfig(moving_obstacles=2, moving_kind="stop_go"))
    for ob in world.moving:
        assert ob.kind == "stop_go" and ob.stop_s > 0 and ob.go_s > 0
        speeds = np.hypot(*np.array([ob.velocity(t) for t in TIMES]).T)
        assert set(np.round(speeds, 9)) == {0.0, round(ob.speed, 9)}
        assert np.mean(speeds == 0) == pytest.approx(ob.stop_s / (ob.go_s + ob.stop_s), abs=0.05)
        # it does not move while it stands
        t0 = ob.go_s + 0.1
        assert np.allclose(ob.position(t0), ob.position(t0 + ob.stop_s - 0.2))


def test_bad_settings_are_refused():
    with pytest.raises(InputError, match="moving_kind"):
        WorldConfig(moving_kind="herd")
    with pytest.raises(InputError, match="crossing_speed_m_s"):
        WorldConfig(crossing_speed_m_s=(1.4, 0.5))
    with pytest.raises(InputError, match="go_s"):
        MovingObstacle("box", (0.2, 0.2), (0, 0), (1, 0), 0.5, stop_s=1.0)


def test_the_cli_spells_the_same_kinds():
    from mnemo_mpc.commands._args import MOVING_KINDS as CLI_KINDS

    assert CLI_KINDS == MOVING_KINDS

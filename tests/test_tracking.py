"""Tracking moving obstacles from the grids (issue 28, `nav.tracking`): a box moving at 1 m/s through a rolling
window gets one confirmed track with its velocity; a static wall revealed by the moving window -- from unknown, or
after reading free briefly, or a wall face creeping out along its length -- never does; two crossing boxes keep their
ids; the settings and inputs are checked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.tracking import Track, Tracker, TrackerConfig, cv_model
from mnemo_mpc.planning.grid import OccupancyGrid

RES, DT = 0.05, 0.1
FREE, OCC, UNK = 3, 97, -1  # what the lidar grid reads for a cell seen free many times / occupied / never seen
H, W = 120, 240  # a 12 m x 6 m room


def room(boxes: list[tuple[float, float, float]] = ()) -> np.ndarray:
    """The room seen free, walls round it, and square boxes (x, y, half side)."""
    data = np.full((H, W), FREE, np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = OCC
    xs, ys = (np.arange(W) + 0.5) * RES, (np.arange(H) + 0.5) * RES
    for x, y, half in boxes:
        data[(np.abs(xs[None, :] - x) <= half) & (np.abs(ys[:, None] - y) <= half)] = OCC
    return data


def window(data: np.ndarray, robot_xy: tuple[float, float], size: int = 100) -> OccupancyGrid:
    """The rolling window of `size` cells centred on the robot, on the room's lattice (unknown beyond the room)."""
    c0, r0 = int(robot_xy[0] / RES) - size // 2, int(robot_xy[1] / RES) - size // 2
    out = np.full((size, size), UNK, np.int8)
    rs, cs = slice(max(r0, 0), min(r0 + size, H)), slice(max(c0, 0), min(c0 + size, W))
    out[rs.start - r0 : rs.stop - r0, cs.start - c0 : cs.stop - c0] = data[rs, cs]
    return OccupancyGrid(out, RES, (c0 * RES, r0 * RES, 0.0))


def test_a_box_at_1_m_s_gets_one_confirmed_track_with_its_velocity():
    tracker = Tracker()
    first, ids = None, set()
    for k in range(25):
        t = k * DT
        robot = (3.0 + 0.5 * t, 3.0)  # the robot drives right at 0.5 m/s: the window moves a cell a step
        box = (5.5, 5.0 - 1.0 * t, 0.2)  # a 0.4 m box crossing its path at 1 m/s
        tracks = tracker.update(window(room([box]), robot), t)
        assert len(tracks) <= 1
        ids |= {tr.id for tr in tracks}
        if tracks and first is None:
            first = t
        if first is not None and t >= first + 0.5:
            (tr,) = tracks
            assert np.allclose(tr.velocity, [0.0, -1.0], atol=0.15), tr.velocity
            assert np.hypot(*(tr.position - box[:2])) <= 0.25
            # its cells are the box's: occupied in this grid, within the box
            grid = window(room([box]), robot)
            assert len(tr.cells) and grid.occupied_mask()[tr.cells[:, 0], tr.cells[:, 1]].all()
            xy = grid.grid_to_world(tr.cells[:, ::-1] + 0.5)
            assert np.all(np.abs(xy - box[:2]) <= box[2] + RES)
    assert first is not None and first <= 1.2  # evidence from 0.5 s (its cells seen free that long), 5 hits
    assert len(ids) == 1


def test_predict_moves_the_centre_and_grows_the_radius():
    tracker = Tracker()
    for k in range(15):
        tracks = tracker.update(window(room([(6.0, 5.0 - 1.0 * k * DT, 0.2)]), (4.0, 3.0)), k * DT)
    (tr,) = tracks
    c0, s0 = tr.predict(0.0)
    c1, s1 = tr.predict(1.0)
    assert np.allclose(c0, tr.position) and np.allclose(c1 - c0, tr.velocity)
    assert 0 < s0 < s1
    with pytest.raises(InputError, match="dt_s"):
        tr.predict(-0.1)


def test_a_static_wall_revealed_by_the_moving_window_is_never_a_track():
    """Three ways a static surface shows up as the robot drives along a wall: first seen (unknown -> occupied), seen
    free for 0.2 s first (a grazing beam), and -- the Jackal's case on the static worlds -- its face creeping out one
    cell along its length, a cell further at each step, as the robot passes."""
    tracker = Tracker()
    data = room()
    data[80:82, 20:200] = OCC  # a wall along y = 4 m
    seen = np.zeros((H, W), bool)
    first_seen = np.full((H, W), np.inf)
    for k in range(60):
        t = k * DT
        x = 1.5 + 0.5 * t  # 0.5 m/s along the wall
        xs, ys = (np.arange(W) + 0.5) * RES, (np.arange(H) + 0.5) * RES
        now_seen = np.hypot(xs[None, :] - x, ys[:, None] - 3.0) <= 2.0
        first_seen = np.where(now_seen & ~seen, t, first_seen)
        seen |= now_seen
        grid_data = np.where(seen, data, UNK).astype(np.int8)
        # the wall's cells read free for their first 0.2 s in view
        fresh = seen & (t - first_seen < 0.2) & (data == OCC)
        grid_data[fresh] = FREE
        # the face creeps out (row 79, seen free for long) a cell behind the robot's x: a wave at 0.5 m/s
        creep = (xs < x - 0.5) & (xs > 1.0)
        grid_data[79, creep] = OCC
        grid = window(grid_data, (x, 3.0))
        assert tracker.update(grid, t) == [], k
    assert not any(tr.confirmed for tr in tracker.tracks)


def test_two_crossing_boxes_keep_their_ids():
    tracker = Tracker()
    seen: dict[str, set[int]] = {"a": set(), "b": set()}
    for k in range(40):
        t = k * DT
        a = (3.5 + 0.8 * t, 3.0, 0.15)  # rightwards
        b = (6.0, 5.0 - 0.8 * t, 0.15)  # downwards: they cross at (6, 3) at t ~ 3 s... b passes first
        tracks = tracker.update(window(room([a, b]), (5.0, 3.0), size=110), t)
        for tr in tracks:
            near = min(("a", a), ("b", b), key=lambda kv: np.hypot(*(tr.position - kv[1][:2])))
            seen[near[0]].add(tr.id)
    assert len(seen["a"]) == 1 and len(seen["b"]) == 1 and seen["a"] != seen["b"], seen


def test_a_track_is_deleted_once_its_box_stops():
    tracker = Tracker()
    for k in range(40):
        y = 5.0 - 1.0 * DT * min(k, 15)  # moves for 1.5 s, then stands
        tracks = tracker.update(window(room([(6.0, y, 0.2)]), (4.0, 3.0)), k * DT)
        if k == 14:
            assert len(tracks) == 1
    assert tracks == [] and tracker.tracks == []


def test_settings_and_inputs_are_checked():
    with pytest.raises(InputError, match="TrackerConfig.min_speed_m_s"):
        TrackerConfig(min_speed_m_s=float("nan"))
    with pytest.raises(InputError, match="TrackerConfig.confirm_hits"):
        TrackerConfig(confirm_hits=1)
    with pytest.raises(InputError, match="TrackerConfig.max_attached"):
        TrackerConfig(max_attached=1.5)
    with pytest.raises(InputError, match="TrackerConfig.grace_s"):
        TrackerConfig(grace_s=2.0, young_s=1.0)
    with pytest.raises(InputError, match="Tracker config"):
        Tracker({"min_cells": 3})  # type: ignore[arg-type]
    tracker = Tracker()
    grid = window(room(), (3.0, 3.0))
    with pytest.raises(InputError, match="grid"):
        tracker.update(grid.data, 0.0)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="now_s"):
        tracker.update(grid, float("inf"))
    tracker.update(grid, 1.0)
    with pytest.raises(InputError, match="reset"):
        tracker.update(grid, 1.0)
    tracker.reset()
    assert tracker.update(grid, 0.0) == []
    rotated = OccupancyGrid(grid.data, RES, (0.0, 0.0, 0.3))
    assert tracker.update(rotated, 0.1) == []  # not the map's rows and columns: no tracks


def test_cv_model_is_the_white_noise_acceleration_model():
    f, q = cv_model(0.5, 2.0)
    x = np.array([1.0, 2.0, 0.4, -0.2])
    assert np.allclose(f @ x, [1.2, 1.9, 0.4, -0.2])
    assert np.allclose(q[0, 0], 4.0 * 0.5**3 / 3) and np.allclose(q[0, 2], 4.0 * 0.5**2 / 2) and q[0, 1] == 0
    assert np.all(np.linalg.eigvalsh(q) >= -1e-12)


def test_track_is_a_plain_dataclass_with_the_agreed_fields():
    names = {f.name for f in dataclasses.fields(Track)}
    assert {"id", "position", "velocity", "covariance", "radius_m", "age_s", "confirmed", "cells"} <= names


def test_a_block_revealed_row_by_row_stays_still_and_is_never_a_track():
    """A free-standing block whose rows turn occupied one every 0.2 s (seen free by grazing beams, then hit as the
    view opens): evidence for over a second, but its centroid creeps at ~0.12 m/s, under `min_speed_m_s`."""
    tracker = Tracker()
    for k in range(40):
        t = k * DT
        data = room()
        rows = min(int(t / 0.2), 8)
        data[60 : 60 + rows, 100:108] = OCC  # rows of a 0.4 m block at (5.2, 3.2)
        assert tracker.update(window(data, (4.0, 2.0)), t) == [], k


def test_a_new_box_far_from_a_coasting_track_gets_its_own_track():
    """Box A moves, then stops (its track coasts); box B, 2 m away, starts moving: gating keeps B's measurements from
    A's track."""
    tracker = Tracker()
    ids: dict[str, set[int]] = {"a": set(), "b": set()}
    for k in range(40):
        t = k * DT
        a = (4.0, 5.0 - 1.0 * min(t, 1.5), 0.2)
        b = (6.0, 5.0 - 1.0 * max(t - 2.0, 0.0), 0.2)
        for tr in tracker.update(window(room([a, b]), (5.0, 3.0), size=110), t):
            near = "a" if np.hypot(*(tr.position - a[:2])) < np.hypot(*(tr.position - b[:2])) else "b"
            ids[near].add(tr.id)
    assert ids["a"] and ids["b"] and not ids["a"] & ids["b"], ids

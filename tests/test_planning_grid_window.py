"""Fitting any costmap to the MPC's fixed planning window: crop, conservative coarsening, resampling."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OCCUPIED, UNKNOWN, OccupancyGrid


def test_a_window_shaped_grid_passes_through_and_a_larger_one_is_cropped_around_the_robot():
    grid = OccupancyGrid(np.zeros((120, 120), np.int8), 0.05, (-3.0, -3.0, 0.0))
    assert grid.fit_window(np.array([2.0, 1.0]), (120, 120), 0.05) is grid
    big = np.zeros((400, 400), np.int8)
    big[210, 230] = OCCUPIED  # the cell covering x = 1.5..1.55, y = 0.5..0.55
    win = OccupancyGrid(big, 0.05, (-10.0, -10.0, 0.0)).fit_window(np.array([1.0, 0.0]), (40, 40), 0.05)
    assert win.shape == (40, 40) and win.resolution == 0.05
    assert win.occupied_mask().sum() == 1
    r, c = np.argwhere(win.occupied_mask())[0]
    x, y = win.grid_to_world(np.array([c + 0.5, r + 0.5]))
    assert 1.5 < x < 1.55 and 0.5 < y < 0.55


def test_coarsening_keeps_every_obstacle_and_unknown_beats_free():
    data = np.zeros((100, 100), np.int8)
    data[37, 52] = OCCUPIED  # one fine cell
    data[80:83, 10:12] = UNKNOWN
    fine = OccupancyGrid(data, 0.01, (0.0, 0.0, 0.0))
    coarse = fine.coarsened(5)
    assert coarse.shape == (20, 20) and coarse.resolution == pytest.approx(0.05)
    assert coarse.data[7, 10] == OCCUPIED and coarse.occupied_mask().sum() == 1
    assert coarse.unknown_mask().sum() == 1 and coarse.data[16, 2] == UNKNOWN
    with pytest.raises(InputError, match="factor"):
        fine.coarsened(0)


def test_a_rotated_or_coarser_grid_is_resampled_and_outside_is_unknown():
    data = np.zeros((20, 20), np.int8)
    data[10, 10] = OCCUPIED
    rotated = OccupancyGrid(data, 0.1, (0.0, 0.0, np.pi / 2))  # x along the map's y axis
    win = rotated.fit_window(np.array([0.0, 0.0]), (80, 80), 0.05)
    assert win.origin == (-2.0, -2.0, 0.0)
    # the occupied cell centre (1.05, 1.05) in the grid frame is at map (-1.05, 1.05)
    assert win.occupied_mask().sum() == 4
    ys, xs = np.nonzero(win.occupied_mask())
    pts = win.grid_to_world(np.stack([xs + 0.5, ys + 0.5], axis=-1))
    assert np.all(np.abs(pts - [-1.05, 1.05]) < 0.1)
    assert win.data[5, 75] == UNKNOWN  # x = 1.75: beyond the rotated grid

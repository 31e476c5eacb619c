"""Obstacle cells held through the grid's flicker (issue 24 item 2).

A wall's corner, or a wall face the drifting odometry has moved off the lattice, fills only part of its cell: some
beams end in that cell (a hit), others pass through it to a wall behind (a miss), and the costmap's Bayes filter flips
it between occupied and free within a few scans (the Jackal in a 0.6 m junction of the dense worlds: a corner cell
went p = 0.85, 0.57, 0.25, 0.08 in four scans). Each time it reads free the wall steps a cell (5 cm) back, the margin
the MPC sees jumps by that much, and a robot turning at 1-2 cm from the corner drove on into it (dense-1020, a
robot-caused collision while `planned` at 5-10 cm/s; its true margin had not changed).

`OccupancyHold` keeps, on the grids' lattice, when each cell was last occupied, and marks occupied again a cell that
was so within `hold_s` and now reads free *next to a cell that is occupied now* (its 8 neighbours): the surface's
partial cell, not a free cell far from any obstacle. A body that moves on trails at most one cell of it, for
`hold_s`; a wall truly gone (a door opened) is back in one `hold_s`. The robot's own footprint is cleared after this
(`nav.clearing`), so a held cell never puts the robot in collision.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning.costmap import LETHAL
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.surfaces import shifted

_NEIGHBOURS = np.ones((3, 3), dtype=bool)


class OccupancyHold:
    """The module docstring's hold over a sequence of grids on one lattice (a new lattice starts afresh)."""

    def __init__(self, hold_s: float) -> None:
        if not (is_real(hold_s) and hold_s >= 0):
            raise InputError(f"OccupancyHold.hold_s: expected seconds >= 0, got {hold_s!r}")
        self.hold_s = float(hold_s)
        self.reset()

    def reset(self) -> None:
        self.last_s: np.ndarray | None = None  # (rows, cols): when each cell was last occupied; -inf never
        self._lattice: tuple[float, float, tuple[int, int]] | None = None  # (resolution, yaw, shape)
        self._index: np.ndarray | None = None  # the window origin's (col, row) on the lattice

    def apply(self, grid: OccupancyGrid, now_s: float) -> OccupancyGrid:
        """`grid` with its held cells occupied (the same object when none is); records its occupied cells at
        `now_s` (seconds, non-decreasing over the calls)."""
        if self.hold_s == 0.0:
            return grid
        occupied = grid.occupied_mask()
        res, (ox, oy, yaw) = float(grid.resolution), grid.origin
        index = np.array([ox / res, oy / res])
        lattice = (res, float(yaw), grid.shape)
        moved = None if self._index is None else index - self._index
        if self.last_s is None or lattice != self._lattice or np.any(np.abs(moved - np.round(moved)) > 1e-6):
            self.last_s = np.full(grid.shape, -math.inf)  # not the same lattice: nothing to hold
        elif np.any(np.round(moved) != 0):
            d_col, d_row = np.round(moved).astype(int)
            self.last_s = shifted(self.last_s, int(d_col), int(d_row), -math.inf)
        self._lattice, self._index = lattice, index
        held = (now_s - self.last_s <= self.hold_s) & grid.free_mask()
        if np.any(held):
            held &= ndimage.binary_dilation(occupied, structure=_NEIGHBOURS)
        self.last_s[occupied] = now_s
        if not np.any(held):
            return grid
        data = grid.data.copy()
        data[held] = LETHAL  # occupied in both semantics a grid can have (`planning.costmap`)
        return grid.with_data(data)

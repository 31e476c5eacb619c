"""A box crossing a free local grid at constant speed: what the node's track tests feed it (the adapter in-process,
the node over DDS). The robot stands at the origin of `odom`, facing +x; the box crosses in front of it along
y = BOX_Y, from x = -RUN_M / 2 to +RUN_M / 2, then starts over (a new obstacle: the tracker gives it a new id)."""

from __future__ import annotations

import numpy as np

RESOLUTION_M = 0.05
CELLS = 120  # 6 m x 6 m centred on the robot, as the node's default planning window
ORIGIN_M = -3.0
BOX_Y_M = 1.5  # beside the robot's way to GOAL, so the planner plans normally
BOX_M = 0.4
SPEED_M_S = 1.0
RUN_M = 5.0
GOAL = (2.5, 0.0, 0.0)


def box_x(t_s: float) -> float:
    """The box's centre x (m) at `t_s` seconds after it first appeared."""
    return -RUN_M / 2 + (SPEED_M_S * t_s) % RUN_M


def box_cells(t_s: float) -> np.ndarray:
    """(CELLS, CELLS) int8 occupancy, row = y, column = x: free, with the box at `box_x(t_s)` occupied."""
    data = np.zeros((CELLS, CELLS), np.int8)
    half = BOX_M / 2
    c0 = int(round((box_x(t_s) - half - ORIGIN_M) / RESOLUTION_M))
    r0 = int(round((BOX_Y_M - half - ORIGIN_M) / RESOLUTION_M))
    n = int(round(BOX_M / RESOLUTION_M))
    data[r0 : r0 + n, max(c0, 0) : max(c0 + n, 0)] = 100
    return data

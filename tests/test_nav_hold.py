"""The occupancy hold (nav/hold.py): a wall's partial cell that flickers free stays occupied for `hold_s`; a cell
away from any obstacle, a new lattice and the robot's own footprint are never held."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.hold import OccupancyHold
from mnemo_mpc.planning.grid import OccupancyGrid

RES = 0.05


def wall_grid(origin=(0.0, 0.0), corner: bool = True) -> OccupancyGrid:
    """40 x 40 free cells, a wall along row 20 from column 10 on; `corner`: its partial cell (20, 9) occupied."""
    data = np.zeros((40, 40), np.int8)
    data[20, 10:] = 100
    if corner:
        data[20, 9] = 90
    return OccupancyGrid(data, resolution=RES, origin=(origin[0], origin[1], 0.0))


def test_a_partial_cell_that_reads_free_is_held_for_hold_s_then_let_go():
    hold = OccupancyHold(0.5)
    assert hold.apply(wall_grid(), 0.0).occupied_mask()[20, 9]
    flicker = wall_grid(corner=False)
    assert hold.apply(flicker, 0.2).occupied_mask()[20, 9]  # read free 0.2 s after: held
    assert hold.apply(flicker, 0.5).occupied_mask()[20, 9]
    out = hold.apply(flicker, 0.55)  # past hold_s: the grid as given
    assert out is flicker and not out.occupied_mask()[20, 9]


def test_a_cell_with_no_occupied_neighbour_now_is_not_held():
    """A body that moved on: its old cells are free and far from anything occupied now."""
    hold = OccupancyHold(0.5)
    box = np.zeros((40, 40), np.int8)
    box[5:8, 5:8] = 100
    hold.apply(OccupancyGrid(box, resolution=RES), 0.0)
    moved = np.zeros((40, 40), np.int8)
    moved[5:8, 8:11] = 100  # 3 cells on: columns 5-6 have no occupied neighbour, column 7 has
    out = hold.apply(OccupancyGrid(moved, resolution=RES), 0.1).occupied_mask()
    assert not out[5:8, 5:7].any() and out[5:8, 7].all()


def test_the_held_cell_follows_the_lattice_when_the_window_moves():
    hold = OccupancyHold(0.5)
    hold.apply(wall_grid(), 0.0)
    # The window moved 3 cells +x and 2 +y: the corner (world cell column 9, row 20) is now at (18, 6)
    data = np.zeros((40, 40), np.int8)
    data[18, 7:] = 100
    out = hold.apply(OccupancyGrid(data, resolution=RES, origin=(3 * RES, 2 * RES, 0.0)), 0.1).occupied_mask()
    assert out[18, 6] and out.sum() == data.astype(bool).sum() + 1


def test_a_grid_off_the_lattice_starts_afresh():
    hold = OccupancyHold(0.5)
    hold.apply(wall_grid(), 0.0)
    half = wall_grid(origin=(0.5 * RES, 0.0), corner=False)
    assert hold.apply(half, 0.1) is half


def test_hold_zero_is_the_grid_as_given_and_bad_values_are_refused():
    grid = wall_grid(corner=False)
    assert OccupancyHold(0.0).apply(grid, 0.0) is grid
    for bad in (-0.1, float("nan"), "0.5"):
        with pytest.raises(InputError, match="hold_s"):
            OccupancyHold(bad)
        with pytest.raises(InputError, match="occupancy_hold_s"):
            ControllerConfig(occupancy_hold_s=bad)


def test_the_controller_plans_on_the_held_cell_and_never_holds_its_own_footprint():
    """The corner's cell flickers free: the field the MPC plans on has it. A cell occupied a step ago that the body
    now covers (next to a wall cell just outside it) is cleared: the hold comes before the footprint's clearing."""
    controller = Controller(config=ControllerConfig(plan_own_path=False))
    goal = np.array([1.8, 0.5, 0.0])
    data = np.zeros((40, 40), np.int8)
    data[20, 10:] = 100
    data[20, 9] = 90
    data[12, 11:13] = 90  # (12, 11) clear of the body at the first pose, under it at the second; (12, 12) never
    controller.step(OccupancyGrid(data, resolution=RES), np.array([0.2, 0.62, 0.0]), np.zeros(2), goal)
    data[20, 9] = data[12, 11] = 0
    out = controller.step(OccupancyGrid(data, resolution=RES), np.array([0.42, 0.62, 0.0]), np.zeros(2), goal)
    assert out.field.obstacles[20, 9]  # held
    assert out.field.obstacles[12, 12] and not out.field.obstacles[12, 11]  # the body's cell: cleared after the hold

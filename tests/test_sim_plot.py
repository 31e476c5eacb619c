"""`mnemo-mpc demo`'s trajectory.png (`mnemo_mpc.sim.plot`): the map with its legend outside it, and the time panels
(v and ω commanded vs measured, clearance, solve time with the control period) from the episode's per-step stats."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.episode import EpisodeResult
from mnemo_mpc.sim.plot import TIME_LABELS, episode_figure, map_clearance, plot_episode
from mnemo_mpc.sim.worlds import World

pytest.importorskip("matplotlib")


def fake_result(steps: int = 40, clearance: bool = True) -> EpisodeResult:
    """A straight drive past a pillar in a 4 x 3 m room, with the per-step stats `run_episode` records."""
    data = np.zeros((60, 80), np.int8)
    data[:3, :] = data[-3:, :] = data[:, :3] = data[:, -3:] = 100
    data[22:38, 36:44] = 100
    world = World(OccupancyGrid(data, 0.05), np.array([0.7, 0.8, 0.0]), np.array([3.3, 0.8, 0.0]), seed=1, kind="t")
    t = np.arange(steps) * 0.1
    x = np.linspace(0.7, 3.3, steps + 1)
    driven = np.column_stack([x, np.full(steps + 1, 0.8), np.zeros(steps + 1)])
    rows = []
    for k in range(steps):
        row = {
            "step": k,
            "t": float(t[k]),
            "pose": driven[k].tolist(),
            "velocity": [0.3 * min(1.0, k / 5), 0.05 * np.sin(k / 4)],
            "command": [0.3 * min(1.0, (k + 1) / 5), 0.06 * np.sin(k / 4)],
            "status": "planned",
            "flags": [],
            "iterations": 2,
            "solve_time_s": 0.002 + 0.001 * (k % 3),
            "step_time_s": 0.008,
        }
        if clearance:
            row["clearance_m"] = float(abs(driven[k, 0] - 2.0) + 0.3)
        rows.append(row)
    metrics = {
        "world": world.name,
        "outcome": "success",
        "time_s": float(t[-1]),
        "path_length_m": 2.6,
        "iterations": {"p50": 2},
        "period_ms": 100.0,
    }
    plans = [(k, driven[k : k + 5]) for k in range(0, steps - 5, 10)]
    return EpisodeResult(metrics, rows, driven, driven[:, :2], plans, world)


def test_the_figure_has_the_map_and_the_four_time_panels_with_the_legend_off_the_map(tmp_path):
    fig = episode_figure(fake_result())
    try:
        ax_map, *panels = fig.axes
        assert len(fig.axes) == 5
        assert (ax_map.get_xlabel(), ax_map.get_ylabel()) == ("x [m]", "y [m]")
        assert [a.get_ylabel() for a in panels] == list(TIME_LABELS)
        assert panels[-1].get_xlabel() == "simulated time [s]"
        labels = [[t.get_text() for t in a.get_legend().get_texts()] for a in panels]
        assert labels[0][:2] == ["commanded", "measured (odometry)"] and labels[1][:2] == labels[0][:2]
        assert labels[2][0].startswith("simulator: footprint to nearest obstacle")
        assert "SQP solve" in labels[3] and "control period 100 ms" in labels[3]
        period = [ln for ln in panels[3].get_lines() if ln.get_label().startswith("control period")][0]
        assert set(period.get_ydata()) == {100.0}
        # the map's legend lies outside the map's axes
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend = ax_map.get_legend().get_window_extent(renderer)
        assert not legend.overlaps(ax_map.get_window_extent(renderer))
        assert legend.y1 < ax_map.get_window_extent(renderer).y0
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    png = plot_episode(fake_result(), tmp_path / "trajectory.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000


def test_without_recorded_clearance_the_panel_estimates_it_from_the_map():
    result = fake_result(clearance=False)
    fig = episode_figure(result)
    try:
        texts = [t.get_text() for t in fig.axes[3].get_legend().get_texts()]
        assert texts[0].startswith("static map estimate")
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    robot = RobotModel()
    grid = result.world.grid
    # at the pillar (x 1.8..2.2, y 1.1..1.9): 1.1 - 0.8 - radius 0.2 = 0.1 m; far from it: the room's walls
    c = map_clearance(grid, np.array([[2.0, 0.8, 0.0], [0.7, 1.5, 0.0]]), robot)
    assert c[0] == pytest.approx(0.1, abs=0.05) and c[1] == pytest.approx(0.7 - 0.15 - 0.2, abs=0.05)

"""Figures of a closed-loop episode (`mnemo-mpc demo`'s `trajectory.png`): on the left the map, the global path, the
driven path with footprints and planned horizons, its legend below the map (never over it); on the right, against
simulated time, four panels from the per-step stats (`EpisodeResult.steps`): v and ω commanded vs measured, the
minimum clearance, and the solve time per step with the control period.

Clearance: a step's `clearance_m` where the run recorded it (`mnemo-mpc demo` does: the simulator's exact
footprint-to-obstacle distance, moving obstacles included, `mnemo_mpc.sim.episode.CLEARANCE_CAP_M` at most); else
estimated from the static map (the footprint outline's distance to the nearest occupied cell, same cap).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.episode import CLEARANCE_CAP_M, EpisodeResult

TIME_LABELS = ("v [m/s]", "ω [rad/s]", "min clearance [m]", "solve time [ms]")


def map_clearance(grid: Any, poses: np.ndarray, robot: RobotModel, cap_m: float = CLEARANCE_CAP_M) -> np.ndarray:
    """Per pose (x, y, yaw) the footprint outline's distance to the nearest occupied cell of `grid` [m], at most
    `cap_m`: an estimate (cell-centre distances less half a cell; moving obstacles unseen) for runs that recorded
    no clearance."""
    from scipy.ndimage import distance_transform_edt

    occupied = grid.occupied_mask()
    if not occupied.any():
        return np.full(len(poses), cap_m)
    dist = distance_transform_edt(~occupied) * grid.resolution - 0.5 * grid.resolution
    out = np.empty(len(poses))
    for k, pose in enumerate(np.asarray(poses, dtype=float)):
        cells = grid.world_to_cell(robot.shape.outline(pose))
        inside = grid.in_bounds(cells)
        d = dist[cells[inside, 0], cells[inside, 1]] if inside.any() else np.array([cap_m])
        out[k] = min(float(d.min()), cap_m)
    return out


def episode_figure(
    result: EpisodeResult,
    robot: RobotModel | None = None,
    footprint_every: int = 15,
    max_horizons: int = 8,
) -> Any:
    """The figure of the module docstring (a matplotlib Figure; `plot_episode` writes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon
    from matplotlib.transforms import offset_copy

    robot = robot or RobotModel()
    world = result.world
    grid = world.grid
    h, w = grid.shape
    ox, oy, _ = grid.origin
    res = grid.resolution
    img = np.full(grid.shape, 0.5)
    img[grid.free_mask()] = 1.0
    img[grid.occupied_mask()] = 0.0

    fig = plt.figure(figsize=(15, 8), dpi=100)
    gs = fig.add_gridspec(4, 2, width_ratios=(1.0, 1.05), hspace=0.3, wspace=0.15)
    ax = fig.add_subplot(gs[:, 0])
    ax_v = fig.add_subplot(gs[0, 1])
    panels = [ax_v] + [fig.add_subplot(gs[i, 1], sharex=ax_v) for i in range(1, 4)]
    ax_w, ax_c, ax_s = panels[1:]

    # --- the map ---
    ax.imshow(img, cmap="gray", vmin=0, vmax=1, origin="lower", extent=(ox, ox + w * res, oy, oy + h * res))
    gp = result.global_path
    ax.plot(gp[:, 0], gp[:, 1], "--", color="tab:blue", lw=1.2, label="global path")
    horizons = result.plans
    if len(horizons) > max_horizons:
        idx = np.linspace(0, len(horizons) - 1, max_horizons).round().astype(int)
        horizons = [horizons[i] for i in idx]
    for j, (_, states) in enumerate(horizons):
        ax.plot(
            states[:, 0],
            states[:, 1],
            "-",
            color="tab:orange",
            lw=1.6,
            alpha=0.9,
            zorder=4,
            label="MPC horizon (every ~N steps)" if j == 0 else None,
        )
        ax.plot(states[0, 0], states[0, 1], "o", color="tab:orange", ms=3, zorder=5)
        ax.plot(states[-1, 0], states[-1, 1], ">", color="tab:orange", ms=4, zorder=5)
    d = result.driven
    ax.plot(d[:, 0], d[:, 1], "-", color="tab:green", lw=1.5, zorder=3, label="driven")
    # The footprint's outline (a polygon, or the disc) at every `footprint_every`-th pose and at the last one.
    shape = robot.shape
    for k in range(0, len(d), max(footprint_every, 1)):
        ax.add_patch(Polygon(shape.outline(d[k]), closed=True, fill=False, color="tab:green", lw=0.6, alpha=0.7))
    ax.add_patch(Polygon(shape.outline(d[-1]), closed=True, fill=False, color="tab:red", lw=1.2))
    s, g = world.start, world.goal
    ax.plot(s[0], s[1], "o", color="tab:green", ms=8, label="start")
    ax.plot(g[0], g[1], "*", color="tab:red", ms=14, label="goal")
    for pose, color in ((s, "tab:green"), (g, "tab:red")):
        ax.arrow(pose[0], pose[1], 0.4 * np.cos(pose[2]), 0.4 * np.sin(pose[2]), color=color, width=0.02)
    m = result.metrics
    iters = (m.get("iterations") or {}).get("p50")
    fig.suptitle(
        f"{m['world']}: {m['outcome']} in {m['time_s']:.1f} s, driven {m['path_length_m']:.1f} m, "
        f"SQP iters p50 {iters}",
        fontsize=11,
    )
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_aspect("equal")
    # Below the map, clear of its tick labels: the legend never covers the map.
    below = offset_copy(ax.transAxes, fig=fig, y=-34, units="points")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=3, fontsize=8, frameon=False)

    # --- time panels ---
    steps = result.steps
    t = np.array([st["t"] for st in steps], dtype=float)
    cmd = np.array([st["command"] for st in steps], dtype=float).reshape(-1, 2)
    vel = np.array([st["velocity"] for st in steps], dtype=float).reshape(-1, 2)
    for a, i in ((ax_v, 0), (ax_w, 1)):
        a.step(t, cmd[:, i], where="post", color="tab:orange", lw=1.3, label="commanded")
        a.plot(t, vel[:, i], color="tab:green", lw=1.1, label="measured (odometry)")
    limits = ((robot.v_min, robot.v_max), (-robot.w_max, robot.w_max))
    for a, pair in zip((ax_v, ax_w), limits, strict=True):
        for j, lim in enumerate(pair):
            a.axhline(lim, color="0.6", ls=":", lw=0.9, label="limits" if j == 0 else None)

    recorded = steps and all("clearance_m" in st for st in steps)
    if recorded:
        clearance = np.array([st["clearance_m"] for st in steps], dtype=float)
        how = f"simulator: footprint to nearest obstacle (≤ {CLEARANCE_CAP_M:g} m)"
    else:
        poses = np.array([st["pose"] for st in steps], dtype=float).reshape(-1, 3)
        clearance = map_clearance(grid, poses, robot) if len(poses) else np.zeros(0)
        how = f"static map estimate: footprint outline (≤ {CLEARANCE_CAP_M:g} m)"
    ax_c.plot(t, clearance, color="tab:blue", lw=1.2, label=how)
    if clearance.size:
        k = int(np.argmin(clearance))
        ax_c.plot(t[k], clearance[k], "v", color="tab:red", ms=6, label=f"minimum {clearance[k]:.3f} m")
    ax_c.axhline(0.0, color="tab:red", lw=0.8)
    margin = getattr(robot, "safety_margin", None)
    if margin:
        ax_c.axhline(margin, color="0.6", ls=":", lw=0.9, label=f"safety margin {margin:g} m")

    solve = np.array([st["solve_time_s"] for st in steps], dtype=float) * 1e3
    step_ms = np.array([st["step_time_s"] for st in steps], dtype=float) * 1e3
    solved = solve > 0
    ax_s.plot(t[solved], solve[solved], ".", ms=3, color="tab:purple", label="SQP solve")
    ax_s.plot(t, step_ms, "-", lw=0.8, color="0.5", alpha=0.8, label="whole controller step")
    period = m.get("period_ms")
    if period:
        ax_s.axhline(period, color="tab:red", ls="--", lw=1.0, label=f"control period {period:g} ms")
    if solved.any() or period:
        ax_s.set_yscale("log")  # sub-millisecond solves and the period both readable
    ax_s.set_xlabel("simulated time [s]")
    for a, label in zip(panels, TIME_LABELS, strict=True):
        a.set_ylabel(label)
        a.grid(True, which="both", alpha=0.3)
        a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    for a in panels[:-1]:
        a.tick_params(labelbottom=False)
    return fig


def plot_episode(
    result: EpisodeResult,
    path: str | os.PathLike[str],
    robot: RobotModel | None = None,
    footprint_every: int = 15,
    max_horizons: int = 8,
) -> Path:
    """Write `trajectory.png`-style figure of `result` to `path` (PNG, written atomically)."""
    import matplotlib.pyplot as plt

    from mnemo_mpc.atomic import atomic_write_bytes

    fig = episode_figure(result, robot, footprint_every, max_horizons)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())

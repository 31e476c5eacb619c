"""What `mnemo-mpc replay` keeps of a replay for its figure (`ReplayTrace`), and the figure (`plot_replay`).

The figure: on the left the map -- the recorded grids painted into one image (`GridMosaic`: each kept grid overwrites
the cells it knows), the recorded odometry's path, the goal, the global path and a few of the replayed local plans;
on the right, against bag time, the linear and angular velocity (the replayed commands, the bag's recorded commands
when it has them, the odometry's measured velocity), the solve time per tick with the control period, and the tick
statuses. numpy only at import; matplotlib inside `plot_replay`.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Local plans drawn on the map (evenly spread over the replay).
MAX_PLANS_DRAWN = 10
# A plan is kept every this many ticks (thinned further when there are too many: bounded memory on a long bag).
PLAN_EVERY_TICKS = 10
MAX_PLANS_KEPT = 200


class GridMosaic:
    """The recorded (rolling-window) grids as one image: a grid kept every `every_s` seconds of bag time, at most
    `max_kept` (beyond, every other one is dropped and the interval doubles), painted in time order."""

    def __init__(self, every_s: float = 0.5, max_kept: int = 200) -> None:
        self.every_s, self.max_kept = every_s, max_kept
        self.grids: list[Any] = []  # OccupancyGrid
        self._last_t: float | None = None

    def add(self, grid: Any, t_s: float) -> None:
        if self._last_t is not None and t_s - self._last_t < self.every_s:
            self.grids[-1] = grid  # the newest view of this interval
            return
        self.grids.append(grid)
        self._last_t = t_s
        if len(self.grids) > self.max_kept:
            self.grids = self.grids[::2]
            self.every_s *= 2

    def image(self, max_cells: int = 1200) -> tuple[np.ndarray, tuple[float, float, float, float]] | None:
        """(H, W) image (1 free, 0 occupied, 0.5 unknown or never seen) and its extent (x0, x1, y0, y1) in metres, or
        None without grids. The cell size is the finest grid's, coarser when the area is wider than `max_cells`."""
        if not self.grids:
            return None
        corners = np.concatenate(
            [
                g.grid_to_world(np.array([[0, 0], [g.shape[1], 0], [0, g.shape[0]], [g.shape[1], g.shape[0]]]))
                for g in self.grids
            ]
        )
        (x0, y0), (x1, y1) = corners.min(axis=0), corners.max(axis=0)
        res = max(min(g.resolution for g in self.grids), max(x1 - x0, y1 - y0) / max_cells)
        w, h = max(1, int(np.ceil((x1 - x0) / res))), max(1, int(np.ceil((y1 - y0) / res)))
        xs, ys = x0 + (np.arange(w) + 0.5) * res, y0 + (np.arange(h) + 0.5) * res
        img = np.full((h, w), 0.5)
        for g in self.grids:
            # only the canvas rows and columns this grid's bounding box covers
            gc = g.grid_to_world(np.array([[0, 0], [g.shape[1], 0], [0, g.shape[0]], [g.shape[1], g.shape[0]]]))
            c0, c1 = np.searchsorted(xs, gc[:, 0].min()), np.searchsorted(xs, gc[:, 0].max())
            r0, r1 = np.searchsorted(ys, gc[:, 1].min()), np.searchsorted(ys, gc[:, 1].max())
            if c1 <= c0 or r1 <= r0:
                continue
            X, Y = np.meshgrid(xs[c0:c1], ys[r0:r1])
            cells = g.world_to_cell(np.stack([X, Y], axis=-1))
            inside = g.in_bounds(cells)
            rows, cols = np.clip(cells[..., 0], 0, g.shape[0] - 1), np.clip(cells[..., 1], 0, g.shape[1] - 1)
            cls = np.where(g.occupied_mask()[rows, cols], 0.0, np.where(g.free_mask()[rows, cols], 1.0, np.nan))
            patch = img[r0:r1, c0:c1]
            known = inside & np.isfinite(cls)
            patch[known] = cls[known]
        return img, (float(x0), float(x0 + w * res), float(y0), float(y0 + h * res))


@dataclass
class ReplayTrace:
    """Per tick and per message what the figure draws; times in seconds from the bag's first message."""

    period_s: float = 0.0
    tick_t: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    command: list[tuple[float, float]] = field(default_factory=list)  # (nan, nan): no command that tick
    solve_ms: list[float] = field(default_factory=list)  # nan: nothing solved that tick
    plans: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (t, states (N+1, 3))
    odom_t: list[float] = field(default_factory=list)
    pose: list[tuple[float, float, float]] = field(default_factory=list)
    velocity: list[tuple[float, float]] = field(default_factory=list)
    recorded_t: list[float] = field(default_factory=list)
    recorded: list[tuple[float, float]] = field(default_factory=list)
    goal: np.ndarray | None = None
    global_path: np.ndarray | None = None
    mosaic: GridMosaic = field(default_factory=GridMosaic)
    _plan_every: int = PLAN_EVERY_TICKS

    def add_tick(self, t: float, status: str, command: Any, solve_ms: float | None, states: Any) -> None:
        k = len(self.tick_t)
        self.tick_t.append(t)
        self.status.append(status)
        self.command.append((float("nan"),) * 2 if command is None else tuple(float(c) for c in command[:2]))
        self.solve_ms.append(float("nan") if solve_ms is None else float(solve_ms))
        if states is not None and k % self._plan_every == 0:
            self.plans.append((t, np.asarray(states, dtype=float)[:, :3].copy()))
            if len(self.plans) > MAX_PLANS_KEPT:
                self.plans = self.plans[::2]
                self._plan_every *= 2

    def add_recorded(self, t: float, v: float, w: float) -> None:
        self.recorded_t.append(t)
        self.recorded.append((v, w))

    def add_input(self, kind: str, t: float, msg: Any) -> None:
        """A message the planner accepted (`kind`: a `mnemo_mpc.ros.replay.INPUT_TYPES` key)."""
        from mnemo_mpc.ros import convert

        if kind == "odom_topic":
            pose, vel = convert.state_from_odometry(msg)
            self.odom_t.append(t)
            self.pose.append(tuple(float(p) for p in pose))
            self.velocity.append((float(vel[0]), float(vel[1])))
        elif kind == "grid_topic":
            self.mosaic.add(convert.grid_from_msg(msg), t)
        elif kind == "goal_topic":
            self.goal = convert.goal_from_pose_stamped(msg)
        elif kind == "path_topic":
            path = convert.path_from_msg(msg)
            self.global_path = path if len(path) >= 2 else None


def plot_replay(trace: ReplayTrace, path: str | os.PathLike[str], title: str = "") -> Path:
    """Write the figure of the module docstring to `path` (PNG, atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import offset_copy

    from mnemo_mpc.atomic import atomic_write_bytes

    fig = plt.figure(figsize=(14, 7.5), dpi=100)
    gs = fig.add_gridspec(4, 2, width_ratios=(1.0, 1.15), hspace=0.35, wspace=0.18)
    ax_map = fig.add_subplot(gs[:, 0])
    ax_v = fig.add_subplot(gs[0, 1])
    ax_w = fig.add_subplot(gs[1, 1], sharex=ax_v)
    ax_s = fig.add_subplot(gs[2, 1], sharex=ax_v)
    ax_st = fig.add_subplot(gs[3, 1], sharex=ax_v)

    # --- the map ---
    mosaic = trace.mosaic.image()
    if mosaic is not None:
        img, extent = mosaic
        ax_map.imshow(img, cmap="gray", vmin=0, vmax=1, origin="lower", extent=extent, interpolation="nearest")
    if trace.global_path is not None:
        gp = trace.global_path
        ax_map.plot(gp[:, 0], gp[:, 1], "--", color="tab:blue", lw=1.2, label="global path (recorded)")
    if trace.pose:
        p = np.asarray(trace.pose)
        ax_map.plot(p[:, 0], p[:, 1], "-", color="tab:green", lw=1.6, label="odometry (recorded)")
        ax_map.plot(p[0, 0], p[0, 1], "o", color="tab:green", ms=7, label="start")
    plans = trace.plans
    if len(plans) > MAX_PLANS_DRAWN:
        plans = [plans[i] for i in np.linspace(0, len(plans) - 1, MAX_PLANS_DRAWN).round().astype(int)]
    for j, (_, states) in enumerate(plans):
        ax_map.plot(
            states[:, 0],
            states[:, 1],
            "-",
            color="tab:orange",
            lw=1.4,
            zorder=4,
            label="local plan (replayed)" if j == 0 else None,
        )
        ax_map.plot(states[-1, 0], states[-1, 1], ">", color="tab:orange", ms=4, zorder=5)
    if trace.goal is not None:
        ax_map.plot(trace.goal[0], trace.goal[1], "*", color="tab:red", ms=14, label="goal")
    ax_map.set_xlabel("x [m]")
    ax_map.set_ylabel("y [m]")
    ax_map.set_aspect("equal")
    ax_map.set_title("recorded grids, odometry and replayed local plans", fontsize=10)
    if ax_map.get_legend_handles_labels()[0]:  # below the map, clear of its tick labels: never over the map
        below = offset_copy(ax_map.transAxes, fig=fig, y=-34, units="points")
        ax_map.legend(
            loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=3, fontsize=8, frameon=False
        )

    # --- time panels ---
    tt = np.asarray(trace.tick_t)
    cmd = np.asarray(trace.command, dtype=float).reshape(-1, 2)
    rec_t, rec = np.asarray(trace.recorded_t), np.asarray(trace.recorded, dtype=float).reshape(-1, 2)
    od_t, vel = np.asarray(trace.odom_t), np.asarray(trace.velocity, dtype=float).reshape(-1, 2)
    for ax, i, unit, name in ((ax_v, 0, "m/s", "v"), (ax_w, 1, "rad/s", "ω")):
        if rec_t.size:
            ax.step(rec_t, rec[:, i], where="post", color="0.45", lw=2.4, alpha=0.6, label="recorded cmd_vel")
        ax.step(tt, cmd[:, i], where="post", color="tab:orange", lw=1.2, label="replayed cmd_vel")
        if od_t.size:
            ax.plot(od_t, vel[:, i], color="tab:green", lw=1.0, label="odometry (measured)")
        ax.set_ylabel(f"{name} [{unit}]")
        ax.grid(True, alpha=0.3)
    ax_v.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    solved = np.isfinite(np.asarray(trace.solve_ms, dtype=float))
    ax_s.plot(tt[solved], np.asarray(trace.solve_ms)[solved], ".", ms=3, color="tab:purple", label="SQP solve")
    if trace.period_s > 0:
        ax_s.axhline(trace.period_s * 1e3, color="tab:red", ls="--", lw=1, label="control period")
    ax_s.set_ylabel("solve [ms]")
    ax_s.set_yscale("log")  # sub-millisecond solves and the period line both readable
    ax_s.grid(True, which="both", alpha=0.3)
    ax_s.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    names = list(dict.fromkeys(trace.status))
    if names:
        ax_st.plot(tt, [names.index(s) for s in trace.status], "|", ms=8, color="tab:blue")
    ax_st.set_yticks(range(len(names)), names, fontsize=7)
    ax_st.set_ylim(-0.5, max(len(names), 1) - 0.5)
    ax_st.set_ylabel("status")
    ax_st.set_xlabel("bag time [s]")
    ax_st.grid(True, axis="x", alpha=0.3)
    for ax in (ax_v, ax_w, ax_s):
        ax.tick_params(labelbottom=False)
    if title:
        fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


__all__ = ["GridMosaic", "ReplayTrace", "plot_replay"]

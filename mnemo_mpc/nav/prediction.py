"""Tracked moving obstacles in the MPC (issue 28: predicted, not only avoided).

The tracker (`nav.tracking`) turns the grids into tracks with a velocity. For each control step this module

* takes a tracked obstacle's cells out of the grid the MPC plans on (`without_tracks`): the static field would
  otherwise hold the body where it *is* for the whole horizon, and the robot could neither pass behind it nor follow
  it through a door;
* gives the MPC each of the `slots` nearest tracks as centres predicted at the knots on the constant-velocity model,
  o_j(t_k) = p_j + v_j (lead + k dt), with a radius grown by the estimate's own uncertainty,
  R_j(t_k) = r_j + min(sigmas * sigma_j(t_k), max_growth_m), sigma_j(t) the 1-sigma radius of the position
  covariance F(t) P_j F(t)^T (the estimate carried forward, without the process noise of future manoeuvres, which
  grows as t^3/2 and would fill the horizon: a person who turns is met by the next step's measurement);
* stops the robot driving towards a moving obstacle that is already close (`approach_guard`), as Nav2's collision
  monitor does in its stop zone: whatever the plan, the last command may turn but not close in;
* marks where the tracks are for the reachable-set detector (`nav.moving_obstacles`) to leave alone (`near_tracks`),
  so it keeps guarding what is moving but not tracked yet -- the first half-second of a new obstacle.

`lead` is the time from the grid's measurement to the start state the MPC plans from (the observation's age plus the
command latency, `nav.actuation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.nav.tracking import Track, TrackerConfig
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MAX_MOVING_OBSTACLES, PredictedObstacles
from mnemo_mpc.planning.robot import RobotModel

FREE = 0


@dataclass(frozen=True)
class PredictionConfig:
    """Tracking and prediction settings (module docstring); lengths in metres."""

    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    slots: int = 3  # tracks the MPC constrains against (MPCConfig.moving_obstacles): the nearest this many
    sigmas: float = 2.0
    max_growth_m: float = 0.3
    # Cells this far around a track (beyond its radius) are the tracker's: the detector takes no evidence there.
    track_guard_m: float = 0.3
    # A moving obstacle (tracked or detected) this near the footprint's outer circle may not be driven towards.
    stop_zone_m: float = 0.25

    def __post_init__(self) -> None:
        if not isinstance(self.tracker, TrackerConfig):
            raise InputError(f"PredictionConfig.tracker: expected a TrackerConfig, got {type(self.tracker).__name__}")
        s = self.slots
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_MOVING_OBSTACLES:
            raise InputError(f"PredictionConfig.slots: expected an integer in [1, {MAX_MOVING_OBSTACLES}], got {s!r}")
        for name in ("sigmas", "max_growth_m", "track_guard_m", "stop_zone_m"):
            value = getattr(self, name)
            if not (is_real(value) and value >= 0):
                raise InputError(f"PredictionConfig.{name}: expected a finite number >= 0, got {value!r}")


def position_sigma(track: Track, t: np.ndarray) -> np.ndarray:
    """1-sigma radius (m) of the position estimate carried forward by t (s), per t: sqrt of the largest eigenvalue
    of the position block of F(t) P F(t)^T = P_pp + t (P_pv + P_vp) + t^2 P_vv."""
    p = np.asarray(track.covariance, dtype=float)
    t = np.asarray(t, dtype=float)[:, None, None]
    block = p[None, :2, :2] + t * (p[None, :2, 2:] + p[None, 2:, :2]) + t * t * p[None, 2:, 2:]
    return np.sqrt(np.maximum(np.linalg.eigvalsh(block)[:, -1], 0.0))


def predicted_obstacles(
    tracks: list[Track],
    pose: np.ndarray,
    robot: RobotModel,
    n: int,
    dt: float,
    lead_s: float,
    config: PredictionConfig,
) -> PredictedObstacles | None:
    """The `config.slots` tracks that come nearest the robot's reach over the horizon (their predicted centres'
    least distance to `pose`), as `PredictedObstacles` for knots 1..N; None when no track can come within reach:
    the horizon's own length at top speed plus the footprint and the obstacle's radius."""
    if not tracks:
        return None
    t = lead_s + dt * np.arange(1, n + 1)
    reach = robot.v_max * dt * n + robot.radius + robot.safety_margin
    chosen: list[tuple[float, np.ndarray, np.ndarray]] = []
    for track in tracks:
        centres = np.asarray(track.position, dtype=float) + t[:, None] * np.asarray(track.velocity, dtype=float)
        growth = np.minimum(config.sigmas * position_sigma(track, t), config.max_growth_m)
        radii = track.radius_m + growth
        nearest = float(np.min(np.hypot(*(centres - np.asarray(pose[:2], dtype=float)).T) - radii))
        if nearest <= reach:
            chosen.append((nearest, centres, radii))
    if not chosen:
        return None
    chosen.sort(key=lambda c: c[0])
    chosen = chosen[: config.slots]
    return PredictedObstacles(np.stack([c for _, c, _ in chosen], axis=1), np.stack([r for _, _, r in chosen], axis=1))


def _cells_mask(grid: OccupancyGrid, cells: list[np.ndarray]) -> np.ndarray:
    mask = np.zeros(grid.shape, bool)
    for c in cells:
        c = np.asarray(c, dtype=np.int64).reshape(-1, 2)
        c = c[grid.in_bounds(c)] if len(c) else c
        mask[tuple(c.T)] = True
    return mask


def without_tracks(grid: OccupancyGrid, tracks: list[Track]) -> OccupancyGrid:
    """`grid` with the tracks' cells free: the MPC meets them as predicted obstacles instead."""
    mask = _cells_mask(grid, [t.cells for t in tracks])
    if not mask.any():
        return grid
    data = grid.data.copy()
    data[mask] = FREE
    return grid.with_data(data)


def near_tracks(grid: OccupancyGrid, tracks: list[Track], guard_m: float) -> np.ndarray | None:
    """Cells of `grid` within each track's radius + `guard_m` of its centre, or of its cells; None without tracks."""
    if not tracks:
        return None
    seeds = _cells_mask(grid, [t.cells for t in tracks])
    cols, rows = np.meshgrid(np.arange(grid.shape[1]), np.arange(grid.shape[0]))
    centres = grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1))
    near = np.zeros(grid.shape, bool)
    for t in tracks:
        near |= np.hypot(*(centres - np.asarray(t.position, dtype=float)).transpose(2, 0, 1)) <= t.radius_m + guard_m
    if seeds.any():
        near |= ndimage.distance_transform_edt(~seeds) * grid.resolution <= guard_m
    return near


def approach_guard(
    command: np.ndarray, pose: np.ndarray, outer_radius: float, tracks: list[Track], points: np.ndarray, zone_m: float
) -> tuple[np.ndarray, bool]:
    """`command` (v, w) with v set to 0 when it drives the robot at `pose` towards a moving obstacle within `zone_m`
    of its outer circle: a track (its centre and radius) or a detected moving cell (`points`, (P, 2)). The collision
    monitor's stop zone (Nav2 `collision_monitor`, action "stop", moving obstacles only): a box that comes at a robot
    standing or turning runs into it; a robot that keeps creeping at it drives into it -- the robot's fault (generic
    robot, corridor-1053 and 1080: 0.07 m/s fallbacks between stops as a box reached it). Returns (command, guarded)."""
    v = float(command[0])
    if v == 0.0:
        return command, False
    heading = np.array([np.cos(pose[2]), np.sin(pose[2])]) * np.sign(v)
    centres = [np.asarray(t.position, dtype=float) for t in tracks] + list(np.asarray(points, dtype=float))
    radii = [float(t.radius_m) for t in tracks] + [0.0] * len(points)
    for c, r in zip(centres, radii, strict=True):
        d = c - np.asarray(pose[:2], dtype=float)
        dist = float(np.hypot(*d))
        if dist - r - outer_radius <= zone_m and dist > 1e-9 and float(np.dot(heading, d)) > 0.0:
            return np.array([0.0, float(command[1])]), True
    return command, False

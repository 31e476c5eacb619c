"""Nav2 MPPI's critics (nav2_mppi_controller, `critics/*.cpp`) on the project's distance field and footprint checker.

Each critic scores a batch of K sampled trajectories of T steps and returns a cost per trajectory (K,); the sampler
(`mnemo_mpc.peers.mppi`) adds them up. Names, parameters and defaults are Nav2's (its README's "Configuration"
tables); where our setting differs the `CriticConfig` field says why. What changes is where obstacles come from:
Nav2 reads distances back out of the inflated costmap's cost values, here they are the ESDF's (`planning.esdf`) at
every covering disc of the footprint (`planning.collision.FootprintChecker.pose_margins`), the numbers the MPC's own
clearance constraint and the shared safety check use, so a "collision" for MPPI is a pose the safety layer would
refuse.

Thresholds compare the robot's distance to the end of its local path (Nav2: to the goal of the pruned plan); the
goal critics act only when that end is the goal itself (not a sub-goal pulled back to what the grid has seen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning.collision import FootprintChecker
from mnemo_mpc.planning.esdf import DistanceField


@dataclass(frozen=True)
class CriticConfig:
    """The critics' weights and parameters: Nav2's defaults (nav2_mppi_controller README) unless noted."""

    # ConstraintCritic. Nav2 penalises velocities outside the limits; the sampler here clamps those, so what is left
    # to penalise is the part of a sampled control the acceleration limits cut off in the rollout (Nav2's motion
    # model clamps it silently), which keeps the averaged sequence one the drive can follow.
    constraint_weight: float = 4.0
    # ObstaclesCritic (Nav2's distance-based obstacle critic; CostCritic reads raw costmap costs instead).
    critical_weight: float = 20.0
    repulsion_weight: float = 1.5
    collision_cost: float = 10000.0
    collision_margin_distance_m: float = 0.10
    near_goal_distance_m: float = 0.5
    # Nav2 repels within the costmap's inflation_radius (0.55 m from an obstacle to the robot's centre by default);
    # measured here from the footprint, that is 0.55 m less a 0.2 m robot's radius.
    repulsion_distance_m: float = 0.35
    # GoalCritic, GoalAngleCritic
    goal_weight: float = 5.0
    goal_threshold_m: float = 1.4
    goal_angle_weight: float = 3.0
    goal_angle_threshold_m: float = 0.5
    # PathAlignCritic (the nearest-point formulation of Nav2's "legacy" critic)
    path_align_weight: float = 10.0
    path_align_threshold_m: float = 0.5
    path_align_offset_from_furthest: int = 20
    path_align_point_step: int = 4
    path_align_max_occupancy: float = 0.07
    # PathFollowCritic
    path_follow_weight: float = 5.0
    path_follow_threshold_m: float = 1.4
    path_follow_offset_from_furthest: int = 6
    # PathAngleCritic (forward_preference true)
    path_angle_weight: float = 2.0
    path_angle_threshold_m: float = 0.5
    path_angle_offset_from_furthest: int = 4
    path_angle_max_angle_rad: float = 1.2
    # PreferForwardCritic
    prefer_forward_weight: float = 5.0
    prefer_forward_threshold_m: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in COUNTS:
                least = COUNTS[f.name]
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise InputError(f"CriticConfig.{f.name}: expected an integer >= {least}, got {value!r}")
            elif not (is_real(value) and value >= 0):
                raise InputError(f"CriticConfig.{f.name}: expected a finite number >= 0, got {value!r}")
        if self.path_align_max_occupancy > 1:
            raise InputError(
                "CriticConfig.path_align_max_occupancy: expected a fraction in [0, 1], got "
                f"{self.path_align_max_occupancy!r}"
            )


# CriticConfig's counts (path points, trajectory points) and their least values; every other field is a number >= 0.
COUNTS = {
    "path_align_offset_from_furthest": 0,
    "path_align_point_step": 1,
    "path_follow_offset_from_furthest": 0,
    "path_angle_offset_from_furthest": 0,
}


@dataclass
class Scene:
    """What the critics score against this step."""

    field: DistanceField
    checker: FootprintChecker
    pose: np.ndarray  # (3,) the start
    path: np.ndarray  # (M, 2) the local path (`peers.local_path`), ending at the sub-goal
    goal: np.ndarray | None  # (3,) the goal when the path ends there, else None
    required_margin: float  # a pose whose bilinear footprint margin is below this is in collision (the safety check's
    # requirement plus the MPC's clearance buffer: `peers.base.footprint_clearance`)
    dt: float


@dataclass
class Scores:
    total: np.ndarray  # (K,)
    terms: dict[str, np.ndarray]  # critic name -> (K,)
    all_collide: bool  # Nav2's fail_flag: no sampled trajectory is collision-free


def score(
    cfg: CriticConfig, scene: Scene, poses: np.ndarray, applied: np.ndarray, demanded: np.ndarray, enabled=None
) -> Scores:
    """Every critic over trajectories `poses` (K, T, 3) (the states after each step) driven by the velocities
    `applied` (K, T, 2) (after the acceleration limits) for the sampled controls `demanded` (K, T, 2). `enabled`: the
    critic names to run (None: all), for ablations and tests."""
    names = CRITICS if enabled is None else tuple(enabled)
    unknown = sorted(set(names) - set(CRITICS))
    if unknown:
        raise InputError(f"critics: unknown {unknown}; expected some of {list(CRITICS)}")
    k = poses.shape[0]
    to_end = float(np.hypot(*(scene.path[-1] - scene.pose[:2])))
    terms: dict[str, np.ndarray] = {}
    all_collide = False
    furthest = _furthest_reached(scene.path, poses[:, -1, :2])
    for name in names:
        if name == "constraint":
            excess = np.abs(demanded - applied).sum(axis=(1, 2)) * scene.dt
            terms[name] = cfg.constraint_weight * excess
        elif name == "obstacles":
            terms[name], all_collide = _obstacles(cfg, scene, poses, to_end)
        elif name == "goal":
            near = scene.goal is not None and to_end < cfg.goal_threshold_m
            terms[name] = (
                cfg.goal_weight * np.hypot(*(poses[..., :2] - scene.goal[:2]).transpose(2, 0, 1)).mean(axis=1)
                if near
                else np.zeros(k)
            )
        elif name == "goal_angle":
            near = scene.goal is not None and to_end < cfg.goal_angle_threshold_m
            terms[name] = (
                cfg.goal_angle_weight * np.abs(_wrap(poses[..., 2] - scene.goal[2])).mean(axis=1)
                if near
                else np.zeros(k)
            )
        elif name == "path_align":
            terms[name] = _path_align(cfg, scene, poses, furthest, to_end)
        elif name == "path_follow":
            if to_end < cfg.path_follow_threshold_m:
                terms[name] = np.zeros(k)
            else:
                target = _valid_ahead(scene, furthest + cfg.path_follow_offset_from_furthest)
                terms[name] = cfg.path_follow_weight * np.hypot(*(poses[:, -1, :2] - scene.path[target]).T)
        elif name == "path_angle":
            terms[name] = _path_angle(cfg, scene, poses, furthest, to_end)
        elif name == "prefer_forward":
            backwards = np.maximum(-applied[..., 0], 0.0).sum(axis=1) * scene.dt
            terms[name] = (
                cfg.prefer_forward_weight * backwards if to_end > cfg.prefer_forward_threshold_m else np.zeros(k)
            )
    total = np.sum(list(terms.values()), axis=0) if terms else np.zeros(k)
    return Scores(total, terms, all_collide)


CRITICS = (
    "constraint",
    "obstacles",
    "goal",
    "goal_angle",
    "path_align",
    "path_follow",
    "path_angle",
    "prefer_forward",
)


def _obstacles(cfg: CriticConfig, scene: Scene, poses: np.ndarray, to_end: float) -> tuple[np.ndarray, bool]:
    """ObstaclesCritic: a trajectory with a pose in collision costs `collision_cost`; otherwise every pose nearer than
    `collision_margin_distance_m` adds its shortfall (times `critical_weight`), and away from the goal every pose
    within `repulsion_distance_m` adds how far inside it is, normalised by the trajectory length and less the batch's
    least (times `repulsion_weight`)."""
    margins = scene.checker.pose_margins(scene.field, poses)  # (K, T): beyond each covering disc, bilinear ESDF
    dist = margins - scene.required_margin  # beyond the footprint as the safety layer pads it
    collide = np.any(dist < 0.0, axis=1)
    critical = np.where(dist < cfg.collision_margin_distance_m, cfg.collision_margin_distance_m - dist, 0.0).sum(1)
    raw = np.where(collide, cfg.collision_cost, critical)
    if to_end < cfg.near_goal_distance_m:
        repulsive = np.zeros(len(raw))
    else:
        repulsive = np.maximum(cfg.repulsion_distance_m - dist, 0.0).sum(axis=1)
        repulsive = (repulsive - repulsive.min()) / poses.shape[1]
    return cfg.critical_weight * raw + cfg.repulsion_weight * repulsive, bool(np.all(collide))


def _furthest_reached(path: np.ndarray, ends: np.ndarray) -> int:
    """Nav2's findPathFurthestReachedPoint: over the trajectories' last points, the largest index of their nearest
    path point."""
    d = np.hypot(ends[:, None, 0] - path[None, :, 0], ends[:, None, 1] - path[None, :, 1])  # (K, M)
    return int(np.max(np.argmin(d, axis=1)))


def _path_valid(scene: Scene) -> np.ndarray:
    """Per path point (M,): the footprint there, heading along the path, keeps the required margin."""
    path = scene.path
    heading = np.arctan2(*np.diff(path, axis=0, append=path[-1:] + (path[-1:] - path[-2:-1])).T[::-1])
    poses = np.column_stack([path, heading])
    return scene.checker.pose_margins(scene.field, poses) >= scene.required_margin


def _valid_ahead(scene: Scene, index: int) -> int:
    """`index` clipped to the path, moved on past points in collision (Nav2's PathFollowCritic skips them)."""
    valid = _path_valid(scene)
    i = min(index, len(scene.path) - 1)
    while i + 1 < len(scene.path) and not valid[i]:
        i += 1
    return i


def _path_align(cfg: CriticConfig, scene: Scene, poses: np.ndarray, furthest: int, to_end: float) -> np.ndarray:
    """PathAlignCritic: every `path_align_point_step`-th trajectory point's distance to the nearest path point, the
    mean, once the trajectories track the path (`furthest` >= offset_from_furthest), away from the goal, and unless
    more than `path_align_max_occupancy` of the path is blocked (then the obstacle and follow critics lead)."""
    k = poses.shape[0]
    if to_end < cfg.path_align_threshold_m or furthest < cfg.path_align_offset_from_furthest:
        return np.zeros(k)
    valid = _path_valid(scene)
    if 1.0 - valid.mean() > cfg.path_align_max_occupancy:
        return np.zeros(k)
    step = cfg.path_align_point_step
    pts = poses[:, step - 1 :: step, :2]  # (K, T', 2)
    path = scene.path[: furthest + 1]
    d = np.hypot(pts[..., None, 0] - path[:, 0], pts[..., None, 1] - path[:, 1]).min(axis=-1)  # (K, T')
    return cfg.path_align_weight * d.mean(axis=1)


def _path_angle(cfg: CriticConfig, scene: Scene, poses: np.ndarray, furthest: int, to_end: float) -> np.ndarray:
    """PathAngleCritic (forward preference): when the robot's heading is more than `path_angle_max_angle_rad` off the
    bearing of the path point `offset_from_furthest` beyond the furthest reached, the trajectories' mean heading
    error towards that point."""
    k = poses.shape[0]
    if to_end < cfg.path_angle_threshold_m:
        return np.zeros(k)
    target = scene.path[min(furthest + cfg.path_angle_offset_from_furthest, len(scene.path) - 1)]
    here = scene.pose
    if abs(_wrap(math.atan2(target[1] - here[1], target[0] - here[0]) - here[2])) < cfg.path_angle_max_angle_rad:
        return np.zeros(k)
    bearing = np.arctan2(target[1] - poses[..., 1], target[0] - poses[..., 0])
    return cfg.path_angle_weight * np.abs(_wrap(bearing - poses[..., 2])).mean(axis=1)


def _wrap(angle):
    return (angle + np.pi) % (2 * np.pi) - np.pi

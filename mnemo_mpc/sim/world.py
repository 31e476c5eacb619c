"""PyBullet static geometry from any `OccupancyGrid`, and ROS map_server maps as simulation worlds.

Occupied cells are merged into few axis-aligned rectangles (row runs merged down identical column spans), each
extruded to a box of `wall_height_m`. The boxes are uploaded as static concave triangle meshes of at most
`max_boxes_per_mesh` boxes each: measured on this machine, 360 `rayTestBatch` rays cost ~2 ms against 5000 boxes in
one mesh but ~70 ms against the same boxes as 16-box compounds (PyBullet caps compounds at 16 children, and its ray
batch scales with the number of bodies), so few large meshes keep big real maps fast.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.sim.worlds import World, world_from_grid

log = logging.getLogger(__name__)

# Unit box corners (x, y, z in {-1, 1}) and its 12 outward-wound triangles.
_CORNERS = np.array([[sx, sy, sz] for sz in (-1, 1) for sy in (-1, 1) for sx in (-1, 1)], dtype=float)
_FACES = np.array(
    [[0, 2, 1], [1, 2, 3], [4, 5, 6], [5, 7, 6], [0, 1, 4], [1, 5, 4], [2, 6, 3], [3, 6, 7], [0, 4, 2], [2, 4, 6]]
    + [[1, 3, 5], [3, 7, 5]],
    dtype=np.int64,
)


@dataclass(frozen=True)
class StaticGeometryConfig:
    wall_height_m: float = 0.5  # above the lidar plane (0.2 m) and the robot's top (0.21 m)
    max_boxes_per_mesh: int = 4096  # 32768 vertices per mesh; PyBullet rejects meshes much past 1e5 vertices


def merge_occupied_rectangles(mask: np.ndarray) -> np.ndarray:
    """Cover a boolean (H, W) mask exactly with disjoint rectangles: (K, 4) int rows (r0, c0, r1, c1), ends exclusive.

    Greedy: each row is split into runs of True; a run continues the rectangle above it when its column span is
    identical, otherwise that rectangle is closed. Walls become one rectangle each; a disc becomes one per row."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise InputError(f"merge_occupied_rectangles mask: expected a 2-D array, got shape {mask.shape}")
    h, w = mask.shape
    padded = np.zeros((h, w + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)  # +1 at run starts, -1 one past run ends
    rows_s, cols_s = np.nonzero(edges == 1)
    rows_e, cols_e = np.nonzero(edges == -1)
    # Both nonzero() calls scan row-major, so the k-th start pairs with the k-th end.
    run_bounds = np.searchsorted(rows_s, np.arange(h + 1))
    out: list[tuple[int, int, int, int]] = []
    active: dict[tuple[int, int], int] = {}
    for r in range(h + 1):
        a, b = (run_bounds[r], run_bounds[r + 1]) if r < h else (0, 0)
        runs = set(zip(cols_s[a:b].tolist(), cols_e[a:b].tolist(), strict=True))
        for key in [k for k in active if k not in runs]:
            out.append((active.pop(key), key[0], r, key[1]))
        for key in runs:
            active.setdefault(key, r)
    assert np.array_equal(rows_s, rows_e)
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def grid_boxes(grid: OccupancyGrid) -> np.ndarray:
    """Occupied cells of `grid` as (K, 5) boxes (cx, cy, half_x, half_y, yaw) in the map frame."""
    rects = merge_occupied_rectangles(grid.occupied_mask())
    if rects.size == 0:
        return np.zeros((0, 5))
    r0, c0, r1, c1 = rects.T.astype(float)
    centres = grid.grid_to_world(np.stack([(c0 + c1) / 2, (r0 + r1) / 2], axis=-1))
    res = grid.resolution
    yaw = np.full(len(rects), grid.origin[2])
    return np.column_stack([centres, (c1 - c0) * res / 2, (r1 - r0) * res / 2, yaw])


def box_mesh(boxes: np.ndarray, height: float) -> tuple[np.ndarray, np.ndarray]:
    """Triangle mesh (vertices (8K, 3), indices (36K,)) of boxes (cx, cy, hx, hy, yaw) extruded over [0, height]."""
    k = len(boxes)
    local = _CORNERS[None] * np.column_stack([boxes[:, 2], boxes[:, 3], np.full(k, height / 2)])[:, None, :]
    c, s = np.cos(boxes[:, 4])[:, None], np.sin(boxes[:, 4])[:, None]
    x = boxes[:, 0:1] + c * local[..., 0] - s * local[..., 1]
    y = boxes[:, 1:2] + s * local[..., 0] + c * local[..., 1]
    z = height / 2 + local[..., 2]
    verts = np.stack([x, y, z], axis=-1).reshape(-1, 3)
    idx = (_FACES[None] + 8 * np.arange(k)[:, None, None]).reshape(-1)
    return verts, idx


def build_static_geometry(client: int, grid: OccupancyGrid, config: StaticGeometryConfig | None = None) -> list[int]:
    """Create the grid's occupied cells as static bodies in PyBullet client `client`; returns their body ids."""
    import pybullet as p

    cfg = config or StaticGeometryConfig()
    boxes = grid_boxes(grid)
    bodies: list[int] = []
    for k in range(0, len(boxes), cfg.max_boxes_per_mesh):
        verts, idx = box_mesh(boxes[k : k + cfg.max_boxes_per_mesh], cfg.wall_height_m)
        shape = p.createCollisionShape(
            p.GEOM_MESH,
            vertices=verts.tolist(),
            indices=idx.tolist(),
            flags=p.GEOM_FORCE_CONCAVE_TRIMESH,
            physicsClientId=client,
        )
        if shape < 0:
            raise InputError(f"build_static_geometry: PyBullet rejected a mesh of {len(verts)} vertices")
        bodies.append(p.createMultiBody(0.0, shape, physicsClientId=client))
    log.debug(
        "static geometry: %d occupied cells -> %d boxes in %d meshes",
        grid.occupied_mask().sum(),
        len(boxes),
        len(bodies),
    )
    return bodies


def build_moving_obstacles(client: int, world: World, config: StaticGeometryConfig | None = None) -> list[int]:
    """Create `world.moving` as kinematic bodies (mass 0, moved by the simulator each substep) of `wall_height_m`,
    placed where they are at t = 0; the lidar's rays and the contact queries see them like any other body."""
    import pybullet as p

    cfg = config or StaticGeometryConfig()
    bodies = []
    for ob in world.moving:
        half_h = cfg.wall_height_m / 2
        if ob.shape == "cylinder":
            shape = p.createCollisionShape(
                p.GEOM_CYLINDER, radius=ob.size[0], height=cfg.wall_height_m, physicsClientId=client
            )
        else:
            shape = p.createCollisionShape(
                p.GEOM_BOX, halfExtents=[ob.size[0], ob.size[1], half_h], physicsClientId=client
            )
        x, y = ob.position(0.0)
        bodies.append(
            p.createMultiBody(
                0.0,
                shape,
                basePosition=[float(x), float(y), half_h],
                baseOrientation=p.getQuaternionFromEuler([0.0, 0.0, ob.yaw]),
                physicsClientId=client,
            )
        )
    return bodies


def ground_truth_grid(grid: OccupancyGrid, unknown_as: str = "occupied") -> OccupancyGrid:
    """A FREE/OCCUPIED-only copy of `grid` (the simulator's ground truth); unknown cells become `unknown_as`."""
    if unknown_as not in ("occupied", "free"):
        raise InputError(f"unknown_as: expected 'occupied' or 'free', got {unknown_as!r}")
    occ = grid.occupied_mask() | (grid.unknown_mask() if unknown_as == "occupied" else False)
    return OccupancyGrid(np.where(occ, OCCUPIED, FREE).astype(np.int8), grid.resolution, grid.origin)


def parse_pose(value: str | list | tuple, name: str) -> np.ndarray:
    """x,y,yaw from a string "x,y,yaw" (brackets allowed) or a sequence of three numbers, as users give a start or a
    goal (`--start`, a scenarios file, a node parameter); InputError naming `name` otherwise."""
    try:
        items = value.strip().strip("[]()").split(",") if isinstance(value, str) else list(value)
        if any(isinstance(v, bool) for v in items):
            raise ValueError("booleans")
        pose = np.array([float(v) for v in items], dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected x,y,yaw (three finite numbers), got {value!r}") from exc
    if pose.shape != (3,) or not np.all(np.isfinite(pose)):
        raise InputError(f"{name}: expected x,y,yaw (three finite numbers), got {value!r}")
    return pose


def load_map_world(
    yaml_path: str | Path,
    start: np.ndarray,
    goal: np.ndarray,
    *,
    unknown_as: str = "occupied",
    robot_radius_m: float = 0.2,
    safety_margin_m: float = 0.05,
) -> World:
    """A ROS map_server map (YAML + image) as a `World` with the given start and goal (x, y, yaw, map frame).

    Unknown cells become walls by default, so a real map's unexplored space stays closed in the simulator. Raises
    `MapFormatError` for unreadable maps (from the loader) and `InfeasibleProblemError` when start or goal are in an
    obstacle or not joined by a path for the footprint."""
    from mnemo_mpc.planning.mapio import load_map

    grid = load_map(yaml_path)
    truth = ground_truth_grid(grid, unknown_as)
    start = np.asarray(start, dtype=float).reshape(-1)
    goal = np.asarray(goal, dtype=float).reshape(-1)
    for name, pose in (("start", start), ("goal", goal)):
        if pose.shape != (3,) or not np.all(np.isfinite(pose)):
            raise InputError(f"{name}: expected a finite (x, y, yaw), got {pose.tolist()}")
    world = world_from_grid(
        truth,
        start,
        goal,
        kind="map",
        seed=0,
        robot_radius_m=robot_radius_m,
        safety_margin_m=safety_margin_m,
    )
    log.info("map world %s: %dx%d cells at %.3f m", Path(yaml_path).name, *truth.shape[::-1], truth.resolution)
    return world


def world_bounds(grid: OccupancyGrid) -> tuple[float, float, float, float]:
    """(xmin, ymin, xmax, ymax) of the grid's footprint in the map frame (handles a rotated origin)."""
    h, w = grid.shape
    corners = grid.grid_to_world(np.array([[0, 0], [w, 0], [0, h], [w, h]], dtype=float))
    return (
        float(corners[:, 0].min()),
        float(corners[:, 1].min()),
        float(corners[:, 0].max()),
        float(corners[:, 1].max()),
    )


__all__ = [
    "StaticGeometryConfig",
    "box_mesh",
    "build_moving_obstacles",
    "build_static_geometry",
    "grid_boxes",
    "ground_truth_grid",
    "load_map_world",
    "merge_occupied_rectangles",
    "parse_pose",
    "world_bounds",
]

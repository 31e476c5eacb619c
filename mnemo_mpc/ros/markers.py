"""The planner's own shapes as a visualization_msgs/MarkerArray for RViz (issue 29): the footprint and the covering
discs at the robot's pose, and the planned horizon.

Like `mnemo_mpc.ros.tracks` (whose `MarkerTypes` it takes), no rclpy import: the markers are built from message
classes handed in, rclpy's in the node and a rosbags typestore's in the tests. Everything is in the grid's frame
(`NavParams.frame_id`), where the odometry pose and the plan are. The footprint and the discs are the robot model's
(`RobotModel.shape`, `RobotModel.discs`: the discs the MPC keeps clear, `mnemo_mpc.planning.footprint`), drawn without
the safety margin.

Each kind of shape has its own namespace, so RViz's MarkerArray display can switch each on and off; ids are fixed per
namespace (0, or the disc's index), and every array starts with a DELETEALL, as the tracks' do: a plan that is gone (a
tick that planned nothing) leaves no line behind. The builder never raises on numbers: a non-finite or misshapen pose
or plan is left out (the node's timer must not raise), a non-finite stamp is sent as 0 (unset).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mnemo_mpc.planning.footprint import to_world
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.ros.convert import make_header
from mnemo_mpc.ros.tracks import MarkerTypes, delete_all, make_marker

MARKERS_TOPIC = "~/markers"  # where the node publishes them (/mnemo_mpc_nav/markers); rviz/mnemo_mpc.rviz shows it

# Namespaces, one per kind of shape; the id within each is 0, or the disc's index (RobotModel.discs row)
NS_FOOTPRINT, NS_HEADING, NS_DISCS = "footprint", "heading", "discs"
NS_HORIZON, NS_HORIZON_FOOTPRINTS, NS_HORIZON_END_DISCS = "horizon", "horizon_footprints", "horizon_end_discs"

FOOTPRINT_EVERY = 5  # the footprint is drawn along the horizon at every this many knots, and at the last
CIRCLE_SEGMENTS = 32  # a circular footprint is drawn as this many-gon (circumscribed: never smaller than the body)
LINE_WIDTH_M = 0.02  # a line's width (scale.x)
DISC_HEIGHT_M = 0.02  # the discs are thin cylinders lying on the ground
Z_M = 0.02  # lines float this high, over the costmap

# RGBA per kind of shape
FOOTPRINT_COLOUR = (0.1, 0.9, 0.2, 1.0)
HEADING_COLOUR = (0.1, 0.9, 0.2, 1.0)
DISC_COLOUR = (0.2, 0.8, 0.9, 0.35)
HORIZON_COLOUR = (0.2, 0.5, 1.0, 1.0)
HORIZON_FOOTPRINT_COLOUR = (0.2, 0.5, 1.0, 0.5)
END_DISC_COLOUR = (0.2, 0.5, 1.0, 0.25)


def planner_markers(
    types: MarkerTypes,
    pose: Any,
    plan_states: Any,
    robot: RobotModel,
    stamp_s: float,
    frame_id: str,
    footprint_every: int = FOOTPRINT_EVERY,
    end_discs: bool = True,
) -> Any:
    """visualization_msgs/MarkerArray of one control tick: first a DELETEALL, then

    - at `pose` (x, y, yaw; None or non-finite: none of these): the footprint's closed outline (LINE_STRIP, ns
      `footprint`), an arrow along the heading as long as the circumscribed radius (ARROW, `heading`: a disc robot's
      outline shows none) and one thin translucent CYLINDER per covering disc (`discs`, id the disc's row in
      `robot.discs`, diameter 2 r);
    - for `plan_states` (the planned knots (N+1, >=3) x, y, yaw, as published on the local plan; None, fewer than two
      knots, or any non-finite number: none of these): the line through the knots' positions (LINE_STRIP,
      `horizon`), the footprint's outline at every `footprint_every`-th knot and the last, each with a tick from the
      centre to the front (one LINE_LIST, `horizon_footprints`), and with `end_discs` the covering discs at the last
      knot (`horizon_end_discs`).

    Everything stamped `stamp_s` in `frame_id`, fading after `tracks.MARKER_LIFETIME_S` without a new array."""
    header = make_header(types.base, stamp_s if _finite(stamp_s) else 0.0, frame_id)
    m = types.Marker
    markers = [delete_all(types, header)]

    def line(ns: str, kind: int, colour: tuple[float, ...], xy: np.ndarray, **fields: Any) -> None:
        fields.setdefault("scale", types.base.Vector3(x=LINE_WIDTH_M, y=0.0, z=0.0))  # a line's width is scale.x
        markers.append(make_marker(types, header, ns, 0, kind, colour, points=_points(types, xy), **fields))

    shape, discs = robot.shape, robot.discs
    current = _pose_or_none(pose)
    if current is not None:
        outline = shape.outline(current, CIRCLE_SEGMENTS)
        closed = np.vstack([outline, outline[:1]])  # a LINE_STRIP closes only by coming back to its first point
        line(NS_FOOTPRINT, m.LINE_STRIP, FOOTPRINT_COLOUR, closed)
        front = to_world(np.array([[robot.radius, 0.0]]), current)  # as long as the circumscribed radius
        head = types.base.Vector3(x=LINE_WIDTH_M, y=3 * LINE_WIDTH_M, z=3 * LINE_WIDTH_M)  # shaft and head diameter
        line(NS_HEADING, m.ARROW, HEADING_COLOUR, np.vstack([current[:2], front]), scale=head)
        markers.extend(_disc_markers(types, header, NS_DISCS, DISC_COLOUR, discs, current))

    plan = _plan_or_none(plan_states)
    if plan is not None:
        line(NS_HORIZON, m.LINE_STRIP, HORIZON_COLOUR, plan[:, :2])
        every = max(int(footprint_every), 1)
        tip = np.array([[robot.radius, 0.0]])  # the heading tick's tip in the robot frame
        pairs = []  # LINE_LIST: each (start, end) pair is one segment
        for k in sorted({*range(every, len(plan), every), len(plan) - 1}):
            outline = shape.outline(plan[k, :3], CIRCLE_SEGMENTS)
            pairs.append(np.stack([outline, np.roll(outline, -1, axis=0)], axis=1))  # its edges
            pairs.append(np.stack([plan[k, :2], to_world(tip, plan[k, :3])[0]])[None])  # the heading tick
        line(NS_HORIZON_FOOTPRINTS, m.LINE_LIST, HORIZON_FOOTPRINT_COLOUR, np.concatenate(pairs).reshape(-1, 2))
        if end_discs:
            markers.extend(_disc_markers(types, header, NS_HORIZON_END_DISCS, END_DISC_COLOUR, discs, plan[-1, :3]))
    return types.MarkerArray(markers=markers)


def _disc_markers(
    types: MarkerTypes, header: Any, ns: str, colour: tuple[float, ...], discs: np.ndarray, pose: np.ndarray
) -> list[Any]:
    """One CYLINDER per covering disc (ox, oy, r) at `pose`, id its row, diameter 2 r, `DISC_HEIGHT_M` tall."""
    b = types.base
    centres = to_world(discs[:, :2], pose)
    return [
        make_marker(
            types,
            header,
            ns,
            i,
            types.Marker.CYLINDER,
            colour,
            pose=_at(types, cx, cy, DISC_HEIGHT_M / 2),
            scale=b.Vector3(x=2.0 * float(r), y=2.0 * float(r), z=DISC_HEIGHT_M),
        )
        for i, ((cx, cy), r) in enumerate(zip(centres, discs[:, 2], strict=True))
    ]


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _pose_or_none(pose: Any) -> np.ndarray | None:
    """(x, y, yaw) as floats, or None when `pose` is None, not three numbers, or not finite."""
    if pose is None:
        return None
    try:
        p = np.asarray(pose, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        return None
    return p[:3] if p.size >= 3 and np.all(np.isfinite(p[:3])) else None


def _plan_or_none(states: Any) -> np.ndarray | None:
    """The plan's knots (M, >=3) as floats, or None when there are fewer than two, they are not rows of at least
    (x, y, yaw), or any of those is not finite (a partly drawn plan would mislead)."""
    if states is None:
        return None
    try:
        s = np.asarray(states, dtype=float)
    except (TypeError, ValueError):
        return None
    if s.ndim != 2 or s.shape[0] < 2 or s.shape[1] < 3 or not np.all(np.isfinite(s[:, :3])):
        return None
    return s


def _points(types: MarkerTypes, xy: np.ndarray) -> list[Any]:
    return [types.base.Point(x=float(x), y=float(y), z=Z_M) for x, y in xy]


def _at(types: MarkerTypes, x: float, y: float, z: float) -> Any:
    b = types.base
    return b.Pose(
        position=b.Point(x=float(x), y=float(y), z=float(z)), orientation=b.Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)
    )

"""The controller's tracked moving obstacles as the node publishes them (issue 28): KeyValues for /diagnostics and a
visualization_msgs/MarkerArray for RViz.

Like `mnemo_mpc.ros.convert`, no rclpy import: the markers are built from a `MarkerTypes` namespace of classes, rclpy's
in the node (when visualization_msgs is installed) and a rosbags typestore's in the tests. Positions and velocities are
in the grid's frame (`NavParams.frame_id`), as the tracker keeps them (`mnemo_mpc.nav.tracking.Track`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.nav.tracking import Track
from mnemo_mpc.planning.mpc import PredictedObstacles
from mnemo_mpc.ros.convert import MessageTypes, make_header

EXTRA_LISTED = 2  # /diagnostics lists the MPC's slots (PredictionConfig.slots) plus this many tracks, nearest first
MAX_MARKED = 16  # the markers draw at most this many tracks, nearest first (a crowd costs no more than this per tick)
MARKER_LIFETIME_S = 1.0  # markers vanish this long after the last publish (a node that stopped leaves none behind)
HEIGHT_M = 0.5  # the drawn cylinder's height: the tracker is planar
ARROW_S = 1.0  # the velocity arrow is the distance covered in this long

# Marker namespaces: one per kind of shape, ids the track's id (a predicted line: its MPC slot)
NS_TRACK, NS_VELOCITY, NS_LABEL, NS_PREDICTED = "tracks", "track_velocity", "track_label", "predicted"


def nearest_first(tracks: Sequence[Track], position: np.ndarray | None) -> list[Track]:
    """The tracks by distance from `position` (x, y), nearest first, ties by id; by id when no position is known."""
    if position is None:
        return sorted(tracks, key=lambda t: t.id)
    p = np.asarray(position, dtype=float)[:2]
    return sorted(tracks, key=lambda t: (float(np.hypot(*(t.position - p))), t.id))


def track_values(tracks: Sequence[Track], frame_id: str, max_listed: int) -> dict[str, str]:
    """/diagnostics KeyValues for the tracks of the last control tick, in the order given (`nearest_first`): the count,
    the frame, and per listed track (at most `max_listed`) its id, position (m), velocity (m/s), speed (m/s) and radius
    (m). Keys `track_<i>_<field>`, i from 0; vectors as "x, y"."""
    values = {"tracks": str(len(tracks)), "tracks_frame": frame_id}
    for i, t in enumerate(tracks[:max_listed]):
        key = f"track_{i}_"
        values[key + "id"] = str(t.id)
        values[key + "position_m"] = f"{t.position[0]:.3f}, {t.position[1]:.3f}"
        values[key + "velocity_m_s"] = f"{t.velocity[0]:.3f}, {t.velocity[1]:.3f}"
        values[key + "speed_m_s"] = f"{t.speed_m_s:.3f}"
        values[key + "radius_m"] = f"{t.radius_m:.3f}"
    return values


@dataclass(frozen=True)
class MarkerTypes:
    """The message classes the markers are built from, on top of the planner's (`MessageTypes`), and the empty texture
    (sensor_msgs/CompressedImage) and mesh (visualization_msgs/MeshFile) every Marker carries since Humble."""

    base: MessageTypes
    Marker: Any
    MarkerArray: Any
    ColorRGBA: Any
    Duration: Any
    texture: Any
    mesh_file: Any

    @classmethod
    def from_rosbags(cls, distro: str = "ROS2_JAZZY") -> MarkerTypes:
        from rosbags.typesys import Stores, get_typestore

        base = MessageTypes.from_rosbags(distro)
        t = get_typestore(getattr(Stores, distro)).types
        empty = np.zeros(0, dtype=np.uint8)
        return cls(
            base=base,
            Marker=t["visualization_msgs/msg/Marker"],
            MarkerArray=t["visualization_msgs/msg/MarkerArray"],
            ColorRGBA=t["std_msgs/msg/ColorRGBA"],
            Duration=t["builtin_interfaces/msg/Duration"],
            texture=t["sensor_msgs/msg/CompressedImage"](header=make_header(base, 0.0, ""), format="", data=empty),
            mesh_file=t["visualization_msgs/msg/MeshFile"](filename="", data=empty),
        )


# RGBA per kind of marker
TRACK_COLOUR = (1.0, 0.55, 0.0, 0.6)
VELOCITY_COLOUR = (1.0, 0.2, 0.0, 1.0)
LABEL_COLOUR = (1.0, 1.0, 1.0, 1.0)
PREDICTED_COLOUR = (0.9, 0.1, 0.6, 0.9)


def track_markers(
    types: MarkerTypes,
    tracks: Sequence[Track],
    predicted: PredictedObstacles | None,
    stamp_s: float,
    frame_id: str,
    max_tracks: int = MAX_MARKED,
) -> Any:
    """visualization_msgs/MarkerArray of one control tick's tracks: first a DELETEALL (the markers of tracks that
    ended go), then per track (the first `max_tracks`) a cylinder (its radius, `HEIGHT_M` tall; id the track's id),
    an arrow from its centre along its velocity (the distance covered in `ARROW_S`) and a label (id and speed), and
    per MPC slot of `predicted` a line strip through the centres predicted at knots 1..N. Everything stamped
    `stamp_s` in `frame_id`."""
    b = types.base
    header = make_header(b, stamp_s, frame_id)
    m = types.Marker

    def marker(ns: str, marker_id: int, kind: int, colour: tuple[float, ...], **fields: Any) -> Any:
        return make_marker(types, header, ns, marker_id, kind, colour, **fields)

    markers = [delete_all(types, header)]
    for t in tracks[:max_tracks]:
        x, y = (float(c) for c in t.position[:2])
        vx, vy = (float(c) for c in t.velocity[:2])
        diameter = max(2.0 * float(t.radius_m), 0.05)
        markers.append(
            marker(
                NS_TRACK,
                t.id,
                m.CYLINDER,
                TRACK_COLOUR,
                pose=_pose(b, x, y, HEIGHT_M / 2),
                scale=b.Vector3(x=diameter, y=diameter, z=HEIGHT_M),
            )
        )
        tip = b.Point(x=x + vx * ARROW_S, y=y + vy * ARROW_S, z=HEIGHT_M / 2)
        markers.append(
            marker(
                NS_VELOCITY,
                t.id,
                m.ARROW,
                VELOCITY_COLOUR,
                points=[b.Point(x=x, y=y, z=HEIGHT_M / 2), tip],
                scale=b.Vector3(x=0.05, y=0.1, z=0.1),  # shaft diameter, head diameter, head length
            )
        )
        markers.append(
            marker(
                NS_LABEL,
                t.id,
                m.TEXT_VIEW_FACING,
                LABEL_COLOUR,
                pose=_pose(b, x, y, HEIGHT_M + 0.2),
                scale=b.Vector3(x=0.0, y=0.0, z=0.2),  # text height
                text=f"#{t.id} {t.speed_m_s:.2f} m/s",
            )
        )
    if predicted is not None:
        for j in range(predicted.count):
            line = [b.Point(x=float(cx), y=float(cy), z=0.05) for cx, cy in predicted.centres[:, j]]
            width = b.Vector3(x=0.03, y=0.0, z=0.0)  # a line strip's width is scale.x
            markers.append(marker(NS_PREDICTED, j, m.LINE_STRIP, PREDICTED_COLOUR, points=line, scale=width))
    return types.MarkerArray(markers=markers)


def make_marker(
    types: MarkerTypes, header: Any, ns: str, marker_id: int, kind: int, colour: tuple[float, ...], **fields: Any
) -> Any:
    """One visualization_msgs/Marker: an ADD of shape `kind` in namespace `ns` with RGBA `colour`, lasting
    `MARKER_LIFETIME_S`, at the identity pose with unit scale and no points unless `fields` say otherwise (any
    Marker field: pose, scale, points, text, action)."""
    b = types.base
    values = {
        "action": types.Marker.ADD,
        "pose": _pose(b, 0.0, 0.0, 0.0),
        "scale": b.Vector3(x=1.0, y=1.0, z=1.0),
        "points": [],
        "text": "",
        **fields,
    }
    return types.Marker(
        header=header,
        ns=ns,
        id=int(marker_id),
        type=int(kind),
        color=types.ColorRGBA(r=colour[0], g=colour[1], b=colour[2], a=colour[3]),
        lifetime=types.Duration(sec=int(MARKER_LIFETIME_S), nanosec=int(round(MARKER_LIFETIME_S % 1 * 1e9))),
        frame_locked=False,
        colors=[],
        texture_resource="",
        texture=types.texture,
        uv_coordinates=[],
        mesh_resource="",
        mesh_file=types.mesh_file,
        mesh_use_embedded_materials=False,
        **values,
    )


def delete_all(types: MarkerTypes, header: Any) -> Any:
    """The Marker that clears every marker this topic's display shows (DELETEALL): a MarkerArray that redraws
    everything starts with it, so shapes that are gone (an ended track, a dropped plan) go too."""
    return make_marker(types, header, "", 0, types.Marker.ARROW, (0.0, 0.0, 0.0, 0.0), action=types.Marker.DELETEALL)


def _pose(b: MessageTypes, x: float, y: float, z: float) -> Any:
    return b.Pose(position=b.Point(x=x, y=y, z=z), orientation=b.Quaternion(x=0.0, y=0.0, z=0.0, w=1.0))

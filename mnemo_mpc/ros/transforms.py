"""A small planar transform buffer for `/tf` and `/tf_static` (issue 29), in place of tf2, which is not installable
here. No rclpy import: messages are read by field name, as `mnemo_mpc.ros.convert` does.

What it keeps: each edge parent -> child of the tree (a TransformStamped's header.frame_id -> child_frame_id) as the
child's planar pose in the parent, (x, y, yaw): the translation's x and y and the rotation's yaw about z
(`convert.yaw_from_quaternion`); z, roll and pitch are dropped, as a planar robot's map -> odom -> base_link needs.
A chain through a tilted frame (a camera's optical frame) gives the composition of the projections, which is not the
projection of the 3-D composition: look up only the planar frames.

As tf2 does (tf2::BufferCore): one parent per frame (a tree), static edges valid at all times, dynamic edges kept
`cache_s` back from their newest sample and interpolated between the two samples around the requested time (linear
in x and y, the shorter way round in yaw), time 0 / None meaning the latest time every edge of the chain has, and a
repeated stamp ignored (TF_REPEATED_DATA). Unlike tf2: no linear extrapolation, but the nearest sample held up to
`tolerance_s` past the newest (or before the oldest) — Nav2's `transform_tolerance`, which accepts the latest
transform if it is no older than that — and beyond it a `TransformError` naming the edge and the gap, so a stale /tf
is stale input; a frame cannot change its parent (tf2 silently re-parents) and no cycle can be formed; a sample older
than the cache is refused instead of being dropped in silence; no waiting (`canTransform` with a timeout), no
lookups between two different times (the "advanced" API), no time-jump detection: the node calls `clear()` when its
clock goes backwards (tf2_ros's Buffer does that on a jump back, e.g. a simulator restart or a looped bag).

Bounded memory: at most `max_frames` frames, names of at most `MAX_FRAME_CHARS` characters, and per edge at most
`cache_s` of history and never more than `max_samples` samples (the oldest go first).

Policy on bad input: `add` raises `InputError` naming the field and why; `add_message` never raises (it runs in a
subscription callback): it adds every valid transform of the message and returns one reason per refused one.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, MnemoError, is_real
from mnemo_mpc.ros.convert import MAX_COORDINATE_M, stamp_seconds, yaw_from_quaternion

MAX_FRAME_CHARS = 256


class TransformError(MnemoError, LookupError):
    """A lookup cannot be answered: an unknown frame, frames in different trees, or data too old or too new for the
    requested time (the message names the edge and the gap). In the node this is stale input, not a malformed one."""


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class Transform2D:
    """The planar pose of a source frame in a target frame: p_target = R(yaw) p_source + (x, y) (tf2's lookup
    convention, lookupTransform(target, source)). `stamp_s` is the time it holds for (None: static, any time)."""

    x: float
    y: float
    yaw: float
    stamp_s: float | None = None

    @classmethod
    def identity(cls, stamp_s: float | None = None) -> Transform2D:
        return cls(0.0, 0.0, 0.0, stamp_s)

    def compose(self, other: Transform2D) -> Transform2D:
        """self * other: `other` maps c -> b and self maps b -> a; the result maps c -> a (the stamp is self's)."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return Transform2D(
            self.x + c * other.x - s * other.y,
            self.y + s * other.x + c * other.y,
            _wrap(self.yaw + other.yaw),
            self.stamp_s,
        )

    def inverse(self) -> Transform2D:
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return Transform2D(-c * self.x - s * self.y, s * self.x - c * self.y, _wrap(-self.yaw), self.stamp_s)

    def apply_pose(self, pose: Any) -> np.ndarray:
        """A pose (x, y, yaw) in the source frame -> the same pose in the target frame."""
        return self.apply_path(np.asarray(pose, dtype=float).reshape(1, -1)).reshape(-1)

    def apply_path(self, path: Any) -> np.ndarray:
        """An (N, 2) path of positions or an (N, 3) path of poses (x, y, yaw) in the source frame -> the target frame
        (the same shape; yaws wrapped to [-pi, pi))."""
        pts = np.asarray(path, dtype=float)
        if pts.ndim != 2 or pts.shape[1] not in (2, 3):
            raise InputError(f"path: expected an (N, 2) or (N, 3) array, got shape {pts.shape}")
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        out = pts.copy()
        out[:, 0] = self.x + c * pts[:, 0] - s * pts[:, 1]
        out[:, 1] = self.y + s * pts[:, 0] + c * pts[:, 1]
        if pts.shape[1] == 3:
            out[:, 2] = (pts[:, 2] + self.yaw + math.pi) % (2.0 * math.pi) - math.pi
        return out


class _Edge:
    """parent -> child: one value when static, else samples sorted by stamp; `start` is the first live one (samples
    before it have expired and are cut off in batches, so that an add costs O(1) amortised)."""

    __slots__ = ("parent", "static", "stamps", "values", "start")

    def __init__(self, parent: str, static: bool) -> None:
        self.parent = parent
        self.static = static
        self.stamps: list[float] = []
        self.values: list[tuple[float, float, float]] = []
        self.start = 0

    def live(self) -> int:
        return len(self.stamps) - self.start

    def newest(self) -> float:
        return self.stamps[-1]

    def oldest(self) -> float:
        return self.stamps[self.start]


@dataclass(frozen=True)
class EdgeInfo:
    """What the buffer holds for one edge (for diagnostics): stamps are None for a static edge."""

    parent: str
    child: str
    static: bool
    samples: int  # live samples (within cache_s and max_samples)
    oldest_s: float | None
    newest_s: float | None
    stored: int  # samples in memory, expired ones not yet cut off included: at most 2 * max_samples + 65


class TransformBuffer:
    """A tree of planar transforms with per-edge history (module docstring). Not thread-safe: the node calls it from
    one executor thread."""

    def __init__(self, cache_s: float = 10.0, max_samples: int = 10_000, max_frames: int = 1_000) -> None:
        if not (is_real(cache_s) and cache_s > 0):
            raise InputError(f"TransformBuffer.cache_s: expected seconds > 0, got {cache_s!r}")
        for name, value in (("max_samples", max_samples), ("max_frames", max_frames)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise InputError(f"TransformBuffer.{name}: expected an integer >= 2, got {value!r}")
        self.cache_s = float(cache_s)
        self.max_samples = max_samples
        self.max_frames = max_frames
        self._edges: dict[str, _Edge] = {}  # child -> its edge from its parent
        self._frames: set[str] = set()

    # --- adding -----------------------------------------------------------------------------------------------------
    def add(
        self, parent: str, child: str, stamp_s: float | None, x: float, y: float, yaw: float, static: bool = False
    ) -> None:
        """Add child's pose (x, y, yaw) in parent at `stamp_s` (ignored, and may be None, for a static edge).

        Raises InputError, naming why, for: a frame name that is empty, not a string, starts with '/' (tf2 refuses
        those too) or is longer than MAX_FRAME_CHARS; parent == child; a non-finite value or |x|, |y| beyond
        MAX_COORDINATE_M; a dynamic sample without a finite stamp, with a stamp already held (tf2's TF_REPEATED_DATA),
        or older than the edge's cache; a child that already has another parent; an edge that would close a cycle; an
        edge once static sent as dynamic or the reverse; a new frame beyond max_frames."""
        reason = self._add(parent, child, stamp_s, x, y, yaw, static)
        if reason is not None:
            raise InputError(reason)

    def add_message(self, tf_message: Any, static: bool = False) -> list[str]:
        """Add every transform of a tf2_msgs/TFMessage (`transforms`: TransformStamped with header.frame_id,
        header.stamp, child_frame_id, transform.translation, transform.rotation); `static` for /tf_static. Never
        raises: returns one reason per transform refused ('transforms[i] parent -> child: why'), [] when all went in.
        A static transform's stamp is not read (0 is common on /tf_static)."""
        try:
            transforms = list(tf_message.transforms)
        except Exception as exc:  # a malformed message is refused, never raised into the callback
            return [f"TFMessage.transforms: expected a sequence of TransformStamped ({type(exc).__name__}: {exc})"]
        reasons = []
        for i, t in enumerate(transforms):
            label = f"transforms[{i}]"
            try:
                parent, child = t.header.frame_id, t.child_frame_id
                label = f"transforms[{i}] {parent!r} -> {child!r}"
                stamp = None if static else stamp_seconds(t.header.stamp)
                if not static and stamp is None:
                    raise InputError("header.stamp: expected a set stamp on /tf, got 0")
                tr = t.transform.translation
                z = float(tr.z)
                if not math.isfinite(z):
                    raise InputError(f"transform.translation.z: expected a finite number, got {z}")
                yaw = yaw_from_quaternion(t.transform.rotation)
                reason = self._add(parent, child, stamp, float(tr.x), float(tr.y), yaw, static)
            except InputError as exc:
                reason = str(exc)
            except Exception as exc:  # a missing or mistyped field: refused and reported like the rest
                reason = f"{type(exc).__name__}: {exc}"
            if reason is not None:
                reasons.append(f"{label}: {reason}")
        return reasons

    def _add(
        self, parent: Any, child: Any, stamp_s: Any, x: Any, y: Any, yaw: Any, static: bool
    ) -> str | None:  # the reason it was refused, None when added
        edge = self._edges.get(child)
        if edge is None or edge.parent != parent:  # a new edge (the usual case skips these checks)
            reason = self._check_new_edge(parent, child)
            if reason is not None:
                return reason
        try:
            x, y, yaw = float(x), float(y), float(yaw)
        except (TypeError, ValueError):
            return f"transform: expected numbers for x, y, yaw, got {x!r}, {y!r}, {yaw!r}"
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(yaw)):
            return f"transform: expected finite x, y, yaw, got ({x}, {y}, {yaw})"
        if abs(x) > MAX_COORDINATE_M or abs(y) > MAX_COORDINATE_M:
            return f"transform.translation: expected |x|, |y| <= {MAX_COORDINATE_M:g} m, got ({x}, {y})"
        value = (x, y, _wrap(yaw))
        if edge is not None and edge.static != static:
            was, now = ("static", "dynamic") if edge.static else ("dynamic", "static")
            return f"edge {parent} -> {child} is {was} (first sent on /tf{'_static' if edge.static else ''}), got {now}"
        if static:
            if edge is None:
                edge = self._new_edge(parent, child, True)
            edge.values[:] = [value]  # a static edge re-sent replaces its value (a latched /tf_static re-published)
            return None
        try:
            stamp = float(stamp_s)
        except (TypeError, ValueError):
            return f"stamp: expected seconds, got {stamp_s!r}"
        if not math.isfinite(stamp):
            return f"stamp: expected finite seconds, got {stamp}"
        if edge is None:
            edge = self._new_edge(parent, child, False)
        return self._insert(edge, child, stamp, value)

    def _check_new_edge(self, parent: Any, child: Any) -> str | None:
        for what, name in (("parent (header.frame_id)", parent), ("child_frame_id", child)):
            if not isinstance(name, str) or not name:
                return f"{what}: expected a non-empty frame name, got {name!r}"
            if name.startswith("/"):
                return f"{what}: frame names must not start with '/' (tf2 refuses them too), got {name!r}"
            if len(name) > MAX_FRAME_CHARS:
                return f"{what}: expected at most {MAX_FRAME_CHARS} characters, got {len(name)}"
        if parent == child:
            return f"frame {child!r} cannot be its own parent"
        edge = self._edges.get(child)
        if edge is not None:
            return f"frame {child!r} already has parent {edge.parent!r}; a frame has one parent (got {parent!r})"
        frame = parent  # walk up from the parent: meeting the child means child is an ancestor of parent
        while frame in self._edges:
            frame = self._edges[frame].parent
            if frame == child:
                return f"edge {parent} -> {child} would close a cycle ({child!r} is already above {parent!r})"
        new = {parent, child} - self._frames
        if len(self._frames) + len(new) > self.max_frames:
            return f"too many frames: at most max_frames = {self.max_frames}, refusing {sorted(new)}"
        return None

    def _new_edge(self, parent: str, child: str, static: bool) -> _Edge:
        edge = self._edges[child] = _Edge(parent, static)
        self._frames.update((parent, child))
        return edge

    def _insert(self, edge: _Edge, child: str, stamp: float, value: tuple[float, float, float]) -> str | None:
        stamps = edge.stamps
        if edge.live() == 0 or stamp > stamps[-1]:  # the usual case: the newest sample
            stamps.append(stamp)
            edge.values.append(value)
        else:
            newest = stamps[-1]
            if stamp < newest - self.cache_s:
                return (
                    f"stamp {stamp:.3f} s of {edge.parent} -> {child} is {newest - stamp:.3f} s older than its newest "
                    f"sample, beyond cache_s = {self.cache_s:g} s (clear() the buffer when time went backwards)"
                )
            if stamp < stamps[edge.start] and edge.live() >= self.max_samples:
                return (
                    f"stamp {stamp:.3f} s of {edge.parent} -> {child} is older than the oldest of the "
                    f"max_samples = {self.max_samples} samples kept"
                )
            i = bisect.bisect_left(stamps, stamp, lo=edge.start)
            if stamps[i] == stamp:
                return f"stamp {stamp:.9f} s of {edge.parent} -> {child}: already held, ignored (TF_REPEATED_DATA)"
            stamps.insert(i, stamp)  # a late sample, within the cache: in order
            edge.values.insert(i, value)
        # Expire what is older than cache_s before the newest, and the oldest beyond max_samples.
        start = max(
            bisect.bisect_left(stamps, stamps[-1] - self.cache_s, lo=edge.start), len(stamps) - self.max_samples
        )
        edge.start = max(edge.start, start)
        if edge.start > 64 and edge.start * 2 > len(stamps):  # compact in batches: O(1) amortised per add
            del stamps[: edge.start], edge.values[: edge.start]
            edge.start = 0
        return None

    def clear(self) -> None:
        """Forget every frame and sample (the node's clock went backwards: tf2_ros clears its buffer then too)."""
        self._edges.clear()
        self._frames.clear()

    # --- looking up -------------------------------------------------------------------------------------------------
    def frames(self) -> set[str]:
        return set(self._frames)

    def edges(self) -> list[EdgeInfo]:
        out = []
        for child, e in self._edges.items():
            live = e.live() if not e.static else 1
            dynamic = not e.static and live > 0
            out.append(
                EdgeInfo(
                    e.parent,
                    child,
                    e.static,
                    live,
                    e.oldest() if dynamic else None,
                    e.newest() if dynamic else None,
                    len(e.values),
                )
            )
        return out

    def lookup(self, target: str, source: str, time_s: float | None = None, tolerance_s: float = 0.0) -> Transform2D:
        """The pose of `source` in `target` at `time_s` (tf2's lookupTransform(target, source, time)).

        The chain goes from both frames up to their nearest common ancestor. Each dynamic edge is interpolated between
        its two samples around `time_s`; within `tolerance_s` past its newest (before its oldest) sample that sample
        is held; beyond, TransformError names the edge and the gap. `time_s` None or 0 means the latest time every
        dynamic edge of the chain has (tf2's Time(0)); the result's `stamp_s` is the time used (None for an
        all-static chain, target == source included). Raises TransformError for an unknown frame or frames in
        different trees, InputError for a malformed time or tolerance."""
        if time_s is not None and not is_real(time_s):
            raise InputError(f"lookup time_s: expected finite seconds or None (latest), got {time_s!r}")
        if not (is_real(tolerance_s) and tolerance_s >= 0):
            raise InputError(f"lookup tolerance_s: expected finite seconds >= 0, got {tolerance_s!r}")
        up_source, up_target = self._chain(source, target)
        edges = up_source + up_target
        dynamic = [(child, e) for child, e in edges if not e.static]
        if time_s is None or time_s == 0:
            if not dynamic:
                time_s = None
            else:
                child, e = min(dynamic, key=lambda ce: ce[1].newest())
                time_s = e.newest()
        # source -> common ancestor, and target -> common ancestor; target <- source = inv(target side) * source side
        to_common_source = self._compose(up_source, time_s, tolerance_s, target, source)
        to_common_target = self._compose(up_target, time_s, tolerance_s, target, source)
        result = to_common_target.inverse().compose(to_common_source)
        return Transform2D(result.x, result.y, result.yaw, None if time_s is None else float(time_s))

    def transform_pose(
        self, pose: Any, target: str, source: str, time_s: float | None = None, tolerance_s: float = 0.0
    ) -> np.ndarray:
        """A pose (x, y, yaw) in `source` -> `target` (`lookup`, then `Transform2D.apply_pose`)."""
        return self.lookup(target, source, time_s, tolerance_s).apply_pose(pose)

    def transform_path(
        self, path: Any, target: str, source: str, time_s: float | None = None, tolerance_s: float = 0.0
    ) -> np.ndarray:
        """An (N, 2) or (N, 3) path in `source` -> `target`, all at one time (`lookup`, then `apply_path`)."""
        return self.lookup(target, source, time_s, tolerance_s).apply_path(path)

    def _chain(self, source: str, target: str) -> tuple[list[tuple[str, _Edge]], list[tuple[str, _Edge]]]:
        """The edges (child, edge) from source up to the common ancestor, and from target up to it."""
        for name in (target, source):
            if name not in self._frames and not (name == target == source):
                known = ", ".join(sorted(self._frames)[:20]) or "none yet"
                raise TransformError(f"frame {name!r} is unknown (frames received: {known})")
        ancestors: dict[str, int] = {}  # frame above source -> index in the source chain
        up_source: list[tuple[str, _Edge]] = []
        frame = source
        ancestors[frame] = 0
        while frame in self._edges:
            e = self._edges[frame]
            up_source.append((frame, e))
            frame = e.parent
            ancestors[frame] = len(up_source)
        up_target: list[tuple[str, _Edge]] = []
        frame = target
        while frame not in ancestors:
            if frame not in self._edges:
                raise TransformError(
                    f"frames {target!r} and {source!r} are not connected (their trees' roots are {frame!r} and "
                    f"{up_source[-1][1].parent if up_source else source!r})"
                )
            e = self._edges[frame]
            up_target.append((frame, e))
            frame = e.parent
        return up_source[: ancestors[frame]], up_target

    def _compose(
        self, chain: Iterable[tuple[str, _Edge]], time_s: float | None, tolerance_s: float, target: str, source: str
    ) -> Transform2D:
        """The product parent <- child over `chain` (child first): the lowest frame's pose in the top one."""
        out = Transform2D.identity()
        for child, e in chain:
            out = Transform2D(*self._value(e, child, time_s, tolerance_s, target, source)).compose(out)
        return out

    def _value(
        self, e: _Edge, child: str, t: float | None, tolerance_s: float, target: str, source: str
    ) -> tuple[float, float, float]:
        if e.static:
            return e.values[0]
        assert t is not None  # a chain with a dynamic edge always has a time (lookup)
        stamps, values, lo = e.stamps, e.values, e.start
        if e.live() == 0:  # not reachable today (an edge is made with its first sample), kept as a clear error
            raise TransformError(f"edge {e.parent} -> {child} holds no samples")
        oldest, newest = stamps[lo], stamps[-1]
        if t >= newest or t <= oldest:
            gap = t - newest if t >= newest else oldest - t
            if gap > tolerance_s:
                when = "after its newest" if t >= newest else "before its oldest"
                raise TransformError(
                    f"lookup {target} <- {source} at {t:.3f} s: edge {e.parent} -> {child} has data from {oldest:.3f} "
                    f"to {newest:.3f} s, {gap:.4g} s {when} sample, beyond the tolerance {tolerance_s:g} s"
                )
            return values[-1] if t >= newest else values[lo]
        i = bisect.bisect_right(stamps, t, lo=lo)  # stamps[i - 1] <= t < stamps[i]
        t0, t1 = stamps[i - 1], stamps[i]
        (x0, y0, a0), (x1, y1, a1) = values[i - 1], values[i]
        r = (t - t0) / (t1 - t0)
        return x0 + r * (x1 - x0), y0 + r * (y1 - y0), _wrap(a0 + r * _wrap(a1 - a0))

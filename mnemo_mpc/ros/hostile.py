"""Seeded hostile-message fuzz of the node core (`NavAdapter`), closed loop on a simulated clock (issue 9, 10-12).

Into the realistic stream of `mnemo_mpc.ros.stream` (a robot driving in generated worlds: its odometry, local grid,
goals and paths; sensor dropouts and sim clock resets) come hostile messages (`HostileScenario`, `HOSTILE`): NaN /
+-inf in every float field of every input type, wrong data length, zero / negative / NaN resolution, empty, 1x1, 3x3
and huge grids, cell values out of range, zero and unnormalised quaternions, stamps backwards / in the far future /
zero / malformed, frame mismatches, paths with 0 / 1 / NaN points, goals in obstacles or off the map, goals at every
decade of distance from 10 m to 1e12 m (the accepted band ends at `convert.MAX_COORDINATE_M`), odometry with absurd
velocities.

Every control period the runner delivers that period's messages to the callbacks (each at its receive time), ticks
the adapter at `now_s` (advancing by T = 1 / control_rate_hz per tick, whatever the wall time), and checks the
node's contract (`Monitor`):

* no exception out of a callback or a tick, and none swallowed inside (issue 26: `NavAdapter` catches everything,
  so those two could never fire): a tick with status "error" (the adapter caught an exception from the controller),
  a message dropped because parsing raised something other than `InputError` (`AdapterStats.unexpected`), and any
  ERROR log record from the package are each a violation;
* every tick within `FuzzConfig.max_tick_s` (1 s, 10-100 periods: a generous bound on a shared machine, far below
  the 1-6 s ticks a far goal once caused);
* every published command is finite, within [v_min, v_max] x [-w_max, w_max], and differs from the previously
  published one (initially (0, 0), kept across idle periods) by at most a_max T and alpha_max T -- for a node that
  compensates a lagging drive (`compensate_dynamics` with lags), by at most (2 - r) a dt / r per axis, r = 1 -
  exp(-dt / lag), dt the MPC step: its command is the lag's inverse of a target within a dt of the velocity it
  predicts (`nav.actuation`), |c_k - v_k| <= a dt / r, and the velocity follows the last command, |v_k - c_(k-1)| <=
  (1 - r) |c_(k-1) - v_(k-1)|;
* the published Twist carries that command; nothing is published only when the last published command was zero;
* when the odometry or the grid is surely stale (no message of that kind that could be accepted arrived within
  `stale_timeout_s` before now - not after it: the clock may have gone back - stamped within `stale_timeout_s` of
  now or unstamped, sec = nanosec = 0 being ROS's "unset"), the command decelerates towards zero and is exactly
  zero once the limits allow (one period of slack; a compensating node's braking command may pass zero by a dt / r,
  and its velocity, not its command, is what decelerates at a: the lag and latency add their periods);
* where the adapter exposes `last_rejection`: messages that must be dropped are, and clean ones are not.

Each message is labelled: "clean" (the realistic stream), "may" (odd but usable, e.g. an unnormalised quaternion:
accepting or dropping both fine), "stale" (usable content, stamp out of the freshness window: must not count as
fresh), "bad" (must be dropped: NaN where the node reads a number, wrong length, wrong frame...). The wall time of
each callback and tick is recorded; timing is reported, not asserted (`mnemo-mpc bench node`).
"""

from __future__ import annotations

import array
import dataclasses
import logging
import math
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.stream import (
    LATENCY_S,
    TOPICS,
    Delivery,
    MessageFactory,
    Scenario,
    ScenarioState,
    StreamConfig,
)
from mnemo_mpc.sim.episode import percentiles

LABELS = ("clean", "may", "stale", "bad")  # module docstring
# Float fields the node reads (NaN/inf there must drop the message); NaN elsewhere (covariance, z, ...) may pass.
USED_FLOATS = {
    "grid": {"info.resolution", "info.origin.position.x", "info.origin.position.y"}
    | {f"info.origin.orientation.{c}" for c in "xyzw"},
    "odometry": {"pose.pose.position.x", "pose.pose.position.y", "twist.twist.linear.x", "twist.twist.angular.z"}
    | {f"pose.pose.orientation.{c}" for c in "xyzw"},
    "goal": {"pose.position.x", "pose.position.y"} | {f"pose.orientation.{c}" for c in "xyzw"},
    "path": {"poses[].pose.position.x", "poses[].pose.position.y"},
}
TOPIC_WEIGHTS = (0.46, 0.46, 0.04, 0.04)  # hostile messages per topic: sensors stream, goals and paths are rare
FRESH_MARGIN_S = 1e-3  # "surely stale" is decided this far past the boundary, so rounding cannot flip it


@dataclass(frozen=True)
class FuzzConfig(StreamConfig):
    """One fuzz run: the stream (`StreamConfig`), the hostile mix and the contract's tick budget."""

    hostile_per_tick: float = 4.0  # mean hostile messages per control period (Poisson); 0: the realistic stream only
    huge_grids: int = 2  # 2000 x 2000 grids per run (each costs ~4 MB and some time; keep it small)
    huge_cells: int = 2000
    exclude: tuple[str, ...] = ()  # hostile variants left out (name prefixes), to isolate one finding from another
    max_tick_s: float = 1.0  # a tick slower than this is a violation (module docstring)

    def __post_init__(self) -> None:
        from mnemo_mpc.errors import InputError

        if self.messages < 1 or self.max_ticks < 1 or self.hostile_per_tick < 0 or self.window_cells < 8:
            raise InputError(
                "FuzzConfig: expected messages >= 1, max_ticks >= 1, hostile_per_tick >= 0, window_cells >= 8, got "
                f"{self.messages}, {self.max_ticks}, {self.hostile_per_tick}, {self.window_cells}"
            )


def header_seconds(msg: Any) -> float:
    """header.stamp in seconds as sent (no validation: the monitor reasons about malformed stamps too)."""
    s = msg.header.stamp
    return float(s.sec) + float(s.nanosec) * 1e-9


def describe(msg: Any, limit: int = 600) -> str:
    """A short, readable repr of a message: vectors inline, arrays summarised (size, dtype, range), paths as their
    extent and where they are non-finite."""

    def num(x: Any) -> str:
        return f"{x:.6g}" if isinstance(x, float) else repr(x)

    def walk(v: Any) -> str:
        kind = getattr(v, "__msgtype__", "").split("/")[-1]
        if kind == "Time":
            return f"{v.sec}s+{v.nanosec}ns"
        if kind == "Header":
            return f"{v.frame_id!r}@{walk(v.stamp)}"
        if kind in ("Point", "Vector3", "Quaternion"):
            return "(" + ", ".join(num(getattr(v, c)) for c in ("x", "y", "z", "w") if hasattr(v, c)) + ")"
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = [f.name for f in dataclasses.fields(v) if not f.name.startswith("__")]
            return f"{kind or type(v).__name__}(" + ", ".join(f"{n}={walk(getattr(v, n))}" for n in fields) + ")"
        if isinstance(v, (np.ndarray, array.array)):
            a = np.asarray(v)
            if a.size <= 6:
                return f"{type(v).__name__}({a.tolist()})"
            with np.errstate(invalid="ignore"):
                return f"<{type(v).__name__} {a.dtype} x{a.size} min={a.min()} max={a.max()}>"
        if isinstance(v, list):
            if v and getattr(v[0], "__msgtype__", "").endswith("PoseStamped"):
                xy = np.array([[p.pose.position.x, p.pose.position.y] for p in v], dtype=float)
                bad = np.flatnonzero(~np.all(np.isfinite(xy), axis=1))
                finite = xy[np.all(np.isfinite(xy), axis=1)]
                lo, hi = (finite.min(axis=0), finite.max(axis=0)) if len(finite) else (xy[0], xy[0])
                return (
                    f"<{len(v)} poses, first {walk(v[0].pose.position)}, x {lo[0]:.6g}..{hi[0]:.6g}, "
                    f"y {lo[1]:.6g}..{hi[1]:.6g}" + (f", non-finite at {bad[:5].tolist()}" if bad.size else "") + ">"
                )
            return "[" + ", ".join(walk(x) for x in v[:3]) + (f", ... ({len(v)} items)]" if len(v) > 3 else "]")
        return num(v)

    text = walk(msg)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _float_leaves(obj: Any, prefix: str = "") -> list[tuple[Any, Any, str]]:
    """(container, key, normalised path) of every float field (numpy float arrays: every element)."""
    out: list[tuple[Any, Any, str]] = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        path = f"{prefix}{f.name}"
        if isinstance(v, float):
            out.append((obj, f.name, path))
        elif isinstance(v, np.ndarray) and v.dtype.kind == "f":
            out.extend((v, i, f"{path}[]") for i in range(v.size))
        elif dataclasses.is_dataclass(v):
            out.extend(_float_leaves(v, path + "."))
        elif isinstance(v, list):
            for item in v:
                if dataclasses.is_dataclass(item):
                    out.extend(_float_leaves(item, path + "[]."))
    return out


# --- hostile variants ---------------------------------------------------------------------------------------------
# Each takes (rng, factory, state, now_s) and returns (topic, msg, label) or a list of them.
Variant = Callable[[np.random.Generator, MessageFactory, ScenarioState, float], Any]


def _clean(topic: str, f: MessageFactory, s: ScenarioState, stamp: float) -> Any:
    if topic == "grid":
        return f.grid(s.grid, stamp)
    if topic == "odometry":
        return f.odometry(s.pose, s.velocity, stamp)
    if topic == "goal":
        return f.goal(s.episode.goal, stamp)
    return f.path(s.episode.path if s.episode.path is not None else np.array([s.pose[:2], s.episode.goal[:2]]), stamp)


def _float_variant(topic: str, value: float) -> Variant:
    def make(rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> Any:
        msg = _clean(topic, f, s, now - LATENCY_S[topic])
        leaves: dict[str, list[tuple[Any, Any]]] = {}
        for container, key, path in _float_leaves(msg):
            leaves.setdefault(path, []).append((container, key))
        path = sorted(leaves)[int(rng.integers(len(leaves)))]  # every field alike, then one element of it
        container, key = leaves[path][int(rng.integers(len(leaves[path])))]
        if isinstance(container, np.ndarray):
            container[key] = value
        else:
            setattr(container, key, value)
        label = "bad" if path in USED_FLOATS[topic] else "may"
        return topic, msg, label, path

    return make


def _mutate(topic: str, label: str, edit: Callable[..., None]) -> Variant:
    """A clean message of `topic` stamped now, changed in place by edit(msg, rng, factory, state, now)."""

    def make(rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> Any:
        msg = _clean(topic, f, s, now - LATENCY_S[topic])
        edit(msg, rng, f, s, now)
        return topic, msg, label

    return make


def _set(path: str, value: Any) -> Callable[..., None]:
    def edit(msg: Any, *_: Any) -> None:
        *parents, last = path.split(".")
        obj = msg
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, value() if callable(value) else value)

    return edit


def _quaternion(path: str, scale: float) -> Callable[..., None]:
    def edit(msg: Any, *_: Any) -> None:
        q = msg
        for p in path.split("."):
            q = getattr(q, p)
        q.x, q.y, q.z, q.w = (scale * float(c) for c in (q.x, q.y, q.z, q.w))

    return edit


def _stamp(offset_s: float | None, sec: int | None = None, nanosec: int | None = None) -> Callable[..., None]:
    def edit(msg: Any, rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> None:
        if offset_s is not None:
            msg.header.stamp = f.header(now + offset_s).stamp
        if sec is not None:
            msg.header.stamp.sec = sec
        if nanosec is not None:
            msg.header.stamp.nanosec = nanosec

    return edit


def _grid_data(make_data: Callable[[np.random.Generator, Any], np.ndarray]) -> Callable[..., None]:
    def edit(msg: Any, rng: np.random.Generator, *_: Any) -> None:
        msg.data = make_data(rng, msg)

    return edit


def _small_grid(rows: int, cols: int) -> Callable[..., None]:
    def edit(msg: Any, rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> None:
        g = s.episode.world.grid.window(s.pose[:2], (rows, cols))
        msg.info = f.grid(g, now).info
        msg.data = g.data.reshape(-1).astype(np.int8)

    return edit


def _out_of_range(rng: np.random.Generator, msg: Any) -> np.ndarray:
    data = np.array(msg.data, dtype=np.int8)
    idx = rng.choice(data.size, size=min(data.size, 50), replace=False)
    data[idx] = rng.choice(np.array([-128, -2, 101, 127], dtype=np.int8), size=idx.size)
    return data


def _grid_dims(width: int, height: int) -> Callable[..., None]:
    def edit(msg: Any, *_: Any) -> None:
        msg.info.width, msg.info.height = width, height

    return edit


def _goal_in_obstacle(msg: Any, rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> None:
    occ = s.episode.occupied_xy
    near = occ[np.hypot(*(occ - s.pose[:2]).T) < 3.0]
    pool = near if len(near) else occ
    x, y = pool[int(rng.integers(len(pool)))]  # generated worlds always have walls
    msg.pose = convert.make_pose(f.types, float(x), float(y), 0.0)


def _goal_at(xy: Callable[[np.random.Generator, ScenarioState], tuple[float, float]]) -> Callable[..., None]:
    def edit(msg: Any, rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> None:
        x, y = xy(rng, s)
        msg.pose = convert.make_pose(f.types, x, y, float(rng.uniform(-math.pi, math.pi)))

    return edit


def _far_goal(distance: float) -> Variant:
    """A goal `distance` to `10 distance` metres from the robot in a random direction: "may" while its coordinates
    are within `convert.MAX_COORDINATE_M` (the node must then plan towards it with bounded work), else "bad"."""

    def make(rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> Any:
        msg = _clean("goal", f, s, now - LATENCY_S["goal"])
        heading = float(rng.uniform(-math.pi, math.pi))
        d = distance * float(rng.uniform(1.0, 10.0))
        x, y = s.pose[0] + d * math.cos(heading), s.pose[1] + d * math.sin(heading)
        msg.pose = convert.make_pose(f.types, x, y, heading)
        label = "may" if max(abs(x), abs(y)) <= convert.MAX_COORDINATE_M else "bad"
        return "goal", msg, label

    return make


def _path_points(points: Callable[[np.random.Generator, ScenarioState], np.ndarray]) -> Callable[..., None]:
    def edit(msg: Any, rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> None:
        msg.poses = f.path(points(rng, s), now).poses

    return edit


def _path_nan_point(msg: Any, rng: np.random.Generator, *_: Any) -> None:
    pose = msg.poses[int(rng.integers(len(msg.poses)))].pose
    setattr(pose.position, "x" if rng.random() < 0.5 else "y", float(rng.choice([np.nan, np.inf, -np.inf])))


def _odom_burst(rng: np.random.Generator, f: MessageFactory, s: ScenarioState, now: float) -> Any:
    # A stalled executor delivers a queue at once: 20 odometry messages with the stamps they were sent at.
    return [
        ("odometry", f.odometry(s.pose, s.velocity, now - LATENCY_S["odometry"] - 0.02 * (19 - i)), "may")
        for i in range(20)
    ]


HOSTILE: dict[str, tuple[str, Variant]] = {}  # name -> (topic, variant); "huge grid" is scheduled separately


def _register() -> None:
    h = HOSTILE
    for topic in TOPICS:
        for name, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
            h[f"{topic}_float_{name}"] = (topic, _float_variant(topic, value))
        frame = "header.frame_id"
        # Goal and path may come in any frame: held until /tf connects it to frame_id (none here: stale input)
        elsewhere = "may" if topic in ("goal", "path") else "bad"
        h[f"{topic}_frame_map"] = (topic, _mutate(topic, elsewhere, _set(frame, "map")))
        h[f"{topic}_frame_huge"] = (topic, _mutate(topic, "bad", _set(frame, "m" * 100_000)))
        h[f"{topic}_frame_empty"] = (topic, _mutate(topic, "bad", _set(frame, "")))
        h[f"{topic}_frame_slash"] = (topic, _mutate(topic, "may", _set(frame, "/odom")))
    # stamps (goal and path are sent once and may carry any stamp: "may")
    for topic in TOPICS:
        timed = "stale" if topic in ("grid", "odometry") else "may"
        h[f"{topic}_stamp_old"] = (topic, _mutate(topic, timed, _stamp(-10.0)))
        h[f"{topic}_stamp_future"] = (topic, _mutate(topic, timed, _stamp(1.0e6)))
        # sec = nanosec = 0 is ROS's "unset" stamp (`ros2 topic pub` sends it): may count by arrival time alone
        h[f"{topic}_stamp_zero"] = (topic, _mutate(topic, "may", _stamp(None, sec=0, nanosec=0)))
        h[f"{topic}_stamp_negative"] = (topic, _mutate(topic, timed, _stamp(None, sec=-5)))
        h[f"{topic}_stamp_nanosec_overflow"] = (topic, _mutate(topic, timed, _stamp(None, nanosec=2**32 - 1)))
        h[f"{topic}_stamp_backwards_small"] = (topic, _mutate(topic, "may", _stamp(-0.15)))
    # grids
    h["grid_resolution_zero"] = ("grid", _mutate("grid", "bad", _set("info.resolution", 0.0)))
    h["grid_resolution_negative"] = ("grid", _mutate("grid", "bad", _set("info.resolution", -0.05)))
    h["grid_resolution_tiny"] = ("grid", _mutate("grid", "may", _set("info.resolution", 1e-30)))
    h["grid_resolution_huge"] = ("grid", _mutate("grid", "may", _set("info.resolution", 1e6)))
    h["grid_data_short"] = ("grid", _mutate("grid", "bad", _grid_data(lambda r, m: np.asarray(m.data)[:-1].copy())))
    h["grid_data_long"] = ("grid", _mutate("grid", "bad", _grid_data(lambda r, m: np.append(m.data, np.int8(0)))))
    h["grid_data_empty"] = ("grid", _mutate("grid", "bad", _grid_data(lambda r, m: np.zeros(0, np.int8))))
    h["grid_width_zero"] = ("grid", _mutate("grid", "bad", _grid_dims(0, 120)))
    h["grid_height_zero"] = ("grid", _mutate("grid", "bad", _grid_dims(120, 0)))
    h["grid_empty_0x0"] = (
        "grid",
        _mutate("grid", "bad", lambda m, *a: (_grid_dims(0, 0)(m), setattr(m, "data", np.zeros(0, np.int8)))),
    )
    h["grid_dims_overflow"] = ("grid", _mutate("grid", "bad", _grid_dims(2**32 - 1, 2**32 - 1)))
    h["grid_dims_reshaped"] = ("grid", _mutate("grid", "may", _grid_dims(240, 60)))  # same cell count
    h["grid_1x1"] = ("grid", _mutate("grid", "may", _small_grid(1, 1)))
    h["grid_3x3"] = ("grid", _mutate("grid", "may", _small_grid(3, 3)))
    h["grid_1x400"] = ("grid", _mutate("grid", "may", _small_grid(1, 400)))
    h["grid_values_out_of_range"] = ("grid", _mutate("grid", "may", _grid_data(_out_of_range)))
    h["grid_all_unknown"] = ("grid", _mutate("grid", "may", _grid_data(lambda r, m: np.full(len(m.data), -1, np.int8))))
    h["grid_all_occupied"] = (
        "grid",
        _mutate("grid", "may", _grid_data(lambda r, m: np.full(len(m.data), 100, np.int8))),
    )
    h["grid_as_list"] = ("grid", _mutate("grid", "clean", _grid_data(lambda r, m: np.asarray(m.data).tolist())))
    h["grid_as_array_b"] = (
        "grid",  # what rclpy hands a callback: array.array('b')
        _mutate("grid", "clean", _grid_data(lambda r, m: array.array("b", np.asarray(m.data).tobytes()))),
    )
    h["grid_far_away"] = ("grid", _mutate("grid", "may", _set("info.origin.position.x", 1.0e4)))
    h["grid_quat_zero"] = ("grid", _mutate("grid", "bad", _quaternion("info.origin.orientation", 0.0)))
    h["grid_quat_unnormalised"] = ("grid", _mutate("grid", "may", _quaternion("info.origin.orientation", 3.0)))
    # odometry
    h["odometry_quat_zero"] = ("odometry", _mutate("odometry", "bad", _quaternion("pose.pose.orientation", 0.0)))
    h["odometry_quat_unnormalised"] = (
        "odometry",
        _mutate("odometry", "may", _quaternion("pose.pose.orientation", 0.2)),
    )
    h["odometry_velocity_huge"] = ("odometry", _mutate("odometry", "may", _set("twist.twist.linear.x", 1.0e6)))
    h["odometry_velocity_reverse"] = ("odometry", _mutate("odometry", "may", _set("twist.twist.linear.x", -3.0)))
    h["odometry_spin_huge"] = ("odometry", _mutate("odometry", "may", _set("twist.twist.angular.z", -1.0e6)))
    h["odometry_position_huge"] = ("odometry", _mutate("odometry", "may", _set("pose.pose.position.x", 1.0e12)))
    h["odometry_child_frame_empty"] = ("odometry", _mutate("odometry", "may", _set("child_frame_id", "")))
    h["odometry_burst"] = ("odometry", _odom_burst)
    # goals
    h["goal_quat_zero"] = ("goal", _mutate("goal", "bad", _quaternion("pose.orientation", 0.0)))
    h["goal_quat_unnormalised"] = ("goal", _mutate("goal", "may", _quaternion("pose.orientation", 5.0)))
    h["goal_in_obstacle"] = ("goal", _mutate("goal", "may", _goal_in_obstacle))
    h["goal_off_map"] = ("goal", _mutate("goal", "may", _goal_at(lambda r, s: (-50.0, 80.0))))
    h["goal_huge"] = ("goal", _mutate("goal", "bad", _goal_at(lambda r, s: (1.0e12, -1.0e12))))
    for decade in range(1, 13):  # every decade of distance: 10 m ... 1e12 m, beyond the accepted 1e6 m too
        h[f"goal_far_1e{decade:02d}"] = ("goal", _far_goal(10.0**decade))
    h["goal_at_robot"] = ("goal", _mutate("goal", "may", _goal_at(lambda r, s: (s.pose[0], s.pose[1]))))
    # paths
    h["path_empty"] = ("path", _mutate("path", "may", _set("poses", list)))
    h["path_one_point"] = ("path", _mutate("path", "may", _path_points(lambda r, s: s.pose[None, :2])))
    h["path_nan_point"] = ("path", _mutate("path", "bad", _path_nan_point))
    h["path_duplicates"] = (
        "path",
        _mutate("path", "may", _path_points(lambda r, s: np.repeat(s.pose[None, :2], 50, axis=0))),
    )
    h["path_long"] = (
        "path",
        _mutate("path", "may", _path_points(lambda r, s: s.pose[:2] + r.normal(0, 2.0, (5000, 2)).cumsum(0) * 0.01)),
    )
    h["path_far_away"] = ("path", _mutate("path", "may", _path_points(lambda r, s: np.array([[1e6, 1e6], [1e6, 2e6]]))))


_register()


# --- the scenario ---------------------------------------------------------------------------------------------------
class HostileScenario(Scenario):
    """The realistic message stream plus hostile injections, closed loop through the published commands."""

    cfg: FuzzConfig

    def __init__(self, cfg: FuzzConfig, params: NavParams, factory: MessageFactory | None = None) -> None:
        super().__init__(cfg, params, factory)
        self._variants = {
            t: sorted(n for n, (topic, _) in HOSTILE.items() if topic == t and not n.startswith(cfg.exclude or "\0"))
            for t in TOPICS
        }

    def _messages_per_tick(self) -> float:
        return super()._messages_per_tick() + self.cfg.hostile_per_tick

    def _schedule(self, horizon: int) -> None:
        self._huge_at = set(self.rng.integers(5, horizon, self.cfg.huge_grids).tolist())

    def _injected(self, t_start: float, t_end: float) -> list[Delivery]:
        """Hostile messages at random times in the period, and a huge grid at the ticks drawn for one."""
        cfg, rng = self.cfg, self.rng
        out: list[Delivery] = []
        for _ in range(int(rng.poisson(cfg.hostile_per_tick))):
            names = self._variants[TOPICS[int(rng.choice(len(TOPICS), p=TOPIC_WEIGHTS))]]
            if not names:
                continue
            for d in self.hostile(names[int(rng.integers(len(names)))], float(rng.uniform(t_start, t_end))):
                # a silent sensor sends nothing usable; malformed or mis-stamped messages still test the staleness
                if d.label in ("bad", "stale") or d.recv_s > self._dropout_until.get(d.topic, -math.inf):
                    out.append(d)
        if self.tick in self._huge_at:
            out.extend(self.hostile("grid_huge", float(rng.uniform(t_start, t_end))))
        return out

    def hostile(self, name: str, t: float) -> list[Delivery]:
        """The deliveries of hostile variant `name` (a key of HOSTILE, or "grid_huge") arriving at `t`."""
        if name == "grid_huge":
            n = self.cfg.huge_cells
            big = self.state.episode.world.grid.window(self.state.pose[:2], (n, n))
            return [Delivery("grid", self.factory.grid(big, t - LATENCY_S["grid"]), t, name, "may")]
        topic, make = HOSTILE[name]
        made = make(self.rng, self.factory, self.state, t)
        items = made if isinstance(made, list) else [made]
        out = []
        for item in items:
            topic, msg, label = item[:3]
            variant = f"{name}:{item[3]}" if len(item) > 3 else name
            out.append(Delivery(topic, msg, t, variant, label))
        if topic in ("goal", "path") and self._restore_at is None:  # the real goal is re-sent a little later
            self._restore_at = self.tick + int(self.rng.integers(1, 15))
        return out


# --- the contract ---------------------------------------------------------------------------------------------------
@dataclass
class Violation:
    kind: str
    tick: int
    now_s: float
    detail: str
    messages: list[str] = field(default_factory=list)  # the period's deliveries (variant, label, repr)

    def __str__(self) -> str:
        lines = [f"[{self.kind}] tick {self.tick} (now {self.now_s:.3f} s): {self.detail}"]
        lines += [f"    {m}" for m in self.messages]
        return "\n".join(lines)


@dataclass
class FuzzReport:
    rate_hz: float
    messages: int = 0
    ticks: int = 0
    published: int = 0
    counts: Counter = field(default_factory=Counter)  # violation kind -> count
    examples: list[Violation] = field(default_factory=list)  # the first few of each kind
    tick_ms: list[float] = field(default_factory=list)
    period_ms: list[float] = field(default_factory=list)  # a control period's callbacks + its tick
    controller_ms: list[float] = field(default_factory=list)  # Controller.step inside the tick (ControlOutput.time_s)
    tick_ms_with_controller: list[float] = field(default_factory=list)  # ticks that ran the controller (not a stop)
    solve_ms: list[float] = field(default_factory=list)  # the SQP (and fallback) solve inside it (PlanResult.time_s)
    tick_ms_by_status: dict[str, list[float]] = field(default_factory=dict)
    slowest: list[tuple[float, int, str, str, list[str]]] = field(default_factory=list)  # top ticks by wall time
    callback_ms: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TOPICS})
    variants: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)  # (variant, "accepted" | "rejected") where observable
    labels: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    rejection_checks: bool = False  # the adapter's rejections are observable (accepted/rejected labels checked)
    own_path_episodes: int = 0
    own_path_ticks: int = 0  # ticks whose goal had no global path: the controller planned its own
    far_goal_ticks: int = 0  # ticks planned towards a goal over 100 m away
    stale_ticks: int = 0
    moving_ticks: int = 0
    episodes: int = 0
    goals_reached: int = 0
    collisions: int = 0
    clock_resets: int = 0
    warm_up_s: float = 0.0
    wall_s: float = 0.0

    def record_tick(self, tick: int, ms: float, period_ms: float, status: str, reason: str, period: list) -> None:
        self.ticks += 1
        self.tick_ms.append(ms)
        self.period_ms.append(period_ms)
        self.statuses[status] += 1
        self.tick_ms_by_status.setdefault(status, []).append(ms)
        if len(self.slowest) < 5 or ms > self.slowest[-1][0]:
            odd = sorted({d.variant for d in period if d.label != "clean"})
            self.slowest = sorted([*self.slowest, (ms, tick, status, reason[:160], odd)], reverse=True)[:5]

    @property
    def violations(self) -> int:
        return sum(self.counts.values())

    def timing(self) -> dict[str, Any]:
        """Wall-time percentiles: ticks (all, and by status), control periods (callbacks + tick), callbacks."""
        return {
            "tick_ms": percentiles(self.tick_ms),
            "tick_ms_by_status": {k: percentiles(v) for k, v in sorted(self.tick_ms_by_status.items())},
            "period_ms": percentiles(self.period_ms),
            "tick_ms_with_controller": percentiles(self.tick_ms_with_controller),
            "controller_ms": percentiles(self.controller_ms),
            "solve_ms": percentiles(self.solve_ms),
            "callback_ms": {t: percentiles(v) for t, v in self.callback_ms.items() if v},
        }

    def summary(self) -> dict[str, Any]:
        period_ms = 1e3 / self.rate_hz
        return {
            "rate_hz": self.rate_hz,
            "messages": self.messages,
            "ticks": self.ticks,
            "published": self.published,
            "violations": dict(self.counts),
            "ticks_over_period": int(sum(t > period_ms for t in self.tick_ms)),
            **self.timing(),
            "labels": dict(self.labels),
            "statuses": dict(self.statuses),
            "rejection_checks": self.rejection_checks,
            "rejected_messages": sum(n for (_, o), n in self.outcomes.items() if o == "rejected"),
            "own_path_episodes": self.own_path_episodes,
            "own_path_ticks": self.own_path_ticks,
            "far_goal_ticks": self.far_goal_ticks,
            "stale_ticks": self.stale_ticks,
            "moving_ticks": self.moving_ticks,
            "episodes": self.episodes,
            "goals_reached": self.goals_reached,
            "collisions": self.collisions,
            "clock_resets": self.clock_resets,
            "warm_up_s": self.warm_up_s,
            "wall_s": self.wall_s,
            "slowest_ticks": [
                {"ms": ms, "tick": k, "status": st, "reason": why, "hostile_this_period": odd}
                for ms, k, st, why, odd in self.slowest
            ],
            "outcomes": self.outcome_table(),
        }

    def outcome_table(self) -> dict[str, dict[str, int]]:
        """variant -> {"accepted": n, "rejected": m}, where the adapter's rejections are observable."""
        table: dict[str, dict[str, int]] = {}
        for (variant, outcome), n in sorted(self.outcomes.items()):
            table.setdefault(variant, {})[outcome] = n
        return table

    def text(self, max_examples: int = 3) -> str:
        s = self.summary()
        t = s["tick_ms"]
        lines = [
            f"fuzz @ {self.rate_hz:g} Hz: {self.messages} messages, {self.ticks} ticks ({self.published} published, "
            f"{self.moving_ticks} moving, {self.stale_ticks} surely stale), {self.episodes} episodes, "
            f"{self.goals_reached} goals reached, {self.collisions} collisions, {self.clock_resets} clock resets, "
            f"{self.own_path_ticks} own-path ticks, {self.far_goal_ticks} far-goal ticks; "
            f"violations {dict(self.counts)}",
            f"tick ms p50 {t['p50']:.2f} p99 {t['p99']:.2f} max {t['max']:.2f} (period {1e3 / self.rate_hz:.0f} ms, "
            f"{s['ticks_over_period']} over); wall {self.wall_s:.1f} s",
        ]
        lines += [
            f"  slow tick {ms:.1f} ms (tick {k}, {st}{': ' + why if why else ''}); hostile that period: {odd}"
            for ms, k, st, why, odd in self.slowest[:3]
        ]
        shown: Counter = Counter()
        for v in self.examples:
            if shown[v.kind] < max_examples:
                shown[v.kind] += 1
                lines.append(str(v))
        return "\n".join(lines)


class Monitor:
    """Checks each callback and tick against the node's contract (module docstring)."""

    def __init__(self, params: NavParams, report: FuzzReport, max_examples: int = 5) -> None:
        robot = params.robot_model()
        self.params = params
        self.report = report
        self.max_examples = max_examples
        self.period_s = 1.0 / params.control_rate_hz
        self.lower, self.upper = robot.control_lower, robot.control_upper
        self.step = robot.accel_limits * self.period_s  # the command's change per period (module docstring)
        self.brake_step = self.step.copy()  # the velocity's, braking
        self.overshoot = np.zeros(2)  # how far past zero a braking command may go
        self.lag_ticks = 0  # periods the velocity trails the command by (latency and lag)
        drive = params.actuation()
        if drive is not None:
            r = drive.response(params.dt)
            self.overshoot = robot.accel_limits * params.dt * drive.lead(params.dt)
            self.step = np.maximum(self.step, (2.0 - r) * self.overshoot)
            settle = drive.latency_s + 3.0 * max(drive.lag_v_s, drive.lag_w_s)  # within 5 % of a step
            self.lag_ticks = int(math.ceil(settle / self.period_s))
        self.last = np.zeros(2)  # last published command
        self.fresh: dict[str, deque] = {"grid": deque(maxlen=4096), "odometry": deque(maxlen=4096)}
        self.stale_run = 0
        self.stale_from = np.zeros(2)
        self.period: list[Delivery] = []
        self.last_accepted: dict[str, Delivery] = {}  # where the adapter's rejections are observable

    def violation(
        self,
        kind: str,
        tick: int,
        now: float,
        detail: str,
        deliveries: list[Delivery] | None = None,
        last_accepted: tuple[str, ...] = (),
    ) -> None:
        """Count a violation; keep the first few of each kind with the period's odd messages (or `deliveries`) and
        the last message the adapter accepted on the topics in `last_accepted` (all sensors for staleness)."""
        self.report.counts[kind] += 1
        if sum(v.kind == kind for v in self.report.examples) < self.max_examples:
            ds = self.period if deliveries is None else deliveries
            odd = [d for d in ds if d.label != "clean"] if deliveries is None else ds
            msgs = [f"{d.topic} {d.variant} [{d.label}] @ {d.recv_s:.3f}: {describe(d.msg)}" for d in odd[-8:]]
            if len(ds) > len(odd):
                msgs.append(f"(+ {len(ds) - len(odd)} clean messages this period)")
            topics = tuple(self.fresh) if kind.startswith("stale") else last_accepted
            msgs += [
                f"last accepted {t}: {d.variant} [{d.label}] @ {d.recv_s:.3f}: {describe(d.msg)}"
                for t, d in self.last_accepted.items()
                if t in topics
            ]
            self.report.examples.append(Violation(kind, tick, now, detail, msgs))

    def delivered(self, d: Delivery) -> None:
        self.period.append(d)
        if d.topic in self.fresh and d.label in ("clean", "may"):
            self.fresh[d.topic].append((d.recv_s, header_seconds(d.msg)))

    def surely_stale(self, now: float) -> bool:
        timeout, m = self.params.stale_timeout_s, FRESH_MARGIN_S

        def fresh(recv: float, stamp: float) -> bool:  # stamp 0: unset, only the arrival time counts
            return -m <= now - recv <= timeout + m and (stamp == 0.0 or abs(now - stamp) <= timeout + m)

        return any(not any(fresh(r, s) for r, s in q) for q in self.fresh.values())

    def tick(self, tick: int, now: float, command: Any, cmd_vel: Any) -> None:
        rep, tol = self.report, 1e-9
        stale = self.surely_stale(now)
        rep.stale_ticks += stale
        if command is None:
            if cmd_vel is not None:
                self.violation("cmd_vel_mismatch", tick, now, "cmd_vel published with command None")
            if np.any(self.last != 0.0):
                self.violation(
                    "silent_while_moving", tick, now, f"nothing published; last command {self.last.tolist()}"
                )
            self.stale_run = 0
            return
        cmd = np.asarray(command, dtype=float)
        if cmd.shape != (2,) or not np.all(np.isfinite(cmd)):
            self.violation("non_finite_command", tick, now, f"command {command!r}")
            return
        rep.published += 1
        rep.moving_ticks += bool(np.any(cmd != 0.0))
        if cmd_vel is not None:
            twist = getattr(cmd_vel, "twist", cmd_vel)
            if (twist.linear.x, twist.angular.z) != (cmd[0], cmd[1]):
                self.violation("cmd_vel_mismatch", tick, now, f"cmd_vel {twist.linear.x, twist.angular.z} != {cmd}")
        else:
            self.violation("cmd_vel_mismatch", tick, now, f"command {cmd.tolist()} but no cmd_vel message")
        slack = tol * np.maximum(1.0, np.abs(np.concatenate([self.lower, self.upper])))
        if np.any(cmd < self.lower - slack[:2]) or np.any(cmd > self.upper + slack[2:]):
            self.violation("velocity_limit", tick, now, f"command {cmd.tolist()} outside {self.lower}..{self.upper}")
        delta = np.abs(cmd - self.last)
        if np.any(delta > self.step * (1 + tol) + 1e-12):
            self.violation(
                "acceleration_limit",
                tick,
                now,
                f"command {cmd.tolist()} after {self.last.tolist()}: |delta| {delta.tolist()} > "
                f"{self.step.tolist()} (a_max, alpha_max x T={self.period_s:g} s, or the lag's inverse of it)",
            )
        if stale:
            if self.stale_run == 0:
                self.stale_from = self.last.copy()
            self.stale_run += 1
            toward_zero = np.all(
                (np.abs(cmd) <= np.maximum(np.abs(self.last), self.overshoot) + tol)
                & ((cmd * self.last >= 0.0) | (np.abs(cmd) <= self.overshoot + tol))
            )
            if not toward_zero:
                self.violation(
                    "stale_not_decelerating", tick, now, f"stale input: {cmd.tolist()} after {self.last.tolist()}"
                )
            reach = np.abs(self.stale_from) + self.overshoot
            needed = int(np.max(np.ceil(reach / self.brake_step - 1e-9))) + self.lag_ticks
            if self.stale_run > needed + 1 and np.any(cmd != 0.0):
                self.violation(
                    "stale_not_stopped",
                    tick,
                    now,
                    f"stale for {self.stale_run} ticks (zero reachable in {needed} from {self.stale_from.tolist()}); "
                    f"command {cmd.tolist()}",
                )
        else:
            self.stale_run = 0
        self.last = cmd.copy()


def _site(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [
        f for f in frames if "mnemo_mpc" in f.filename and not f.filename.endswith(("hostile.py", "stream.py"))
    ] or frames
    f = ours[-1]
    return f"{type(exc).__name__} at {f.filename.split('mnemo_mpc/')[-1]}:{f.lineno} ({f.name}): {str(exc)[:200]}"


def _rejection_probe(adapter: Any) -> Callable[[], Any] | None:
    """A value that changes whenever the adapter drops a message: its rejection counters where it has them (the
    node's /diagnostics counts them), else `last_rejection` (the same reason twice in a row then reads as one)."""
    rejected = getattr(getattr(adapter, "stats", None), "rejected", None)
    if isinstance(rejected, Counter):
        return lambda: sum(rejected.values())
    if hasattr(adapter, "last_rejection"):
        return lambda: (adapter.last_rejection, id(adapter.last_rejection))
    return None


class _ErrorLog(logging.Handler):
    """Counts ERROR records from the package's loggers (an exception the node caught and logged is still a finding)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("mnemo_mpc"):
            self.records.append(f"{record.name}: {record.getMessage()[:200]}")


def _unexpected_probe(adapter: Any) -> Callable[[], int] | None:
    """The count of messages the adapter dropped on an exception other than InputError (`AdapterStats.unexpected`)."""
    unexpected = getattr(getattr(adapter, "stats", None), "unexpected", None)
    return (lambda: sum(unexpected.values())) if isinstance(unexpected, Counter) else None


def run_fuzz(
    cfg: FuzzConfig,
    params: NavParams | None = None,
    adapter: Any = None,
    progress: bool = False,
    time_limit_s: float | None = None,
) -> FuzzReport:
    """Drive a `NavAdapter` with the scenario (module docstring) and check every callback and tick."""
    from mnemo_mpc.ros.adapter import NavAdapter

    params = params or NavParams()
    scenario = HostileScenario(cfg, params)
    adapter = adapter or NavAdapter(params, scenario.factory.types)
    report = FuzzReport(rate_hz=params.control_rate_hz)
    monitor = Monitor(params, report)
    if hasattr(adapter, "warm_up"):  # what the node does before its first tick
        t0 = time.perf_counter()
        adapter.warm_up()
        report.warm_up_s = time.perf_counter() - t0
    rejections = _rejection_probe(adapter)
    report.rejection_checks = rejections is not None
    unexpected = _unexpected_probe(adapter)
    errors = _ErrorLog()
    package_log = logging.getLogger("mnemo_mpc")
    package_log.addHandler(errors)
    try:
        _drive(cfg, params, scenario, adapter, report, monitor, rejections, unexpected, errors, progress, time_limit_s)
    finally:
        package_log.removeHandler(errors)
    report.episodes = scenario.episodes
    report.own_path_episodes = scenario.own_path_episodes
    report.goals_reached = scenario.goals_reached
    report.collisions = scenario.collisions
    report.clock_resets = scenario.clock_resets
    return report


def progress_by_ticks(cfg: FuzzConfig) -> bool:
    """Whether a run's progress is counted in ticks (its tick bound is below its message bound) or in messages."""
    return cfg.max_ticks < cfg.messages


def _drive(
    cfg: FuzzConfig,
    params: NavParams,
    scenario: HostileScenario,
    adapter: Any,
    report: FuzzReport,
    monitor: Monitor,
    rejections: Callable[[], Any] | None,
    unexpected: Callable[[], int] | None,
    errors: _ErrorLog,
    progress: bool,
    time_limit_s: float | None,
) -> None:
    """The run loop of `run_fuzz`: deliver each period's messages, tick, check (module docstring)."""
    from tqdm import tqdm

    callbacks = {
        "grid": adapter.on_grid,
        "odometry": adapter.on_odometry,
        "goal": adapter.on_goal,
        "path": adapter.on_path,
    }
    t_wall = time.perf_counter()
    # The bar counts what bounds the run: ticks when max_ticks is the smaller bound (`bench node` passes a message
    # bound of 1e9 and a tick bound of a few hundred: its bar counted messages to 1,000,000,000), else messages.
    by_ticks = progress_by_ticks(cfg)
    bar = tqdm(
        total=cfg.max_ticks if by_ticks else cfg.messages,
        desc=f"fuzz {params.control_rate_hz:g} Hz",
        disable=not progress,
        unit="tick" if by_ticks else "msg",
    )
    while report.messages < cfg.messages and report.ticks < cfg.max_ticks:
        if time_limit_s is not None and time.perf_counter() - t_wall > time_limit_s:
            break
        k = report.ticks
        monitor.period = []
        period_ms = 0.0
        for d in scenario.deliveries():
            monitor.delivered(d)
            report.messages += 1
            report.variants[d.variant.split(":")[0]] += 1
            report.labels[d.label] += 1
            before = rejections() if rejections else None
            swallowed_before = unexpected() if unexpected else 0
            logged_before = len(errors.records)
            t0 = time.perf_counter()
            raised = False
            try:
                callbacks[d.topic](d.msg, d.recv_s)
            except Exception as exc:  # noqa: BLE001 - any exception out of a callback is the finding
                raised = True
                monitor.violation(f"exception_in_callback[{d.topic}]", k, d.recv_s, _site(exc), [d])
            ms = (time.perf_counter() - t0) * 1e3
            if unexpected and unexpected() != swallowed_before:
                why = getattr(adapter, "last_rejection", "")
                monitor.violation(f"swallowed_exception_in_callback[{d.topic}]", k, d.recv_s, why, [d])
            for line in errors.records[logged_before:]:
                monitor.violation(f"logged_error_in_callback[{d.topic}]", k, d.recv_s, line, [d])
            report.callback_ms[d.topic].append(ms)
            period_ms += ms
            if rejections and not raised:
                rejected = rejections() != before
                report.outcomes[(d.variant.split(":")[0], "rejected" if rejected else "accepted")] += 1
                if not rejected:
                    monitor.last_accepted[d.topic] = d
                if d.label == "bad" and not rejected:
                    monitor.violation("accepted_bad_message", k, d.recv_s, f"{d.variant} was not rejected", [d])
                elif d.label == "clean" and rejected:
                    why = f"rejected: {adapter.last_rejection}"
                    monitor.violation("rejected_clean_message", k, d.recv_s, why, [d], last_accepted=(d.topic,))
        now = scenario.now
        logged_before = len(errors.records)
        t0 = time.perf_counter()
        command, status, res = None, "exception", None
        try:
            res = adapter.tick(now)
        except Exception as exc:  # noqa: BLE001 - any exception out of a tick is the finding
            monitor.violation("exception_in_tick", k, now, _site(exc))
        ms = (time.perf_counter() - t0) * 1e3
        if ms > cfg.max_tick_s * 1e3:
            monitor.violation("tick_over_budget", k, now, f"tick took {ms:.0f} ms (max_tick_s {cfg.max_tick_s:g})")
        if res is not None:
            command, status = res.command, str(res.status)
            if status == "error":  # the adapter caught an exception from the controller: a bug, stopped safely
                monitor.violation("error_tick", k, now, str(getattr(res, "reason", ""))[:300])
            elif errors.records[logged_before:]:
                for line in errors.records[logged_before:]:
                    monitor.violation("logged_error_in_tick", k, now, line)
            goal = getattr(adapter, "goal", None)
            if getattr(res, "output", None) is not None and goal is not None:
                report.own_path_ticks += getattr(adapter, "global_path", 0) is None
                report.far_goal_ticks += float(np.hypot(*(goal[:2] - scenario.state.pose[:2]))) > 100.0
            out = getattr(res, "output", None)
            if out is not None:
                report.controller_ms.append(out.time_s * 1e3)
                report.tick_ms_with_controller.append(ms)
                if out.plan is not None:
                    report.solve_ms.append(out.plan.time_s * 1e3)
            monitor.tick(k, now, command, res.cmd_vel)
        report.record_tick(k, ms, period_ms + ms, status, getattr(res, "reason", ""), monitor.period)
        scenario.advance(command if command is None or np.all(np.isfinite(command)) else None)
        bar.update(1 if by_ticks else len(monitor.period))
    bar.close()
    report.wall_s = time.perf_counter() - t_wall

"""Replay a recorded rosbag2 through the local planner, without ROS: the node's exact logic (`NavAdapter`) fed by
the bag's grid / odometry / goal / path messages in timestamp order, ticked at the control rate.

Output: a new rosbag2 with the commands (`cmd_vel_topic`) and local plans (`local_plan_topic`) the node would have
published, and a JSON summary (status counts, solve-time and iteration percentiles; where the bag has the recorded
commands on `cmd_vel_topic`, how far the replayed ones are from them). Open-loop: the recorded robot does not react to
our commands — this is for regression testing a planner change against logs. `ReplaySummary.trace` keeps what
`mnemo_mpc.ros.replay_plot` draws (commands, odometry, solve times, a few local plans, the grids seen).

Message definitions: `distro` (a rosbags Stores name), by default the installed ROS 2's (`mnemo_mpc.ros.distro`).
A sample bag recorded from the project's own simulator and planner ships in `sim/bags/` (`mnemo_mpc.ros.record`).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.replay_plot import ReplayTrace

log = logging.getLogger(__name__)

INPUT_TYPES = {
    "grid_topic": "nav_msgs/msg/OccupancyGrid",
    "odom_topic": "nav_msgs/msg/Odometry",
    "goal_topic": "geometry_msgs/msg/PoseStamped",
    "path_topic": "nav_msgs/msg/Path",
}


CMD_TYPES = ("geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped")


@dataclass
class ReplaySummary:
    ticks: int
    statuses: dict[str, int]
    solve_ms: dict[str, float]
    iterations: dict[str, float]
    commands_written: int
    out_bag: str
    bag: str = ""
    distro: str = ""
    duration_s: float = 0.0  # from the first input message to the bag's end
    control_period_ms: float = 0.0
    # The bag's own commands on cmd_vel_topic (a recorded run), and the replayed ones against them: each replayed
    # command paired with the recorded one nearest in time (within half a control period).
    recorded_commands: int = 0
    command_difference: dict[str, float] = field(default_factory=dict)
    trace: ReplayTrace | None = field(default=None, repr=False)  # for the plot; not in the JSON

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "trace"}


# rosbag2 metadata lists topics and files: kilobytes, megabytes for a huge split bag; beyond this it is not one.
MAX_METADATA_BYTES = 16 << 20


def check_bag_metadata(bag: Path) -> None:
    """`bag/metadata.yaml` is a regular, UTF-8, alias-free YAML file of bounded size (`mnemo_mpc.safe_io`): checked
    before rosbags parses it, so a hostile or truncated file is an InputError naming the bag instead of a decode
    traceback or an alias bomb expanding without bound (rosbag2 writes no anchors or aliases)."""
    from mnemo_mpc.safe_io import load_yaml

    meta = bag / "metadata.yaml"
    if not meta.is_file():
        raise InputError(f"{bag}: not a rosbag2 directory (no metadata.yaml)")
    load_yaml(meta, MAX_METADATA_BYTES, "rosbag2 metadata")


def _input_connections(reader: Any, bag: Path, wanted: dict[str, str], params: NavParams) -> list[Any]:
    """The bag's connections on the input topics; InputError when one has the wrong type or a required one is
    missing."""
    conns = []
    for c in reader.connections:
        key = wanted.get(c.topic)
        if key is None:
            continue
        if c.msgtype != INPUT_TYPES[key]:
            raise InputError(f"{bag}: topic {c.topic} has type {c.msgtype}, expected {INPUT_TYPES[key]}")
        conns.append(c)
    found = {wanted[c.topic] for c in conns}
    missing = {"grid_topic", "odom_topic", "goal_topic"} - found
    if missing:
        raise InputError(
            f"{bag}: no messages on {sorted(_topic(getattr(params, k)) for k in missing)} "
            f"(topics in bag: {sorted(c.topic for c in reader.connections)})"
        )
    return conns


def _topic(name: str) -> str:
    return name if name.startswith("/") else "/" + name


def _command_connection(reader: Any, params: NavParams) -> Any | None:
    """The bag's recorded commands (cmd_vel_topic as Twist or TwistStamped), or None."""
    topic = _topic(params.cmd_vel_topic)
    return next((c for c in reader.connections if c.topic == topic and c.msgtype in CMD_TYPES), None)


def command_difference(trace: ReplayTrace, period_s: float) -> dict[str, float]:
    """|replayed - recorded| for v [m/s] and w [rad/s]: mean and max over the replayed commands that have a recorded
    one within half a control period; `pairs` counts them. Empty without recorded commands."""
    rec_t, rep_t = np.asarray(trace.recorded_t), np.asarray(trace.tick_t)
    rep = np.asarray(trace.command, dtype=float).reshape(-1, 2)
    has = np.all(np.isfinite(rep), axis=1)
    if rec_t.size == 0 or not has.any():
        return {}
    rep_t, rep = rep_t[has], rep[has]
    j = np.clip(np.searchsorted(rec_t, rep_t), 1, rec_t.size - 1) if rec_t.size > 1 else np.zeros(rep_t.size, int)
    if rec_t.size > 1:
        j = np.where(np.abs(rec_t[j - 1] - rep_t) <= np.abs(rec_t[j] - rep_t), j - 1, j)
    close = np.abs(rec_t[j] - rep_t) <= period_s / 2 + 1e-9
    if not close.any():
        return {"pairs": 0}
    d = np.abs(rep[close] - np.asarray(trace.recorded, dtype=float).reshape(-1, 2)[j[close]])
    return {
        "pairs": int(close.sum()),
        "v_mean_abs": float(d[:, 0].mean()),
        "v_max_abs": float(d[:, 0].max()),
        "w_mean_abs": float(d[:, 1].mean()),
        "w_max_abs": float(d[:, 1].max()),
    }


def replay_bag(
    bag: str | Path, out_bag: str | Path, params: NavParams | None = None, distro: str | None = None
) -> ReplaySummary:
    """See the module docstring. `distro`: a rosbags Stores name; None: the installed ROS 2's."""
    from rosbags.rosbag2 import Reader, ReaderError, Writer
    from rosbags.typesys import Stores, get_typestore

    from mnemo_mpc.ros.distro import default_distro

    params = params or NavParams()
    distro = distro or default_distro()
    bag, out_bag = Path(bag), Path(out_bag)
    check_bag_metadata(bag)
    if out_bag.exists():
        raise InputError(f"{out_bag}: output bag exists; choose a new path")
    if distro not in Stores.__members__:
        raise InputError(f"distro: expected one of {', '.join(Stores.__members__)}, got {distro!r}")
    wanted = {_topic(getattr(params, key)): key for key in INPUT_TYPES}
    tmp_out = out_bag.with_name(out_bag.name + ".partial")
    if tmp_out.exists():
        raise InputError(f"{tmp_out}: a previous replay was interrupted; remove it first")
    # Open the bag and check its topics before the planner (and a warm-start model) is loaded: a bad bag is one
    # error line, not a model load followed by a rosbags traceback.
    try:
        with Reader(bag) as reader:
            _input_connections(reader, bag, wanted, params)
    except ReaderError as exc:
        raise InputError(f"{bag}: cannot read the bag ({' '.join(str(exc).split())})") from exc
    store = get_typestore(Stores[distro])
    types = convert.MessageTypes.from_rosbags(distro)
    adapter = NavAdapter(params, types)
    handlers = {
        "grid_topic": adapter.on_grid,
        "odom_topic": adapter.on_odometry,
        "goal_topic": adapter.on_goal,
        "path_topic": adapter.on_path,
    }
    period_ns = int(round(1e9 / params.control_rate_hz))
    statuses: Counter[str] = Counter()
    solve_ms, iters = [], []
    written = 0
    trace = ReplayTrace()
    first_ns: int | None = None
    end_ns = 0
    try:
        # Written as OUT.partial/OUT, then moved to OUT: the storage file is OUT.db3 (named after its folder).
        tmp_out.mkdir(parents=True)
        with Reader(bag) as reader, Writer(tmp_out / out_bag.name, version=9) as writer:
            conns = _input_connections(reader, bag, wanted, params)
            cmd_in = _command_connection(reader, params)
            cmd_type = "geometry_msgs/msg/TwistStamped" if params.use_stamped_twist else "geometry_msgs/msg/Twist"
            cmd_conn = writer.add_connection(_topic(params.cmd_vel_topic), cmd_type, typestore=store)
            plan_conn = writer.add_connection(_topic(params.local_plan_topic), "nav_msgs/msg/Path", typestore=store)
            next_tick = None

            def tick_until(t_ns: int) -> None:
                nonlocal next_tick, written
                while next_tick is not None and next_tick <= t_ns:
                    res = adapter.tick(next_tick * 1e-9)
                    statuses[res.status] += 1
                    if res.cmd_vel is not None:
                        writer.write(cmd_conn, next_tick, store.serialize_cdr(res.cmd_vel, cmd_type))
                        written += 1
                    if res.local_plan is not None:
                        writer.write(plan_conn, next_tick, store.serialize_cdr(res.local_plan, "nav_msgs/msg/Path"))
                    plan = res.output.plan if res.output is not None else None
                    if plan is not None:
                        solve_ms.append(plan.time_s * 1e3)
                        iters.append(plan.iterations)
                    trace.add_tick(
                        (next_tick - first_ns) * 1e-9,
                        res.status,
                        None if res.command is None or res.cmd_vel is None else res.command,
                        None if plan is None else plan.time_s * 1e3,
                        None if plan is None or not plan.success else plan.states,
                    )
                    next_tick += period_ns

            for conn, t_ns, raw in reader.messages(connections=[*conns, *([cmd_in] if cmd_in else [])]):
                if first_ns is None:
                    first_ns = t_ns
                msg = store.deserialize_cdr(raw, conn.msgtype)
                if conn is cmd_in:  # the recorded commands: compared with, never fed to the planner
                    twist = msg.twist if conn.msgtype.endswith("TwistStamped") else msg
                    trace.add_recorded((t_ns - first_ns) * 1e-9, float(twist.linear.x), float(twist.angular.z))
                    continue
                tick_until(t_ns - 1)  # ticks strictly before this message see the state before it
                if next_tick is None:
                    next_tick = t_ns
                kind = wanted[conn.topic]
                dropped = sum(adapter.stats.rejected.values()) + sum(adapter.stats.unexpected.values())
                try:
                    handlers[kind](msg, t_ns * 1e-9)
                except MnemoError as exc:  # as the node does: report and drop a malformed message
                    log.warning("dropped message on %s at %d ns: %s", conn.topic, t_ns, exc)
                    continue
                if sum(adapter.stats.rejected.values()) + sum(adapter.stats.unexpected.values()) == dropped:
                    try:  # what the planner accepted, for the figure
                        trace.add_input(kind, (t_ns - first_ns) * 1e-9, msg)
                    except MnemoError:
                        pass
            if next_tick is not None:
                tick_until(reader.end_time)
            end_ns = reader.end_time
        (tmp_out / out_bag.name).rename(out_bag)
        tmp_out.rmdir()
    except ReaderError as exc:  # unparsable metadata, missing or corrupt storage files: the bag, not our code
        import shutil

        shutil.rmtree(tmp_out, ignore_errors=True)
        raise InputError(f"{bag}: cannot read the bag ({' '.join(str(exc).split())})") from exc
    except BaseException:
        import shutil

        shutil.rmtree(tmp_out, ignore_errors=True)
        raise

    def pct(values: list[float], keys=(50, 95, 99)) -> dict[str, float]:
        if not values:
            return {}
        arr = np.asarray(values, dtype=float)
        return {"mean": float(arr.mean()), **{f"p{k}": float(np.percentile(arr, k)) for k in keys}}

    trace.period_s = period_ns * 1e-9
    return ReplaySummary(
        ticks=sum(statuses.values()),
        statuses=dict(statuses),
        solve_ms=pct(solve_ms),
        iterations=pct(iters),
        commands_written=written,
        out_bag=str(out_bag),
        bag=str(bag),
        distro=distro,
        duration_s=round((end_ns - first_ns) * 1e-9, 3) if first_ns is not None else 0.0,
        control_period_ms=round(period_ns * 1e-6, 3),
        recorded_commands=len(trace.recorded_t),
        command_difference=command_difference(trace, period_ns * 1e-9),
        trace=trace,
    )

"""Replay a recorded rosbag2 through the local planner, without ROS: the node's exact logic (`NavAdapter`) fed by
the bag's grid / odometry / goal / path messages in timestamp order, ticked at the control rate.

Output: a new rosbag2 with the commands (`cmd_vel_topic`) and local plans (`local_plan_topic`) the node would have
published, and a JSON summary (status counts, solve-time and iteration percentiles). Open-loop: the recorded robot
does not react to our commands — this is for regression testing a planner change against logs.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.adapter import NavAdapter

log = logging.getLogger(__name__)

INPUT_TYPES = {
    "grid_topic": "nav_msgs/msg/OccupancyGrid",
    "odom_topic": "nav_msgs/msg/Odometry",
    "goal_topic": "geometry_msgs/msg/PoseStamped",
    "path_topic": "nav_msgs/msg/Path",
}


@dataclass
class ReplaySummary:
    ticks: int
    statuses: dict[str, int]
    solve_ms: dict[str, float]
    iterations: dict[str, float]
    commands_written: int
    out_bag: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


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


def replay_bag(
    bag: str | Path, out_bag: str | Path, params: NavParams | None = None, distro: str = "ROS2_HUMBLE"
) -> ReplaySummary:
    from rosbags.rosbag2 import Reader, ReaderError, Writer
    from rosbags.typesys import Stores, get_typestore

    params = params or NavParams()
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
    try:
        with Reader(bag) as reader, Writer(tmp_out, version=9) as writer:
            conns = _input_connections(reader, bag, wanted, params)
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
                    if res.output is not None and res.output.plan is not None:
                        solve_ms.append(res.output.plan.time_s * 1e3)
                        iters.append(res.output.plan.iterations)
                    next_tick += period_ns

            for conn, t_ns, raw in reader.messages(connections=conns):
                tick_until(t_ns - 1)  # ticks strictly before this message see the state before it
                if next_tick is None:
                    next_tick = t_ns
                msg = store.deserialize_cdr(raw, conn.msgtype)
                try:
                    handlers[wanted[conn.topic]](msg, t_ns * 1e-9)
                except MnemoError as exc:  # as the node does: report and drop a malformed message
                    log.warning("dropped message on %s at %d ns: %s", conn.topic, t_ns, exc)
            if next_tick is not None:
                tick_until(reader.end_time)
        tmp_out.rename(out_bag)
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

    return ReplaySummary(
        ticks=sum(statuses.values()),
        statuses=dict(statuses),
        solve_ms=pct(solve_ms),
        iterations=pct(iters),
        commands_written=written,
        out_bag=str(out_bag),
    )

"""Record a rosbag2 for `mnemo-mpc replay` from the project's own two nodes, without ROS: the simulator node's logic
(`SimAdapter`) and the planner node's (`NavAdapter`) in one process on simulated time, as `mnemo-mpc dds-loop` runs
the nodes themselves over DDS.

The bag holds what `ros2 bag record` would take from the pair: the simulator's odometry and local grid each
simulator step, its latched goal and global path (again when the localiser moves the odom frame), and the planner's
`cmd_vel` each control period (what `replay` compares its own commands with). Bag time is the simulated time (/clock,
from 0), so header stamps and receive times are one clock. Left out to keep a sample small: the scan and /clock
(`replay` reads neither) and the planner's `local_plan` (`replay` writes its own). Messages are zstd-compressed one by
one (rosbag2's `message` compression; `rosbags` and `ros2 bag` read it): a grid shrinks to a few hundred bytes.

`mnemo-mpc replay --record BAG` runs it; `sim/bags/README.md` holds the command that made the shipped sample.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mnemo_mpc.profile import NavParams

# After the planner reports the goal reached, record this much longer (the stop and the idle ticks after it) [s].
AFTER_GOAL_S = 0.5


def _topic(name: str) -> str:
    return name if name.startswith("/") else "/" + name


def record_sim_bag(
    bag: str | Path,
    nav: NavParams | None = None,
    *,
    world_seed: int = 45,
    seconds: float = 30.0,
    realism: str = "profile",
    robot_params: str = "",
    distro: str | None = None,
    compress: bool = True,
) -> dict[str, Any]:
    """Drive the planner (`nav`, default `NavParams()`) in the simulator's generated world `world_seed` until the
    planner reports the goal reached (plus `AFTER_GOAL_S`) or `seconds` of simulated time, and record the bag at
    `bag` (a new directory). `robot_params` (a params YAML, as the simulator node's parameter) gives the simulated
    robot a profile's body; the simulator steps at the planner's control rate. Returns a JSON-ready summary."""

    from rosbags.rosbag2 import CompressionFormat, CompressionMode, Writer
    from rosbags.typesys import Stores, get_typestore

    from mnemo_mpc.ros.adapter import NavAdapter
    from mnemo_mpc.ros.distro import default_distro
    from mnemo_mpc.ros.sim_adapter import SimAdapter
    from mnemo_mpc.ros.sim_convert import SimMessageTypes
    from mnemo_mpc.ros.sim_params import SimNodeParams
    from mnemo_mpc.sim.identify import check_new_recording

    nav = nav or NavParams()
    distro = distro or default_distro()
    bag, partial = check_new_recording(bag, distro, seconds)
    sim_params = SimNodeParams(
        world_seed=int(world_seed),
        robot_params=robot_params,
        realism=realism,
        sim_rate_hz=float(nav.control_rate_hz),
        frame_id=nav.frame_id,
        base_frame_id=nav.base_frame_id,
        odom_topic=nav.odom_topic,
        grid_topic=nav.grid_topic,
        cmd_vel_topic=nav.cmd_vel_topic,
        use_stamped_twist=nav.use_stamped_twist,
        goal_topic=nav.goal_topic,
        path_topic=nav.path_topic,
        goal_tolerance_m=nav.goal_tolerance_m,
    )
    store = get_typestore(Stores[distro])
    types = SimMessageTypes.from_rosbags(distro)
    planner = NavAdapter(nav, types.base)
    planner.warm_up()
    sim = SimAdapter(sim_params, types)
    cmd_type = "geometry_msgs/msg/TwistStamped" if nav.use_stamped_twist else "geometry_msgs/msg/Twist"
    kinds = {
        "odom": (nav.odom_topic, "nav_msgs/msg/Odometry"),
        "grid": (nav.grid_topic, "nav_msgs/msg/OccupancyGrid"),
        "goal": (nav.goal_topic, "geometry_msgs/msg/PoseStamped"),
        "path": (nav.path_topic, "nav_msgs/msg/Path"),
        "cmd": (nav.cmd_vel_topic, cmd_type),
    }
    counts = dict.fromkeys(kinds, 0)
    statuses: dict[str, int] = {}
    goal_reached_s: float | None = None
    step_ns, period_ns = sim.step_ns, int(round(1e9 / nav.control_rate_hz))
    end_ns = int(round(seconds * 1e9))
    try:
        # Written as PARTIAL/NAME, then moved to NAME: the storage file is NAME.db3 (rosbag2 names it after its folder).
        partial.mkdir(parents=True)
        writer = Writer(partial / bag.name, version=9)
        if compress:
            writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
        with writer:
            conns = {k: writer.add_connection(_topic(t), m, typestore=store) for k, (t, m) in kinds.items()}

            def write(kind: str, msg: Any, t_ns: int) -> None:
                writer.write(conns[kind], t_ns, store.serialize_cdr(msg, kinds[kind][1]))
                counts[kind] += 1

            def latched(t_ns: int) -> None:  # goal and path, as the simulator node publishes them
                now = t_ns * 1e-9
                goal, path = sim.goal_msg(), sim.path_msg()
                write("goal", goal, t_ns)
                planner.on_goal(goal, now)
                if path is not None:
                    write("path", path, t_ns)
                    planner.on_path(path, now)

            def observe(out: Any, t_ns: int) -> None:
                now = t_ns * 1e-9
                if out.frame_changed:
                    latched(t_ns)
                write("odom", out.odom, t_ns)
                planner.on_odometry(out.odom, now)
                write("grid", out.grid, t_ns)
                planner.on_grid(out.grid, now)

            first = sim.observation()
            latched(0)
            observe(first, 0)
            next_step, next_tick = step_ns, 0
            while next_tick <= end_ns:
                if next_step <= next_tick:  # the simulator's messages at t first: the tick at t sees them
                    out = sim.step()
                    observe(out, sim.time_ns)
                    next_step += step_ns
                    continue
                t_s = next_tick * 1e-9
                res = planner.tick(t_s)
                statuses[res.status] = statuses.get(res.status, 0) + 1
                if res.cmd_vel is not None:
                    write("cmd", res.cmd_vel, next_tick)
                    sim.on_cmd_vel(res.cmd_vel)
                if res.status == "goal_reached" and goal_reached_s is None:
                    goal_reached_s = t_s
                    end_ns = min(end_ns, next_tick + int(AFTER_GOAL_S * 1e9))
                next_tick += period_ns
        (partial / bag.name).rename(bag)
        partial.rmdir()
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        summary = sim.summary()
        sim.close()
    return {
        "bag": str(bag),
        "bytes": sum(f.stat().st_size for f in bag.iterdir() if f.is_file()),
        "distro": distro,
        "world": summary["world"],
        "world_seed": int(world_seed),
        "realism": realism,
        "seconds": round(sim.time_s, 3),
        "goal_reached_s": None if goal_reached_s is None else round(goal_reached_s, 3),
        "collisions": summary["collisions"],
        "path_length_m": summary["path_length_m"],
        "statuses": statuses,
        "messages": {_topic(kinds[k][0]): n for k, n in counts.items()},
        "compressed": compress,
    }


__all__ = ["AFTER_GOAL_S", "record_sim_bag"]

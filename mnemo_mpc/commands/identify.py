"""`mnemo-mpc identify BAG --out PROFILE.yaml [--params BASE.yaml]`: fit the drive's command latency, actuator lags
and slip to a recorded rosbag2 (issue 24 item 3) and write them into a robot profile;
`mnemo-mpc identify --record BAG [--params ROBOT.yaml]`: record an excitation bag from the simulator to try it on.

Fitting reads `cmd_vel` (geometry_msgs/Twist or TwistStamped) and the odometry (nav_msgs/Odometry, its twist), fits
the simulator's drive model (`mnemo_mpc.sim.identify`: latency, first-order lags with the profile's acceleration
limits, a gain per topic and axis) and writes BASE (default: the built-in parameters) with `dynamics.latency_s`,
`lag_v_s`, `lag_w_s` replaced -- and `slip_v` / `slip_w` only where the bag can tell them:

* `--ground-truth-topic T`: a second nav_msgs/Odometry whose twist sees the body (motion capture, a GPS-fused
  estimate, the simulator's ground truth): both slips are its gains;
* else `--odom-sees` says what the odometry's twist measures: `gyro` (the default; the wheels' v and a gyro's yaw
  rate, as the simulator's odometry and an IMU-fused odom: slip_w only -- wheels cannot see slip), `wheels` (both from
  the wheel encoders: no slip) or `body` (both from a body-referenced estimate: both slips).

A slip the bag cannot tell keeps the base profile's value. Next to the profile: `PROFILE.identify.json` (fitted values
with standard errors, each topic's gains, RMS residual per axis and samples used, what was written and why) and
`PROFILE.identify.png` (measured vs fitted response per axis).

Recording drives the simulated robot of --params (its body, control period and --realism) with random steps in v
and w held 0.3-1.5 s, in an empty world, and writes cmd_vel, `odom` (the simulator's odometry: wheels' v, gyro's w)
and a ground-truth Odometry (`/ground_truth/odom`: the body's true twist) -- ROS2 Jazzy definitions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError
from mnemo_mpc.realism import LEVELS

RECORD_ONLY = ("seconds", "seed", "realism")
FIT_ONLY = ("out", "json", "plot", "odom_sees", "stamps", "max_latency")


def register(sub: argparse._SubParsersAction) -> None:
    from mnemo_mpc.ros.distro import InstalledDistro

    p = sub.add_parser(
        "identify",
        help="fit latency, actuator lags and slip to a rosbag2 of cmd_vel + odometry and write a robot profile "
        "(--record: record one from the simulator)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bag", type=Path, nargs="?", help="rosbag2 directory with cmd_vel and odometry (fitting)")
    p.add_argument("--out", type=Path, default=None, help="robot profile to write (fitting; required)")
    p.add_argument(
        "--params",
        type=Path,
        default=None,
        help="fitting: the base profile whose dynamics keys are replaced (its topics and acceleration limits are "
        "used; default: the built-in parameters); --record: the robot to simulate",
    )
    p.add_argument("--cmd-topic", default=None, help="command topic (default: the profile's cmd_vel_topic)")
    p.add_argument("--odom-topic", default=None, help="odometry topic (default: the profile's odom_topic)")
    p.add_argument(
        "--ground-truth-topic",
        default=None,
        help="nav_msgs/Odometry whose twist sees the body (mocap, GPS-fused, simulator truth): slip_v and slip_w "
        "are its gains (--record: the topic the true twist is written on, default /ground_truth/odom)",
    )
    p.add_argument(
        "--odom-sees",
        choices=("wheels", "gyro", "body"),
        default=None,
        help="what the odometry twist measures, without --ground-truth-topic: gyro (wheels' v, a gyro's yaw rate: "
        "slip_w is written; default), wheels (no slip written) or body (slip_v and slip_w written)",
    )
    p.add_argument(
        "--stamps",
        choices=("bag", "header"),
        default=None,
        help="message times: bag receive times (default; one clock for all topics) or header stamps "
        "(TwistStamped commands and Odometry only)",
    )
    p.add_argument(
        "--max-latency",
        type=_args.positive_float,
        default=None,
        help="upper bound of the fitted latency [s] (default 1.0)",
    )
    p.add_argument("--json", type=Path, default=None, help="fit and residuals (default: PROFILE.identify.json)")
    p.add_argument("--plot", type=Path, default=None, help="fit figure, PNG (default: PROFILE.identify.png)")
    p.add_argument(
        "--distro",
        default=InstalledDistro(),
        help="message definitions, a rosbags Stores name (default: the installed ROS 2's: %(default)s)",
    )
    p.add_argument("--record", type=Path, default=None, metavar="BAG", help="record a new excitation bag here instead")
    p.add_argument("--seconds", type=_args.duration_s, default=None, help="--record: excitation length (default 30)")
    p.add_argument("--seed", type=_args.seed, default=None, help="--record: excitation and noise seed (default 0)")
    p.add_argument(
        "--realism",
        choices=LEVELS,
        default=None,
        help="--record: the simulated drive: the --params profile's dynamics (profile, default), ideal or harsh "
        "(mnemo_mpc.sim.realism)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemo_mpc.ros.distro import InstalledDistro

    args.distro = InstalledDistro.resolve(args.distro)
    if _args.bag_or_record(args, FIT_ONLY, RECORD_ONLY, ("fitting", "fit"), "the robot profile to write"):
        return record(args)
    return fit(args)


def fit(args: argparse.Namespace) -> int:
    from mnemo_mpc.sim.identify import check_bag_metadata

    # Every input and output checked before the bag is read.
    check_bag_metadata(args.bag)
    out = _args.check_output_file(args.out, "--out")
    stem = out.with_suffix("") if out.suffix in (".yaml", ".yml") else out
    json_path = _args.check_output_file(args.json or stem.with_name(stem.name + ".identify.json"), "--json")
    plot_path = _args.check_output_file(args.plot or stem.with_name(stem.name + ".identify.png"), "--plot")
    _args.check_distinct({"--out": out, "--json": json_path, "--plot": plot_path})
    params = _args.load_params(args)
    base_doc = None
    if args.params is not None:
        from mnemo_mpc.profile import MAX_PARAMS_FILE_BYTES
        from mnemo_mpc.safe_io import load_yaml

        base_doc = load_yaml(args.params, MAX_PARAMS_FILE_BYTES, "parameter file")

    import numpy as np
    import rosbags
    import scipy

    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.sim import identify as ident

    params = params or NavParams()
    cmd_topic = ident.topic_name(args.cmd_topic or params.cmd_vel_topic)
    odom_topic = ident.topic_name(args.odom_topic or params.odom_topic)
    truth_topic = ident.topic_name(args.ground_truth_topic) if args.ground_truth_topic else None
    odom_sees = args.odom_sees or "gyro"
    stamps = args.stamps or "bag"
    topics = [odom_topic] + ([truth_topic] if truth_topic else [])
    rec = ident.read_bag(args.bag, cmd_topic, topics, distro=args.distro, stamps=stamps)
    accel = (params.dynamics_accel_v_max, params.dynamics_accel_w_max)
    result = ident.fit_drive(rec, accel, args.max_latency or ident.MAX_LATENCY_S)
    values, sources = ident.identified_values(result, odom_topic, odom_sees, truth_topic)
    kept = {k: getattr(params, f"dynamics_{k}") for k in ("slip_v", "slip_w") if k not in values}
    doc = ident.updated_profile(base_doc, values)
    header = (
        f"# Robot profile written by `mnemo-mpc identify` from the bag {_args.one_line(args.bag)}.\n"
        f"# Fitted: dynamics {', '.join(values)} (fit and residuals: {json_path.name}, {plot_path.name}).\n"
        f"# Every other value from {_args.one_line(args.params or 'the built-in parameters')}"
        " (its comments are not kept).\n"
    )
    warnings = fit_warnings(result, args.max_latency or ident.MAX_LATENCY_S, ident.MAX_LAG_S)
    summary = {
        "bag": str(args.bag),
        "out": str(out),
        "base_params": str(args.params) if args.params else None,
        "topics": {"cmd_vel": cmd_topic, "odom": odom_topic, "ground_truth": truth_topic},
        "odom_sees": odom_sees,
        "stamps": stamps,
        "written": values,
        "sources": sources,
        "kept_from_base": kept,
        "samples": {"commands": len(rec.cmd_t), **{s.topic: len(s.t) for s in rec.series}},
        "duration_s": float(rec.cmd_t[-1]),
        "rms": {t: {a: f.rms for a, f in axes.items()} for t, axes in result.axes.items()},
        "fit": result.to_dict(),
        "warnings": warnings,
        "versions": {
            "mnemo_mpc": __version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "rosbags": getattr(rosbags, "__version__", None),
        },
    }
    ident.write_profile(out, doc, values, header)
    atomic_write_json(json_path, summary)
    ident.plot_fit(rec, result, plot_path)
    se = result.std_error
    print(
        f"fitted from {len(rec.cmd_t)} commands and {', '.join(f'{len(s.t)} on {s.topic}' for s in rec.series)} "
        f"({summary['duration_s']:.1f} s):"
    )
    for key in ("latency_s", "lag_v_s", "lag_w_s"):
        err = f" +- {se[key]:.4f}" if se.get(key) is not None else ""
        print(f"  {key} = {getattr(result, key):.4f}{err} s")
    for topic, axes in result.axes.items():
        for a, f in axes.items():
            print(
                f"  {topic} {a}: gain {f.gain:.3f}, offset {f.offset:+.4f}, "
                f"RMS residual {f.rms:.4g} ({f.samples} samples)"
            )
    print("wrote dynamics: " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    for k, v in kept.items():
        print(f"  {k} kept from the base ({v:g}): not identifiable from {odom_topic} with --odom-sees {odom_sees}")
    for line in warnings:
        print(f"warning: {line}")
    print(f"profile: {out}\nresiduals: {json_path}\nplot: {plot_path}")
    return 0


# A topic's RMS residual above this share of its signal's spread: the model does not describe what it measures.
POOR_FIT_RELATIVE_RMS = 0.25


def fit_warnings(result: Any, max_latency_s: float, max_lag_s: float) -> list[str]:
    """What a user should look at before trusting the fit: a value pinned at its bound, or a poor fit."""
    out = []
    if result.latency_s >= 0.99 * max_latency_s:
        out.append(f"latency_s {result.latency_s:.3f} is at its bound (--max-latency {max_latency_s:g})")
    for key in ("lag_v_s", "lag_w_s"):
        if getattr(result, key) >= 0.99 * max_lag_s:
            out.append(f"{key} is at its bound ({max_lag_s:g} s): the drive barely follows its command")
    for topic, axes in result.axes.items():
        for a, f in axes.items():
            if f.rms_relative > POOR_FIT_RELATIVE_RMS:
                out.append(
                    f"poor fit of {a} on {topic} (RMS residual {f.rms_relative:.0%} of the signal's spread): check the "
                    "topics, --odom-sees and the acceleration limits of --params (dynamics.accel_*_max)"
                )
    return out


def record(args: argparse.Namespace) -> int:
    bag = _args.check_output_dir(args.record, "--record", new=True)
    partial = bag.with_name(bag.name + ".partial")
    if partial.exists():
        raise InputError(f"--record: {partial} is left from an interrupted recording; remove it first")
    params = _args.load_params(args)

    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.sim import identify as ident
    from mnemo_mpc.sim.profile import closed_loop_setup

    setup = closed_loop_setup(params, realism=args.realism or "profile")
    p = params or NavParams()
    topics = ident.RecordTopics(
        cmd_vel=args.cmd_topic or p.cmd_vel_topic,
        odom=args.odom_topic or p.odom_topic,
        ground_truth=args.ground_truth_topic or ident.DEFAULT_GROUND_TRUTH_TOPIC,
        stamped=p.use_stamped_twist,
    )
    summary = ident.record_excitation_bag(
        bag,
        setup,
        seconds=args.seconds or 30.0,
        seed=args.seed if args.seed is not None else 0,
        topics=topics,
        distro=args.distro,
    )
    print(json.dumps(summary, indent=2))
    base = f" --params {args.params}" if args.params else ""
    print(
        f"identify it: mnemo-mpc identify {bag}{base} --ground-truth-topic {summary['topics']['ground_truth']} "
        f"--out PROFILE.yaml"
    )
    return 0

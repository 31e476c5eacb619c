"""`mnemo-mpc ros-interfaces build --out DIR` / `env DIR`: Nav2's FollowPath and TF's TFMessage interface packages,
built from their definitions into a prefix where no ROS install provides them (mnemo_mpc.ros.interfaces, issue 29).

`build` installs nothing: without the build tools it names the missing pip packages (the `nav2` extra) or system
tools in one line. It writes DIR whole at the end (built beside it, then renamed) and prints the line that puts the
prefix on PYTHONPATH, LD_LIBRARY_PATH and AMENT_PREFIX_PATH; `env DIR` prints the same as `export` lines for
`eval "$(mnemo-mpc ros-interfaces env DIR)"`.
"""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ros-interfaces",
        help="build nav2_msgs (FollowPath) and tf2_msgs (TFMessage) from their definitions into a prefix",
        description="Nav2's FollowPath and TF's TFMessage interface packages, built where no ROS install has them.",
    )
    sub = p.add_subparsers(dest="interfaces_command", metavar="ACTION", required=True)
    b = sub.add_parser(
        "build",
        help="generate, compile and install the interface packages into DIR (CMake + the rosidl generators)",
        formatter_class=_args.DefaultsHelpFormatter,
    )
    b.add_argument(
        "--out", required=True, help="prefix folder to write: new, empty, or one this command built (replaced)"
    )
    b.add_argument("--jobs", type=_args.count, default=2, help="compile processes")
    b.set_defaults(func=build_handler)
    e = sub.add_parser("env", help="print the `export` lines that make a built prefix's packages importable")
    e.add_argument("dir", help="prefix written by `mnemo-mpc ros-interfaces build`")
    e.set_defaults(func=env_handler)


def build_handler(args: argparse.Namespace) -> int:
    import shlex

    from mnemo_mpc.ros import interfaces

    out = interfaces.check_output(args.out, "--out")
    _args.check_output_dir(out, "--out")
    interfaces.check_build_tools()
    prefix = interfaces.build(out, jobs=args.jobs, progress=print)
    print(f"built {', '.join(interfaces.PACKAGES)} into {prefix.root} in {prefix.info['build_s']:.1f} s; to use them:")
    print(" ".join(["export", *(line.removeprefix("export ") for line in interfaces.export_lines(prefix.root))]))
    print(f'(or: eval "$(mnemo-mpc ros-interfaces env {shlex.quote(str(prefix.root))})")')
    return 0


def env_handler(args: argparse.Namespace) -> int:
    from mnemo_mpc.ros import interfaces

    _args.check_input_dir(args.dir, "dir")
    for line in interfaces.export_lines(args.dir, "dir"):
        print(line)
    return 0

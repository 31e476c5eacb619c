"""Argument checks shared by the `mnemo-mpc` sub-commands and `python -m mnemo_mpc.experiments`.

Every check here runs before a command does any work, so that a user error costs a second, prints one line and leaves
nothing behind. Two kinds:

* argparse `type=` functions for scalar flags (`count`, `seed`, `positive_float`, `pose`...): argparse reports their
  `ArgumentTypeError` as `PROG: error: argument --flag: MESSAGE` through `ArgumentParser.error` below;
* path checks (`check_output_file`, `check_output_dir`, `check_input_file`, `check_input_dir`) called at the top of
  a handler; they raise `InputError` naming the flag, which `mnemo_mpc.cli.main` prints as one line.

Writability is tested by doing it (issue 26): the output's missing folders are created and a temporary file is
created in the folder the output goes to, then both are removed again (`probe_writable`). `os.access` was not a write
test: as root it says yes to `/proc/x/y.json`, and it cannot see ACLs, read-only mounts or a full quota, so such a run
failed after its work with a traceback. Only folders this check created are removed, deepest first; a process killed
in between leaves at most those empty folders and one empty `.mnemo-mpc-probe-*` file.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from mnemo_mpc.errors import MAX_COORDINATE_M, InputError

# Seeds: what numpy's legacy generators accept; world seeds derived from them (collection: seed * 100000 + id) stay
# well inside 64 bits.
MAX_SEED = 2**32 - 1
# A simulated episode longer than this (11.6 days) is a typo; 1e308 would overflow the step count to inf.
MAX_TIME_S = 1e6


def one_line(message: object) -> str:
    """`message` on one line: a user error is exactly one line on stderr, whatever the exception text holds."""
    return " ".join(str(message).split()) or "(no message)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (`PROG: error: MESSAGE`, exit 2) instead of a usage block: the full
    usage is one `--help` away, and scripts and users alike get the same one-line form as every other user error.
    Sub-parsers inherit the class (`add_subparsers` creates parsers of the parent's type)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` with each flag's default, `(default: X)`, except where the help already states it, where the default
    is None (the help says what happens then) and for on/off switches (`store_true`, default False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


def user_error(prog: str, message: object) -> int:
    """Print a user error as the one line every command uses; returns the exit status (2)."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return 2


# --- argparse types -------------------------------------------------------------------------------------------------
def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value):  # float() accepts "nan", "inf" and "1e999": none is a setting
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def count(text: str) -> int:
    """An integer >= 1 (worlds, steps, epochs, workers...)."""
    value = _int(text, "an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in [0, 2^32 - 1]."""
    value = _int(text, f"an integer seed in [0, {MAX_SEED}]")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer seed in [0, {MAX_SEED}], got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _float(text, "a finite number > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    value = _float(text, "a finite number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def unit_interval(text: str) -> float:
    value = _float(text, "a number in [0, 1]")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def duration_s(text: str) -> float:
    """Seconds: > 0 and at most MAX_TIME_S."""
    value = _float(text, f"seconds in (0, {MAX_TIME_S:g}]")
    if not 0 < value <= MAX_TIME_S:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, {MAX_TIME_S:g}], got {text!r}")
    return value


def distance_m(text: str) -> float:
    """Metres: > 0 and at most MAX_COORDINATE_M."""
    value = _float(text, f"metres in (0, {MAX_COORDINATE_M:g}]")
    if not 0 < value <= MAX_COORDINATE_M:
        raise argparse.ArgumentTypeError(f"expected metres in (0, {MAX_COORDINATE_M:g}], got {text!r}")
    return value


def parse_pose(value: Any, name: str) -> list[float]:
    """x,y,yaw from "x,y,yaw" (brackets allowed) or a sequence of three numbers: finite and within MAX_COORDINATE_M,
    checked before any arithmetic so that e.g. 1e308 is an error line, not an overflow warning further on."""
    expected = f"x,y,yaw (three finite numbers within +-{MAX_COORDINATE_M:g})"
    try:
        items = value.strip().strip("[]()").split(",") if isinstance(value, str) else list(value)
        if any(isinstance(v, bool) or not isinstance(v, (str, int, float)) for v in items):
            raise TypeError("not a number")
        pose = [float(v) for v in items]
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected {expected}, got {value!r}") from None
    if len(pose) != 3 or not all(math.isfinite(v) and abs(v) <= MAX_COORDINATE_M for v in pose):
        raise InputError(f"{name}: expected {expected}, got {value!r}")
    return pose


def pose(text: str) -> list[float]:
    """argparse type of --start / --goal."""
    try:
        return parse_pose(text, "pose")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("pose: ")) from None


def number(value: Any, name: str, *, low: float, high: float, low_open: bool = True) -> float:
    """A JSON/YAML value that must be a real number in (low, high] (or [low, high]); InputError naming `name`."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name}: expected a number in {interval}, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and (value > low if low_open else value >= low) and value <= high):
        raise InputError(f"{name}: expected a number in {interval}, got {value!r}")
    return value


# --- paths ----------------------------------------------------------------------------------------------------------
def _stat(path: Path, flag: str) -> os.stat_result | None:
    """stat() following links; None when nothing is there (or a dangling link); InputError when it cannot be asked."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:  # EACCES on a folder on the way, a name too long, an embedded NUL...
        raise InputError(f"{flag}: cannot use {str(path)!r} ({exc})") from None


def _check_creatable(path: Path, flag: str) -> None:
    """`path` does not exist: the nearest existing folder above it must be a directory, and the folders down to
    `path`'s parent must be creatable and writable (`probe_writable`)."""
    ancestor = Path(os.path.abspath(path)).parent
    while (st := _stat(ancestor, flag)) is None and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{flag}: cannot create {path}: {ancestor} is not a directory")
    probe_writable(Path(os.path.abspath(path)).parent, flag, f"cannot create {path}")


def probe_writable(folder: Path, flag: str, what: str) -> None:
    """Create `folder` (and its missing parents) and a temporary file in it, then remove them: InputError naming
    `flag` when any of it fails. The only test that answers for root, ACLs, read-only mounts and full disks alike."""
    created: list[Path] = []
    try:
        missing = []
        p = folder
        while not os.path.lexists(p) and p != p.parent:
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            os.mkdir(d)
            created.append(d)
        fd, tmp = tempfile.mkstemp(prefix=".mnemo-mpc-probe-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        reason = "not writable" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else exc.strerror
        where = exc.filename if exc.filename else folder
        raise InputError(
            f"{flag}: {what}: {where} is {reason}" if reason == "not writable" else f"{flag}: {what}: {where}: {reason}"
        ) from None
    finally:
        for d in reversed(created):
            try:
                os.rmdir(d)
            except OSError:
                pass


def check_output_file(path: str | os.PathLike[str], flag: str) -> Path:
    """A file the command will write (atomically, replacing an existing one): not a directory or other non-file,
    and its folder writable or creatable."""
    path = Path(path)
    st = _stat(path, flag)
    if st is None:
        _check_creatable(path, flag)
    elif stat.S_ISDIR(st.st_mode):
        raise InputError(f"{flag}: {path} is a directory; expected a file path")
    elif not stat.S_ISREG(st.st_mode):
        raise InputError(f"{flag}: {path} exists and is not a regular file")
    else:
        probe_writable(path.parent, flag, f"cannot replace {path}")
    return path


def check_output_dir(path: str | os.PathLike[str], flag: str, *, new: bool = False) -> Path:
    """A directory the command writes into: an existing writable directory (unless `new`: it must not exist yet),
    or a path whose folders can be created."""
    path = Path(path)
    st = _stat(path, flag)
    if st is None:
        _check_creatable(path, flag)
    elif new:
        raise InputError(f"{flag}: {path} exists; expected a new path")
    elif not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{flag}: {path} exists and is not a directory")
    else:
        probe_writable(path, flag, f"cannot write into {path}")
    return path


def check_input_file(path: str | os.PathLike[str], flag: str, what: str = "file") -> Path:
    """A file the command reads: it exists, is a regular file (not a folder, FIFO or device) and is readable."""
    path = Path(path)
    st = _stat(path, flag)
    if st is None:
        raise InputError(f"{flag}: {what} not found: {path}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{flag}: {path} is not a regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{flag}: {path} is not readable")
    return path


def check_input_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """A directory the command reads: it exists, is a directory and can be listed."""
    path = Path(path)
    st = _stat(path, flag)
    if st is None:
        raise InputError(f"{flag}: directory not found: {path}")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{flag}: {path} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{flag}: {path} is not readable")
    return path


def check_distinct(paths: dict[str, Path | None]) -> None:
    """Two outputs of one command must not be the same file (one would silently replace the other)."""
    seen: dict[str, str] = {}
    for flag, path in paths.items():
        if path is None:
            continue
        key = os.path.abspath(path)
        if key in seen:
            raise InputError(f"{flag}: {path} is also {seen[key]}; expected different files")
        seen[key] = flag


def check_warmstart(args: argparse.Namespace) -> None:
    """--warmstart / --model (see commands.eval.add_warmstart_arguments): the model file exists, and a model is not
    given to a start that never uses one."""
    if args.model is None:
        return
    if args.warmstart in ("cold", "shift"):
        raise InputError(f"--model: --warmstart {args.warmstart} uses no model; drop --model or use learned/hybrid")
    check_input_file(args.model, "--model")


def add_params_argument(p: argparse.ArgumentParser) -> None:
    """--params FILE: a robot profile / node parameter file (config/robots/*.yaml, config/nav.yaml) whose footprint,
    limits and sensor range the command's robot, simulator and worlds take (`load_params`)."""
    p.add_argument(
        "--params",
        default=None,
        help="robot profile / node parameter file (config/robots/*.yaml): footprint, limits, sensor range "
        "(default: the built-in 0.2 m disc robot)",
    )


def load_params(args: argparse.Namespace) -> Any:
    """The `NavParams` of --params (None without it), read and fully checked -- footprint, limits, every value --
    before any work: a missing file, bad YAML or a bad footprint is one InputError line naming --params."""
    if getattr(args, "params", None) is None:
        return None
    path = check_input_file(args.params, "--params", what="parameter file")
    from mnemo_mpc.profile import NavParams

    try:
        return NavParams.from_yaml(path)
    except InputError as exc:
        raise InputError(f"--params: {exc}") from None


def check_device(device: str, flag: str = "--device", *, auto: bool = False) -> None:
    """A torch device string that names a device present here (cpu, cuda, cuda:i; `auto` too when allowed)."""
    import re

    if auto and device == "auto" or device == "cpu":
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        allowed = "auto, cpu, cuda or cuda:i" if auto else "cpu, cuda or cuda:i"
        raise InputError(f"{flag}: expected {allowed}, got {device!r}")
    import torch

    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        found = torch.cuda.device_count()
        raise InputError(f"{flag}: {device} is not available on this machine ({found} CUDA devices)")


# Generated-world families (mnemo_mpc.sim.worlds.ALL_KINDS, spelled out so that parsing imports no numpy; a
# test keeps the two equal) and a cap on moving obstacles per world.
WORLD_KINDS = ("rooms", "corridor", "doors", "clutter", "open", "mixed", "dense")
MOVING_KINDS = ("patrol", "crossing", "head_on", "overtaking", "stop_go", "mixed")  # mnemo_mpc.sim.worlds.MOVING_KINDS
MAX_MOVING_OBSTACLES = 50


def world_kinds(text: str) -> tuple[str | None, ...]:
    """argparse type of --world-kinds (eval, collect): a comma-separated list of families, None for 'any' (the
    seed's own kind)."""
    items = [k.strip() for k in text.split(",")]
    bad = [k for k in items if k != "any" and k not in WORLD_KINDS]
    if not items or bad:
        raise argparse.ArgumentTypeError(f"expected families from any, {', '.join(WORLD_KINDS)}; got {text!r}")
    return tuple(None if k == "any" else k for k in items)


def moving_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_MOVING_OBSTACLES:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, {MAX_MOVING_OBSTACLES}], got {text!r}")
    return value


def add_world_arguments(p: argparse.ArgumentParser, scope: str = "") -> None:
    """--world-kinds and --moving-obstacles of the generated worlds (eval, collect); `scope` ends their help."""
    p.add_argument(
        "--world-kinds",
        type=world_kinds,
        default=None,
        help=f"comma-separated world families{scope}, taken in turn (world i gets kind i mod K); 'any' is the kind "
        "the seed draws (default: any). Families: any, " + ", ".join(WORLD_KINDS),
    )
    p.add_argument(
        "--moving-obstacles",
        type=moving_count,
        default=0,
        help=f"moving obstacles per world{scope}: constant-velocity boxes and cylinders the lidar sees (default 0)",
    )
    p.add_argument(
        "--moving-kind",
        choices=MOVING_KINDS,
        default="patrol",
        help="how they move: patrol (back and forth on free segments, 0.2-0.5 m/s; default), or against the start-goal "
        "path: crossing (people, 0.5-1.4 m/s), head_on and overtaking (carts), stop_go, mixed (each one of those)",
    )


# The local planners a closed-loop command can drive (mnemo_mpc.peers.CONTROLLERS; kept here so that registering
# the commands imports nothing heavy).
CONTROLLERS = ("mpc", "mppi", "dwa")


def controllers(text: str) -> tuple[str, ...]:
    """argparse type of --controller: one local planner, or (eval) a comma-separated list of distinct ones."""
    items = [c.strip() for c in text.split(",")]
    bad = [c for c in items if c not in CONTROLLERS]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"expected planners from {', '.join(CONTROLLERS)}; got {text!r}")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"each planner once; got {text!r}")
    return tuple(items)


def add_controller_argument(p: argparse.ArgumentParser, several: bool) -> None:
    """--controller mpc|mppi|dwa (issue 30: the MPC's peers behind the same Controller interface, `mnemo_mpc.peers`);
    with `several`, a comma-separated list run in turn over the same worlds."""
    p.add_argument(
        "--controller",
        type=controllers,
        default=None,
        help="local planner: mpc (the SQP MPC), mppi (pytorch-mppi with Nav2 MPPI's critics), dwa (Fox et al.'s "
        "dynamic window), each with the same route, limits and safety layer"
        + ("; a comma-separated list runs each in turn over the same worlds into one JSON" if several else "")
        + " (default: the --params profile's local_planner, else mpc)",
    )


def check_controller(args: argparse.Namespace, params: Any = None, several: bool = True) -> tuple[str, ...]:
    """--controller (without it, `params`' local_planner, else mpc) against the MPC's own flags: --warmstart,
    --model and --sqp-mode only with mpc among them."""
    if args.controller is None:
        args.controller = (params.local_planner if params is not None else "mpc",)
    names = tuple(args.controller)
    if not several and len(names) > 1:
        raise InputError(f"--controller: one planner here, got {','.join(names)}")
    if "mpc" not in names:
        for flag_name, dest in (("--warmstart", "warmstart"), ("--model", "model"), ("--sqp-mode", "sqp_mode")):
            if getattr(args, dest, None) is not None:
                raise InputError(f"{flag_name}: the MPC's; only with --controller mpc (got {','.join(names)})")
    return names


def add_realism_argument(p: argparse.ArgumentParser) -> None:
    """--realism ideal|profile|harsh: how far the simulated robot departs from the planner's model
    (`mnemo_mpc.sim.realism`); recorded in every result."""
    from mnemo_mpc.sim.realism import LEVELS

    p.add_argument(
        "--realism",
        choices=LEVELS,
        default="profile",
        help="the simulated robot: ideal (obeys the planner's model exactly: an upper bound), profile (the latency, "
        "lags, slip, odometry and lidar the --params profile states; ideal for a profile without them; default) or "
        "harsh (each of them worse than the profile states)",
    )


def flag(name: str) -> str:
    """The command-line spelling of an argparse destination: `max_latency` -> `--max-latency`."""
    return "--" + name.replace("_", "-")


def bag_or_record(
    args: Any, bag_only: tuple[str, ...], record_only: tuple[str, ...], verb: tuple[str, str], out_expected: str
) -> bool:
    """For the commands that either work on a given rosbag2 (`args.bag`) or record a new one (`--record BAG`):
    True to record, False to work on the bag; a misused option is an InputError naming it (`bag_only` options need a
    bag, `record_only` ones --record; `verb` ("replaying", "replay") and `out_expected` word the messages)."""
    from rosbags.typesys import Stores

    if args.distro not in Stores.__members__:
        raise InputError(f"--distro: expected one of {', '.join(Stores.__members__)}, got {args.distro!r}")
    if args.record is not None:
        if args.bag is not None:
            raise InputError(f"--record: records a new bag; drop the input bag {args.bag}")
        wrong = next((n for n in bag_only if getattr(args, n) is not None), None)
        if wrong:
            raise InputError(f"{flag(wrong)}: only for {verb[0]} a bag, not with --record")
        return True
    wrong = next((n for n in record_only if getattr(args, n) is not None), None)
    if wrong:
        raise InputError(f"{flag(wrong)}: only with --record")
    if args.bag is None:
        raise InputError(f"bag: expected a rosbag2 directory to {verb[1]} (or --record BAG to record one)")
    if args.out is None:
        raise InputError(f"--out: expected {out_expected}")
    return False

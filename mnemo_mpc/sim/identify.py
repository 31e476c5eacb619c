"""System identification of the drive (issue 24 item 3): fit the command latency, the actuator lags and the slip the
simulator models (`mnemo_mpc.sim.realism.Drive`) to a recorded rosbag2 of `cmd_vel` and odometry, write them into a
robot profile, and record excitation bags from the simulator to try it on.

The model is the simulator's drive, per axis a in (v, w), in continuous time:

* **latency**: the command c_i sent at t_i acts on [t_i + latency_s, t_{i+1} + latency_s) -- one latency shared by
  both axes; before the first command acts the drive holds its state at the first measurement;
* **lag with saturation**: the axis' velocity x follows the acting command c as dx/dt = clip((c - x) / lag_a_s,
  -accel_a_max, accel_a_max), the limit of `Drive.body_velocity`'s exact discretisation
  x += clip((1 - exp(-h / lag)) (c - x), -accel_max h, accel_max h) as h -> 0. Between two events (a command taking
  effect, a measurement) it is solved in closed form (`drive_response`): a ramp at accel_a_max while
  |c - x| > accel_a_max lag_a_s, then x = c - (c - x0) exp(-d / lag_a_s). The saturation is the profile's
  `dynamics.accel_*_max` (0: none), taken as known, not fitted: a short excitation rarely pins it down;
* **measurement**: a twist topic measures gain_a x + offset_a (+ noise), a gain and offset per topic and axis.

What the gains mean depends on what the topic sees, so the profile's slip is written only where it is identifiable:
the simulator's odometry (and a robot's wheel odometry) reports the wheels' speed, gain_v ~ 1 whatever the slip; a
gyro's yaw rate is the body's, gain_w = slip_w; a topic that sees the body (motion capture, a GPS-fused estimate, the
simulator's ground truth) has gain_v = slip_v and gain_w = slip_w. `identified_values` takes slip from a ground-truth
topic when one is given, else from the odometry as far as `odom_sees` says (wheels: neither; gyro: slip_w; body:
both), and keeps the base profile's value for the rest. Latency and lags come from every topic jointly.

The fit is variable projection: scipy's `least_squares` (trust-region reflective, bounded) over (latency_s, lag_v_s,
lag_w_s); for each trial the gains and offsets are the closed-form linear least-squares solution of each topic and
axis. Each series' residuals are divided by its signal's standard deviation and the square root of its sample count,
so v (m/s) and w (rad/s), and topics recorded at different rates, weigh alike. Several starting latencies guard
against a local minimum; the best fit wins.

Times: by default each message's bag (receive) time -- one clock for every topic, as a controller would see it;
`stamps="header"` takes the header stamps of TwistStamped commands and Odometry instead.
"""

from __future__ import annotations

import dataclasses
import io
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError

AXES = ("v", "w")
CMD_TYPES = ("geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped")
TWIST_TYPE = "nav_msgs/msg/Odometry"
# A twist topic needs this many samples while the commands run: a few dozen per step response, a handful of steps.
MIN_SAMPLES = 50
# Bounds of the fit. Latency beyond a second or lags beyond five are not a velocity loop a local planner can drive.
MAX_LATENCY_S = 1.0
MAX_LAG_S = 5.0
# What an odometry twist sees (module docstring) -> the profile slip keys its gains identify.
ODOM_SEES = {"wheels": (), "gyro": ("slip_w",), "body": ("slip_v", "slip_w")}
# rosbag2 metadata lists topics and files: kilobytes; beyond this it is not one (as mnemo_mpc.ros.replay).
MAX_METADATA_BYTES = 16 << 20
DEFAULT_GROUND_TRUTH_TOPIC = "/ground_truth/odom"


def topic_name(name: str) -> str:
    return name if name.startswith("/") else "/" + name


# --- the model ------------------------------------------------------------------------------------------------------
def drive_response(
    cmd_t: np.ndarray,
    cmd: np.ndarray,
    query_t: np.ndarray,
    latency_s: float,
    lag_s: float,
    accel_max: float = 0.0,
    x0: float = 0.0,
) -> np.ndarray:
    """One axis' velocity at `query_t` (sorted) for commands `cmd` sent at `cmd_t` (sorted): the latency, lag and
    saturation of the module docstring, solved exactly between events. Before the first command acts the drive holds
    `x0`."""
    switch = np.asarray(cmd_t, dtype=float) + latency_s
    query = np.asarray(query_t, dtype=float)
    times = np.concatenate([switch, query])
    # Stable: a command taking effect at a measurement's instant is ordered first, and has had no time to act.
    order = np.argsort(times, kind="stable").tolist()
    n = len(switch)
    values = np.asarray(cmd, dtype=float).tolist()
    tl = times.tolist()
    out = np.empty(len(query))
    x = c = float(x0)
    t = tl[order[0]] if order else 0.0
    ramp_gap = accel_max * lag_s  # |c - x| above which the acceleration limit, not the lag, sets the rate
    for i in order:
        ti = tl[i]
        d = ti - t
        t = ti
        if d > 0.0 and x != c:
            e = c - x
            if accel_max > 0.0 and abs(e) > ramp_gap:
                ramp_s = (abs(e) - ramp_gap) / accel_max
                if d <= ramp_s:
                    x += math.copysign(accel_max * d, e)
                    d = 0.0
                else:
                    x = c - math.copysign(ramp_gap, e)
                    d -= ramp_s
                e = c - x
            if d > 0.0:
                x = c - e * math.exp(-d / lag_s) if lag_s > 0.0 else c
        if i < n:
            c = values[i]
        else:
            out[i - n] = x
    return out


# --- data -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    """One twist topic: sample times (s, from the first command) and measured (v, w) rows."""

    topic: str
    t: np.ndarray  # (N,)
    y: np.ndarray  # (N, 2)


@dataclass(frozen=True)
class Recording:
    """What the fit uses from a bag: the commands (times, (v, w) rows) and one or more twist series, all within the
    commands' span, times in seconds from the first command."""

    cmd_topic: str
    cmd_t: np.ndarray  # (M,)
    cmd: np.ndarray  # (M, 2)
    series: tuple[Series, ...]
    source: str = ""  # the bag
    t0_ns: int = 0  # the first command's time (bag or header clock, see `stamps`)

    def check(self) -> None:
        """InputError when the recording cannot identify the drive: too few samples, an axis never excited."""
        where = self.source or "recording"
        if len(self.cmd_t) < 2:
            raise InputError(f"{where}: too few commands on {self.cmd_topic}: {len(self.cmd_t)}, expected >= 2")
        for a, key in enumerate(("linear.x", "angular.z")):
            if np.ptp(self.cmd[:, a]) <= 1e-9:
                raise InputError(
                    f"{where}: {self.cmd_topic} {key} never changes, so lag_{AXES[a]}_s cannot be identified; record "
                    "steps in both v and w (e.g. `mnemo-mpc identify --record`)"
                )
        span = float(self.cmd_t[-1] - self.cmd_t[0])
        for s in self.series:
            if len(s.t) < MIN_SAMPLES:
                raise InputError(
                    f"{where}: too few samples: {len(s.t)} messages on {s.topic} during the {span:.2f} s of commands "
                    f"on {self.cmd_topic}, expected >= {MIN_SAMPLES}; record a longer excitation"
                )


def check_new_recording(bag: str | Path, distro: str, seconds: float) -> tuple[Path, Path]:
    """(bag, its ".partial" sibling) for a recording about to start: the bag must be new, the distro a rosbags
    Stores name, the length > 0 s, and no interrupted recording left in the way; each an InputError naming it."""
    from rosbags.typesys import Stores

    bag = Path(bag)
    if bag.exists():
        raise InputError(f"{bag}: exists; expected a new bag directory")
    if distro not in Stores.__members__:
        raise InputError(f"distro: expected one of {', '.join(Stores.__members__)}, got {distro!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise InputError(f"seconds: expected a duration > 0, got {seconds}")
    partial = bag.with_name(bag.name + ".partial")
    if partial.exists():
        raise InputError(f"{partial}: left from an interrupted recording; remove it first")
    return bag, partial


def check_bag_metadata(bag: Path) -> None:
    """`bag/metadata.yaml` is a bounded, alias-free YAML file (`mnemo_mpc.safe_io`), checked before rosbags parses it
    (as `mnemo_mpc.ros.replay.check_bag_metadata`, not imported: that module loads the planner)."""
    from mnemo_mpc.safe_io import load_yaml

    if not bag.is_dir():
        raise InputError(f"{bag}: bag not found (expected a rosbag2 directory)")
    meta = bag / "metadata.yaml"
    if not meta.is_file():
        raise InputError(f"{bag}: not a rosbag2 directory (no metadata.yaml)")
    load_yaml(meta, MAX_METADATA_BYTES, "rosbag2 metadata")


def _stamp_ns(header: Any) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def read_bag(
    bag: str | Path,
    cmd_topic: str,
    twist_topics: list[str],
    *,
    distro: str = "ROS2_JAZZY",
    stamps: str = "bag",
) -> Recording:
    """The commands on `cmd_topic` (geometry_msgs/Twist or TwistStamped) and the twists of `twist_topics`
    (nav_msgs/Odometry) of a rosbag2, each twist series cut to the commands' span; `stamps` is "bag" (receive times)
    or "header" (module docstring). InputError for a missing bag or topic, a wrong type, a non-finite value, too few
    samples or an axis never commanded (`Recording.check`)."""
    from rosbags.rosbag2 import Reader, ReaderError
    from rosbags.typesys import Stores, get_typestore

    bag = Path(bag)
    if stamps not in ("bag", "header"):
        raise InputError(f"stamps: expected 'bag' or 'header', got {stamps!r}")
    if distro not in Stores.__members__:
        raise InputError(f"distro: expected one of {', '.join(Stores.__members__)}, got {distro!r}")
    check_bag_metadata(bag)
    cmd_topic = topic_name(cmd_topic)
    twist_topics = [topic_name(t) for t in twist_topics]
    if len(set(twist_topics)) != len(twist_topics) or cmd_topic in twist_topics:
        raise InputError(f"topics: expected different topics, got {cmd_topic} and {twist_topics}")
    store = get_typestore(Stores[distro])
    wanted = {cmd_topic: CMD_TYPES, **{t: (TWIST_TYPE,) for t in twist_topics}}
    rows: dict[str, list[tuple[int, float, float]]] = {t: [] for t in wanted}
    try:
        with Reader(bag) as reader:
            conns = []
            for c in reader.connections:
                if c.topic in wanted:
                    if c.msgtype not in wanted[c.topic]:
                        raise InputError(
                            f"{bag}: topic {c.topic} has type {c.msgtype}, expected {' or '.join(wanted[c.topic])}"
                        )
                    conns.append(c)
            missing = sorted(set(wanted) - {c.topic for c in conns})
            if missing:
                raise InputError(
                    f"{bag}: no messages on {', '.join(missing)} "
                    f"(topics in bag: {', '.join(sorted({c.topic for c in reader.connections})) or 'none'})"
                )
            for conn, t_ns, raw in reader.messages(connections=conns):
                msg = store.deserialize_cdr(raw, conn.msgtype)
                if conn.msgtype == TWIST_TYPE:
                    twist, header = msg.twist.twist, msg.header
                elif conn.msgtype == CMD_TYPES[1]:
                    twist, header = msg.twist, msg.header
                else:
                    twist, header = msg, None
                if stamps == "header":
                    if header is None:
                        raise InputError(
                            f"stamps: header stamps asked for, but {conn.topic} is geometry_msgs/Twist (no header); "
                            "use bag times"
                        )
                    t_ns = _stamp_ns(header)
                v, w = float(twist.linear.x), float(twist.angular.z)
                if not (math.isfinite(v) and math.isfinite(w)):
                    raise InputError(
                        f"{bag}: non-finite twist on {conn.topic} at {t_ns * 1e-9:.3f} s (linear.x={v}, angular.z={w})"
                    )
                rows[conn.topic].append((int(t_ns), v, w))
    except ReaderError as exc:  # unparsable metadata, missing or corrupt storage files: the bag, not our code
        raise InputError(f"{bag}: cannot read the bag ({' '.join(str(exc).split())})") from exc

    def arrays(topic: str) -> tuple[np.ndarray, np.ndarray]:
        data = sorted(rows[topic])  # header stamps need not arrive in order
        t = np.array([r[0] for r in data], dtype=np.int64)
        return t, np.array([r[1:] for r in data], dtype=float).reshape(-1, 2)

    cmd_ns, cmd = arrays(cmd_topic)
    if len(cmd_ns) == 0:  # a connection without messages
        raise InputError(f"{bag}: no messages on {cmd_topic}")
    t0 = int(cmd_ns[0])
    t_end = int(cmd_ns[-1])
    series = []
    for topic in twist_topics:
        t_ns, y = arrays(topic)
        keep = (t_ns >= t0) & (t_ns <= t_end)
        series.append(Series(topic, (t_ns[keep] - t0) * 1e-9, y[keep]))
    rec = Recording(cmd_topic, (cmd_ns - t0) * 1e-9, cmd, tuple(series), str(bag), t0)
    rec.check()
    return rec


# --- the fit --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AxisFit:
    """One topic's axis: measured = gain x + offset; the residual's RMS (in m/s or rad/s, and over the signal's
    standard deviation) and the samples it used."""

    gain: float
    offset: float
    rms: float
    rms_relative: float
    samples: int


@dataclass(frozen=True)
class DriveFit:
    """The fitted drive: latency and lags (with approximate standard errors), and per topic and axis the gain and
    offset (`AxisFit`)."""

    latency_s: float
    lag_v_s: float
    lag_w_s: float
    std_error: dict[str, float]
    axes: dict[str, dict[str, AxisFit]]  # topic -> axis -> fit
    accel_max: tuple[float, float]  # the saturation the model assumed (v, w), not fitted
    x0: tuple[float, float]
    cost: float
    starts: list[dict[str, float]] = field(default_factory=list)  # each start's latency and cost

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency_s": self.latency_s,
            "lag_v_s": self.lag_v_s,
            "lag_w_s": self.lag_w_s,
            "std_error": self.std_error,
            "topics": {t: {a: dataclasses.asdict(f) for a, f in axes.items()} for t, axes in self.axes.items()},
            "accel_max_assumed": {"v": self.accel_max[0], "w": self.accel_max[1]},
            "initial_state": {"v": self.x0[0], "w": self.x0[1]},
            "cost": self.cost,
            "starts": self.starts,
        }

    def predict(self, rec: Recording, t: np.ndarray) -> np.ndarray:
        """The drive's (v, w) rows at times `t` (sorted) -- before any topic's gain and offset."""
        lags = (self.lag_v_s, self.lag_w_s)
        return np.stack(
            [
                drive_response(rec.cmd_t, rec.cmd[:, a], t, self.latency_s, lags[a], self.accel_max[a], self.x0[a])
                for a in range(2)
            ],
            axis=1,
        )


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Closed-form least squares of y ~ gain x + offset (the projected-out linear part)."""
    xm, ym = x.mean(), y.mean()
    var = float(np.dot(x - xm, x - xm))
    gain = float(np.dot(x - xm, y - ym)) / var if var > 1e-18 else 0.0
    return gain, float(ym - gain * xm)


def fit_drive(
    rec: Recording, accel_max: tuple[float, float] = (0.0, 0.0), max_latency_s: float = MAX_LATENCY_S
) -> DriveFit:
    """Fit latency_s, lag_v_s, lag_w_s and each topic's gains and offsets to `rec` (module docstring)."""
    from scipy.optimize import least_squares

    rec.check()
    if not (math.isfinite(max_latency_s) and max_latency_s > 0):
        raise InputError(f"max_latency_s: expected seconds > 0, got {max_latency_s}")
    for a, value in enumerate(accel_max):
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"accel_{AXES[a]}_max: expected a number >= 0, got {value}")
    t_all = np.unique(np.concatenate([s.t for s in rec.series]))
    index = [np.searchsorted(t_all, s.t) for s in rec.series]
    first = rec.series[0]
    x0 = (float(first.y[0, 0]), float(first.y[0, 1]))  # the state the bag starts in, as its first topic saw it
    scale = [[max(float(np.std(s.y[:, a])), 1e-9) * math.sqrt(len(s.t)) for a in range(2)] for s in rec.series]

    def states(theta: np.ndarray) -> list[np.ndarray]:
        return [
            drive_response(rec.cmd_t, rec.cmd[:, a], t_all, theta[0], theta[1 + a], accel_max[a], x0[a])
            for a in range(2)
        ]

    def residuals(theta: np.ndarray) -> np.ndarray:
        xs = states(theta)
        out = []
        for s, idx, sc in zip(rec.series, index, scale, strict=True):
            for a in range(2):
                x, y = xs[a][idx], s.y[:, a]
                gain, offset = _linear_fit(x, y)
                out.append((y - gain * x - offset) / sc[a])
        return np.concatenate(out)

    lower = np.zeros(3)
    upper = np.array([max_latency_s, MAX_LAG_S, MAX_LAG_S])
    starts, best = [], None
    for latency0 in sorted({min(v, 0.9 * max_latency_s) for v in (0.02, 0.1, 0.3)}):
        res = least_squares(
            residuals,
            np.array([latency0, 0.1, 0.1]),
            bounds=(lower, upper),
            x_scale=np.array([0.05, 0.1, 0.1]),
            diff_step=1e-4,
            method="trf",
        )
        starts.append({"latency0_s": latency0, "latency_s": float(res.x[0]), "cost": float(res.cost)})
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    theta = best.x
    if not np.all(np.isfinite(theta)) or best.status <= 0:
        raise InputError(f"{rec.source}: the fit did not converge ({best.message})")
    # Gauss-Newton covariance of the projected problem: an estimate, good when the model fits and noise is white.
    dof = max(len(best.fun) - 3, 1)
    sigma2 = 2 * best.cost / dof
    try:
        cov = np.linalg.inv(best.jac.T @ best.jac) * sigma2
        std = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        std = np.full(3, np.nan)
    xs = states(theta)
    axes: dict[str, dict[str, AxisFit]] = {}
    for s, idx in zip(rec.series, index, strict=True):
        axes[s.topic] = {}
        for a, name in enumerate(AXES):
            x, y = xs[a][idx], s.y[:, a]
            gain, offset = _linear_fit(x, y)
            r = y - gain * x - offset
            rms = float(np.sqrt(np.mean(r**2)))
            axes[s.topic][name] = AxisFit(gain, offset, rms, rms / max(float(np.std(y)), 1e-12), len(y))
    names = ("latency_s", "lag_v_s", "lag_w_s")
    return DriveFit(
        latency_s=float(theta[0]),
        lag_v_s=float(theta[1]),
        lag_w_s=float(theta[2]),
        std_error={n: float(v) if math.isfinite(v) else None for n, v in zip(names, std, strict=True)},
        axes=axes,
        accel_max=(float(accel_max[0]), float(accel_max[1])),
        x0=x0,
        cost=float(best.cost),
        starts=starts,
    )


def identified_values(
    fit: DriveFit, odom_topic: str, odom_sees: str = "gyro", ground_truth_topic: str | None = None
) -> tuple[dict[str, float], dict[str, str]]:
    """The profile `dynamics:` values the fit identifies, and where each came from: latency and lags always; slip from
    the ground-truth topic when given, else from the odometry as far as `odom_sees` (ODOM_SEES) allows (module
    docstring). Values rounded to what a profile states (0.1 ms, 0.001)."""
    if odom_sees not in ODOM_SEES:
        raise InputError(f"odom_sees: expected one of {', '.join(ODOM_SEES)}, got {odom_sees!r}")
    values = {
        "latency_s": round(fit.latency_s, 4),
        "lag_v_s": round(fit.lag_v_s, 4),
        "lag_w_s": round(fit.lag_w_s, 4),
    }
    sources = {k: "fit of every twist topic" for k in values}
    for key in ("slip_v", "slip_w"):
        axis = key[-1]
        if ground_truth_topic is not None:
            topic, why = topic_name(ground_truth_topic), "ground truth"
        elif key in ODOM_SEES[odom_sees]:
            topic, why = topic_name(odom_topic), f"odometry, --odom-sees {odom_sees}"
        else:
            continue
        gain = fit.axes[topic][axis].gain
        if not 0 < gain <= 1.5:  # Realism's bound on a slip factor
            raise InputError(
                f"{topic}: fitted {axis} gain {gain:.3f} is not a slip factor in (0, 1.5]; check which twist the "
                "topic measures (--odom-sees, --ground-truth-topic)"
            )
        values[key] = round(gain, 3)
        sources[key] = f"gain of {axis} on {topic} ({why})"
    return values, sources


# --- the profile ----------------------------------------------------------------------------------------------------
def updated_profile(base: dict | None, values: dict[str, float], node_name: str | None = None) -> dict:
    """A ROS2 parameter document: `base` (a parsed parameter file; None: `/**: {ros__parameters: {}}`, the built-in
    defaults) with `values` set under `dynamics:` -- in the `/**` entry (or the first entry `NavParams.from_yaml`
    reads) and in every other such entry with a `dynamics:` section (a named entry's section replaces the wildcard's
    whole in `from_yaml`, key by key in rcl: both then read the fitted values), any flattened `dynamics.KEY` form
    removed. Other nodes' entries are left alone."""
    import copy

    from mnemo_mpc.profile import NODE_NAME

    node_name = node_name or NODE_NAME
    doc = copy.deepcopy(base) if base is not None else {"/**": {"ros__parameters": {}}}
    matches = [k for k in doc if k == "/**" or str(k).rsplit("/", 1)[-1] == node_name]
    if not matches:
        doc["/**"] = {"ros__parameters": {}}
        matches = ["/**"]
    matches.sort(key=lambda k: k != "/**")
    for n, key in enumerate(matches):
        params = doc[key]["ros__parameters"]
        for k in values:
            params.pop(f"dynamics.{k}", None)
        dynamics = params.get("dynamics")
        if n == 0:
            dynamics = params.setdefault("dynamics", {})
        if isinstance(dynamics, dict):  # every entry's section: `from_yaml` takes a later entry's section whole
            dynamics.update({k: float(v) for k, v in values.items()})
    return doc


def write_profile(path: str | Path, doc: dict, values: dict[str, float], header: str = "") -> Path:
    """Write `doc` as YAML to `path` atomically, after checking that `NavParams.from_yaml` loads it with `values`."""
    import yaml

    from mnemo_mpc.atomic import atomic_write_text
    from mnemo_mpc.profile import NavParams

    path = Path(path)
    text = header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
    with tempfile.TemporaryDirectory(prefix="mnemo-identify-") as tmp:
        probe = Path(tmp) / path.name
        probe.write_text(text, encoding="utf-8")
        try:
            loaded = NavParams.from_yaml(probe)
        except InputError as exc:
            raise InputError(f"{path}: the identified profile does not load: {exc}") from None
    for k, v in values.items():
        got = getattr(loaded, f"dynamics_{k}")
        if got != v:
            raise InputError(f"{path}: the written profile reads dynamics.{k} = {got}, expected the fitted {v}")
    return atomic_write_text(path, text)


# --- the figure -----------------------------------------------------------------------------------------------------
def plot_fit(rec: Recording, fit: DriveFit, path: str | Path) -> Path:
    """Measured vs fitted response per axis (and topic), with the command, to `path` (PNG, written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mnemo_mpc.atomic import atomic_write_bytes

    t_end = float(rec.cmd_t[-1])
    t_fine = np.linspace(0.0, t_end, max(2000, int(t_end * 200)))
    x_fine = fit.predict(rec, t_fine)
    fig, axs = plt.subplots(2, 1, figsize=(11, 6.5), dpi=110, sharex=True)
    labels = ("v [m/s]", "w [rad/s]")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for a, ax in enumerate(axs):
        ax.step(rec.cmd_t, rec.cmd[:, a], where="post", color="0.6", lw=1.0, ls="--", label=f"command {rec.cmd_topic}")
        for k, s in enumerate(rec.series):
            f = fit.axes[s.topic][AXES[a]]
            color = colors[k % len(colors)]
            ax.plot(s.t, s.y[:, a], ".", ms=2.5, color=color, label=f"measured {s.topic}")
            ax.plot(
                t_fine,
                f.gain * x_fine[:, a] + f.offset,
                "-",
                lw=1.0,
                color=color,
                alpha=0.8,
                label=f"fitted {s.topic}: gain {f.gain:.3f}, RMS {f.rms:.3g}",
            )
        ax.set_ylabel(labels[a])
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    axs[-1].set_xlabel(f"time since the first command [s] ({rec.source})")
    axs[0].set_title(
        f"latency {fit.latency_s * 1e3:.1f} ms, lag_v {fit.lag_v_s * 1e3:.0f} ms, lag_w {fit.lag_w_s * 1e3:.0f} ms "
        f"(accel limits assumed: v {fit.accel_max[0]:g} m/s^2, w {fit.accel_max[1]:g} rad/s^2)",
        fontsize=9,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


# --- excitation bags from the simulator -----------------------------------------------------------------------------
def excitation(
    seed: int,
    steps: int,
    dt: float,
    v_range: tuple[float, float],
    w_max: float,
    hold_s: tuple[float, float] = (0.3, 1.5),
    p_zero: float = 0.2,
    rest_s: float = 0.5,
) -> np.ndarray:
    """(steps, 2) commands, one per control period: on each axis independently, random steps uniform within its range
    held U(hold_s) seconds, a step to zero with probability `p_zero`; at rest for the first `rest_s`. Independent
    switching keeps the axes' responses apart."""
    rng = np.random.default_rng(seed)
    out = np.zeros((steps, 2))
    ranges = (v_range, (-w_max, w_max))
    first = min(steps, int(round(rest_s / dt)))
    for a in range(2):
        k = first
        while k < steps:
            n = max(1, int(round(rng.uniform(*hold_s) / dt)))
            lo, hi = ranges[a]
            out[k : k + n, a] = 0.0 if rng.random() < p_zero else rng.uniform(lo, hi)
            k += n
    return out


@dataclass(frozen=True)
class RecordTopics:
    cmd_vel: str = "/cmd_vel"
    odom: str = "/odom"
    ground_truth: str = DEFAULT_GROUND_TRUTH_TOPIC
    stamped: bool = False  # TwistStamped on cmd_vel


def record_excitation_bag(
    bag: str | Path,
    setup: Any,
    *,
    seconds: float = 30.0,
    seed: int = 0,
    topics: RecordTopics | None = None,
    distro: str = "ROS2_JAZZY",
    physics_hz: float = 1000.0,
) -> dict[str, Any]:
    """Drive the simulated robot of `setup` (`mnemo_mpc.sim.profile.ClosedLoopSetup`: its body, control period and
    realism) through `excitation` in an empty world and record a rosbag2 at `bag` (a new directory): the command
    (Twist or TwistStamped) at each send time, and each control period the odometry (`Observation.velocity`: the
    wheels' v, the gyro's w; the odometry pose) and the ground truth (the body's true twist and pose). Returns a
    summary (what was recorded and the realism the simulator drove)."""
    import shutil

    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    from mnemo_mpc.planning.grid import OccupancyGrid
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import World

    topics = topics or RecordTopics()
    bag, partial = check_new_recording(bag, distro, seconds)
    store = get_typestore(Stores[distro])
    T = store.types
    dt = setup.sim.control_dt
    robot = setup.robot
    steps = max(1, int(round(seconds / dt)))
    commands = excitation(seed, steps, dt, (robot.v_min, robot.v_max), robot.w_max)
    # An empty world with no geometry at all: the robot can drive anywhere and never touches anything.
    grid = OccupancyGrid(np.zeros((64, 64), dtype=np.int8), 1.0, (-32.0, -32.0, 0.0))
    world = World(grid=grid, start=np.zeros(3), goal=np.array([1.0, 0.0, 0.0]), seed=int(seed), kind="open")
    # At least `physics_hz`, in whole substeps per control period: the drive switches commands on substep
    # boundaries, so PyBullet's 4 ms default would round every latency up by ~2 ms (4 % of 50 ms) in the bag.
    substeps = max(1, math.ceil(dt * physics_hz - 1e-9))
    sim_cfg = dataclasses.replace(setup.sim, seed=int(seed), physics_hz=max(setup.sim.physics_hz, substeps / dt))

    def header(t_s: float, frame: str) -> Any:
        sec, nanosec = divmod(int(round(t_s * 1e9)), 1_000_000_000)
        return T["std_msgs/msg/Header"](
            stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame
        )

    def twist(v: float, w: float) -> Any:
        vec = T["geometry_msgs/msg/Vector3"]
        return T["geometry_msgs/msg/Twist"](linear=vec(x=float(v), y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=float(w)))

    def odometry(t_s: float, frame: str, pose: np.ndarray, vel: np.ndarray) -> Any:
        x, y, yaw = (float(p) for p in pose)
        p = T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=x, y=y, z=0.0),
            orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)),
        )
        return T[TWIST_TYPE](
            header=header(t_s, frame),
            child_frame_id="base_link",
            pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=p, covariance=np.zeros(36)),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=twist(*vel), covariance=np.zeros(36)),
        )

    cmd_type = CMD_TYPES[1] if topics.stamped else CMD_TYPES[0]
    collided = False
    try:
        with Simulator(sim_cfg) as sim, Writer(partial, version=9) as writer:
            c_cmd = writer.add_connection(topic_name(topics.cmd_vel), cmd_type, typestore=store)
            c_odom = writer.add_connection(topic_name(topics.odom), TWIST_TYPE, typestore=store)
            c_truth = writer.add_connection(topic_name(topics.ground_truth), TWIST_TYPE, typestore=store)

            def write_state(obs: Any) -> None:
                t_ns = int(round(obs.time_s * 1e9))
                odom = odometry(obs.time_s, "odom", obs.pose, obs.velocity)
                truth = odometry(obs.time_s, "map", obs.true_pose, sim.robot.velocity())
                writer.write(c_odom, t_ns, store.serialize_cdr(odom, TWIST_TYPE))
                writer.write(c_truth, t_ns, store.serialize_cdr(truth, TWIST_TYPE))

            obs = sim.reset(world)
            write_state(obs)
            for v, w in commands:
                now = sim.time_s
                msg = twist(v, w)
                if topics.stamped:
                    msg = T[CMD_TYPES[1]](header=header(now, "base_link"), twist=msg)
                writer.write(c_cmd, int(round(now * 1e9)), store.serialize_cdr(msg, cmd_type))
                obs = sim.step(float(v), float(w))
                collided |= bool(obs.collision)
                write_state(obs)
        partial.rename(bag)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {
        "bag": str(bag),
        "seconds": steps * dt,
        "control_dt_s": dt,
        "commands": steps,
        "seed": int(seed),
        "physics_hz": sim_cfg.physics_hz,
        "collided": collided,
        "topics": {
            "cmd_vel": topic_name(topics.cmd_vel),
            "odom": topic_name(topics.odom),
            "ground_truth": topic_name(topics.ground_truth),
        },
        "cmd_type": cmd_type,
        "distro": distro,
        "realism": setup.sim.realism.to_dict(),
    }

"""Run an exported warm-start model with onnxruntime: an MPC problem -> a `WarmStart` for the SQP.

Execution providers are tried in the order TensorRT -> CUDA -> CPU (those the installed onnxruntime offers; the GPU
build also runs on the CPU). ONNX Runtime's own messages about providers it cannot load are silenced; instead one
short INFO line names the provider in use, and why the faster ones were not is one DEBUG line (`-v`): a CPU machine
is the normal case, not news. Only a caller that asked for providers itself (`providers=`) gets that reason at INFO
when a GPU provider it asked for could not be used. The model's metadata must agree with the
planner it serves (horizon, step, robot limits and footprint): a model trained for another robot or horizon would
give starts for another problem, so that is an error naming the field, as are a wrong input shape or dtype and a
file that is not a readable ONNX model.

Model files come from users and are read like maps (issue 26): a regular file (a FIFO or device is refused before it
is opened) of at most `max_model_bytes()` through `safe_io.read_regular_file`; every metadata value type- and
range-checked (`InputSpec` fields bounded by what a tick can afford); the graph's inputs and output (names, element
types, shapes) checked against that metadata; and one probe inference at load whose output must be finite and of the
declared shape. Every failure is an `InputError` naming the file and what was expected, so `--model BAD` is one
line and exit status 2, never a model that fails every control step.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.safe_io import first_line, parse_json, read_regular_file, show
from mnemo_mpc.warmstart.inputs import FORMAT, INPUTS, OUTPUT, InputSpec, grid_input, vector_input

log = logging.getLogger(__name__)

PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
ROBOT_FIELDS = ("radius", "safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max")
# The shipped model is ~1 MB; a ViT of 100x its parameters still fits. Larger is a wrong file (a 3 GiB file took 49 s
# and ~3 GB to refuse before the cap). MNEMO_MPC_MAX_MODEL_BYTES raises it.
MAX_MODEL_BYTES = 256 << 20
# Input spec bounds: the crop is built every control step (2 x S x S floats from the distance field) and a horizon
# is an NLP of 2N variables; beyond these a tick's time and memory budget is gone (S = 256: 0.5 MB per crop and
# 65,536 distance look-ups, ~10x the shipped 40; N = 500: 17x the default horizon).
MAX_CROP_CELLS = 256
MAX_HORIZON = 500
ONNX_FLOAT = 1  # onnx.TensorProto.FLOAT


def max_model_bytes() -> int:
    """The model-file size cap: $MNEMO_MPC_MAX_MODEL_BYTES, else MAX_MODEL_BYTES."""
    text = os.environ.get("MNEMO_MPC_MAX_MODEL_BYTES")
    if text is None:
        return MAX_MODEL_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"MNEMO_MPC_MAX_MODEL_BYTES: expected a positive integer, got {text!r}")
    return value


@dataclass
class ModelInfo:
    path: str
    inputs: InputSpec
    robot: dict[str, float]
    feature_map: str
    training: dict[str, Any]
    version: str


def _input_spec(path: Path, value: Any) -> InputSpec:
    """`InputSpec` from the metadata's JSON object, every field of the right type and within the bounds above."""
    key = "mnemo_mpc.inputs"
    names = {f.name: f for f in fields(InputSpec)}
    if not isinstance(value, dict) or not set(value) <= set(names):
        extra = sorted(set(value) - set(names)) if isinstance(value, dict) else type(value).__name__
        raise InputError(f"{path}: metadata field {key} must be an object with keys from {sorted(names)}, got {extra}")
    for name, v in value.items():
        if name in ("size", "N"):
            high = MAX_CROP_CELLS if name == "size" else MAX_HORIZON
            low = 2 if name == "size" else 1
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise InputError(
                    f"{path}: metadata field {key}.{name}: expected an integer in [{low}, {high}], got {show(v)}"
                )
        elif name == "behind_m":
            if not (is_real(v) and abs(v) <= 1e3):
                raise InputError(
                    f"{path}: metadata field {key}.{name}: expected a finite number of metres, got {show(v)}"
                )
        elif not (is_real(v) and 0 < v <= 1e3):
            raise InputError(
                f"{path}: metadata field {key}.{name}: expected a finite number in (0, 1000], got {show(v)}"
            )
    try:
        return InputSpec(**value)
    except InputError as exc:
        raise InputError(f"{path}: metadata field {key}: {exc}") from exc


def _robot(path: Path, value: Any) -> dict[str, Any]:
    """The metadata's robot: every limit a finite number, the footprint (when present) a list of [x, y] pairs."""
    key = "mnemo_mpc.robot"
    if not isinstance(value, dict) or any(k not in value for k in ROBOT_FIELDS):
        raise InputError(f"{path}: metadata field {key} must hold {list(ROBOT_FIELDS)}")
    for name in ROBOT_FIELDS:
        if not is_real(value[name]):
            raise InputError(f"{path}: metadata field {key}.{name}: expected a finite number, got {show(value[name])}")
    fp = value.get("footprint")
    if fp is not None and not (
        isinstance(fp, list)
        and len(fp) <= 1000
        and all(isinstance(p, list) and len(p) == 2 and all(is_real(c) for c in p) for p in fp)
    ):
        raise InputError(f"{path}: metadata field {key}.footprint: expected a list of [x, y] numbers, got {show(fp)}")
    return value


def _dims(value_info: Any) -> list[int | str | None]:
    """A graph input's / output's shape: ints, symbolic names (a dynamic axis) or None (unknown)."""
    shape = value_info.type.tensor_type.shape
    out: list[int | str | None] = []
    for d in shape.dim:
        kind = d.WhichOneof("value")
        out.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
    return out


def check_graph(path: Path, proto: Any, spec: InputSpec) -> None:
    """The graph's inputs and output agree with the metadata: names, float32, and shapes (B, 2, S, S), (B, 2N + 7)
    -> (B, N, 2). An axis may be dynamic (a name, or unknown: exporters leave derived sizes so); a fixed one must be
    the metadata's. A crop or horizon the metadata does not describe would feed the model inputs it was not built
    for, or give starts for another horizon; what a dynamic axis really is, the probe inference at load shows."""
    names_in = [i.name for i in proto.graph.input]
    names_out = [o.name for o in proto.graph.output]
    if names_in != list(INPUTS) or names_out != [OUTPUT]:
        raise InputError(f"{path}: graph inputs {names_in} / outputs {names_out}, expected {list(INPUTS)} / [{OUTPUT}]")
    expected = {
        "grid": [2, spec.size, spec.size],
        "vector": [spec.vector_size],
        OUTPUT: [spec.N, 2],
    }
    for info in [*proto.graph.input, *proto.graph.output]:
        if not info.type.HasField("tensor_type") or info.type.tensor_type.elem_type != ONNX_FLOAT:
            raise InputError(f"{path}: graph {info.name!r} must be a float32 tensor")
        dims, want = _dims(info), expected[info.name]
        fixed_ok = len(dims) == len(want) + 1 and all(
            isinstance(d, str) or d is None or d == w for d, w in zip(dims, [None, *want], strict=True)
        )
        batch_ok = bool(dims) and (dims[0] in (1, None) or isinstance(dims[0], str))
        if not (fixed_ok and batch_ok):
            shown = ["?" if isinstance(d, str) or d is None else d for d in dims]
            raise InputError(
                f"{path}: graph {info.name!r} has shape {shown}, expected [B, {', '.join(map(str, want))}] from "
                f"metadata mnemo_mpc.inputs (size={spec.size}, N={spec.N})"
            )


def read_metadata(path: str | os.PathLike[str]) -> tuple[bytes, ModelInfo]:
    """The model file's bytes and its parsed metadata, the graph's signature checked against it (`check_graph`);
    InputError naming the file and field when unusable."""
    import onnx

    path = Path(path)
    cap = max_model_bytes()
    data = read_regular_file(path, cap, "the warm-start model", hint=" (MNEMO_MPC_MAX_MODEL_BYTES raises it)")
    try:
        proto = onnx.load_from_string(data)
        onnx.checker.check_model(proto)
    except Exception as exc:  # protobuf raises DecodeError and friends for damaged files
        raise InputError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {str(exc)[:200]})") from exc
    meta = {p.key: p.value for p in proto.metadata_props}
    if meta.get("mnemo_mpc.format") != FORMAT:
        raise InputError(
            f"{path}: metadata field mnemo_mpc.format is {show(meta.get('mnemo_mpc.format'))}, expected {FORMAT!r}"
        )

    def field_json(key: str) -> Any:
        if key not in meta:
            raise InputError(f"{path}: metadata field {key} is missing")
        raw = meta[key]  # protobuf hands a string that is not valid UTF-8 back as bytes
        return parse_json(raw if isinstance(raw, bytes) else raw.encode("utf-8"), path, f"metadata field {key}")

    spec = _input_spec(path, field_json("mnemo_mpc.inputs"))
    robot = _robot(path, field_json("mnemo_mpc.robot"))
    check_graph(path, proto, spec)
    info = ModelInfo(
        str(path),
        spec,
        robot,
        str(meta.get("mnemo_mpc.feature_map", "?"))[:100],
        field_json("mnemo_mpc.training"),
        str(meta.get("mnemo_mpc.version", "?"))[:100],
    )
    return data, info


def check_compatible(info: ModelInfo, robot: RobotModel, n: int, dt: float) -> None:
    """The model must have been trained for this planner: same horizon, step, limits and footprint."""
    if info.inputs.N != n or not math.isclose(info.inputs.dt, dt):
        raise InputError(
            f"{info.path}: metadata field mnemo_mpc.inputs has N={info.inputs.N}, dt={info.inputs.dt}; the planner "
            f"uses N={n}, dt={dt}"
        )
    for name in ROBOT_FIELDS:
        want, got = float(getattr(robot, name)), float(info.robot[name])
        if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12):
            raise InputError(
                f"{info.path}: metadata field mnemo_mpc.robot.{name} = {got} disagrees with the planner's {want}"
            )
    # A polygon footprint: models trained before footprints existed (no field) were trained on the round robot.
    want_fp = [[float(x), float(y)] for x, y in robot.footprint]
    got_fp = info.robot.get("footprint") or []
    try:
        same = len(got_fp) == len(want_fp) and all(
            math.isclose(float(a), b, abs_tol=1e-9)
            for p, q in zip(got_fp, want_fp, strict=True)
            for a, b in zip(p, q, strict=True)
        )
    except (TypeError, ValueError):
        same = False
    if not same:
        raise InputError(
            f"{info.path}: metadata field mnemo_mpc.robot.footprint = {got_fp or 'round'} disagrees with the planner's "
            f"{want_fp or 'round'}"
        )


@contextlib.contextmanager
def _captured_output() -> Any:
    """Everything written to stdout/stderr meanwhile, Python and C++ alike (file descriptors 1 and 2 redirected)."""
    import tempfile

    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys_fds = (1, 2)
        saved = [os.dup(fd) for fd in sys_fds]
        text = io.StringIO()
        try:
            for fd in sys_fds:
                os.dup2(tmp.fileno(), fd)
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield text
        finally:
            for fd, old in zip(sys_fds, saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
            tmp.seek(0)
            text.write(tmp.read().decode("utf-8", "replace"))


def _reason(text: str) -> str:
    """A short cause from onnxruntime's messages about a provider it could not start."""
    for pattern in ("cannot open shared object file", "Please install"):
        for line in text.splitlines():
            if pattern in line:
                if pattern == "Please install":
                    return line[line.index(pattern) :].split(" as mentioned")[0].split(",")[0]
                return line.split("with error: ")[-1].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "*" not in ln]
    return lines[0][:120] if lines else "could not be started"


def _session(data: bytes, providers: tuple[str, ...], threads: int) -> tuple[Any, str, dict[str, str]]:
    """The first provider (in `providers` order) that onnxruntime can actually start, with the others' reasons."""
    import onnxruntime as ort

    available = set(ort.get_available_providers())
    skipped: dict[str, str] = {}
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for provider in providers:
        if provider not in available:
            skipped[provider] = "not in this onnxruntime build"
            continue
        chain = [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
        try:
            with _captured_output() as captured:
                session = ort.InferenceSession(data, so, providers=chain)
        except Exception as exc:  # a provider that fails to initialise raises from inside onnxruntime
            skipped[provider] = _reason(str(exc))
            continue
        if session.get_providers()[0] == provider:
            return session, provider, skipped
        skipped[provider] = _reason(captured.getvalue())
    raise InputError("no onnxruntime execution provider could run the warm-start model: " + json.dumps(skipped))


class WarmStartModel:
    """An exported model (see `export`) for one planner; `__call__(context)` gives a `WarmStart`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        robot: RobotModel,
        n: int,
        dt: float,
        providers: tuple[str, ...] | None = None,
        threads: int = 1,
    ) -> None:
        """`providers`: the execution providers to try, in order; None tries `PROVIDERS` (GPU ones when this
        onnxruntime has them) and says why a GPU one was not used at DEBUG only."""
        data, self.info = read_metadata(path)
        check_compatible(self.info, robot, n, dt)
        self.robot, self.spec = robot, self.info.inputs
        asked = providers is not None
        try:
            self.session, self.provider, skipped = _session(data, tuple(providers if asked else PROVIDERS), threads)
        except InputError as exc:  # a graph that passed the checker but that onnxruntime cannot build
            raise InputError(f"{self.info.path}: {exc}") from exc
        self.last_inference_s = 0.0
        self.last_features_s = 0.0
        self._probe()
        why = "; ".join(f"{p.replace('ExecutionProvider', '')}: {r}" for p, r in skipped.items())
        name = Path(path).name
        if why and asked and any(p != "CPUExecutionProvider" for p in skipped):
            # the caller asked for a GPU provider that could not be used: that is news, one line with the reasons
            log.info("warm-start model %s on %s (%s)", name, self.provider, why)
        else:
            log.info("warm-start model %s on %s", name, self.provider)
            if why:
                log.debug("warm-start model %s: providers not used: %s", name, why)

    def _probe(self) -> None:
        """One inference at load on a batch of two typical inputs (free space ahead, the robot at rest, the
        sub-goal straight ahead): the output must be float32 (2, N, 2) and finite. A graph that computes NaN, or
        another shape than it declares, is refused here instead of failing every control step."""
        s = self.spec
        grid = np.ones((2, 2, s.size, s.size), np.float32)
        vector = np.zeros((2, s.vector_size), np.float32)
        vector[:, 2] = 1.0  # the sub-goal scale_m ahead
        vector[:, 4] = 1.0  # cos of the heading difference
        try:
            out = self.session.run([OUTPUT], {"grid": grid, "vector": vector})[0]
        except Exception as exc:  # onnxruntime raises its own exception types for a graph that cannot run
            raise InputError(
                f"{self.info.path}: the probe inference failed ({type(exc).__name__}: {first_line(exc)})"
            ) from exc
        want = (2, s.N, 2)
        if not isinstance(out, np.ndarray) or out.shape != want or out.dtype != np.float32:
            got = (getattr(out, "shape", None), getattr(out, "dtype", type(out).__name__))
            raise InputError(f"{self.info.path}: the probe inference gave {got}, expected float32 {want}")
        if not np.all(np.isfinite(out)):
            raise InputError(f"{self.info.path}: the probe inference gave non-finite controls (NaN or inf)")

    def predict(self, grid: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """Controls (B, N, 2) for a batch of inputs (float32 grid (B, 2, S, S), vector (B, 2N + 7))."""
        s = self.spec
        for name, arr, shape in (("grid", grid, (2, s.size, s.size)), ("vector", vector, (s.vector_size,))):
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
                raise InputError(
                    f"WarmStartModel.{name}: expected a float32 numpy array, got "
                    f"{getattr(arr, 'dtype', type(arr).__name__)}"
                )
            if arr.ndim != len(shape) + 1 or arr.shape[1:] != shape:
                raise InputError(
                    f"WarmStartModel.{name}: expected shape (batch, {', '.join(map(str, shape))}), got {arr.shape}"
                )
        if grid.shape[0] != vector.shape[0]:
            raise InputError(f"WarmStartModel: grid and vector batches differ ({grid.shape[0]} vs {vector.shape[0]})")
        t0 = time.perf_counter()
        out = self.session.run([OUTPUT], {"grid": grid, "vector": vector})[0]
        self.last_inference_s = time.perf_counter() - t0
        return out

    def inputs(self, context: Any) -> tuple[np.ndarray, np.ndarray]:
        """(grid, vector) of a batch of one from a warm-start context (field, pose, velocity, subgoal, reference)."""
        ref = context.reference
        if ref is None:  # no global path: the MPC tracks the sub-goal at every knot
            ref = np.tile(np.asarray(context.subgoal, dtype=float)[:2], (self.spec.N + 1, 1))
        grid = grid_input(context.field, context.pose, self.robot, self.spec)[None]
        vector = vector_input(context.pose, context.velocity, context.subgoal, ref, self.robot, self.spec)[None]
        return grid, vector

    def __call__(self, context: Any) -> Any:
        from mnemo_mpc.planning.mpc import WarmStart

        t0 = time.perf_counter()
        grid, vector = self.inputs(context)
        self.last_features_s = time.perf_counter() - t0
        controls = self.predict(grid, vector)[0].astype(float)
        return WarmStart(self.robot.rollout(context.pose, controls, self.spec.dt), controls)

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.info.path,
            "provider": self.provider,
            "feature_map": self.info.feature_map,
            "inputs": {f.name: getattr(self.spec, f.name) for f in fields(self.spec)},
            "training": self.info.training,
            "version": self.info.version,
        }


def model_dirs() -> list[Path]:
    """Where shipped models are looked for: $MNEMO_MPC_MODELS, the source checkout's `models/`, and the installed
    package's share folder (`share/mnemo_mpc/models`, where setup.py and colcon put them); see
    `mnemo_mpc.resources`."""
    from mnemo_mpc.resources import share_dirs

    return share_dirs("models")


def find_model(robot: RobotModel, n: int, dt: float, why_not: list[str] | None = None) -> Path | None:
    """The first shipped model trained for this robot, horizon and step (metadata checked), or None; `why_not`
    collects, per model that does not fit, the first field that differs."""
    for d in model_dirs():
        for path in sorted(d.glob("*.onnx")):
            try:
                _, info = read_metadata(path)
            except InputError as exc:  # a damaged or foreign file: skipped, said once, never fatal
                log.warning("skipping %s: %s", path, exc)
                continue
            try:
                check_compatible(info, robot, n, dt)
            except InputError as exc:  # a good model for another robot or horizon: the normal case, not news
                log.debug("model %s does not fit: %s", path, exc)
                if why_not is not None:
                    why_not.append(f"{path.name}: {str(exc).removeprefix(f'{path}: ')}")
                continue
            return path
    return None


def resolve(mode: str | None, model: str | None, robot: RobotModel, n: int, dt: float) -> tuple[str, Any]:
    """(warm-start mode, provider or None) for a command line: `mode` None means "hybrid" when a model is given or a
    shipped one fits the robot, else "shift"; "learned"/"hybrid" without a usable model is an error."""
    why_not: list[str] = []
    path = Path(model) if model else find_model(robot, n, dt, why_not)
    if mode is None:
        mode = "hybrid" if path is not None else "shift"
        if path is None:  # one line: why no shipped model serves this robot
            log.info(
                "warm start shift: no shipped model fits this robot (%s)",
                f"{len(why_not)} looked at; {'; '.join(why_not)}" if why_not else f"none in {model_dirs()}",
            )
    if mode in ("cold", "shift"):
        return mode, None
    if path is None:
        raise InputError(
            f"--warmstart {mode}: needs a model (--model FILE.onnx); none in {model_dirs()} fits this robot"
        )
    return mode, WarmStartModel(path, robot, n, dt)

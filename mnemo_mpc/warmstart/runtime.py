"""Run an exported warm-start model with onnxruntime: an MPC problem -> a `WarmStart` for the SQP.

Execution providers are tried in the order TensorRT -> CUDA -> CPU (those the installed onnxruntime offers; the GPU
build also runs on the CPU). ONNX Runtime's own messages about providers it cannot load are silenced; instead one
log line names the provider in use and why the faster ones were not. The model's metadata must agree with the
planner it serves (horizon, step, robot limits and footprint): a model trained for another robot or horizon would
give starts for another problem, so that is an error naming the field, as are a wrong input shape or dtype and a
file that is not a readable ONNX model.
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

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart.export import FORMAT, INPUTS, OUTPUT
from mnemo_mpc.warmstart.inputs import InputSpec, grid_input, vector_input

log = logging.getLogger(__name__)

PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
ROBOT_FIELDS = ("radius", "safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max")


@dataclass
class ModelInfo:
    path: str
    inputs: InputSpec
    robot: dict[str, float]
    feature_map: str
    training: dict[str, Any]
    version: str


def read_metadata(path: str | os.PathLike[str]) -> tuple[bytes, ModelInfo]:
    """The model file's bytes and its parsed metadata; InputError naming the file and field when unusable."""
    import onnx

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the warm-start model ({exc})") from exc
    try:
        proto = onnx.load_from_string(data)
        onnx.checker.check_model(proto)
    except Exception as exc:  # protobuf raises DecodeError and friends for damaged files
        raise InputError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {str(exc)[:200]})") from exc
    meta = {p.key: p.value for p in proto.metadata_props}
    if meta.get("mnemo_mpc.format") != FORMAT:
        raise InputError(
            f"{path}: metadata field mnemo_mpc.format is {meta.get('mnemo_mpc.format')!r}, expected {FORMAT!r}"
        )

    def field_json(key: str) -> Any:
        try:
            return json.loads(meta[key])
        except KeyError as exc:
            raise InputError(f"{path}: metadata field {key} is missing") from exc
        except ValueError as exc:
            raise InputError(f"{path}: metadata field {key} is not valid JSON ({exc})") from exc

    try:
        spec = InputSpec(**field_json("mnemo_mpc.inputs"))
    except TypeError as exc:
        raise InputError(f"{path}: metadata field mnemo_mpc.inputs does not describe an input spec ({exc})") from exc
    robot = field_json("mnemo_mpc.robot")
    if not isinstance(robot, dict) or any(k not in robot for k in ROBOT_FIELDS):
        raise InputError(f"{path}: metadata field mnemo_mpc.robot must hold {list(ROBOT_FIELDS)}")
    names_in = [i.name for i in proto.graph.input]
    names_out = [o.name for o in proto.graph.output]
    if names_in != list(INPUTS) or names_out != [OUTPUT]:
        raise InputError(f"{path}: graph inputs {names_in} / outputs {names_out}, expected {list(INPUTS)} / [{OUTPUT}]")
    info = ModelInfo(
        str(path),
        spec,
        robot,
        meta.get("mnemo_mpc.feature_map", "?"),
        field_json("mnemo_mpc.training"),
        meta.get("mnemo_mpc.version", "?"),
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
        providers: tuple[str, ...] = PROVIDERS,
        threads: int = 1,
    ) -> None:
        data, self.info = read_metadata(path)
        check_compatible(self.info, robot, n, dt)
        self.robot, self.spec = robot, self.info.inputs
        self.session, self.provider, skipped = _session(data, tuple(providers), threads)
        why = "; ".join(f"{p.replace('ExecutionProvider', '')}: {r}" for p, r in skipped.items())
        log.info("warm-start model %s on %s%s", Path(path).name, self.provider, f" ({why})" if why else "")
        self.last_inference_s = 0.0
        self.last_features_s = 0.0

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


def find_model(robot: RobotModel, n: int, dt: float) -> Path | None:
    """The first shipped model trained for this robot, horizon and step (metadata checked), or None."""
    for d in model_dirs():
        for path in sorted(d.glob("*.onnx")):
            try:
                _, info = read_metadata(path)
                check_compatible(info, robot, n, dt)
            except InputError as exc:
                log.debug("model %s does not fit: %s", path, exc)
                continue
            return path
    return None


def resolve(mode: str | None, model: str | None, robot: RobotModel, n: int, dt: float) -> tuple[str, Any]:
    """(warm-start mode, provider or None) for a command line: `mode` None means "hybrid" when a model is given or a
    shipped one fits the robot, else "shift"; "learned"/"hybrid" without a usable model is an error."""
    path = Path(model) if model else find_model(robot, n, dt)
    if mode is None:
        mode = "hybrid" if path is not None else "shift"
    if mode in ("cold", "shift"):
        return mode, None
    if path is None:
        raise InputError(
            f"--warmstart {mode}: needs a model (--model FILE.onnx); none in {model_dirs()} fits this robot"
        )
    return mode, WarmStartModel(path, robot, n, dt)

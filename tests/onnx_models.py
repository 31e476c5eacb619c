"""Small hand-built warm-start ONNX models for the hostile-input tests and fuzz (issue 26): a graph of the exported
signature (`grid` (B, 2, S, S), `vector` (B, 2N + 7) -> `controls` (B, N, 2), float32) that any field of the
metadata, any shape of the graph and its output values can be made to disagree with. Built with `onnx.helper` in a
few milliseconds, so thousands of cases cost no training."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np

from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart.inputs import FORMAT, InputSpec

ROBOT = RobotModel()  # the built-in robot: what `eval` plans for without --params


def robot_meta(robot: RobotModel = ROBOT) -> dict[str, Any]:
    fields = ("radius", "safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max")
    out: dict[str, Any] = {k: float(getattr(robot, k)) for k in fields}
    out["footprint"] = [[float(x), float(y)] for x, y in robot.footprint]
    return out


def model_bytes(
    spec: InputSpec | None = None,
    *,
    robot: RobotModel = ROBOT,
    grid_size: int | str | None = None,
    vector_size: int | str | None = None,
    out_n: int | str | None = None,
    real_n: int | None = None,
    out_dtype: int = 1,
    value: float = 0.0,
    input_names: tuple[str, str] = ("grid", "vector"),
    output_name: str = "controls",
    meta: dict[str, str | None] | None = None,
) -> bytes:
    """An ONNX model whose controls are `value` everywhere (plus a zero-weight product of the vector, so the graph
    uses its input). The graph declares `grid_size` / `vector_size` / `out_n` (default: the spec's; a string is a
    dynamic axis) and the output really has N = `real_n` knots (default: `out_n` when an int, else the spec's);
    `meta` overrides metadata fields (None removes one)."""
    import onnx
    from onnx import TensorProto, helper

    spec = spec or InputSpec()
    s = spec.size if grid_size is None else grid_size
    v = spec.vector_size if vector_size is None else vector_size
    n = spec.N if out_n is None else out_n
    n_real = real_n if real_n is not None else n if isinstance(n, int) else spec.N
    v_real = v if isinstance(v, int) else spec.vector_size
    weight = np.zeros((v_real, 2 * n_real), np.float32)
    bias = np.full((2 * n_real,), value, np.float32)
    nodes = [
        helper.make_node("MatMul", [input_names[1], "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["flat"]),
        helper.make_node("Reshape", ["flat", "shape"], ["controls_f"]),
    ]
    if out_dtype == TensorProto.FLOAT:
        nodes.append(helper.make_node("Identity", ["controls_f"], [output_name]))
    else:
        nodes.append(helper.make_node("Cast", ["controls_f"], [output_name], to=out_dtype))
    graph = helper.make_graph(
        nodes,
        "tiny_warmstart",
        [
            helper.make_tensor_value_info(input_names[0], TensorProto.FLOAT, ["batch", 2, s, s]),
            helper.make_tensor_value_info(input_names[1], TensorProto.FLOAT, ["batch", v]),
        ],
        [helper.make_tensor_value_info(output_name, out_dtype, ["batch", n, 2])],
        [
            helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.reshape(-1).tolist()),
            helper.make_tensor("b", TensorProto.FLOAT, bias.shape, bias.tolist()),
            helper.make_tensor("shape", TensorProto.INT64, (3,), [-1, n_real, 2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fields = {
        "mnemo_mpc.format": FORMAT,
        "mnemo_mpc.version": "test",
        "mnemo_mpc.inputs": json.dumps(asdict(spec)),
        "mnemo_mpc.robot": json.dumps(robot_meta(robot)),
        "mnemo_mpc.feature_map": "none",
        "mnemo_mpc.training": json.dumps({"data": "none"}),
    }
    for key, val in (meta or {}).items():
        if val is None:
            fields.pop(key, None)
        else:
            fields[key] = val
    onnx.helper.set_model_props(model, fields)
    return model.SerializeToString()

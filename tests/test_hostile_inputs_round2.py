"""Hostile inputs, round 2 (issue 26): every case of the issue, each a clear error naming the file or field, in
bounded time and memory. Model files (read bounded, graph and probe checked), model metadata, store JSON (special
files, deep nesting, huge numbers), parameter upper bounds, controller inputs, `negate`, output-path probes."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from onnx_models import ROBOT, model_bytes

from mnemo_mpc.errors import DatasetError, InputError

pytest.importorskip("onnxruntime")


# --- 2, 3, 4: model files -----------------------------------------------------------------------------------------
def _load(path):
    from mnemo_mpc.warmstart.runtime import WarmStartModel

    return WarmStartModel(path, ROBOT, 30, 0.1)


MODEL_CASES = [
    # graph disagrees with the metadata
    ("crop", {"grid_size": 32}, r"graph 'grid' has shape \['\?', 2, 32, 32\], expected \[B, 2, 40, 40\]"),
    ("vector", {"vector_size": 60}, r"graph 'vector' has shape .*expected \[B, 67\]"),
    ("knots", {"out_n": 20}, r"graph 'controls' has shape .*expected \[B, 30, 2\]"),
    ("knots_dynamic", {"out_n": "n", "real_n": 20}, r"probe inference gave .*expected float32 \(2, 30, 2\)"),
    ("nan_output", {"value": math.nan}, "non-finite controls"),
    ("inf_output", {"value": math.inf}, "non-finite controls"),
    ("int64_output", {"out_dtype": 7}, "'controls' must be a float32 tensor"),
    ("input_names", {"input_names": ("image", "vector")}, r"graph inputs \['image', 'vector'\]"),
    # metadata values
    ("scale_inf", {"meta": {"mnemo_mpc.inputs": '{"scale_m": Infinity}'}}, r"mnemo_mpc.inputs.scale_m: .* got inf"),
    ("size_huge", {"meta": {"mnemo_mpc.inputs": '{"size": 200000}'}}, r"inputs.size: .* in \[2, 256\]"),
    ("size_str", {"meta": {"mnemo_mpc.inputs": '{"size": "40"}'}}, r"inputs.size: expected an integer"),
    ("n_float", {"meta": {"mnemo_mpc.inputs": '{"N": 30.5}'}}, r"inputs.N: expected an integer"),
    ("unknown_key", {"meta": {"mnemo_mpc.inputs": '{"crop": 40}'}}, r"mnemo_mpc.inputs must be an object"),
    ("inputs_list", {"meta": {"mnemo_mpc.inputs": "[1, 2]"}}, r"mnemo_mpc.inputs must be an object"),
    ("inputs_not_json", {"meta": {"mnemo_mpc.inputs": "{size: 40"}}, r"mnemo_mpc.inputs is not valid JSON"),
    ("inputs_deep", {"meta": {"mnemo_mpc.inputs": "[" * 5000 + "]" * 5000}}, r"nested 5000 levels deep"),
    ("inputs_digits", {"meta": {"mnemo_mpc.inputs": '{"size": ' + "4" * 5000 + "}"}}, "not valid JSON"),
    ("robot_str", {"meta": {"mnemo_mpc.robot": None}}, "mnemo_mpc.robot is missing"),
    ("format", {"meta": {"mnemo_mpc.format": "other/1"}}, "mnemo_mpc.format is 'other/1'"),
]


@pytest.mark.parametrize("name, kwargs, message", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_a_model_is_checked_against_its_graph_and_a_probe(tmp_path, name, kwargs, message):
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model_bytes(**kwargs))
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=message) as info:
        _load(path)
    assert str(path) in str(info.value) and time.perf_counter() - t0 < 1.0


def test_robot_metadata_values_are_the_packages_error(tmp_path):
    from onnx_models import robot_meta

    for field, value in (("v_max", "fast"), ("radius", None), ("w_max", [1]), ("a_max", 1e400)):
        robot = robot_meta()
        robot[field] = value
        path = tmp_path / f"robot_{field}.onnx"
        path.write_bytes(model_bytes(meta={"mnemo_mpc.robot": json.dumps(robot)}))
        with pytest.raises(InputError, match=rf"mnemo_mpc.robot.{field}: expected a finite number"):
            _load(path)
    robot = robot_meta()
    robot["footprint"] = [[0.1, "x"]]
    path = tmp_path / "robot_fp.onnx"
    path.write_bytes(model_bytes(meta={"mnemo_mpc.robot": json.dumps(robot)}))
    with pytest.raises(InputError, match="mnemo_mpc.robot.footprint"):
        _load(path)


def test_a_good_small_model_loads(tmp_path):
    path = tmp_path / "ok.onnx"
    path.write_bytes(model_bytes())
    model = _load(path)
    assert model.spec.N == 30
    dynamic = tmp_path / "dynamic.onnx"
    dynamic.write_bytes(model_bytes(out_n="knots"))  # a dynamic knot axis that really has N knots is fine
    _load(dynamic)


@pytest.mark.timeout(20)
def test_model_files_are_read_bounded(tmp_path, monkeypatch):
    """A FIFO (would block the node's start-up forever), /dev/zero behind a symlink (read 3.7 GB), a directory and a
    sparse file over the cap: each refused from its stat, in milliseconds."""
    os.mkfifo(tmp_path / "fifo.onnx")
    (tmp_path / "zero.onnx").symlink_to("/dev/zero")
    (tmp_path / "dir.onnx").mkdir()
    with open(tmp_path / "huge.onnx", "wb") as fh:
        fh.truncate(3 << 30)
    for name, message in (
        ("fifo.onnx", "must be a regular file, this is a FIFO"),
        ("zero.onnx", "must be a regular file, this is a device"),
        ("dir.onnx", "must be a regular file, this is a directory"),
        ("huge.onnx", "3221225472 bytes, over the 268435456-byte cap"),
    ):
        t0 = time.perf_counter()
        with pytest.raises(InputError, match=message):
            _load(tmp_path / name)
        assert time.perf_counter() - t0 < 0.5
    monkeypatch.setenv("MNEMO_MPC_MAX_MODEL_BYTES", "1000")
    (tmp_path / "ok.onnx").write_bytes(model_bytes())
    with pytest.raises(InputError, match="over the 1000-byte cap .*MNEMO_MPC_MAX_MODEL_BYTES"):
        _load(tmp_path / "ok.onnx")


def test_a_bad_file_in_a_models_folder_is_skipped_with_one_line(tmp_path, monkeypatch, caplog):
    from mnemo_mpc.warmstart import runtime

    (tmp_path / "a_bad.onnx").write_bytes(model_bytes(meta={"mnemo_mpc.inputs": '{"N": "thirty"}'}))
    (tmp_path / "b_fifo.onnx").symlink_to("/dev/zero")
    from mnemo_mpc.warmstart.inputs import InputSpec

    (tmp_path / "c_other_horizon.onnx").write_bytes(model_bytes(InputSpec(N=20)))
    (tmp_path / "d_good.onnx").write_bytes(model_bytes())
    monkeypatch.setattr(runtime, "model_dirs", lambda: [tmp_path])
    with caplog.at_level(logging.DEBUG, logger="mnemo_mpc.warmstart.runtime"):
        assert runtime.find_model(ROBOT, 30, 0.1) == tmp_path / "d_good.onnx"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings  # one line per damaged file; a model for another robot is not news
    assert "a_bad.onnx" in warnings[0] and "inputs.N" in warnings[0] and "b_fifo.onnx" in warnings[1]
    # and every command that looks for a default model still runs: hybrid resolves to the good one
    mode, provider = runtime.resolve(None, None, ROBOT, 30, 0.1)
    assert mode == "hybrid" and provider.info.path == str(tmp_path / "d_good.onnx")


# --- 5: store JSON ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pristine_store(tmp_path_factory):
    from test_dataset_store import small_store

    root, _ = small_store(tmp_path_factory.mktemp("store"), worlds=2, steps=4)
    return root


@pytest.fixture
def store(pristine_store, tmp_path):
    """A fresh copy per test (each damages it): copying is ~20x cheaper than writing the store again."""
    root = tmp_path / "ds"
    shutil.copytree(pristine_store, root, symlinks=True)
    return root


def _read_all(root):
    from mnemo_mpc.dataset.loader import SQPStepDataset
    from mnemo_mpc.dataset.stats import dataset_stats
    from mnemo_mpc.dataset.store import verify_store

    outcomes = []
    for read in (
        lambda: [SQPStepDataset(root, split="all", only_converged=False)[i] for i in range(8)],
        lambda: dataset_stats(root),
    ):
        try:
            read()
            outcomes.append("read")
        except DatasetError as exc:
            outcomes.append(str(exc))
    report = verify_store(root)
    return outcomes, report


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "rel", ["manifest.json", "worlds/w000000/zarr.json", "worlds/w000000/pose/zarr.json", "worlds/w000001/pose/c/0/0"]
)
@pytest.mark.parametrize("special", ["fifo", "dev_zero", "directory"])
def test_store_special_files_are_errors_not_hangs(store, rel, special):
    path = store / rel
    path.unlink()
    if special == "fifo":
        os.mkfifo(path)
    elif special == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    t0 = time.perf_counter()
    outcomes, report = _read_all(store)
    assert time.perf_counter() - t0 < 5.0
    assert all(o != "read" for o in outcomes), outcomes
    assert not report.ok


@pytest.mark.parametrize(
    "content, message",
    [
        ("[" * 100_000 + "]" * 100_000, "nested 100000 levels deep"),
        ('{"a": ' * 70 + "1" + "}" * 70, "nested 70 levels deep"),
        ("9" * 5000, "not valid JSON"),
        ("NaN", "not a mnemo_mpc.sqp_dataset manifest"),
        ('{"format": "mnemo_mpc.sqp_dataset", "schema_version": NaN}', "schema_version nan"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_pathological_manifest_json_is_a_dataset_error(store, content, message):
    from mnemo_mpc.dataset.store import DatasetStore

    path = store / "manifest.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DatasetError, match=message):
        DatasetStore.open(store)


def test_deep_world_metadata_is_a_dataset_error(store):
    from mnemo_mpc.dataset.store import DatasetStore

    (store / "worlds/w000001/zarr.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DatasetError, match="w000001.*nested 100000 levels deep"):
        DatasetStore.open(store).open_world(1)


# --- 6: parameters, controller inputs, maps, outputs --------------------------------------------------------------
def test_a_5000_digit_footprint_number_is_one_line(tmp_path, capsys):
    from mnemo_mpc.cli import main

    params = tmp_path / "fp.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    footprint: '[[0.3, 0.2], [0.3, -0.2], [-0.3, -0.2], ["
        + "1" * 5000
        + ", 0.2]]'\n"
    )
    assert main(["eval", "--worlds", "1", "--params", str(params), "--out", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--params" in err and "footprint" in err and "4300 digits" in err, err
    assert len(err) < 600


@pytest.mark.parametrize(
    "field, value",
    [
        ("grid_window_m", 1e5),
        ("horizon_steps", 100_000),
        ("max_iter", 10_000),
        ("max_grid_cells", 10**9),
        ("max_path_poses", 10**8),
        ("control_rate_hz", 1e6),
        ("diagnostics_rate_hz", 1e4),
        ("stale_timeout_s", 1e9),
        ("sensor_beams", 10**9),
        ("sensor_range_m", 1e6),
    ],
)
def test_parameters_have_upper_bounds(field, value):
    from mnemo_mpc.profile import NavParams

    t0 = time.perf_counter()
    with pytest.raises(InputError, match=field):
        NavParams(**{field: value})
    assert time.perf_counter() - t0 < 0.5


def test_every_upper_bound_is_stated_in_nav_yaml():
    from mnemo_mpc.profile import MAX_WINDOW_CELLS, UPPER_BOUNDS, NavParams

    text = (Path(__file__).resolve().parents[1] / "config" / "nav.yaml").read_text()
    for name, bound in UPPER_BOUNDS.items():
        description = NavParams().descriptions()[name]
        assert f"at most {bound:,.0f}" in description or f"at most {bound:.0f}" in description, (name, description)
        assert description in text
    assert f"at most {MAX_WINDOW_CELLS} cells" in NavParams().descriptions()["grid_window_m"]


@pytest.mark.parametrize(
    "argument, value",
    [
        ("pose", [1e308, 0.0, 0.0]),
        ("pose", [0.0, -1e7, 0.0]),
        ("pose", [0.0, 0.0, 1e308]),
        ("goal", [1e308, 1e308, 0.0]),
        ("velocity", [1e308, 0.0]),
        ("global_path", [[0.0, 0.0], [1e308, -1e308]]),
        ("global_path", np.array([[0.0, 0.0], [-1e308, 1.0]])),
        ("global_path", [[0.0, 0.0], [math.inf, 1.0]]),
    ],
)
def test_controller_step_refuses_out_of_bound_inputs_and_keeps_working(argument, value):
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.planning.grid import OccupancyGrid

    controller = Controller()
    grid = OccupancyGrid(np.zeros((120, 120), np.int8), 0.05, (-3.0, -3.0, 0.0))
    args = {"grid": grid, "pose": [0.0, 0.0, 0.0], "velocity": [0.0, 0.0], "goal": [1.0, 0.0, 0.0]}
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=f"Controller.{argument}"):
        controller.step(**{**args, argument: value})
    assert time.perf_counter() - t0 < 0.1
    assert controller.step(**args).status == "planned"  # nothing of the bad input was kept


def test_bounds_agree_with_the_ros_conversions():
    from mnemo_mpc.nav import step_inputs
    from mnemo_mpc.planning import surfaces
    from mnemo_mpc.ros import convert

    assert step_inputs.MAX_COORDINATE_M == convert.MAX_COORDINATE_M == surfaces.MAX_COORDINATE_M


def test_map_negate_follows_map_server(tmp_path):
    """nav2_map_server reads `negate` as an int or, failing that, a bool: `negate: true` is negate 1, which swaps
    what white and black mean (p = value / 255 instead of (255 - value) / 255); raw mode ignores it."""
    from mnemo_mpc.planning.mapio import load_map

    img = np.array([[0, 254], [128, 30]], np.uint8)
    (tmp_path / "m.pgm").write_bytes(b"P5\n2 2\n255\n" + img.tobytes())
    grids = {}
    for name, negate in (("zero", "0"), ("one", "1"), ("true", "true"), ("false", "false")):
        (tmp_path / f"{name}.yaml").write_text(f"image: m.pgm\nresolution: 0.1\norigin: [0, 0, 0]\nnegate: {negate}\n")
        grids[name] = load_map(tmp_path / f"{name}.yaml").data
    np.testing.assert_array_equal(grids["true"], grids["one"])
    np.testing.assert_array_equal(grids["false"], grids["zero"])
    # row 0 of the grid is the image's bottom row: [128, 30]; black (0) is occupied unless negated
    np.testing.assert_array_equal(grids["zero"], [[-1, 100], [100, 0]])
    np.testing.assert_array_equal(grids["one"], [[-1, 0], [0, 100]])


def test_output_paths_are_probed_by_writing(tmp_path):
    from mnemo_mpc.commands import _args

    target = tmp_path / "a" / "b" / "c.json"
    assert _args.check_output_file(target, "--out") == target
    assert list(tmp_path.iterdir()) == []  # the folders the probe created are gone again
    with pytest.raises(InputError, match=r"--out: cannot create /proc/x/y.json"):
        _args.check_output_file("/proc/x/y.json", "--out")
    with pytest.raises(InputError, match=r"--out: cannot create /proc/self/y.json"):
        _args.check_output_file("/proc/self/y.json", "--out")  # a folder that exists but takes no files
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        _args.check_output_dir(tmp_path / "f" / "sub", "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    shutil.rmtree(tmp_path / "f", ignore_errors=True)

"""CLI argument fuzz: bad invocations of every `mnemo-mpc` sub-command and of `python -m mnemo_mpc.experiments`.

Each must be a user error reported before any work: exit status 2, exactly one non-empty line on stderr, no
traceback, no output file or folder created, and fast (well under the cost of the work it would have started).
Most run in-process through `main(argv)`; a few run as real processes so that the real stderr is seen, numeric
library warnings included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.commands import _args
from mnemo_mpc.experiments.__main__ import main as experiments_main

# A user error is reported before the work: far below any command's real cost (seconds to hours).
MAX_ERROR_WALL_S = 5.0


def write_map(folder: Path, name: str = "room") -> Path:
    """A 4 m x 3 m map_server map (YAML + binary PGM)."""
    img = np.full((60, 80), 254, np.uint8)
    img[:3, :] = img[-3:, :] = img[:, :3] = img[:, -3:] = 0
    (folder / f"{name}.pgm").write_bytes(b"P5\n80 60\n255\n" + img.tobytes())
    yaml = folder / f"{name}.yaml"
    yaml.write_text(f"image: {name}.pgm\nresolution: 0.05\norigin: [0.0, 0.0, 0.0]\nnegate: 0\n")
    return yaml


def scenario(**override: object) -> list[dict]:
    return [{"map": "room.yaml", "start": [0.5, 0.5, 0.0], "goal": [3.0, 2.0, 0.0], **override}]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files the bad invocations point at (inputs only: outputs go to a fresh folder per case)."""
    root = tmp_path_factory.mktemp("cli_inputs")
    write_map(root)
    (root / "afile").write_text("not a directory\n")
    (root / "adir").mkdir()
    (root / "model.onnx").write_bytes(b"not an ONNX model")
    # issue 26: models whose graph, output or metadata disagree (tests/onnx_models.py), and hostile parameter files
    from onnx_models import model_bytes, robot_meta

    robot = {**robot_meta(), "v_max": "fast"}
    bad_models = {
        "nan": {"value": float("nan")},
        "crop": {"grid_size": 32},
        "knots": {"out_n": 20},
        "knots_dynamic": {"out_n": "n", "real_n": 20},
        "dtype": {"out_dtype": 7},
        "n_str": {"meta": {"mnemo_mpc.inputs": '{"N": "thirty"}'}},
        "scale_inf": {"meta": {"mnemo_mpc.inputs": '{"scale_m": Infinity}'}},
        "size_huge": {"meta": {"mnemo_mpc.inputs": '{"size": 200000}'}},
        "robot_str": {"meta": {"mnemo_mpc.robot": json.dumps(robot)}},
        "deep": {"meta": {"mnemo_mpc.inputs": "[" * 10_000 + "]" * 10_000}},
        "digits": {"meta": {"mnemo_mpc.inputs": '{"N": ' + "3" * 5000 + "}"}},
        "no_inputs": {"meta": {"mnemo_mpc.inputs": None}},
    }
    for name, kwargs in bad_models.items():
        (root / f"model_{name}.onnx").write_bytes(model_bytes(**kwargs))
    ros = "/**:\n  ros__parameters:\n"
    fp = "'[[0.3, 0.2], [0.3, -0.2], [-0.3, -0.2], [" + "1" * 5000 + ", 0.2]]'"
    (root / "params_fp_digits.yaml").write_text(ros + f"    footprint: {fp}\n")
    (root / "params_window.yaml").write_text(ros + "    grid_window_m: 100000.0\n")
    (root / "params_horizon.yaml").write_text(ros + "    horizon_steps: 100000\n")
    (root / "params_window_overflow.yaml").write_text(ros + "    grid_window_m: 1.0e+308\n")
    bad_scenarios = {
        "tol_str": scenario(goal_tolerance_m="abc"),
        "tol_neg": scenario(goal_tolerance_m=-1),
        "tol_bool": scenario(goal_tolerance_m=True),
        "time_inf": scenario(time_limit_s=1e400),  # json.dumps writes Infinity, json.loads reads it back as inf
        "unknown_key": scenario(goal_tolerence_m=0.3),
        "start_huge": scenario(start=[1e308, 1, 0]),
        "goal_short": scenario(goal=[1, 2]),
        "goal_str": scenario(goal="abc"),
        "map_num": scenario(map=3),
        "map_dir": scenario(map="adir"),
        "map_missing": scenario(map="nope.yaml"),
        "not_list": {"map": "room.yaml"},
        "empty_list": [],
        "item_not_obj": [3],
    }
    for name, content in bad_scenarios.items():
        (root / f"scen_{name}.json").write_text(json.dumps(content))
    (root / "scen_utf8.json").write_bytes(b'[{"map": "\xff\xfe"}]')
    (root / "scen_deep.json").write_text("[" * 100_000 + "]" * 100_000)
    bags = {
        "garbage": b"rosbag2_bagfile_information: [",
        "binary": b"\xff\xfe\x00 not yaml",
        "empty": b"",
        "alias": b"a: &a [1, 2]\nb: [*a, *a]\n",
        "no_info": b"{}\n",
        "version": b"rosbag2_bagfile_information:\n  version: 99\n",
    }
    for name, content in bags.items():
        (root / f"bag_{name}").mkdir()
        (root / f"bag_{name}" / "metadata.yaml").write_bytes(content)
    (root / "bag_none").mkdir()
    from test_ros_replay import write_bag  # a real rosbag2, then its database removed

    write_bag(root / "bag_nodb")
    for f in (root / "bag_nodb").glob("*.db3"):
        f.unlink()
    (root / "junk").mkdir()
    (root / "junk" / "notes.txt").write_text("not a dataset store\n")
    (root / "params_bad.yaml").write_text("/**:\n  ros__parameters: [\n")
    (root / "params_type.yaml").write_text("/**:\n  ros__parameters:\n    control_rate_hz: fast\n")
    (root / "map_bad.yaml").write_text("image: [\n")
    (root / "params_dir").mkdir()
    ro = root / "readonly"
    ro.mkdir()
    ro.chmod(0o555)
    return {"root": str(root), "map": str(root / "room.yaml"), "file": str(root / "afile"), "dir": str(root / "adir")}


def _fill(argv: list[str], inputs: dict[str, str], out: Path) -> list[str]:
    return [a.format(**inputs, out=out) for a in argv]


# (argv, text the one line must contain). {root}: the input folder; {out}: a fresh, empty output folder.
CASES: list[tuple[list[str], str]] = [
    # argparse usage errors
    ([], "required: COMMAND"),
    (["nosuch"], "invalid choice"),
    (["eval"], "the following arguments are required"),
    (["eval", "--worlds", "1"], "--out"),
    (["eval", "--worlds", "1", "--map", "{map}", "--out", "{out}/e.json"], "not allowed with"),
    (["demo", "--bogus"], "unrecognized arguments"),
    (["bench"], "required: BENCHMARK"),
    (["bench", "sqp", "--clock", "sundial", "--out", "{out}/b.json"], "invalid choice"),
    (["data"], "required: ACTION"),
    # numbers: malformed, out of range, non-finite
    (["eval", "--worlds", "0", "--out", "{out}/e.json"], "--worlds"),
    (["eval", "--worlds", "-3", "--out", "{out}/e.json"], "--worlds"),
    (["eval", "--worlds", "two", "--out", "{out}/e.json"], "--worlds"),
    (["eval", "--worlds", "1", "--seed", "-1", "--out", "{out}/e.json"], "--seed"),
    (["eval", "--worlds", "1", "--seed", str(2**40), "--out", "{out}/e.json"], "--seed"),
    (["eval", "--worlds", "1", "--goal-tolerance", "nan", "--out", "{out}/e.json"], "--goal-tolerance"),
    (["eval", "--worlds", "1", "--goal-tolerance", "-0.1", "--out", "{out}/e.json"], "--goal-tolerance"),
    (["eval", "--worlds", "1", "--time-limit", "inf", "--out", "{out}/e.json"], "--time-limit"),
    (["eval", "--worlds", "1", "--time-limit", "1e308", "--out", "{out}/e.json"], "--time-limit"),
    (["eval", "--worlds", "1", "--time-limit", "0", "--out", "{out}/e.json"], "--time-limit"),
    (["demo", "--seed", "1.5", "--out", "{out}/d"], "--seed"),
    (["demo", "--kind", "castle", "--out", "{out}/d"], "--kind"),
    (["collect", "--worlds", "0", "--out", "{out}/ds"], "--worlds"),
    (["collect", "--worlds", "1000001", "--out", "{out}/ds"], "--worlds"),
    (["collect", "--worlds", "2", "--workers", "0", "--out", "{out}/ds"], "--workers"),
    (["collect", "--worlds", "2", "--workers", "100000", "--out", "{out}/ds"], "--workers"),
    (["collect", "--worlds", "2", "--difficulty", "1.5", "--out", "{out}/ds"], "--difficulty"),
    (["collect", "--worlds", "2", "--difficulty", "nan", "--out", "{out}/ds"], "--difficulty"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--epochs", "0"], "--epochs"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--lr", "nan"], "--lr"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--lr", "-1e-3"], "--lr"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--batch-size", "0"], "--batch-size"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--crop-resolution", "inf"], "--crop-resolution"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--device", "tpu"], "--device"),
    (["train", "--data", "{dir}", "--out", "{out}/run", "--device", "cuda:99"], "--device"),
    (["bench", "sqp", "--problems", "0", "--out", "{out}/b.json"], "--problems"),
    (["bench", "sqp", "--max-iter", "-1", "--out", "{out}/b.json"], "--max-iter"),
    (["bench", "sqp", "--sigmas", "0.1,x", "--out", "{out}/b.json"], "--sigmas"),
    (["bench", "sim", "--worlds", "0", "--out", "{out}/b.json"], "--worlds"),
    (["bench", "sim", "--beams", "-36", "--out", "{out}/b.json"], "--beams"),
    (["bench", "node", "--rate-hz", "nan", "--out", "{out}/b.json"], "--rate-hz"),
    (["bench", "node", "--rate-hz", "0", "--out", "{out}/b.json"], "--rate-hz"),
    (["bench", "model", "--threads", "0", "--out", "{out}/b.json"], "--threads"),
    (["bench", "pipeline", "--stride", "0", "--out", "{out}/b.json"], "--stride"),
    (["dds-loop", "--rtf", "0", "--out", "{out}/l.json"], "--rtf"),
    (["dds-loop", "--repeats", "0", "--out", "{out}/l.json"], "--repeats"),
    # poses
    (["eval", "--map", "{map}", "--start", "1e308,1,0", "--goal", "1,1,0", "--out", "{out}/e.json"], "--start"),
    (["eval", "--map", "{map}", "--start", "1,1,0", "--goal", "1e308,1,0", "--out", "{out}/e.json"], "--goal"),
    (["eval", "--map", "{map}", "--start", "nan,1,0", "--goal", "1,1,0", "--out", "{out}/e.json"], "--start"),
    (["eval", "--map", "{map}", "--start", "1,1", "--goal", "1,1,0", "--out", "{out}/e.json"], "--start"),
    (["eval", "--map", "{map}", "--start", "1,1,0,0", "--goal", "1,1,0", "--out", "{out}/e.json"], "--start"),
    (["eval", "--map", "{map}", "--start", "1,1,0", "--goal", "1,inf,0", "--out", "{out}/e.json"], "--goal"),
    (["eval", "--map", "{map}", "--start", "1,1,0", "--out", "{out}/e.json"], "--goal"),
    (["eval", "--worlds", "1", "--start", "1,1,0", "--out", "{out}/e.json"], "--start: only with --map"),
    # files that must exist, and be regular files / directories
    (["eval", "--map", "{root}/nope.yaml", "--start", "1,1,0", "--goal", "2,2,0", "--out", "{out}/e.json"], "--map"),
    (["eval", "--map", "{dir}", "--start", "1,1,0", "--goal", "2,2,0", "--out", "{out}/e.json"], "not a regular"),
    (["eval", "--map", "/dev/null", "--start", "1,1,0", "--goal", "2,2,0", "--out", "{out}/e.json"], "not a regular"),
    (["eval", "--scenarios", "{root}/nope.json", "--out", "{out}/e.json"], "--scenarios"),
    (
        ["eval", "--worlds", "1", "--warmstart", "learned", "--model", "{root}/no.onnx", "--out", "{out}/e.json"],
        "--model",
    ),
    (
        ["eval", "--worlds", "1", "--warmstart", "shift", "--model", "{root}/model.onnx", "--out", "{out}/e.json"],
        "--model",
    ),
    (["demo", "--warmstart", "hybrid", "--model", "{dir}", "--out", "{out}/d"], "--model"),
    (["collect", "--worlds", "2", "--warmstart", "learned", "--out", "{out}/ds"], "--model"),
    (["train", "--data", "{root}/nope", "--out", "{out}/run"], "--data"),
    (["train", "--data", "{file}", "--out", "{out}/run"], "--data"),
    (["export", "{root}/nope", "--out", "{out}/m.onnx"], "run_dir"),
    (["runs", "{dir}", "{root}/nope", "--out", "{out}/r.json"], "run_dir"),
    (["replay", "{root}/nope", "--out", "{out}/bag"], "not a rosbag2"),
    (["replay", "{root}/bag_none", "--out", "{out}/bag"], "no metadata.yaml"),
    (["replay", "{root}/bag_garbage", "--out", "{out}/bag"], "not valid YAML"),
    (["replay", "{root}/bag_binary", "--out", "{out}/bag"], "not UTF-8"),
    (["replay", "{root}/bag_alias", "--out", "{out}/bag"], "aliases"),
    (["replay", "{root}/bag_empty", "--out", "{out}/bag"], "bag_empty"),
    (["replay", "{root}/bag_no_info", "--out", "{out}/bag"], "bag_no_info"),
    (["replay", "{root}/bag_version", "--out", "{out}/bag"], "bag_version"),
    (["replay", "{root}/bag_no_info", "--out", "{out}/bag", "--params", "{root}/params_dir"], "--params"),
    (["replay", "{root}/bag_no_info", "--out", "{out}/bag", "--distro", "ROS2_BOGUS"], "--distro"),
    (["data", "stats", "{root}/nope"], "nope"),
    # inputs of the right kind on disk but the wrong content: refused before any work by the loaders' own checks
    (["replay", "{root}/bag_nodb", "--out", "{out}/bag"], "database files are missing"),
    (["replay", "{root}/bag_nodb", "--out", "{out}/bag", "--params", "{root}/params_bad.yaml"], "params_bad"),
    (["replay", "{root}/bag_nodb", "--out", "{out}/bag", "--params", "{root}/params_type.yaml"], "control_rate_hz"),
    (
        ["eval", "--map", "{root}/map_bad.yaml", "--start", "1,1,0", "--goal", "2,2,0", "--out", "{out}/e.json"],
        "map_bad",
    ),
    (["train", "--data", "{dir}", "--out", "{out}/run"], "not a dataset store"),
    (["export", "{dir}", "--out", "{out}/m.onnx"], "best.pt"),
    (["runs", "{dir}", "--out", "{out}/r.json"], "not a finished training run"),
    (["collect", "--worlds", "1", "--out", "{root}/junk"], "junk"),
    (["data", "stats", "{root}/junk"], "junk"),
    (
        ["eval", "--worlds", "1", "--warmstart", "learned", "--model", "{root}/model.onnx", "--out", "{out}/e.json"],
        "not a readable ONNX model",
    ),
    (["demo", "--warmstart", "hybrid", "--model", "{root}/model.onnx", "--out", "{out}/d"], "not a readable ONNX"),
    (
        ["collect", "--worlds", "1", "--warmstart", "learned", "--model", "{root}/model.onnx", "--out", "{out}/ds"],
        "not a readable ONNX model",
    ),
    # issue 26: models checked against their graph, a probe inference and typed metadata; hostile parameter files
    *[
        (
            [
                "eval",
                "--worlds",
                "1",
                "--warmstart",
                "hybrid",
                "--model",
                f"{{root}}/model_{name}.onnx",
                "--out",
                "{out}/e.json",
            ],
            expect,
        )
        for name, expect in (
            ("nan", "non-finite controls"),
            ("crop", "graph 'grid' has shape ['?', 2, 32, 32], expected [B, 2, 40, 40]"),
            ("knots", "graph 'controls' has shape ['?', 20, 2], expected [B, 30, 2]"),
            ("knots_dynamic", "probe inference gave"),
            ("dtype", "'controls' must be a float32 tensor"),
            ("n_str", "inputs.N: expected an integer in [1, 500], got 'thirty'"),
            ("scale_inf", "inputs.scale_m"),
            ("size_huge", "inputs.size: expected an integer in [2, 256], got 200000"),
            ("robot_str", "mnemo_mpc.robot.v_max: expected a finite number, got 'fast'"),
            ("deep", "nested 10000 levels deep"),
            ("digits", "not valid JSON"),
            ("no_inputs", "mnemo_mpc.inputs is missing"),
        )
    ],
    (["demo", "--warmstart", "learned", "--model", "{root}/model_nan.onnx", "--out", "{out}/d"], "non-finite"),
    (
        [
            "collect",
            "--worlds",
            "1",
            "--warmstart",
            "learned",
            "--model",
            "{root}/model_crop.onnx",
            "--out",
            "{out}/ds",
        ],
        "graph 'grid'",
    ),
    (["eval", "--worlds", "1", "--params", "{root}/params_fp_digits.yaml", "--out", "{out}/e.json"], "footprint"),
    (["eval", "--worlds", "1", "--params", "{root}/params_window.yaml", "--out", "{out}/e.json"], "grid_window_m"),
    (["eval", "--worlds", "1", "--params", "{root}/params_horizon.yaml", "--out", "{out}/e.json"], "horizon_steps"),
    (
        ["eval", "--worlds", "1", "--params", "{root}/params_window_overflow.yaml", "--out", "{out}/e.json"],
        "grid_window_m",
    ),
    (["eval", "--worlds", "1", "--out", "/proc/x/y.json"], "cannot create /proc/x/y.json"),
    # outputs that cannot be written: under an existing FILE, a directory where a file is expected, and back
    (["eval", "--worlds", "1", "--out", "{file}/e.json"], "not a directory"),
    (["eval", "--worlds", "1", "--out", "{file}/sub/e.json"], "not a directory"),
    (["eval", "--worlds", "1", "--out", "{dir}"], "is a directory"),
    (["eval", "--worlds", "1", "--out", "/dev/null"], "not a regular file"),
    (["demo", "--out", "{file}"], "not a directory"),
    (["demo", "--out", "{file}/d"], "not a directory"),
    (["collect", "--worlds", "2", "--out", "{file}"], "not a directory"),
    (["collect", "--worlds", "2", "--out", "{file}/ds"], "not a directory"),
    (["train", "--data", "{dir}", "--out", "{file}"], "not a directory"),
    (["export", "{dir}", "--out", "{dir}"], "is a directory"),
    (["runs", "{dir}", "--out", "{file}/r.json"], "not a directory"),
    (["runs", "{dir}", "--out", "{out}/r.json", "--png", "{out}/r.json"], "--png"),
    (["replay", "{root}/bag_no_info", "--out", "{dir}"], "exists"),
    (["replay", "{root}/bag_no_info", "--out", "{root}/bag_no_info", "--json", "{dir}"], "exists"),
    (["bench", "sqp", "--out", "{dir}"], "is a directory"),
    (["bench", "sqp", "--out", "{file}/b.json"], "not a directory"),
    (["bench", "sqp", "--out", "{out}/b.json", "--plot", "{file}/b.png"], "--plot"),
    (["bench", "sqp", "--out", "{out}/b.png"], "--plot"),  # the default plot OUT.png would replace the JSON
    (["bench", "sim", "--out", "{file}/b.json"], "not a directory"),
    (["bench", "model", "--model", "{root}/no.onnx", "--out", "{out}/b.json"], "--model"),
    (["dds-loop", "--out", "{dir}"], "is a directory"),
    (["dds-loop", "--out", "{out}/l.json", "--work", "{file}"], "--work"),
    # scenario files: every field of every scenario
    (["eval", "--scenarios", "{root}/scen_tol_str.json", "--out", "{out}/e.json"], "item 0 goal_tolerance_m"),
    (["eval", "--scenarios", "{root}/scen_tol_neg.json", "--out", "{out}/e.json"], "item 0 goal_tolerance_m"),
    (["eval", "--scenarios", "{root}/scen_tol_bool.json", "--out", "{out}/e.json"], "item 0 goal_tolerance_m"),
    (["eval", "--scenarios", "{root}/scen_time_inf.json", "--out", "{out}/e.json"], "item 0 time_limit_s"),
    (["eval", "--scenarios", "{root}/scen_unknown_key.json", "--out", "{out}/e.json"], "goal_tolerence_m"),
    (["eval", "--scenarios", "{root}/scen_start_huge.json", "--out", "{out}/e.json"], "item 0 start"),
    (["eval", "--scenarios", "{root}/scen_goal_short.json", "--out", "{out}/e.json"], "item 0 goal"),
    (["eval", "--scenarios", "{root}/scen_goal_str.json", "--out", "{out}/e.json"], "item 0 goal"),
    (["eval", "--scenarios", "{root}/scen_map_num.json", "--out", "{out}/e.json"], "item 0 map"),
    (["eval", "--scenarios", "{root}/scen_map_dir.json", "--out", "{out}/e.json"], "item 0 map"),
    (["eval", "--scenarios", "{root}/scen_map_missing.json", "--out", "{out}/e.json"], "map file not found"),
    (["eval", "--scenarios", "{root}/scen_not_list.json", "--out", "{out}/e.json"], "non-empty JSON list"),
    (["eval", "--scenarios", "{root}/scen_empty_list.json", "--out", "{out}/e.json"], "non-empty JSON list"),
    (["eval", "--scenarios", "{root}/scen_item_not_obj.json", "--out", "{out}/e.json"], "item 0"),
    (["eval", "--scenarios", "{root}/scen_utf8.json", "--out", "{out}/e.json"], "not valid JSON"),
    (["eval", "--scenarios", "{root}/scen_deep.json", "--out", "{out}/e.json"], "not valid JSON"),
]

EXPERIMENT_CASES: list[tuple[list[str], str]] = [
    ([], "required: cmd"),
    (["run"], "required: name"),
    (["run", "no_such_study", "--out", "{out}/x"], "unknown study"),
    (["run", "lemma1_pgd", "--seeds", "0", "--out", "{out}/x"], "--seeds"),
    (["run", "lemma1_pgd", "--quick", "--full"], "not allowed with"),
    (["run", "lemma1_pgd", "--out", "{file}"], "not a directory"),
    (["run", "lemma1_pgd", "--out", "{file}/x"], "not a directory"),
    (["run", "lemma1_pgd", "--device", "gpu0", "--out", "{out}/x"], "--device"),
    (["report", "--out", "{root}/nope"], "--out"),
]


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _check_one_line_error(rc: int, out: str, err: str, expect: str, elapsed: float, prog: str) -> None:
    lines = err.splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].strip(), err
    assert lines[0].startswith(f"{prog}") and ": error: " in lines[0], lines[0]
    assert expect in lines[0], (expect, lines[0])
    assert "Traceback" not in out + err
    assert elapsed < MAX_ERROR_WALL_S, f"user error after {elapsed:.1f} s: {lines[0]}"


@pytest.mark.parametrize("argv, expect", CASES, ids=[" ".join(a)[:80] for a, _ in CASES])
def test_bad_invocation_is_one_line_before_any_work(argv, expect, inputs, tmp_path, capsys, recwarn):
    before = _tree(Path(inputs["root"]))
    argv = _fill(argv, inputs, tmp_path)
    t0 = time.perf_counter()
    rc = main(argv)
    elapsed = time.perf_counter() - t0
    captured = capsys.readouterr()
    _check_one_line_error(rc, captured.out, captured.err, expect, elapsed, "mnemo-mpc")
    assert _tree(tmp_path) == [], "a user error created output"
    assert _tree(Path(inputs["root"])) == before, "a user error wrote next to its inputs"
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]


@pytest.mark.parametrize("argv, expect", EXPERIMENT_CASES, ids=[" ".join(a) for a, _ in EXPERIMENT_CASES])
def test_experiments_bad_invocation_is_one_line(argv, expect, inputs, tmp_path, capsys):
    argv = _fill(argv, inputs, tmp_path)
    t0 = time.perf_counter()
    rc = experiments_main(argv)
    elapsed = time.perf_counter() - t0
    captured = capsys.readouterr()
    _check_one_line_error(rc, captured.out, captured.err, expect, elapsed, "python -m mnemo_mpc.experiments")
    assert _tree(tmp_path) == []


def test_there_are_at_least_fifty_bad_invocations():
    assert len(CASES) + len(EXPERIMENT_CASES) >= 50
    assert len({tuple(a) for a, _ in CASES}) == len(CASES)  # distinct


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder: not an error for root")
def test_output_under_read_only_folder(inputs, capsys):
    ro = Path(inputs["root"]) / "readonly"
    for argv in (
        ["eval", "--worlds", "1", "--out", f"{ro}/e.json"],
        ["demo", "--out", f"{ro}/sub/d"],
        ["collect", "--worlds", "1", "--out", f"{ro}/ds"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not writable" in err
    assert _tree(ro) == []


@pytest.mark.parametrize(
    "argv, expect",
    [
        (
            [
                "mnemo_mpc.cli",
                "eval",
                "--map",
                "{map}",
                "--start",
                "1,1,0",
                "--goal",
                "1e308,1,0",
                "--out",
                "{out}/e.json",
            ],
            "--goal",
        ),
        (["mnemo_mpc.cli", "collect", "--worlds", "2", "--out", "{file}"], "--out"),
        (["mnemo_mpc.cli", "bench", "sqp", "--quick", "--out", "{dir}"], "--out"),
        (["mnemo_mpc.cli", "replay", "{root}/bag_binary", "--out", "{out}/bag"], "not UTF-8"),
        (["mnemo_mpc.experiments", "run", "nope", "--out", "{out}/x"], "unknown study"),
    ],
)
def test_real_process_stderr_is_one_line(argv, expect, inputs, tmp_path):
    """The real stderr of a real process: no warnings from numeric libraries, no traceback, one line."""
    argv = _fill(argv, inputs, tmp_path)
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # show every warning that would be emitted
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.perf_counter() - t0
    prog = "python -m mnemo_mpc.experiments" if argv[0] == "mnemo_mpc.experiments" else "mnemo-mpc"
    # A fresh interpreter pays the imports; the bound is still far below the work.
    _check_one_line_error(proc.returncode, proc.stdout, proc.stderr, expect, elapsed, prog)
    assert _tree(tmp_path) == []


def test_help_and_version_exit_zero(capsys):
    assert main(["--version"]) == 0
    assert main(["eval", "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


def test_one_line_collapses_multi_line_messages():
    assert _args.one_line("a\n  b\tc\n") == "a b c"
    assert _args.one_line("") == "(no message)"


def test_max_coordinate_matches_the_ros_conversions():
    from mnemo_mpc.ros import convert

    assert _args.MAX_COORDINATE_M == convert.MAX_COORDINATE_M


def test_output_checks_leave_nothing_behind(tmp_path):
    target = tmp_path / "a" / "b" / "c.json"
    assert _args.check_output_file(target, "--out") == target
    assert _args.check_output_dir(tmp_path / "x" / "y", "--out") == tmp_path / "x" / "y"
    assert _tree(tmp_path) == []


def test_scenarios_file_parses_valid_fields(tmp_path):
    from mnemo_mpc.commands.eval import load_scenarios

    write_map(tmp_path)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario(goal_tolerance_m=0.3, time_limit_s=20, name="room", source="test")))
    (item,) = load_scenarios(path)
    assert item["goal_tolerance_m"] == 0.3 and item["time_limit_s"] == 20.0
    assert item["start"] == [0.5, 0.5, 0.0] and item["map"] == tmp_path / "room.yaml"


# --- the library API behind the commands: bad configuration is an InputError naming the field, at construction ----
@pytest.mark.parametrize(
    "field, value",
    [
        ("max_iter", -1),
        ("max_iter", 2.5),
        ("dt", "abc"),
        ("dt", float("nan")),
        ("tol", -1e-6),
        ("tol_du", float("inf")),
        ("w_goal", float("nan")),
        ("w_track", -1.0),
        ("max_time_s", "x"),
        ("heading_radius", -1.0),
        ("compile", "yes"),
        ("extra_options", 3),
    ],
)
def test_mpc_config_rejects_bad_values_naming_the_field(field, value):
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.planning.mpc import MPCConfig

    with pytest.raises(InputError, match=f"MPCConfig.{field}"):
        MPCConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [
        ("goal_tolerance_m", "abc"),
        ("goal_tolerance_m", float("nan")),
        ("v_ref_fraction", 0.0),
        ("subgoal_clearance_m", -0.1),
        ("unknown_policy", "maybe"),
        ("reuse_previous_plan", "no"),
        ("warm_start", "warm"),
        ("prefetch_start", "yes"),
        ("solve_ahead", "yes"),
        ("sqp_mode", "two"),
    ],
)
def test_controller_config_rejects_bad_values_naming_the_field(field, value):
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.nav.controller import ControllerConfig

    with pytest.raises(InputError, match=f"ControllerConfig.{field}"):
        ControllerConfig(**{field: value})


@pytest.mark.parametrize(
    "path",
    [
        "abc",
        b"abc",
        {"x": 1},
        [["a", "b"]],
        [[0.0, 1.0], [2.0]],
        np.zeros(3),
        np.zeros((0, 2)),
        np.zeros((2, 5)),
        np.full((2, 2), np.inf),
    ],
    ids=["str", "bytes", "dict", "strings", "ragged", "1d", "empty", "5 columns", "inf"],
)
def test_controller_global_path_must_be_a_finite_point_array(path):
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.planning.mpc import MPCConfig

    controller = Controller(mpc_config=MPCConfig(compile=False))
    with pytest.raises(InputError, match=r"Controller.global_path: expected a finite \(M, 2\)"):
        controller.set_global_path(path)


def test_controller_step_max_iter_is_checked_before_planning():
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.planning.grid import OccupancyGrid
    from mnemo_mpc.planning.mpc import MPCConfig

    controller = Controller(mpc_config=MPCConfig(compile=False))
    grid = OccupancyGrid(np.zeros((20, 20), np.int8), 0.1, (0.0, 0.0, 0.0))
    for bad in (-1, 0, 1.5, "3"):
        with pytest.raises(InputError, match="Controller.step.max_iter"):
            controller.step(grid, [0.5, 0.5, 0.0], [0.0, 0.0], [1.5, 1.5, 0.0], max_iter=bad)

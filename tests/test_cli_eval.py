"""`mnemo-mpc eval`, `demo` and `data stats` on the command line: output shape and clear errors on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemo_mpc.cli import main

pytest.importorskip("pybullet")


def write_map(dirpath, name="room"):
    """A 4 m x 3 m map_server map (YAML + binary PGM) with a pillar in the middle."""
    img = np.full((60, 80), 254, np.uint8)  # free
    img[:3, :] = img[-3:, :] = img[:, :3] = img[:, -3:] = 0  # walls (dark = occupied)
    img[22:38, 36:44] = 0
    pgm = dirpath / f"{name}.pgm"
    pgm.write_bytes(b"P5\n80 60\n255\n" + img.tobytes())
    yaml = dirpath / f"{name}.yaml"
    yaml.write_text(
        f"image: {name}.pgm\nresolution: 0.05\norigin: [0.0, 0.0, 0.0]\nnegate: 0\n"
        "occupied_thresh: 0.65\nfree_thresh: 0.196\n"
    )
    return yaml


def test_eval_generated_worlds_writes_rates_and_rows(tmp_path, capsys):
    out = tmp_path / "eval.json"
    rc = main(["eval", "--worlds", "1", "--seed", "1000", "--time-limit", "1.0", "--out", str(out), "--no-progress"])
    assert rc == 0
    res = json.loads(out.read_text())
    for key in ("success_rate", "collision_rate", "timeout_rate", "mean_time_s", "step_iterations", "episodes"):
        assert key in res
    ep = res["episodes"][0]
    for key in ("success", "collision", "timeout", "time_s", "path_length_m"):
        assert key in ep
    assert res["timeout_rate"] == 1.0 and ep["steps"] == 10  # 1 s at 10 Hz cannot reach a generated goal
    assert set(res["step_iterations"]) >= {"p50", "p95"}
    # the start of every solve, and only of solves: hybrid with the shipped model never starts one cold
    hybrid_starts = {"learned", "shift", "ahead"}
    assert res["warmstart"] == "hybrid" and set(res["starts_used"]) <= hybrid_starts, res["starts_used"]
    # every step's time, pooled over the families: here the one family's, the same ten steps
    assert res["step_time_ms"] == res["step_time_ms_by_family"][ep["kind"]] and res["step_time_ms"]["max"] > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--map", "MISSING.yaml", "--start", "0,0,0", "--goal", "1,1,0"], "map file not found"),
        (["--map", "{map}", "--start", "0,zero,0", "--goal", "1,1,0"], "--start"),
        (["--map", "{map}", "--start", "1,1,0"], "--goal"),
        (["--scenarios", "{bad_json}"], "not valid JSON"),
        (["--scenarios", "{no_goal}"], "expected an object with map, start and goal"),
        (["--scenarios", "{missing_map}"], "map file not found"),
    ],
)
def test_eval_bad_input_is_one_clear_line(tmp_path, capsys, argv, message):
    yaml = write_map(tmp_path)
    (tmp_path / "bad.json").write_text("[{")
    (tmp_path / "nogoal.json").write_text(json.dumps([{"map": "room.yaml", "start": [0.7, 1.5, 0]}]))
    (tmp_path / "missing.json").write_text(json.dumps([{"map": "nope.yaml", "start": [0, 0, 0], "goal": [1, 1, 0]}]))
    subs = {
        "map": str(yaml),
        "bad_json": str(tmp_path / "bad.json"),
        "no_goal": str(tmp_path / "nogoal.json"),
        "missing_map": str(tmp_path / "missing.json"),
    }
    argv = [a.format(**subs) for a in argv]
    rc = main(["eval", *argv, "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_eval_map_start_inside_obstacle(tmp_path, capsys):
    pytest.importorskip("mnemo_mpc.planning.mapio", reason="map_server loader not available yet")
    yaml = write_map(tmp_path)
    rc = main(["eval", "--map", str(yaml), "--start", "2.0,1.5,0", "--goal", "3.3,1.5,0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "start" in err


def test_eval_scenarios_file_on_a_map(tmp_path):
    pytest.importorskip("mnemo_mpc.planning.mapio", reason="map_server loader not available yet")
    write_map(tmp_path)
    scen = tmp_path / "scen.json"
    scen.write_text(
        json.dumps([{"map": "room.yaml", "start": [0.7, 1.5, 0], "goal": [3.3, 1.5, 0], "goal_tolerance_m": 0.3}])
    )
    out = tmp_path / "eval.json"
    assert main(["eval", "--scenarios", str(scen), "--out", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["n_episodes"] == 1 and res["success_rate"] == 1.0 and res["collision_rate"] == 0.0


def test_data_stats_cli(tmp_path, capsys):
    from test_dataset_store import CONFIG, synthetic_record

    from mnemo_mpc.dataset.store import DatasetStore, write_world

    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    store.record_world(write_world(root, synthetic_record(0, 6)))
    assert main(["data", "stats", str(root), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["examples"] == 6 and stats["worlds"] == 1
    assert main(["data", "stats", str(tmp_path / "nope")]) == 2
    assert "no manifest.json" in capsys.readouterr().err

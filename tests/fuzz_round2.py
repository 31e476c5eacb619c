"""Issue 26's must-show, measured: each hostile case of the issue run as the real command (a fresh process), its exit
status, its one stderr line, wall time and peak memory (the child's ru_maxrss); and the fuzz summaries of the round
(node core, models, profiles, store, maps) gathered from their own result files, each with the command that made it.

    python tests/fuzz_round2.py --fuzz results/fuzz_node_10hz_round2.json ... --out results/fuzz_round2.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def run(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `argv`, return exit status, stderr's last line, wall seconds and the child's peak RSS (MB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    out, err = proc.communicate(timeout=120)
    wall = time.perf_counter() - t0
    # ru_maxrss of the children so far: the largest child, which the Python start-up alone puts at ~70 MB
    import resource

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
    stdout = [ln for ln in out.decode(errors="replace").splitlines() if ln.strip()]
    return {
        "exit": proc.returncode,
        "stderr_lines": len(lines),
        "line": (lines[-1] if lines else stdout[-1] if stdout else "")[:400],
        "wall_s": round(wall, 3),
        "children_max_rss_mb": round(rss, 1),
    }


def cases(tmp: Path) -> list[tuple[str, list[str], dict[str, str] | None]]:
    from onnx_models import model_bytes
    from test_dataset_store import small_store

    py = sys.executable
    cli = [py, "-m", "mnemo_mpc.cli"]
    os.mkfifo(tmp / "fifo.onnx")
    (tmp / "zero.onnx").symlink_to("/dev/zero")
    with open(tmp / "big.onnx", "wb") as fh:
        fh.truncate(3 << 30)
    for name, kwargs in {
        "nan": {"value": float("nan")},
        "crop": {"grid_size": 32},
        "knots": {"out_n": 20},
        "scale_inf": {"meta": {"mnemo_mpc.inputs": '{"scale_m": Infinity}'}},
        "size": {"meta": {"mnemo_mpc.inputs": '{"size": 200000}'}},
        "n_str": {"meta": {"mnemo_mpc.inputs": '{"N": "thirty"}'}},
    }.items():
        (tmp / f"{name}.onnx").write_bytes(model_bytes(**kwargs))
    ros = "/**:\n  ros__parameters:\n"
    for name, body in {
        "model_fifo": f"    warm_start: hybrid\n    warm_start_model: {tmp / 'fifo.onnx'}\n",
        "model_zero": f"    warm_start: hybrid\n    warm_start_model: {tmp / 'zero.onnx'}\n",
        "fp_digits": "    footprint: '[[0.3, 0.2], [0.3, -0.2], [-0.3, -0.2], [" + "1" * 5000 + ", 0.2]]'\n",
        "window": "    grid_window_m: 100000.0\n",
        "horizon": "    horizon_steps: 100000\n",
    }.items():
        (tmp / f"{name}.yaml").write_text(ros + body)
    stores = {}
    for name in ("fifo_world", "fifo_manifest", "deep_manifest", "digits_manifest"):
        root, _ = small_store(tmp / name)
        stores[name] = root
    (stores["fifo_world"] / "worlds/w000000/zarr.json").unlink()
    os.mkfifo(stores["fifo_world"] / "worlds/w000000/zarr.json")
    (stores["fifo_manifest"] / "manifest.json").unlink()
    os.mkfifo(stores["fifo_manifest"] / "manifest.json")
    (stores["deep_manifest"] / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    (stores["digits_manifest"] / "manifest.json").write_text('{"format": ' + "9" * 5000 + "}")
    out = str(tmp / "out" / "e.json")
    models = tmp / "models"
    models.mkdir()
    (models / "a_bad.onnx").write_bytes(model_bytes(meta={"mnemo_mpc.inputs": '{"N": "thirty"}'}))
    (models / "b_good.onnx").write_bytes(model_bytes())
    find = (
        "import logging; logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s'); "
        "from mnemo_mpc.planning.robot import RobotModel; from mnemo_mpc.warmstart.runtime import find_model; "
        "print(find_model(RobotModel(), 30, 0.1))"
    )
    step = (
        "import sys, numpy as np; from mnemo_mpc.nav.controller import Controller; "
        "from mnemo_mpc.planning.grid import OccupancyGrid; from mnemo_mpc.errors import InputError\n"
        "g = OccupancyGrid(np.zeros((120, 120), np.int8), 0.05, (-3, -3, 0)); c = Controller()\n"
        "try: c.step(g, {pose}, [0, 0], [1, 0, 0], global_path={path})\n"
        "except InputError as e: print('InputError:', e, file=sys.stderr); sys.exit(2)"
    )
    return [
        (
            "2 model FIFO via the node's warm_start_model",
            [*cli, "bench", "node", "--ticks", "2", "--params", str(tmp / "model_fifo.yaml"), "--out", out],
            None,
        ),
        (
            "2 model /dev/zero via warm_start_model",
            [*cli, "bench", "node", "--ticks", "2", "--params", str(tmp / "model_zero.yaml"), "--out", out],
            None,
        ),
        (
            "2 model FIFO via --model",
            [*cli, "eval", "--worlds", "1", "--warmstart", "hybrid", "--model", str(tmp / "fifo.onnx"), "--out", out],
            None,
        ),
        (
            "2 model 3 GiB sparse file",
            [*cli, "eval", "--worlds", "1", "--warmstart", "hybrid", "--model", str(tmp / "big.onnx"), "--out", out],
            None,
        ),
        *[
            (
                f"3 model {name}",
                [
                    *cli,
                    "eval",
                    "--worlds",
                    "1",
                    "--warmstart",
                    "hybrid",
                    "--model",
                    str(tmp / f"{name}.onnx"),
                    "--out",
                    out,
                ],
                None,
            )
            for name in ("nan", "crop", "knots", "scale_inf", "size")
        ],
        (
            "4 model non-numeric metadata",
            [*cli, "eval", "--worlds", "1", "--warmstart", "hybrid", "--model", str(tmp / "n_str.onnx"), "--out", out],
            None,
        ),
        ("4 bad file in a models folder skipped (find_model)", [py, "-c", find], {"MNEMO_MPC_MODELS": str(models)}),
        ("5 FIFO as a world's zarr.json: data stats", [*cli, "data", "stats", str(stores["fifo_world"])], None),
        (
            "5 FIFO as a world's zarr.json: data verify",
            [*cli, "data", "verify", str(stores["fifo_world"]), "--no-progress"],
            None,
        ),
        ("5 FIFO as manifest.json: data stats", [*cli, "data", "stats", str(stores["fifo_manifest"])], None),
        ("5 manifest nested 100,000 deep: data stats", [*cli, "data", "stats", str(stores["deep_manifest"])], None),
        (
            "5 manifest with a 5000-digit number: data stats",
            [*cli, "data", "stats", str(stores["digits_manifest"])],
            None,
        ),
        (
            "6 5000-digit footprint number via --params",
            [*cli, "eval", "--worlds", "1", "--params", str(tmp / "fp_digits.yaml"), "--out", out],
            None,
        ),
        (
            "6 grid_window_m 1e5",
            [*cli, "eval", "--worlds", "1", "--params", str(tmp / "window.yaml"), "--out", out],
            None,
        ),
        (
            "6 horizon_steps 1e5",
            [*cli, "eval", "--worlds", "1", "--params", str(tmp / "horizon.yaml"), "--out", out],
            None,
        ),
        ("6 Controller.step with a 1e308 pose", [py, "-c", step.format(pose="[1e308, 0, 0]", path="None")], None),
        (
            "6 Controller.step with a +-1e308 global path",
            [py, "-c", step.format(pose="[0, 0, 0]", path="[[0, 0], [1e308, -1e308]]")],
            None,
        ),
        ("6 --out /proc/x/y.json (as root)", [*cli, "eval", "--worlds", "1", "--out", "/proc/x/y.json"], None),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuzz", nargs="*", default=[], type=Path, help="fuzz result files to summarise")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="round2-") as tmp:
        rows = []
        for name, argv_, env in cases(Path(tmp)):
            row = {
                "case": name,
                "command": " ".join(a if len(a) < 200 else a[:60] + "..." for a in argv_),
                **run(argv_, env),
            }
            rows.append(row)
            print(f"{row['exit']} {row['wall_s']:6.2f} s  {name}: {row['line'][:150]}", file=sys.stderr)
    fuzz = {}
    for path in args.fuzz:
        doc = json.loads(path.read_text())
        keep = (
            "counts",
            "tick_ms",
            "wall_s",
            "cases",
            "bugs",
            "totals",
            "bug_counts",
            "by_kind",
            "valid_cases",
            "valid_loaded",
            "max_case_wall_s",
            "max_rss_bytes",
            "slowest_case_s",
            "summary",
            "config",
        )
        fuzz[path.name] = {k: doc[k] for k in keep if k in doc}
        if "config" in doc and "bench" in doc["config"]:
            b = doc["config"]["bench"]
            fuzz[path.name]["command"] = (
                f"mnemo-mpc bench node --fuzz --ticks {b['ticks']} --rate-hz {b['rate_hz']:g} --out {path}"
            )
            fuzz[path.name].pop("config")
    result = {
        "cases": rows,
        "fuzz": fuzz,
        "command": "python tests/fuzz_round2.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    from mnemo_mpc.atomic import atomic_write_json

    atomic_write_json(args.out, result)
    return 0 if all(r["exit"] == 2 for r in rows if "find_model" not in r["case"]) else 1


if __name__ == "__main__":
    sys.exit(main())

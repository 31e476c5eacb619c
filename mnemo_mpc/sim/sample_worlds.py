"""The sample worlds shipped in `sim/`: generated worlds saved as ROS map_server maps, and a scenarios file using them.

    python -m mnemo_mpc.sim.sample_worlds [--out sim]

writes `worlds/<name>.yaml` + `.pgm` (`mnemo_mpc.planning.mapio.save_map`, trinary) and
`scenarios/sample_worlds.json` (the format `mnemo-mpc eval --scenarios` reads: map paths relative to the file).
Each world is `generate_world(seed)`, the world `mnemo-mpc demo --seed S` and the simulator node's `world_seed`
drive, so a map run and a generated run of the same seed are the same problem.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from mnemo_mpc.atomic import atomic_write_text
from mnemo_mpc.planning.mapio import save_map
from mnemo_mpc.sim.worlds import generate_world


@dataclass(frozen=True)
class SampleWorld:
    name: str
    seed: int
    note: str


# Short, medium and long: global path 5.0 m (open), 5.7 m (corridor), 13.7 m (rooms, the demo's default seed).
SAMPLES = (
    SampleWorld("open_45", 45, "open hall, 5.0 m global path; the closed-loop-over-DDS test's short world"),
    SampleWorld("corridor_19", 19, "corridor maze, 5.7 m global path"),
    SampleWorld("rooms_7", 7, "rooms with doors, 13.7 m global path; `mnemo-mpc demo`'s default world"),
)
SCENARIOS_FILE = "scenarios/sample_worlds.json"


def write_sample_worlds(out_dir: str | Path) -> list[Path]:
    """Generate every sample world into `out_dir` (worlds/ and scenarios/); returns the files written."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    scenarios = []
    for sample in SAMPLES:
        world = generate_world(sample.seed)
        yaml_path = save_map(world.grid, out_dir / "worlds" / f"{sample.name}.yaml")
        written += [yaml_path, yaml_path.with_suffix(".pgm")]
        scenarios.append(
            {
                "name": sample.name,
                "source": f"generate_world({sample.seed}) ({world.name}): {sample.note}",
                "map": f"../worlds/{sample.name}.yaml",
                "start": [round(float(v), 6) for v in world.start],
                "goal": [round(float(v), 6) for v in world.goal],
                "goal_tolerance_m": 0.25,
            }
        )
    scen = out_dir / SCENARIOS_FILE
    atomic_write_text(scen, json.dumps(scenarios, indent=2) + "\n")
    return [*written, scen]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mnemo_mpc.sim.sample_worlds", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="sim", help="the sim/ data folder to write into (default: ./sim)")
    args = parser.parse_args(argv)
    for path in write_sample_worlds(args.out):
        print(path)  # noqa: T201 (a script's output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

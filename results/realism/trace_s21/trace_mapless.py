"""Trace one mapless dense episode with real time off (so it repeats): per step the true pose, command, status, flags
and plan, pickled with the world and the metrics; the outcome on stdout.

    PYTHONPATH=. python results/realism/trace_s21/trace_mapless.py SEED PARAMS.yaml REALISM OUT.pkl

(issue 24, docs/realism.md "Not yet", twenty-first session)."""

from __future__ import annotations

import pickle
import sys

import numpy as np

from mnemo_mpc.profile import NavParams
from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
from mnemo_mpc.sim.profile import closed_loop_setup
from mnemo_mpc.sim.simulator import Simulator
from mnemo_mpc.sim.worlds import generate_world


class Recorder:
    """An episode observer keeping each step's pose, command, status, flags and plan."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def step(self, k, obs, goal, out, controller) -> dict:
        plan = None if out.plan is None else out.plan.states.copy()
        pose, command = np.asarray(obs.true_pose, float).copy(), np.asarray(out.command).copy()
        row = dict(t=obs.time_s, true=pose, cmd=command, status=out.status, flags=list(out.flags), plan=plan)
        self.rows.append(row)
        return {}

    def finish(self, *args) -> None:
        return None


def main() -> None:
    seed, params, realism, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    setup = closed_loop_setup(NavParams.from_yaml(params), real_time=False, realism=realism)
    recorder = Recorder()
    with Simulator(setup.sim) as sim:
        controller = setup.controller("hybrid", None, "mpc")
        world = generate_world(seed, setup.world, kind="dense")
        result = run_episode(
            world, sim=sim, controller=controller, config=EpisodeConfig(global_path=False), observer=recorder
        )
    m = result.metrics
    sys.stdout.write(f"{seed} {world.kind} {m['outcome']} {m['time_s']} s, {m.get('recoveries')} recoveries\n")
    with open(out, "wb") as f:
        pickle.dump(dict(rows=recorder.rows, world=world, metrics=m, driven=result.driven), f)


if __name__ == "__main__":
    main()

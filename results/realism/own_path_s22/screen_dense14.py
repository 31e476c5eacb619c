"""Screen worlds of the dense family mapless as `eval` runs them (real time, the profile's controller), and write
each episode's metrics as a JSON list; one line per episode on stdout.

    PYTHONPATH=. python results/realism/own_path_s22/screen_dense14.py PARAMS.yaml REALISM OUT.json SEED...

(issue 24, docs/realism.md "Not yet", twenty-second session; the row's 14 dense worlds are seeds 1006, 1013, ...,
1097)."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from mnemo_mpc.commands._logs import episode_notes
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import generate_world

    params, realism, out = sys.argv[1], sys.argv[2], sys.argv[3]
    setup = closed_loop_setup(NavParams.from_yaml(params), real_time=True, realism=realism)
    controller = setup.controller(None, None, "mpc", goal_tolerance_m=setup.goal_tolerance(0.25))
    episodes = []
    with episode_notes(verbose=False), Simulator(setup.sim) as sim:
        for seed in (int(s) for s in sys.argv[4:]):
            world = generate_world(seed, setup.world, kind="dense")
            cfg = EpisodeConfig(goal_tolerance_m=0.25, time_limit_s=None, keep_plan_every=0, global_path=False)
            m = run_episode(world, sim=sim, controller=controller, config=cfg).metrics
            episodes.append(m)
            sys.stdout.write(f"{seed} {m['outcome']} {m['time_s']} s, {m['recoveries']} recoveries\n")
    with open(out, "w") as f:
        json.dump(episodes, f)


if __name__ == "__main__":
    main()

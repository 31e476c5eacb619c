"""Where a realistic Jackal's control step spends its time: cProfile of `Controller.step` over one episode.

    PYTHONPATH=. python results/learned/profile_step_s19.py 1006 dense > results/learned/profile_step_s19.txt

World SEED of KIND (`sim.worlds.generate_world`), the Jackal profile's realistic robot with a global path, the
`shift` start, real time off (the episode repeats exactly; the fallback solver's calls are then unbounded in time:
read the other rows). The profiler inflates Python-heavy code; the ranking, not the milliseconds, is the finding
(`docs/learned_start.md`, nineteenth session).
"""

import cProfile
import pstats
import sys


def main() -> None:
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import generate_world

    seed, kind = int(sys.argv[1]), sys.argv[2]
    setup = closed_loop_setup(NavParams.from_yaml("config/robots/jackal.yaml"), real_time=False, realism="profile")
    with Simulator(setup.sim) as sim:
        controller = setup.controller("shift")
        world = generate_world(seed, setup.world, kind=kind)
        profiler = cProfile.Profile()
        step = controller.step

        def profiled(*args, **kwargs):
            profiler.enable()
            try:
                return step(*args, **kwargs)
            finally:
                profiler.disable()

        controller.step = profiled
        result = run_episode(world, sim=sim, controller=controller, config=EpisodeConfig(global_path=True))
    sys.stdout.write(f"{result.metrics['outcome']} {result.metrics['steps']} steps\n")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()

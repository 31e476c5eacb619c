"""`mnemo-mpc demo [--seed S] [--out DIR] [--params ROBOT.yaml] [--quiet]`: one headless closed-loop episode in a
generated world.

Prints a line per MPC step (`--quiet`: none; `make demo` passes it) and a summary; writes `episode.json` (metrics,
config, per-step stats with each step's clearance) and `trajectory.png` (map, global path, driven path with footprints,
a few planned horizons; beside it v and ω commanded vs measured, the clearance and the solve time per step).
"""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="one simulated navigation episode: per-step log (--quiet: summary only), episode.json, trajectory.png",
        description="One simulated navigation episode in a generated world: a line per control step (hundreds; "
        "--quiet prints only the summary), then the summary; writes episode.json and trajectory.png.",
    )
    p.add_argument("--seed", type=_args.seed, default=7, help="world seed (default 7)")
    p.add_argument("--kind", default=None, help="world kind (rooms, corridor, doors, clutter, open, mixed, dense)")
    p.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    p.add_argument("--quiet", action="store_true", help="summary only: no per-step lines (episode.json has every step)")
    from mnemo_mpc.commands.eval import add_warmstart_arguments

    _args.add_controller_argument(p, several=False)
    add_warmstart_arguments(p)
    _args.add_params_argument(p)
    _args.add_realism_argument(p)
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    import dataclasses

    from mnemo_mpc.errors import InputError
    from mnemo_mpc.sim.worlds import ALL_KINDS, generate_world

    # Every argument is checked before the simulator and the solver are loaded.
    out = _args.check_output_dir(args.out, "--out")
    _args.check_warmstart(args)
    params = _args.load_params(args)
    (name,) = _args.check_controller(args, params, several=False)
    if args.kind is not None and args.kind not in ALL_KINDS:
        raise InputError(f"--kind: expected one of {', '.join(ALL_KINDS)}, got {args.kind!r}")

    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.commands.eval import build_controller
    from mnemo_mpc.sim.episode import CLEARANCE_CAP_M, EpisodeConfig, count_starts, run_episode
    from mnemo_mpc.sim.plot import plot_episode
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator

    # One profile (--params, else the default robot) sizes the robot, the MPC step, the simulator and the world.
    setup = closed_loop_setup(params, real_time=True, realism=args.realism)
    world = generate_world(args.seed, setup.world, kind=args.kind)
    cfg = EpisodeConfig()
    controller = build_controller(args, setup, name, goal_tolerance_m=setup.goal_tolerance(cfg.goal_tolerance_m))
    provider = controller.warm_start_provider
    print(
        f"planner: {name}"
        + (f", warm start: {controller.config.warm_start}" if name == "mpc" else "")
        + (f" with {provider.info.path} on {provider.provider}" if provider is not None else "")
    )
    print(
        f"world {world.name}: start ({world.start[0]:.2f}, {world.start[1]:.2f}) -> goal ({world.goal[0]:.2f}, "
        f"{world.goal[1]:.2f}), map {world.grid.size_m[0]:.1f} x {world.grid.size_m[1]:.1f} m"
    )

    def on_step(s: dict) -> None:
        # The pose this step starts from: its footprint's exact distance to the nearest obstacle (moving ones
        # included), for episode.json and trajectory.png's clearance panel.
        s["clearance_m"] = round(float(sim.clearance(CLEARANCE_CAP_M)), 4)
        if args.quiet:
            return
        print(
            f"step {s['step']:4d} t={s['t']:6.1f}s pose=({s['pose'][0]:6.2f},{s['pose'][1]:6.2f},{s['pose'][2]:6.2f}) "
            f"cmd=({s['command'][0]:5.2f},{s['command'][1]:6.2f}) {s['status']:<22} start={s['start']:<7} "
            f"iters={s['iterations']:2d} solve={s['solve_time_s'] * 1e3:6.1f}ms goal_dist={s['dist_to_goal_m']:5.2f}m"
            + (f" flags={','.join(s['flags'])}" if s["flags"] else "")
        )

    with Simulator(setup.sim) as sim:
        result = run_episode(world, sim=sim, controller=controller, config=cfg, on_step=on_step)
    m = result.metrics
    starts = count_starts(result.steps)  # the solves' starts, as `eval` counts them
    payload = {
        "controller": name,
        "metrics": m,
        "config": {
            "planner": getattr(controller, "describe", lambda: {"controller": name})(),
            "episode": dataclasses.asdict(cfg),
            "robot": dataclasses.asdict(controller.robot),
            "mpc": dataclasses.asdict(controller.mpc_config),
            "controller": dataclasses.asdict(controller.config),
            "params": args.params,
            "sim": dataclasses.asdict(setup.sim),
            "realism": setup.realism.to_dict(),
            "world": {"seed": world.seed, "kind": world.kind, "start": world.start, "goal": world.goal},
            "model": provider.describe() if provider is not None else None,
        },
        "starts_used": starts,
        "version": __version__,
        "steps": result.steps,
    }
    atomic_write_json(out / "episode.json", payload)
    plot_episode(result, out / "trajectory.png", controller.robot)
    print(
        f"{m['world']}: {m['outcome'].upper()} time {m['time_s']:.1f} s ({m['steps']} steps), driven "
        f"{m['path_length_m']:.2f} m (global path {m['global_path_length_m']:.2f} m), final goal distance "
        f"{m['final_dist_to_goal_m']:.2f} m"
    )
    print(
        f"{'SQP' if name == 'mpc' else name} iterations mean {m['iterations']['mean']} p50 {m['iterations']['p50']} "
        f"p95 {m['iterations']['p95']}; "
        f"solve ms p50 {m['solve_time_ms']['p50']} p95 {m['solve_time_ms']['p95']}; fallback steps "
        f"{m['fallback_steps']}, clipped {m['clipped_steps']}; starts used ({controller.config.warm_start}): {starts}"
    )
    print(f"wrote {out / 'episode.json'} and {out / 'trajectory.png'}")
    return 0 if m["success"] else 1

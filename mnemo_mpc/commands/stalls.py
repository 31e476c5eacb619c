"""`mnemo-mpc stalls --controller mppi|dwa --seeds S[,S...] --out F.json`: where a peer planner stalls, and what the
MPC does on the same step's problem (`mnemo_mpc.sim.stalls`; issue 30's measured causes, docs/peers.md).

One episode per seed (world kind `--kind`, dense by default; `--params` and `--realism` as for `eval`); for each that
does not succeed, every `--every`-th step of its last `--window-s` seconds is solved by the MPC too. Prints a line per
world and the summary; writes the JSON (rows per world, and the summary over all).
"""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "stalls", help="where a peer planner stalls, and what the MPC does on the same step's problem"
    )
    p.add_argument("--controller", required=True, choices=("mppi", "dwa"), help="the peer planner")
    p.add_argument("--seeds", required=True, help="world seeds, comma-separated (eval's worlds: 1000 up)")
    p.add_argument("--kind", default="dense", help="world kind (default: dense)")
    p.add_argument("--window-s", type=_args.positive_float, default=15.0, help="the stall: the last seconds (15)")
    p.add_argument("--every", type=_args.count, default=5, help="compare every k-th step of the stall (5)")
    p.add_argument("--no-global-path", action="store_true", help="the controller plans its own path")
    p.add_argument(
        "--time-limit", type=_args.positive_float, default=None, help="episode time limit [s] (default: eval's)"
    )
    _args.add_params_argument(p)
    _args.add_realism_argument(p)
    p.add_argument("--out", required=True, help="output JSON")
    p.set_defaults(func=handler)


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise InputError(f"--seeds: expected integers separated by commas, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(seeds) > 1000:
        raise InputError(f"--seeds: expected 1 to 1000 seeds >= 0, got {text!r}")
    return seeds


def handler(args: argparse.Namespace) -> int:
    out = _args.check_output_file(args.out, "--out")
    seeds = _seeds(args.seeds)
    params = _args.load_params(args)
    from mnemo_mpc.sim.worlds import ALL_KINDS

    if args.kind not in ALL_KINDS:
        raise InputError(f"--kind: expected one of {', '.join(ALL_KINDS)}, got {args.kind!r}")

    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.stalls import stall_report, summarize
    from mnemo_mpc.sim.worlds import generate_world

    setup = closed_loop_setup(params, real_time=True, realism=args.realism)
    reports = []
    for seed in seeds:
        world = generate_world(seed, setup.world, kind=args.kind)
        controller = setup.controller(planner=args.controller, goal_tolerance_m=setup.goal_tolerance(0.25))
        rep = stall_report(
            setup, controller, world, args.window_s, args.every, not args.no_global_path, args.time_limit
        )
        rep["seed"] = seed
        reports.append(rep)
        s = rep.get("summary")
        print(
            f"{args.kind}-{seed} {args.controller}: {rep['outcome']} "
            + (
                f"(stall: {s['steps']} steps compared; MPC converged {s['mpc_converged']}, progress p50 "
                f"{s['mpc_progress_p50_m']} m, goes on in {s['mpc_goes_on']}; {args.controller} progress p50 "
                f"{s['peer_progress_p50_m']} m, goes on in {s['peer_goes_on']})"
                if s
                else ""
            )
        )
    summary = summarize([r for r in reports if r["rows"]])
    atomic_write_json(
        out,
        {
            "version": __version__,
            "controller": args.controller,
            "kind": args.kind,
            "realism": args.realism,
            "params": args.params,
            "window_s": args.window_s,
            "every": args.every,
            "summary": summary,
            "worlds": reports,
        },
    )
    print(
        f"over {summary['steps']} stalled steps: the MPC on the same problem converged in {summary['mpc_converged']}, "
        f"progress p50 {summary['mpc_progress_p50_m']} m (>= {summary['goes_on_m']} m in {summary['mpc_goes_on']}); "
        f"{args.controller}: p50 {summary['peer_progress_p50_m']} m (>= {summary['goes_on_m']} m in "
        f"{summary['peer_goes_on']})"
    )
    print(f"wrote {out}")
    return 0

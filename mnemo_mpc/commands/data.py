"""`mnemo-mpc data stats DIR [--json]`: summarise an SQP dataset store."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="inspect an SQP dataset store")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    s = sub.add_parser("stats", help="counts, episode outcomes and solver statistics of a store")
    s.add_argument("dir", help="dataset directory written by `mnemo-mpc collect`")
    s.add_argument("--json", action="store_true", help="print the full summary as JSON")
    s.add_argument("--no-verify", action="store_true", help="skip opening every world to check it")
    s.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from mnemo_mpc.dataset.stats import dataset_stats

    stats = dataset_stats(args.dir, verify=not args.no_verify)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    gb = stats["disk_bytes"] / 1e9
    print(f"store            {stats['root']} (schema v{stats['schema_version']}, {gb:.3f} GB on disk)")
    print(f"worlds           {stats['worlds']}  by outcome {stats['worlds_by_status']}")
    print(f"examples         {stats['examples']} ({stats['examples_expert_converged']} with a converged expert)")
    print(f"steps per world  {stats['steps_per_world']}")
    print(f"grid shapes      {stats['grid_shapes']}   horizons N {stats['horizons']}")
    print(f"expert iters     {stats['expert_iterations']}")
    print(f"expert time ms   {stats['expert_time_ms']}")
    print(f"mpc iters        {stats['mpc_iterations']}")
    print(f"mpc time ms      {stats['mpc_time_ms']}")
    print(f"throughput       {stats['throughput']}")
    return 0

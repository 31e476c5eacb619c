"""`mnemo-mpc bench <name>`: benchmarks that write one JSON file.

Each benchmark is a module in `mnemo_mpc.bench` registered in `BENCHMARKS` with a one-line help. The module provides
`add_arguments(parser)` (its own flags), `config_from_args(args)` and `run(config) -> dict`, optionally
`report(result) -> str` (what to print; without it, the result's measurements, one line each, with the configuration,
machine and version blocks left to the JSON: `default_report`) and `after_run(result, args) -> [files]` (figures);
this command adds the shared `--out`, runs it and writes the JSON atomically. Adding a benchmark = one module + one
line here.

Arguments are checked before the benchmark runs: a flag the module declares with `type=int` is a count (>= 1), except
`--seed` (a seed, >= 0), and one with `type=float` a finite number > 0 (every such flag so far is a size, a count or
a rate); a module that needs another range passes its own type function. `--out`, `--plot` (OUT.png by default) and
`--model` are checked as files to write and to read.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mnemo_mpc.commands import _args

BENCHMARKS: dict[str, tuple[str, str]] = {
    "sqp": ("mnemo_mpc.bench.sqp", "SQP MPC iterations/time, cold vs shifted warm start, on a seeded problem suite"),
    "sim": ("mnemo_mpc.sim.bench", "simulator time per control step: physics, lidar, local-grid update"),
    "pipeline": (
        "mnemo_mpc.bench.pipeline",
        "warm starts (cold / shift / learned / hybrid) on fresh and steady steps of held-out closed-loop runs",
    ),
    "model": (
        "mnemo_mpc.bench.model",
        "warm-start ViT latency under onnxruntime vs batch size and sequence length, per feature map",
    ),
    "realism": (
        "mnemo_mpc.bench.realism",
        "success and collisions vs command latency x actuator lag, today's controller beside the compensating one",
    ),
    "node": (
        "mnemo_mpc.bench.node",
        "the ROS node core's control tick (callbacks + adapter + controller) on a closed-loop message stream",
    ),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and write its JSON")
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (module_name, help_text) in BENCHMARKS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--out", required=True, help="output JSON file")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        # Flags are declared by the benchmark module; import it only when it is the chosen one would need lazy
        # argparse, so the modules keep `add_arguments` free of heavy imports instead.
        importlib.import_module(module_name).add_arguments(p)
        _strict_numbers(p)
        p.set_defaults(func=handler, bench_module=module_name)


def _strict_numbers(parser: argparse.ArgumentParser) -> None:
    """Plain `int` / `float` flags -> counts, seeds and positive numbers (module docstring)."""
    for action in parser._actions:
        if action.type is int:
            action.type = _args.seed if action.dest == "seed" else _args.count
        elif action.type is float:
            action.type = _args.positive_float


def handler(args: argparse.Namespace) -> int:
    from mnemo_mpc.atomic import atomic_write_json

    out = _args.check_output_file(args.out, "--out")
    if hasattr(args, "plot"):  # the figure after_run writes: --plot, or OUT.png beside the JSON
        plot = _args.check_output_file(args.plot or out.with_suffix(".png"), "--plot")
        _args.check_distinct({"--out": out, "--plot": plot})
    if getattr(args, "model", None) is not None:
        _args.check_input_file(args.model, "--model")
    if getattr(args, "params", None) is not None:
        _args.check_input_file(args.params, "--params")
    module = importlib.import_module(args.bench_module)
    config = module.config_from_args(args)
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():  # a log line during the run goes above the progress bar, not into it
        result = module.run(config, progress=not args.no_progress)
    atomic_write_json(out, result)
    report = getattr(module, "report", None)
    print(report(result) if report else default_report(result))
    written = [str(out)] + (module.after_run(result, args) if hasattr(module, "after_run") else [])
    print("wrote " + ", ".join(written))
    return 0


# Keys of a result that describe how it was obtained, not what was measured: in the JSON, not on the console.
SETUP_KEYS = ("config", "machine", "version", "versions", "platform")


def _is_setup(key: str) -> bool:
    return key in SETUP_KEYS or key.endswith("_config")


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    return str(value)


def default_report(result: dict[str, Any]) -> str:
    """The console lines of a benchmark without its own `report`: one line per measurement (a nested block one line
    per entry, e.g. `timing lidar: median_ms 0.41, p95_ms 0.52, ...`); configuration, machine and version blocks are
    left to the JSON (`bench sim` printed its whole config before)."""
    lines = []
    for key, value in result.items():
        if _is_setup(key):
            continue
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            lines += [f"{key} {k}: {_value(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_value(value)}")
    return "\n".join(lines)

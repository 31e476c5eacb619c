"""`mnemo-mpc table RUN.json [RUN.json ...] --out TABLE.json [--plot TABLE.png]`: the planners of several `eval` runs
side by side (issue 30), one row per planner: success, collisions the robot caused, time ratio, minimum clearance and
the control step's time (p50 / p99 / max, pooled and per world family).

`eval --controller mpc,mppi,dwa` writes the same table itself; this command joins runs made one at a time (one
planner per run, or on another day of the same machine). Runs over different worlds, robots or realism levels are
refused: a table compares planners, nothing else.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError

# What must agree between the runs of one table (the eval JSON's keys).
SAME = ("source", "realism")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("table", help="planners of several eval runs side by side: one JSON table and a plot")
    p.add_argument("runs", nargs="+", help="eval result JSONs (one planner each, or a multi-planner eval JSON)")
    p.add_argument("--out", required=True, help="table JSON")
    p.add_argument("--plot", default=None, help="figure (default: OUT.png)")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    out = _args.check_output_file(args.out, "--out")
    plot = _args.check_output_file(args.plot or out.with_suffix(".png"), "--plot")
    _args.check_distinct({"--out": out, "--plot": plot})
    runs: dict[str, dict[str, Any]] = {}
    first: dict[str, Any] | None = None
    for path in args.runs:
        for summary in _summaries(path):
            name = summary.get("controller", "mpc")  # eval JSONs from before --controller are the MPC's
            if name in runs:
                raise InputError(f"runs: {path} holds planner {name!r} again; one run per planner")
            if first is None:
                first = summary
            for key in SAME:
                if summary.get(key) != first.get(key):
                    raise InputError(f"runs: {path} differs from {args.runs[0]} in {key!r}; not a comparison")
            if summary.get("config", {}).get("robot") != first.get("config", {}).get("robot"):
                raise InputError(f"runs: {path} drives another robot than {args.runs[0]}; not a comparison")
            runs[name] = summary
    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json

    rows = peer_table(runs)
    atomic_write_json(out, {"version": __version__, "runs": list(map(str, args.runs)), "table": rows})
    print(write_table(rows))
    plot_table(rows, plot)
    print(f"wrote {out} and {plot}")
    return 0


def _summaries(path: str) -> list[dict[str, Any]]:
    """The per-planner summaries in an eval JSON: itself, or its "runs" (eval --controller a,b,...)."""
    p = _args.check_input_file(path, "runs")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"runs: cannot read {path} as JSON ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("runs"), dict):
        return list(data["runs"].values())
    if not isinstance(data, dict) or "success_rate" not in data or "step_time_ms" not in data:
        raise InputError(f"runs: {path} is not an eval result (no success_rate / step_time_ms)")
    return [data]


def peer_table(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per planner from its eval summary."""
    rows = []
    for name, s in runs.items():
        rows.append(
            {
                "controller": name,
                "episodes": s["n_episodes"],
                "success_rate": s["success_rate"],
                "robot_caused_collision_rate": s["robot_caused_collision_rate"],
                "timeout_rate": s["timeout_rate"],
                "time_ratio_p50": s["time_ratio"]["p50"],
                "min_clearance_p50_m": s["min_clearance_m"]["p50"],
                "min_clearance_min_m": s["min_clearance_min_m"],
                "step_time_ms": {k: s["step_time_ms"][k] for k in ("p50", "p99", "max")},
                "step_time_ms_by_family": {
                    family: {k: pct[k] for k in ("p50", "p99", "max")}
                    for family, pct in s["step_time_ms_by_family"].items()
                },
                "period_ms": s["period_ms"],
                "failed_worlds": s["failed_worlds"],
            }
        )
    return rows


def write_table(rows: list[dict[str, Any]]) -> str:
    """The table as Markdown: the pooled figures, then the step time per family."""
    head = (
        "| planner | success | robot collisions | time ratio p50 | min clearance p50 / min (m) "
        "| step ms p50 / p99 / max |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        st = r["step_time_ms"]
        lines.append(
            f"| {r['controller']} | {r['success_rate']:.2f} | {r['robot_caused_collision_rate']:.2f} "
            f"| {_fmt(r['time_ratio_p50'])} | {_fmt(r['min_clearance_p50_m'])} / {_fmt(r['min_clearance_min_m'])} "
            f"| {_fmt(st['p50'])} / {_fmt(st['p99'])} / {_fmt(st['max'])} |"
        )
    families = sorted({f for r in rows for f in r["step_time_ms_by_family"]})
    lines += ["", "| step ms p50 / p99 / max | " + " | ".join(families) + " |", "|---" * (len(families) + 1) + "|"]
    for r in rows:
        cells = []
        for f in families:
            pct = r["step_time_ms_by_family"].get(f)
            cells.append("-" if pct is None else f"{_fmt(pct['p50'])} / {_fmt(pct['p99'])} / {_fmt(pct['max'])}")
        lines.append(f"| {r['controller']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Success and robot-caused collisions, time ratio, and the step time (p50, p99, max against the period) per
    planner: one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["controller"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.6))
    ax[0].bar([i - 0.2 for i in x], [r["success_rate"] for r in rows], 0.4, label="success")
    ax[0].bar([i + 0.2 for i in x], [r["robot_caused_collision_rate"] for r in rows], 0.4, label="robot collisions")
    ax[0].set_ylabel("fraction of episodes")
    ax[0].set_ylim(0, 1.05)
    ax[0].legend(fontsize=8)
    ax[1].bar(list(x), [r["time_ratio_p50"] or 0.0 for r in rows])
    ax[1].set_ylabel("time ratio p50 (time / (path / v_max))")
    for key, marker in (("p50", "o"), ("p99", "s"), ("max", "^")):
        ax[2].plot(list(x), [r["step_time_ms"][key] or 0.0 for r in rows], marker, label=key)
    ax[2].axhline(rows[0]["period_ms"], color="k", lw=0.8, ls="--", label="period")
    ax[2].set_yscale("log")
    ax[2].set_ylabel("control step (ms)")
    ax[2].legend(fontsize=8)
    for a in ax:
        a.set_xticks(list(x), names)
    fig.suptitle(f"{rows[0]['episodes']} episodes per planner")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)

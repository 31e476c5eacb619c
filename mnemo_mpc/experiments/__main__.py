"""`python -m mnemo_mpc.experiments list | run NAME|all [--quick|--full] [--seeds K] [--device D] [--out DIR] |
report [--out DIR]`.

As `mnemo-mpc`: arguments are checked before any study runs, and a user error is one line
(`python -m mnemo_mpc.experiments CMD: error: ...`) with exit status 2.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.experiments import STUDIES, available, get_study

PROG = "python -m mnemo_mpc.experiments"


def main(argv: list[str] | None = None) -> int:
    parser = _args.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="registered studies")
    run = sub.add_parser("run", help="run one study, or all")
    run.add_argument("name", help="study name or 'all'")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="CI-sized (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="the paper's protocol")
    run.add_argument("--seeds", type=_args.count, default=None, help="number of seeds (default: the config's)")
    run.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    run.add_argument("--out", type=Path, default=Path("out/experiments"))
    rep = sub.add_parser("report", help="collect all results into REPORT.md")
    rep.add_argument("--out", type=Path, default=Path("out/experiments"))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from mnemo_mpc.experiments.runner import run_study, write_report

    try:
        if args.cmd == "list":
            ready = set(available())
            for name in STUDIES:
                study = get_study(name) if name in ready else None
                title = f"{study.TITLE} ({study.PAPER})" if study else "(not available)"
                print(f"{name:16s} {title}")
            return 0
        if args.cmd == "report":
            _args.check_input_dir(args.out, "--out")
            _args.check_output_file(args.out / "REPORT.md", "--out")
            print(write_report(args.out))
            return 0
        # Everything a run needs is checked before the first study starts.
        if args.name != "all" and args.name not in STUDIES:
            raise InputError(f"NAME: unknown study {args.name!r}; expected 'all' or one of: {', '.join(STUDIES)}")
        names = available() if args.name == "all" else [args.name]
        mode_ = args.mode or "quick"
        _args.check_output_dir(args.out, "--out")
        _args.check_device(args.device)
        t0 = time.perf_counter()
        failed = []
        for name in names:
            res = run_study(name, args.out, mode=mode_, seeds=args.seeds, device=args.device)
            held = sum(res["claims"].values())
            print(
                f"{name}: {held}/{len(res['claims'])} claims hold, {res['wall_time_s']:.1f} s -> "
                f"{args.out / name / 'results.json'}"
            )
            failed += [f"{name}.{c}" for c, ok in res["claims"].items() if not ok]
        print(f"total wall time {time.perf_counter() - t0:.1f} s; report: {write_report(args.out)}")
        if failed:
            print(f"claims that did not reproduce: {', '.join(failed)}")
        return 0
    except MnemoError as exc:
        return _args.user_error(f"{PROG} {args.cmd}", exc)
    except KeyboardInterrupt:
        print("interrupted: completed seeds are saved; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

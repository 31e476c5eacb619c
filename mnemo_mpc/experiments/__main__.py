"""`python -m mnemo_mpc.experiments list | run NAME|all [--quick|--full] [--seeds K] [--device D] [--out DIR] [-v] |
report [--out DIR]`.

As `mnemo-mpc`: arguments are checked before any study runs, and a user error is one line
(`python -m mnemo_mpc.experiments CMD: error: ...`) with exit status 2.

A run says `study k/K: NAME` as each study starts and one result line when it ends; the studies' own progress notes
(INFO) show only with `-v`. Torch and BLAS run one thread per process unless OMP_NUM_THREADS is set: the studies'
small tensors gain nothing from threads, and on a busy machine oversubscribed threads made a study 4-5x slower.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.experiments import STUDIES, available, get_study

PROG = "python -m mnemo_mpc.experiments"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@contextlib.contextmanager
def one_thread_unless_set() -> Iterator[bool]:
    """One torch / BLAS thread while the studies run, unless the user set OMP_NUM_THREADS (then nothing changes);
    yields whether it applied. The variables are set before torch and numpy load (this module imports neither) and
    reach the studies' worker processes; a torch already loaded is set to one thread too. Everything is restored on
    the way out, so an in-process caller (the tests) keeps its own settings."""
    if "OMP_NUM_THREADS" in os.environ:
        yield False
        return
    saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    for k in THREAD_VARIABLES:
        os.environ.setdefault(k, "1")
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield True
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if torch is not None and torch_threads is not None:
            torch.set_num_threads(torch_threads)


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
    run.add_argument("-v", "--verbose", action="store_true", help="show the studies' progress notes (INFO logs)")
    rep = sub.add_parser("report", help="collect all results into REPORT.md")
    rep.add_argument("--out", type=Path, default=Path("out/experiments"))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    verbose = getattr(args, "verbose", False)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )

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
        from tqdm.contrib.logging import logging_redirect_tqdm

        with one_thread_unless_set(), logging_redirect_tqdm():
            for k, name in enumerate(names, 1):
                print(f"study {k}/{len(names)}: {name}", flush=True)
                res = run_study(name, args.out, mode=mode_, seeds=args.seeds, device=args.device)
                held = sum(res["claims"].values())
                print(
                    f"{name}: {held}/{len(res['claims'])} claims hold, {res['wall_time_s']:.1f} s -> "
                    f"{args.out / name / 'results.json'}",
                    flush=True,
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

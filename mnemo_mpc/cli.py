"""The `mnemo-mpc` entry point.

Each sub-command lives in its own module under `mnemo_mpc.commands` and exposes
`register(subparsers) -> None`; registration must stay import-light (heavy imports go inside the handler),
so `mnemo-mpc --help` is instant.

User errors: a handler checks all its arguments and output paths first (`mnemo_mpc.commands._args`), before any
work, and raises `MnemoError`; that and argparse's own usage errors are printed as exactly one line,
`mnemo-mpc CMD: error: ...`, with exit status 2. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from mnemo_mpc import __version__
from mnemo_mpc.commands._args import ArgumentParser, user_error
from mnemo_mpc.errors import MnemoError

# Sub-command name -> module in mnemo_mpc.commands. A module that is not there yet is skipped.
COMMANDS = (
    "demo",
    "bench",
    "eval",
    "collect",
    "data",
    "train",
    "export",
    "optim",
    "runs",
    "replay",
    "dds_loop",
    "identify",
    "table",
    "stalls",
    "ros_interfaces",
)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="mnemo-mpc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mnemo-mpc {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"mnemo_mpc.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"mnemo_mpc.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed as one line
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except MnemoError as exc:
        return user_error(f"mnemo-mpc {_command_name(args)}", exc)
    except BrokenPipeError:
        # `mnemo-mpc data stats D | head`: the reader left; not an error of ours. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt as exc:
        # 128 + the signal, the shell's convention: 130 for Ctrl-C, 143 for SIGTERM (collect's `CollectInterrupted`
        # carries the signal and says how to resume).
        detail = f": {exc}" if str(exc) else ""
        print(f"mnemo-mpc {_command_name(args)}: interrupted{detail}", file=sys.stderr)
        return 128 + int(getattr(exc, "signum", 2))


def _command_name(args: argparse.Namespace) -> str:
    """The words the user typed to choose the handler: `eval`, `bench sqp`, `data stats`..."""
    sub = next(
        (
            getattr(args, k)
            for k in ("benchmark", "data_command", "optim_command", "interfaces_command")
            if getattr(args, k, None)
        ),
        None,
    )
    return f"{args.command} {sub}" if sub else args.command


if __name__ == "__main__":
    sys.exit(main())

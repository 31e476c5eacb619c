"""The `mnemo-mpc` entry point.

Each sub-command lives in its own module under `mnemo_mpc.commands` and exposes
`register(subparsers) -> None`; registration must stay import-light (heavy imports go inside the handler),
so `mnemo-mpc --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from mnemo_mpc import __version__
from mnemo_mpc.errors import MnemoError

# Sub-command name -> module in mnemo_mpc.commands. A module that is not there yet is skipped.
COMMANDS = ("demo", "bench", "eval", "collect", "data", "train", "export", "runs", "replay", "dds_loop")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnemo-mpc", description=__doc__.splitlines()[0])
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except MnemoError as exc:
        print(f"mnemo-mpc {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mnemo-mpc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

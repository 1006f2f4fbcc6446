"""`localspec run | chat | ...`: the command line. Every user-facing error is one line and a non-zero exit.

One module a command (two for `convert-eagle | convert-dflash` and `train-drafter | train-eagle`), each with
``NAMES`` (the subcommands it adds), ``add_parser(sub, common)`` and ``run(args) -> int``; flags.py holds what
the parsers share, common.py what the commands do with a Session. A command imports what it runs on only when
it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from localspec import __version__
from localspec.apps.cli import (
    bench,
    calibrate,
    chat,
    config,
    convert,
    export,
    listing,
    pull,
    rm,
    run,
    serve,
    simulate,
    train,
)
from localspec.apps.cli.flags import Parser, common_parser
from localspec.errors import LocalspecError

# in the order `localspec --help` lists them
COMMANDS = (run, simulate, bench, calibrate, pull, listing, rm, train, convert, export, config, serve, chat)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="localspec",
        description="Local chat with speculative decoding: faster answers from the model's own distribution "
        "(greedy output may differ from a plain run at near-ties, as in every engine; --exact makes it "
        "bit-identical).",
    )
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    common = common_parser()
    for command in COMMANDS:
        command.add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return next(c for c in COMMANDS if args.command in c.NAMES).run(args)
    except LocalspecError as exc:
        print(f"localspec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130

"""`localspec calibrate`: --exact's near-tie margin for a model and build, or a check of its batch-invariant
kernels (cached)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from localspec.errors import ConfigError

NAMES = ("calibrate",)


def add_parser(sub, common) -> None:
    cal = sub.add_parser(
        "calibrate",
        parents=[common],
        help="measure how verify windows round against 1-token steps for this model and build: --exact's "
        "near-tie margin, or a check of its batch-invariant kernels (cached)",
    )
    cal.add_argument("--positions", type=int, default=512, help="positions to measure (512)")


def run(args) -> int:
    """Measures and caches --exact's near-tie margin for the model, backend and build given (or checks its
    batch-invariant kernels): the model is loaded as --exact loads it."""
    from localspec.apps.cli.common import read_settings
    from localspec.engine.calibrate import calibrate
    from localspec.session import Session

    if args.positions < 16:
        raise ConfigError(f"--positions must be at least 16, got {args.positions}")
    with Session.open(replace(read_settings(args), exact=True)) as session:
        print(f"calibrating {session.load_report()}", file=sys.stderr)
        result = calibrate(session.backend, lambda line: print(f"  {line}", file=sys.stderr), args.positions)
    print(json.dumps(result))
    if result["kernels"] == "batch-invariant":
        print(
            f"batch-invariant kernels: verify windows differ from 1-token steps by at most "
            f"{result['max_gap_difference']} logits over {result['positions']} positions "
            f"({result['argmax_flips']} argmax flips); greedy turns need no margin",
            file=sys.stderr,
        )
        return 0 if result["max_gap_difference"] == 0 else 1
    print(
        f"exact guard margin {result['margin']} (2 x the largest gap difference {result['max_gap_difference']} "
        f"over {result['positions']} positions; {result['argmax_flips']} argmax flips seen); cached",
        file=sys.stderr,
    )
    return 0

"""`localspec config`: every setting a run with these flags would use and where it comes from; loads no model."""

from __future__ import annotations

import json
from pathlib import Path

NAMES = ("config",)


def add_parser(sub, common) -> None:
    conf = sub.add_parser(
        "config",
        parents=[common],
        help="print every setting a run with these flags would use and where it comes from "
        "(flag, environment, config.toml, models.toml, default); loads no model",
    )
    conf.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    """Every setting a run with these flags would use, and where each comes from; loads no model."""
    from localspec.apps.cli.common import read_settings

    rows = read_settings(args).rows
    if args.json:
        print(json.dumps([{"setting": n, "value": _shown(v), "source": s} for n, v, s in rows], indent=1))
        return 0
    width = max(len(n) for n, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {_shown(value)}  [{source}]")
    return 0


def _shown(value) -> object:
    return str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value

"""`localspec list`: the models localspec knows, what is downloaded, and which drafters fit."""

from __future__ import annotations

import json

NAMES = ("list",)


def add_parser(sub, common) -> None:
    ls = sub.add_parser("list", help="the models localspec knows, what is downloaded, and which drafters fit")
    ls.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    from localspec.models import hub

    rows = hub.listing()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'name':<20}{'on disk':<24}{'sources':<24}drafters / compatible drafts")
    for row in (r for r in rows if "app" not in r):
        disk = ", ".join(_on_disk(d) for d in row["downloaded"]) or "-"
        drafts = ", ".join(row["drafters"]) + (f" / {', '.join(row['drafts'])}" if row["drafts"] else "")
        print(f"{row['name']:<20}{disk:<24}{', '.join(row['sources']):<24}{drafts}")
    found = [r for r in rows if "app" in r]
    if found:
        print("\nfound in other apps' files (read where they are; run one with --model NAME):")
        for row in found:
            disk = row["downloaded"][0]
            print(f"  {row['name']:<60} {disk['bytes'] / 2**20:>7.0f} MB  {disk['path']}")
    return 0


def _on_disk(item: dict) -> str:
    return f"{item['backend']} {item['bytes'] / 2**20:.0f} MB" + (f" ({item['app']})" if "app" in item else "")

"""Merge `localspec bench --json` reports of the same workload, settings and code into one with all their repeats.

    .venv/bin/python benchmarks/merge_reports.py OUT.json FIRST.json MORE.json [...]

The repeats of later reports are numbered after the earlier ones' (their seeds should differ: `--seed`); per_case
and by_kind are recomputed over every case-run by the bench's own summaries, and a note says what was merged.
benchmarks/results/bench-qwen2.5-coder-1.5b-peer-t0.8-3r-2026-12-07.json was made this way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.bench.run import summarize, summarize_cases  # noqa: E402


def merge(paths: list[str]) -> dict:
    first, *rest = paths
    base = json.loads(Path(first).read_text(encoding="utf-8"))
    repeats = base["repeats"]
    for path in rest:
        other = json.loads(Path(path).read_text(encoding="utf-8"))
        if other["methods"] != base["methods"] or other["sampling"] != base["sampling"]:
            raise SystemExit(f"{path}: other methods or sampling than {first}; only like reports merge")
        base["cases"] += [dict(row, repeat=row["repeat"] + repeats) for row in other["cases"]]
        repeats += other["repeats"]
    base["repeats"] = repeats
    base["per_case"] = summarize_cases(base["cases"], base["methods"])
    base["by_kind"] = summarize(base["cases"], base["per_case"], base["methods"])
    base["notes"] = [*base.get("notes", []), f"merged from {', '.join(paths)} (benchmarks/merge_reports.py)"]
    return base


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    report = merge(sys.argv[2:])
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"{sys.argv[1]}: {report['repeats']} repeats, {len(report['cases'])} case-runs")

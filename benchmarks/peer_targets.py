"""Issue 13's targets, read off a `localspec bench --peer llama-server --json` report (nothing is re-measured).

    .venv/bin/python benchmarks/peer_targets.py benchmarks/results/bench-qwen1.5b-peer.json

Prints per case: the median decode ratio to own plain of every method, the suffix method's median tok/s
against the server's best speculative type (ratio and absolute), its fraction of the verify-curve bound,
and whether every localspec method kept >= 0.97x plain with prefill counted; then the targets, each as
reached or not reached with its figure.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

SERVER = "server:"


def median_tok_s(report: dict, case_id: str, label: str) -> float:
    return statistics.median(r["methods"][label]["decode_tok_s"] for r in report["cases"] if r["id"] == case_id)


def main(path: str) -> int:
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    methods = report["methods"]
    ours = [m for m in methods if not m.startswith(SERVER) and m != "none"]
    peers = [m for m in methods if m.startswith(SERVER) and m != SERVER + "plain"]
    print(f"{report['model']} · {report['date']} · {report['repeats']} repeats · medians per case")
    print(
        f"{'case':<18}{'kind':<11}"
        + "".join(f"{m:>10}" for m in ours)
        + "".join(f"{m[7:]:>14}" for m in peers)
        + f"{'suffix/best':>12}{'tok/s s|b':>14}{'of bound':>9}{'min total':>10}"
    )
    checks, edit_ratios = [], []
    for case_id, c in report["per_case"].items():
        ratio = c["median_ratio"]
        best = max(peers, key=lambda m: ratio[m] or 0) if peers else None
        vs = ratio["suffix"] / ratio[best] if best and ratio.get("suffix") and ratio[best] else None
        tok_s = (median_tok_s(report, case_id, "suffix"), median_tok_s(report, case_id, best)) if best else (0, 0)
        total = min(c["median_ratio_total"][m] or 0 for m in ours)
        print(
            f"{case_id:<18}{c['kind']:<11}"
            + "".join(f"{ratio[m] or 0:>10.2f}" for m in ours)
            + "".join(f"{ratio[m] or 0:>14.2f}" for m in peers)
            + f"{vs or 0:>12.2f}{tok_s[0]:>7.1f}|{tok_s[1]:<6.1f}{c['fraction_of_bound'].get('suffix') or 0:>9.2f}"
            + f"{total:>10.2f}"
        )
        if c["kind"] == "code-edit" and vs:
            edit_ratios.append(vs)
            checks.append((f"{case_id}: suffix >= server's best ({best[7:]})", vs >= 1.0, f"{vs:.2f}x"))
        if c["kind"] in ("multi-turn", "structured") and best:
            bar = max(1.0, ratio[best] or 0)
            checks.append(
                (
                    f"{case_id}: suffix >= max(1, server's best)",
                    (ratio["suffix"] or 0) >= bar,
                    f"{ratio['suffix']:.2f} vs {bar:.2f}",
                )
            )
        checks.append(
            (f"{case_id}: every localspec method >= 0.97x plain, prefill counted", total >= 0.97, f"min {total:.2f}")
        )
    if edit_ratios:
        mean = sum(edit_ratios) / len(edit_ratios)
        checks.append(("code-edit mean: suffix >= 1.15x the server's best", mean >= 1.15, f"{mean:.2f}x"))
    print()
    for what, ok, figure in checks:
        print(f"{'reached    ' if ok else 'NOT reached'}  {what}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

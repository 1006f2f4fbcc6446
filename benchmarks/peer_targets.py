"""Issue 40's targets, read off a `localspec bench --peer llama-server --json` report (nothing is re-measured).

    .venv/bin/python benchmarks/peer_targets.py benchmarks/results/bench-qwen2.5-coder-1.5b-peer-t0-2026-12-04.json

Prints per case the median decode tok/s of every method, localspec's and the server's side by side (absolute:
a ratio to one's own plain hides a slow plain), each method's median ratio to its own system's plain, and the
suffix method against the server's best type on that case; then the targets of the report's temperature,
each as reached or NOT reached with its figure:
- T = 0: code-edit mean of suffix / the server's best type >= 1.15, every code-edit case >= 1.0;
  edit-logging suffix >= 2.0x localspec plain;
- T > 0: code-edit mean of suffix / the server's best type >= 1.1;
- both: localspec plain >= 0.97x llama-server plain (mean of the per-case medians); every localspec method,
  prefill counted, >= 0.97x localspec plain on every case of every kind but code-edit (where speculation is
  measured by the targets above).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

SERVER = "server:"


def medians(report: dict, case_id: str, label: str, key: str = "decode_tok_s") -> float:
    return statistics.median(r["methods"][label][key] for r in report["cases"] if r["id"] == case_id)


def main(path: str) -> int:
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    methods = report["methods"]
    ours = [m for m in methods if not m.startswith(SERVER)]
    servers = [m for m in methods if m.startswith(SERVER)]
    temperature = report["sampling"]["temperature"]
    print(f"{report['model']} · {report['date']} · T = {temperature} · {report['repeats']} repeats · medians per case")
    print("decode tok/s (ratio to own plain)")
    print(
        f"{'case':<18}{'kind':<11}"
        + "".join(f"{m.replace(SERVER, 's:'):>18}" for m in methods)
        + f"{'suffix/best':>12}"
    )
    checks, edit_vs_best, plain_vs_server = [], [], []
    for case_id, c in report["per_case"].items():
        tok_s = {m: medians(report, case_id, m) for m in methods}
        ratio = c["median_ratio"]
        best = max(servers, key=lambda m: tok_s[m])
        vs = tok_s["suffix"] / tok_s[best] if "suffix" in tok_s and tok_s[best] else None
        print(
            f"{case_id:<18}{c['kind']:<11}"
            + "".join(f"{tok_s[m]:>11.1f} ({ratio[m] or 0:.2f})" for m in methods)
            + (f"{vs:>8.2f} ({best[len(SERVER) :]})" if vs else "")
        )
        if "none" in tok_s and SERVER + "plain" in tok_s:
            plain_vs_server.append(tok_s["none"] / tok_s[SERVER + "plain"])
        if c["kind"] == "code-edit" and vs:
            edit_vs_best.append(vs)
            if temperature == 0:
                checks.append((f"{case_id}: suffix >= 1.0x the server's best ({best[len(SERVER) :]})", vs >= 1.0, vs))
        if case_id == "edit-logging" and temperature == 0 and ratio.get("suffix"):
            checks.append(("edit-logging: suffix >= 2.0x localspec plain", ratio["suffix"] >= 2.0, ratio["suffix"]))
        if c["kind"] != "code-edit":
            total = {m: c["median_ratio_total"][m] or 0 for m in ours if m != "none"}
            worst = min(total, key=total.get)
            checks.append(
                (f"{case_id}: every localspec method >= 0.97x plain, prefill counted", total[worst] >= 0.97,
                 total[worst], worst)
            )  # fmt: skip
    if edit_vs_best:
        mean = sum(edit_vs_best) / len(edit_vs_best)
        bar = 1.15 if temperature == 0 else 1.1
        checks.append((f"code-edit mean: suffix >= {bar}x the server's best type", mean >= bar, mean))
    if plain_vs_server:
        mean = sum(plain_vs_server) / len(plain_vs_server)
        checks.append(("localspec plain >= 0.97x llama-server plain (mean of cases)", mean >= 0.97, mean))
    print()
    for what, ok, figure, *which in checks:
        print(f"{'reached    ' if ok else 'NOT reached'}  {what}: {figure:.2f}" + (f" ({which[0]})" if which else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Issue 49's targets, read off a `localspec bench --peer llama-server --json` report (nothing is re-measured).

    .venv/bin/python benchmarks/peer_targets.py benchmarks/results/bench-qwen2.5-coder-1.5b-peer-t0.8-2026-12-06.json
    .venv/bin/python benchmarks/peer_targets.py --markdown REPORT.json    (the README's table of it)

Prints per case the median decode tok/s of every method over the report's repeats, localspec's and the server's
side by side (absolute: a ratio to one's own plain hides a slow plain), each method's median ratio to its own
system's plain, and the suffix method against the server's best type on that case; then per kind the mean over
its cases of those medians (the README's cells) and localspec's default against the server's best type on the
kind, as the ratio of those means; then the targets, each as reached or NOT reached with its figure (the same
at T = 0 and T > 0):
- localspec plain >= 0.98x llama-server plain (mean over cases of the per-case medians);
- code edits: suffix >= 1.15x the server's best type on the kind's mean, and >= 1.0x on every case;
- every other kind: localspec's default drafter >= 1.0x the server's best type on the kind's mean;
- every localspec method, prefill counted, >= 0.97x localspec plain on every case but code edits (issue 40).
A report of an --exact run without the server prints instead how many case-runs answered with the same tokens
under every drafter as under plain decoding (issue 49: 30/30 at T = 0.8).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.config import DEFAULT_DRAFTER  # noqa: E402

SERVER = "server:"


def medians(report: dict, case_id: str, label: str, key: str = "decode_tok_s") -> float:
    return statistics.median(r["methods"][label][key] for r in report["cases"] if r["id"] == case_id)


def main(path: str) -> int:
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    methods = report["methods"]
    servers = [m for m in methods if m.startswith(SERVER)]
    temperature = report["sampling"]["temperature"]
    print(f"{report['model']} · {report['date']} · T = {temperature} · {report['repeats']} repeats · medians per case")
    if not servers:
        return seeded(report)
    print("decode tok/s (ratio to own plain)")
    print(
        f"{'case':<18}{'kind':<11}"
        + "".join(f"{m.replace(SERVER, 's:'):>18}" for m in methods)
        + f"{'suffix/best':>12}"
    )
    checks, plain_vs_server, by_kind = [], [], {}
    for case_id, c in report["per_case"].items():
        tok_s = {m: medians(report, case_id, m) for m in methods}
        by_kind.setdefault(c["kind"], []).append(tok_s)
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
            checks.append((f"{case_id}: suffix >= 1.0x the server's best ({best[len(SERVER) :]})", vs >= 1.0, vs))
        if c["kind"] != "code-edit":
            total = {m: c["median_ratio_total"][m] or 0 for m in methods if not m.startswith(SERVER) and m != "none"}
            worst = min(total, key=total.get)
            checks.append(
                (f"{case_id}: every localspec method >= 0.97x plain, prefill counted", total[worst] >= 0.97,
                 total[worst], worst)
            )  # fmt: skip
    print(f"\nper kind: the mean over its cases of the per-case medians; {DEFAULT_DRAFTER} (the default) / best type")
    for kind, rows in by_kind.items():
        mean = {m: statistics.fmean(r[m] for r in rows) for m in methods}
        best = max(servers, key=mean.get)
        ours = "suffix" if kind == "code-edit" else DEFAULT_DRAFTER
        if ours not in mean:
            continue
        vs, bar = mean[ours] / mean[best], 1.15 if kind == "code-edit" else 1.0
        print(f"{kind:<12}" + "".join(f"{m.replace(SERVER, 's:')} {mean[m]:.1f}  " for m in methods) + f"{vs:.2f}")
        checks.append((f"{kind} ({len(rows)} cases): {ours} >= {bar}x the server's best ({best[len(SERVER) :]})",
                       vs >= bar, vs))  # fmt: skip
    if plain_vs_server:
        mean = sum(plain_vs_server) / len(plain_vs_server)
        checks.append(("localspec plain >= 0.98x llama-server plain (mean of cases)", mean >= 0.98, mean))
    print()
    for what, ok, figure, *which in checks:
        print(f"{'reached    ' if ok else 'NOT reached'}  {what}: {figure:.2f}" + (f" ({which[0]})" if which else ""))
    return 0


def markdown(path: str) -> int:
    """The README's table of the report: per kind the mean over its cases of the per-case medians, each
    localspec method's and server type's decode tok/s with its ratio to its own system's plain (from the same
    means), the fastest cell of the row in bold."""
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    methods, by_kind = report["methods"], {}
    for case_id, c in report["per_case"].items():
        by_kind.setdefault(c["kind"], []).append({m: medians(report, case_id, m) for m in methods})
    names = [m.replace(SERVER, "server ") if m != SERVER + "plain" else "server plain" for m in methods]
    names = ["localspec plain" if m == "none" else n for m, n in zip(methods, names, strict=True)]
    temperature = report["sampling"]["temperature"]
    print(f"| T = {temperature:g}, kind | " + " | ".join(names) + " |")
    print("|---" * (len(methods) + 1) + "|")
    for kind, rows in by_kind.items():
        mean = {m: statistics.fmean(r[m] for r in rows) for m in methods}
        top = max(mean, key=mean.get)
        cells = []
        for m in methods:
            plain = mean[SERVER + "plain"] if m.startswith(SERVER) else mean.get("none")
            cell = f"{mean[m]:.1f}" + (
                "" if m in ("none", SERVER + "plain") or not plain else f" ({mean[m] / plain:.2f})"
            )
            cells.append(f"**{cell}**" if m == top else cell)
        print(f"| {kind} ({len(rows)}) | " + " | ".join(cells) + " |")
    return 0


def seeded(report: dict) -> int:
    """Case-runs whose every drafter answered with plain decoding's tokens (same seed, --exact)."""
    runs = report["cases"]
    same = [r for r in runs if all(m["same_as_plain"] for m in r["methods"].values())]
    for r in runs:
        if r not in same:
            differ = [label for label, m in r["methods"].items() if not m["same_as_plain"]]
            print(f"{r['id']} r{r['repeat']}: differs from plain with {', '.join(differ)}")
    ok = len(same) == len(runs)
    print(f"{'reached    ' if ok else 'NOT reached'}  same tokens with {', '.join(report['methods'])}: "
          f"{len(same)}/{len(runs)} case-runs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(markdown(sys.argv[2]) if sys.argv[1] == "--markdown" else main(sys.argv[1]))

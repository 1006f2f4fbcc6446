"""Compact against free-whitespace JSON under a schema: which layout answers a structured request sooner.

localspec writes JSON compact where the schema leaves the layout free (structured/grammar.py: `", "` and `": "`,
no other whitespace), so that every separator is forced and drafted for free. The other choice lets the model lay
the JSON out as it likes (llguidance's `whitespace_flexible`: newlines and indentation allowed anywhere JSON
allows them). This asks the JSON cases of benchmarks/data/structured (response_format json_schema and
json_object) of one in-process session with the default drafter (grammar+suffix), once per layout, alternating
which goes first, at each temperature, --repeats times with the same seed for both layouts; the request goes
through the server's own parsing and prompt building (apps/server/requests.py, shaping.py).

Per answer: tokens, decode seconds and tok/s, forced tokens drafted and accepted, validity against the schema.
Decode tok/s alone would favour the layout with more (cheap, forced) whitespace tokens, so the summary compares
decode seconds per answer too (median over repeats per case, then the ratio free / compact per case and their
mean).

    .venv/bin/python benchmarks/json_layout.py [--model PATH.gguf] [--temperatures 0,0.8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from statistics import mean, median

from agent_loop import DEFAULT_MODEL, ROOT, machine, own_cache
from structured import CASES, check

from localspec.apps.cli import build_parser
from localspec.apps.server.requests import parse_chat
from localspec.apps.server.shaping import chat_prompt
from localspec.bench.run import load_cases
from localspec.config import settings_from_args
from localspec.models.registry import resolve_model
from localspec.session import Session
from localspec.structured import grammar

LAYOUTS = {"compact": grammar.JSON_LAYOUT, "free": {"whitespace_flexible": True}}


def json_cases() -> list[dict]:
    return [c for c in load_cases(str(CASES)) if "response_format" in c or "json_schema" in c]


def answer(session: Session, case: dict, layout: str, sampler: dict) -> dict:
    """The case asked once under ``layout`` (the schema compiled with it, as the server compiles it)."""
    grammar.JSON_LAYOUT = LAYOUTS[layout]  # read when the request's schema is compiled
    try:
        body = {"messages": case["messages"], "max_tokens": case["max_tokens"], **sampler}
        body |= {k: case[k] for k in ("response_format", "json_schema") if k in case}
        gen = parse_chat(body)
    finally:
        grammar.JSON_LAYOUT = LAYOUTS["compact"]
    prompt, _ = chat_prompt(session, gen.messages, None, None)
    text, last = [], None
    for event in session.complete(prompt, gen.request):
        text.append(event.text)
        last = event
    stats, answer_text = last.stats, "".join(text)
    valid, why = check(case, answer_text)
    return {
        "tokens": stats.generated,
        "decode_s": round(stats.decode_s, 4),
        "decode_tok_s": round(stats.generated / stats.decode_s, 2) if stats.decode_s else None,
        "forced_drafted": stats.grammar["forced_drafted"],
        "forced_accepted": stats.grammar["forced_accepted"],
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "finish_reason": last.finish_reason,
        "valid": valid,
        "invalid_because": why,
        "answer": answer_text,
    }


def summarize(rows: list[dict]) -> dict:
    per_case, seconds, rates = {}, [], []
    for case in dict.fromkeys(r["case"] for r in rows):
        med = {}
        for layout in LAYOUTS:
            mine = [r for r in rows if r["case"] == case and r["layout"] == layout]
            med[layout] = {k: median(r[k] or 0 for r in mine) for k in ("tokens", "decode_s", "decode_tok_s")}
        s = med["free"]["decode_s"] / med["compact"]["decode_s"]
        t = (med["free"]["decode_tok_s"] or 0) / (med["compact"]["decode_tok_s"] or 1)
        flat = {f"{k}_{lay}": v for lay, m in med.items() for k, v in m.items()}
        per_case[case] = {**flat, "free_over_compact_decode_s": round(s, 3), "free_over_compact_tok_s": round(t, 3)}
        seconds.append(s)
        rates.append(t)
    valid = {lay: f"{sum(r['valid'] for r in rows if r['layout'] == lay)}/{sum(r['layout'] == lay for r in rows)}"
             for lay in LAYOUTS}  # fmt: skip
    return {
        "aggregation": "per case: median over repeats; ratios per case from those medians; means over cases",
        "free_over_compact_decode_s_mean": round(mean(seconds), 3),
        "free_over_compact_tok_s_mean": round(mean(rates), 3),
        "valid": valid,
        "per_case": per_case,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a .gguf path or a models.toml name")
    ap.add_argument("--temperatures", default="0,0.8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    name, model = resolve_model(args.model)
    parsed = build_parser().parse_args(
        ["serve", "--model", str(model), "--ctx", "8192", "--threads", str(args.threads)]
    )
    # as structured.py's servers: an empty suffix store, your measured costs and guard
    os.environ["LOCALSPEC_CACHE"] = str(own_cache(Path(tempfile.mkdtemp(prefix="json-layout-")) / "cache"))
    session = Session.open(settings_from_args(parsed))
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows, turn = [], 0
    try:
        for t in temperatures:
            for r in range(args.repeats):
                for case in json_cases():
                    order = list(LAYOUTS) if turn % 2 == 0 else list(LAYOUTS)[::-1]
                    for layout in order:
                        row = answer(session, case, layout, {"temperature": t, "seed": args.seed + turn})
                        rows.append({"temperature": t, "repeat": r, "case": case["id"], "layout": layout, **row})
                        print(f"  T={t} {case['id']:<18} {layout:<8} {row['tokens']} tokens {row['decode_tok_s']} "
                              f"tok/s {row['decode_s']} s forced {row['forced_accepted']}/{row['forced_drafted']} "
                              f"valid {row['valid']}", flush=True)  # fmt: skip
                    turn += 1
    finally:
        session.close()
    summary = {str(t): summarize([r for r in rows if r["temperature"] == t]) for t in temperatures}
    out = args.out or ROOT / "benchmarks" / "results" / f"json-layout-{Path(name).stem}.json"
    report = {"benchmark": "json_layout", "model": name, "model_path": str(model), "repeats": args.repeats,
              "threads": args.threads, "machine": machine(), "summary": summary, "rows": rows}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    for t, s in summary.items():
        print(f"T={t}: free / compact decode seconds {s['free_over_compact_decode_s_mean']}, "
              f"tok/s {s['free_over_compact_tok_s_mean']}, valid {s['valid']}")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Structured output against llama-server: the same constrained requests to both servers, tok/s and validity.

Every case of benchmarks/data/structured/cases.jsonl (the ../shared/bench workload format; `source` pastes a
stdlib object's source) carries one constraint in llama-server's own request fields: `response_format`
(json_schema, strict, or json_object), `grammar` (GBNF, with a `check` regex whose language is the grammar's),
or `tools` (with `tool_choice`: the answer's calls, each to an offered function with arguments its schema takes).
Systems, all up at once (started and stopped as benchmarks/agent_loop.py does): `localspec serve` plain
(--drafter none) and with its default drafter (grammar+suffix under a constraint), llama-server plain and
--spec-type ngram-mod. Each case is asked of every system in a rotating order, at each temperature, --repeats
times, with the same seed for every system; localspec's systems answer it once more without the constraint
("free"), which says whether the mask pays for itself. Each answer is checked: JSON against its schema
(jsonschema), json_object as a JSON object, a grammar's answer against its regex.

The summary, per temperature: per case the median over repeats of decode tok/s (each server's own `timings`);
localspec's default over llama-server's best type under the same constraint (per case and the mean over cases);
constrained over free for localspec's systems; valid answers per system.

    .venv/bin/python benchmarks/structured.py [--model PATH.gguf] [--temperatures 0,0.8] [--repeats 3]
        [--cases id,...] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import mean, median

import openai
from agent_loop import DEFAULT_MODEL, PEER_BIN, ROOT, ask, machine, start_systems, versions

from localspec.bench.peer import PeerError, find_llama_server
from localspec.bench.run import load_cases
from localspec.models.registry import resolve_model
from localspec.sampling import SamplingParams

CASES = ROOT / "benchmarks" / "data" / "structured" / "cases.jsonl"
SYSTEMS = {  # name -> (family, localspec serve flags | llama-server spec type)
    "localspec-plain": ("localspec", ["--drafter", "none"]),
    "localspec-default": ("localspec", []),
    "server-plain": ("server", "plain"),
    "server-ngram-mod": ("server", "ngram-mod"),
}
FIELDS = ("response_format", "grammar", "json_schema", "tools")  # the constraint's request fields


def constraint_of(case: dict) -> dict:
    """The case's constraint (tools come with their tool_choice)."""
    fields = {k: case[k] for k in FIELDS if k in case}
    return {**fields, "tool_choice": case.get("tool_choice", "auto")} if "tools" in fields else fields


def check(case: dict, answer: str, calls: list[dict] | None = None) -> tuple[bool, str | None]:
    """Whether the answer (its text, and the tool calls it made) is what the constraint allows, and why not."""
    import jsonschema

    if "tools" in case:
        return check_calls(case, calls or [])
    if "grammar" in case:
        ok = re.fullmatch(case["check"], answer) is not None
        return ok, None if ok else "does not match the grammar's language"
    try:
        value = json.loads(answer)
    except ValueError as exc:
        return False, f"not JSON: {exc}"
    fmt = case.get("response_format", {})
    schema = fmt.get("json_schema", {}).get("schema") or case.get("json_schema")
    if schema is None:
        return isinstance(value, dict), None if isinstance(value, dict) else "not a JSON object"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return False, exc.message
    return True, None


def check_calls(case: dict, calls: list[dict]) -> tuple[bool, str | None]:
    """At least one call, each to an offered function, its arguments a JSON object that function's schema takes."""
    import jsonschema

    if not calls:
        return False, "no tool call"
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in case["tools"]}
    for call in calls:
        if call["name"] not in schemas:
            return False, f"calls {call['name']!r}, which was not offered"
        try:
            jsonschema.validate(json.loads(call["arguments"]), schemas[call["name"]])
        except ValueError as exc:
            return False, f"{call['name']}: arguments not JSON: {exc}"
        except jsonschema.ValidationError as exc:
            return False, f"{call['name']}: {exc.message}"
    return True, None


def run_case(talks: dict, case: dict, turn: int, sampler: dict) -> list[dict]:
    """The case asked of every (system, variant), in an order rotated by ``turn``."""
    entries = [(name, "constrained") for name in talks]
    entries += [(name, "free") for name in talks if SYSTEMS[name][0] == "localspec"]
    shift = turn % len(entries)
    rows = []
    for name, variant in entries[shift:] + entries[:shift]:
        client, model = talks[name]
        extra = {**sampler, **(constraint_of(case) if variant == "constrained" else {})}
        try:
            row = ask(client, model, case["messages"], case["max_tokens"], extra)
        except openai.OpenAIError as exc:
            row = {"error": f"{type(exc).__name__}: {exc}", "answer": "", "decode_tok_s": None}
        if variant == "constrained" and "error" not in row:
            row["valid"], row["invalid_because"] = check(case, row["answer"], row.get("calls"))
        rows.append({"case": case["id"], "kind": case["kind"], "system": name, "variant": variant, **row})
        why = row.get("error") or row.get("invalid_because") or ""
        print(f"  {case['id']:<18} {name:<18} {variant:<11} {row.get('generated_tokens')} tokens "
              f"{row.get('decode_tok_s')} tok/s drafts {row.get('draft_n_accepted')}/{row.get('draft_n')} "
              f"valid {row.get('valid', '-')} {why}", flush=True)  # fmt: skip
    return rows


def summarize(rows: list[dict]) -> dict:
    """Per case the median over repeats per (system, variant); the ratios of the module doc."""
    cells: dict[tuple, list[float]] = {}
    for r in rows:
        if r.get("decode_tok_s"):
            cells.setdefault((r["case"], r["system"], r["variant"]), []).append(r["decode_tok_s"])
    med = {key: median(v) for key, v in cells.items()}
    per_case, vs_server, vs_free = {}, [], {"localspec-plain": [], "localspec-default": []}
    for case in dict.fromkeys(r["case"] for r in rows):
        c = {f"{s}/{v}": round(x, 2) for (k, s, v), x in med.items() if k == case}
        servers = [med.get((case, s, "constrained")) for s in SYSTEMS if SYSTEMS[s][0] == "server"]
        best = max((x for x in servers if x), default=None)
        ours = med.get((case, "localspec-default", "constrained"))
        if best and ours:
            c["default_over_server_best"] = round(ours / best, 3)
            vs_server.append(ours / best)
        for s, ratios in vs_free.items():
            con, free = med.get((case, s, "constrained")), med.get((case, s, "free"))
            if con and free:
                c[f"{s}_constrained_over_free"] = round(con / free, 3)
                ratios.append(con / free)
        per_case[case] = c
    valid = {}
    for r in rows:
        if r["variant"] == "constrained":
            v = valid.setdefault(r["system"], [0, 0])
            v[0] += bool(r.get("valid"))
            v[1] += 1
    return {
        "aggregation": "per case: median over repeats of decode tok/s; ratios per case from those medians; "
        "means: arithmetic mean over cases of the per-case ratios",
        "default_over_server_best_mean": round(mean(vs_server), 3) if vs_server else None,
        "default_over_server_best_min": round(min(vs_server), 3) if vs_server else None,
        "constrained_over_free_mean": {s: round(mean(v), 3) if v else None for s, v in vs_free.items()},
        "valid": {s: f"{a}/{n}" for s, (a, n) in valid.items()},
        "per_case": per_case,
    }


def asked_for(ap: argparse.ArgumentParser, args) -> tuple[list[dict], list[str]]:
    """The cases and systems asked for; an unknown one is an error that lists the known ones."""
    cases = load_cases(str(CASES))
    if args.cases:
        wanted = set(args.cases.split(","))
        if unknown := sorted(wanted - {c["id"] for c in cases}):
            ap.error(f"unknown cases {unknown}; the cases are in {CASES}")
        cases = [c for c in cases if c["id"] in wanted]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        ap.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    return cases, systems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a .gguf path or a models.toml name")
    ap.add_argument("--temperatures", default="0,0.8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", help="comma-separated case ids (default: all)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=str(PEER_BIN) if PEER_BIN.is_dir() else None, help="binary or folder")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cases, systems = asked_for(ap, args)
    name, model = resolve_model(args.model)
    try:
        binary, binary_error = find_llama_server(args.llama_server), None
    except PeerError as exc:
        binary, binary_error = None, str(exc)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows, errors = [], {}
    with tempfile.TemporaryDirectory(prefix="structured-") as tmp, ExitStack() as stack:
        chosen = {system: SYSTEMS[system] for system in systems}
        procs = start_systems(chosen, model, binary, binary_error, args, Path(tmp), stack, errors)
        talks = {}
        for system, proc in procs.items():
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{proc.port}/v1", api_key="none", max_retries=0)
            talks[system] = (client, client.models.list().data[0].id)
        turn = 0
        for t in temperatures:
            sampler = SamplingParams(temperature=t).server_fields()
            for r in range(args.repeats):
                for case in cases:
                    seed = args.seed + turn
                    for row in run_case(talks, case, turn, {**sampler, "seed": seed}):
                        rows.append({"temperature": t, "repeat": r, "seed": seed, **row})
                    turn += 1
    summary = {str(t): summarize([r for r in rows if r["temperature"] == t]) for t in temperatures}
    out = args.out or ROOT / "benchmarks" / "results" / f"structured-{Path(name).stem}.json"
    report = {
        "benchmark": "structured", "model": name, "model_path": str(model), "repeats": args.repeats,
        "threads": args.threads, "ctx": args.ctx, "systems": systems, "machine": machine(),
        "versions": versions(binary), "errors": errors, "summary": summary, "rows": rows,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    for t, s in summary.items():
        best, low = s["default_over_server_best_mean"], s["default_over_server_best_min"]
        print(f"T={t}: default / server best {best} (min {low}), "
              f"constrained / free {s['constrained_over_free_mean']}, valid {s['valid']}")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

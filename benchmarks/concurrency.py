"""Several clients at once: aggregate decode throughput of `localspec serve` against llama-server with `-np N`.

N clients (--concurrency, default 1,2,4) each send one request of the shared workload at the same moment (client
i of round r takes case (r*N + i) mod the number of cases: chat, code edits, structured, code generation, multi-turn
— a mix), non-streamed through the real `openai` client, with the same sampler settings and seed; the round ends
when the last answer is in. Per round and system: aggregate tok/s = all completion tokens / the round's wall time
(first request sent to last answer received), each request's time to its first token (streamed), end-to-end
latency and decode tok/s from the server's own `timings` (p50 and p95 in the summary).

Systems, all up at once for each N and started afresh for the next N (benchmarks/agent_loop.py starts them):
localspec default settings and --drafter none, one request at a time (the others wait in its queue), the same
with `--parallel N` (from N = 2; N slots of --ctx tokens each, every slot's step in one batch), llama-server plain
and --spec-type ngram-mod with `-np N` slots of --ctx tokens each (its continuous batching verifies every slot's
drafts in one batch). The systems take turns round by round in a rotating order.

The summary per N: each system's median aggregate tok/s over rounds and mean latency; localspec's default over
llama-server's best type (issue 51's target: 1.15x at every N).

    .venv/bin/python benchmarks/concurrency.py [--model PATH.gguf] [--concurrency 1,2,4] [--rounds 3]
        [--max-tokens 160] [--temperature 0] [--seed 0] [--workload ../shared/bench/workload.jsonl] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from statistics import mean, median, quantiles

import openai
from agent_loop import DEFAULT_MODEL, PEER_BIN, ROOT, machine, start_systems, versions

from localspec.bench.peer import PeerError, find_llama_server
from localspec.bench.run import load_cases
from localspec.models.registry import resolve_model
from localspec.sampling import SamplingParams

SYSTEMS = {  # name -> (family, localspec serve flags | llama-server spec type)
    "localspec-default": ("localspec", []),
    "localspec-plain": ("localspec", ["--drafter", "none"]),
    # --parallel N (from N = 2), the context N times --ctx: each slot --ctx tokens, as llama-server's
    "localspec-parallel": ("localspec", ["--parallel"]),
    "localspec-parallel-plain": ("localspec", ["--drafter", "none", "--parallel"]),
    "server-plain": ("server", "plain"),
    "server-ngram-mod": ("server", "ngram-mod"),
}
SHARED_WORKLOAD = ROOT.parent / "shared" / "bench" / "workload.jsonl"


def ask(client: openai.OpenAI, case: dict, max_tokens: int, sampler: dict, t0: float) -> dict:
    """One streamed request: its tokens, its time to the first token, when it was answered (after the round's
    start), its server's figures (the last chunk's `timings`)."""
    start, ttft, usage, timings = time.perf_counter(), None, None, {}
    stream = client.chat.completions.create(
        model="model", messages=case["messages"], max_tokens=min(max_tokens, case["max_tokens"]), stream=True,
        stream_options={"include_usage": True}, extra_body=sampler,
    )  # fmt: skip
    for chunk in stream:
        timings = (chunk.model_extra or {}).get("timings") or timings
        usage = chunk.usage or usage
        if ttft is None and any(c.delta and c.delta.content for c in chunk.choices):
            ttft = time.perf_counter() - start
    return {
        "case": case["id"],
        "kind": case["kind"],
        "tokens": usage.completion_tokens if usage else timings.get("predicted_n", 0),
        "ttft_s": round(ttft, 3) if ttft is not None else None,
        "e2e_s": round(time.perf_counter() - start, 3),
        "done_at_s": round(time.perf_counter() - t0, 3),
        "decode_tok_s": timings.get("predicted_per_second"),
        "draft_n": timings.get("draft_n", 0),
        "draft_n_accepted": timings.get("draft_n_accepted", 0),
    }


def run_round(clients: list[openai.OpenAI], cases: list[dict], max_tokens: int, sampler: dict) -> dict:
    """Every client sends its case at once (client i the i-th case); the round's aggregate figures."""
    with ThreadPoolExecutor(len(clients)) as pool:
        t0 = time.perf_counter()
        futures = [pool.submit(ask, c, case, max_tokens, sampler, t0) for c, case in zip(clients, cases, strict=True)]
        rows = [f.result() for f in futures]
    wall = max(r["done_at_s"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    return {"wall_s": round(wall, 3), "tokens": tokens, "aggregate_tok_s": round(tokens / wall, 2), "requests": rows}


def run_level(procs: dict, n: int, cases: list[dict], rounds: int, max_tokens: int, sampler: dict) -> dict:
    clients = {
        name: [openai.OpenAI(base_url=f"http://127.0.0.1:{p.port}/v1", api_key="none", max_retries=0, timeout=3600)
               for _ in range(n)]
        for name, p in procs.items()
    }  # fmt: skip
    names, out = list(procs), {name: [] for name in procs}
    for r in range(rounds):
        batch = [cases[(r * n + i) % len(cases)] for i in range(n)]
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            row = run_round(clients[name], batch, max_tokens, {**sampler, "seed": sampler["seed"] + r})
            out[name].append(row)
            print(f"  N={n} round {r + 1} {name}: {row['tokens']} tokens in {row['wall_s']} s = "
                  f"{row['aggregate_tok_s']} tok/s", flush=True)  # fmt: skip
    return out


def summarize(levels: dict) -> dict:
    summary = {}
    for n, runs in levels.items():
        row = {
            name: {
                "aggregate_tok_s": median(r["aggregate_tok_s"] for r in rounds),
                "latency_s": round(mean(q["e2e_s"] for r in rounds for q in r["requests"]), 2),
                **spread("ttft_s", [q["ttft_s"] for r in rounds for q in r["requests"]]),
                **spread("decode_tok_s", [q["decode_tok_s"] for r in rounds for q in r["requests"]]),
            }
            for name, rounds in runs.items()
            if rounds
        }
        servers = [v["aggregate_tok_s"] for k, v in row.items() if k.startswith("server-")]
        ours = [row[k]["aggregate_tok_s"] for k in ("localspec-default", "localspec-parallel") if k in row]
        if servers and "localspec-default" in row:
            row["default_over_best_server"] = round(row["localspec-default"]["aggregate_tok_s"] / max(servers), 3)
        if servers and ours:
            row["best_speculative_over_best_server"] = round(max(ours) / max(servers), 3)
        summary[n] = row
    return summary


def spread(name: str, values: list[float]) -> dict:
    """p50 and p95 of a request figure (where the request has it)."""
    values = [v for v in values if v is not None]
    if not values:
        return {}
    cuts = quantiles(values, n=20, method="inclusive") if len(values) > 1 else [values[0]] * 19
    return {f"{name}_p50": round(median(values), 3), f"{name}_p95": round(cuts[18], 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a .gguf path or a models.toml name")
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=160, help="at most; a case's own max_tokens if lower")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workload", default=str(SHARED_WORKLOAD))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--ctx", type=int, default=4096, help="each slot's context")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=str(PEER_BIN) if PEER_BIN.is_dir() else None, help="binary or folder")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    chosen = {s: SYSTEMS[s] for s in args.systems.split(",")}
    sampler = {**SamplingParams(temperature=args.temperature).server_fields(), "seed": args.seed}
    name, model = resolve_model(args.model)
    cases = load_cases(args.workload)
    out = args.out or ROOT / "benchmarks" / "results" / f"concurrency-{Path(name).stem}.json"
    try:
        binary, binary_error = find_llama_server(args.llama_server), None
    except PeerError as exc:
        binary, binary_error = None, str(exc)
    results, errors = {}, {}
    for n in levels:
        at_n = {
            name: (family, [*how, str(n), "--ctx", str(args.ctx * n)] if "--parallel" in how else how)
            for name, (family, how) in chosen.items()
            if n > 1 or not (family == "localspec" and "--parallel" in how)
        }
        with tempfile.TemporaryDirectory(prefix="concurrency-") as tmp, ExitStack() as stack:
            procs = start_systems(at_n, model, binary, binary_error, args, Path(tmp), stack, errors, n_parallel=n)
            try:
                results[n] = run_level(procs, n, cases, args.rounds, args.max_tokens, sampler)
            except (PeerError, openai.OpenAIError, OSError) as exc:
                errors[f"N={n}"] = f"{type(exc).__name__}: {exc}"
                print(f"  failed: {errors[f'N={n}']}", flush=True)
    summary = summarize(results)
    report = {
        "benchmark": "concurrency", "model": name, "model_path": str(model), "concurrency": levels,
        "rounds": args.rounds, "sampler": sampler, "max_tokens": args.max_tokens, "ctx_per_slot": args.ctx,
        "threads": args.threads, "workload": args.workload, "machine": machine(), "versions": versions(binary),
        "errors": errors, "summary": summary, "runs": results,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

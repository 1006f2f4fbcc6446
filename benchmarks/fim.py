"""Editor autocomplete against llama-server: the same `/infill` requests to both servers, latency per completion.

A workload cut from real files, as an editor plugin (llama.vscode) sends it: for each of several standard-library
modules, cursors at evenly spaced code lines going down the file, each at a column inside the line's text; the
request's `input_prefix` is the PREFIX_LINES lines before the cursor (and the line's start), `input_suffix` the
SUFFIX_LINES lines after the line, `input_extra` two chunks of other modules (the same for every request in a
file, as the plugin's ring of recently seen chunks), `n_predict` N_PREDICT. The hole is the rest of the line: the
model may write more (a multi-line completion) and stops where it ends the middle.

Systems, all up at once (benchmarks/agent_loop.py starts and stops them): `localspec serve` plain (--drafter none)
and default, llama-server plain, --spec-type ngram-mod and ngram-simple, each with its default prompt cache;
llama-server with its out-of-the-box batch of 2048 (its FIM window: prefix ≤ 1,536 tokens, suffix ≤ 510, as
localspec's chat/fim.py). Each request goes to every system in a rotating order, non-streamed, at --temperature
(default 0) with the same seed.

Per system: p50 and p95 end-to-end latency per completion (the client's clock), mean prompt tokens computed and
cached, prefill ms and decode tok/s from each server's `timings`, drafts accepted; localspec's default p50 over the
best llama-server type's p50 (lower is better; the target is 0.8x); at T=0 how often each localspec system's
completion equals llama-server plain's (the same prompt tokens; equal where the kernels agree).

    .venv/bin/python benchmarks/fim.py [--model PATH.gguf] [--files 5] [--cursors 6] [--repeats 1] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import mean, median, quantiles

import httpx
from agent_loop import DEFAULT_MODEL, PEER_BIN, ROOT, machine, start_systems, versions

from localspec.bench.peer import PeerError, find_llama_server
from localspec.models.registry import resolve_model
from localspec.sampling import SamplingParams

SYSTEMS = {  # name -> (family, localspec serve flags | llama-server spec type)
    "localspec-plain": ("localspec", ["--drafter", "none"]),
    "localspec-default": ("localspec", []),
    "server-plain": ("server", "plain"),
    "server-ngram-mod": ("server", "ngram-mod"),
    "server-ngram-simple": ("server", "ngram-simple"),
}
MODULES = ["textwrap.py", "shlex.py", "fnmatch.py", "tabnanny.py", "csv.py", "getopt.py", "glob.py", "bisect.py"]
PREFIX_LINES, SUFFIX_LINES, EXTRA_LINES, N_PREDICT = 48, 16, 40, 64
FILES, CURSORS = 5, 6  # the default workload: 30 completions
SERVER_BATCH = 2048  # llama-server's default -b: its /infill window


def requests_for(path: Path, others: list[Path], cursors: int) -> list[dict]:
    """``cursors`` completions down one file (see the module doc)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    extra = [{"filename": o.name, "text": "".join(o.read_text(encoding="utf-8").splitlines(True)[:EXTRA_LINES])}
             for o in others]  # fmt: skip
    code = [i for i, line in enumerate(lines) if line.startswith("    ") and len(line.strip()) >= 16 and i >= 8]
    picked = [code[(k * len(code)) // cursors] for k in range(cursors)]
    out = []
    for n, i in enumerate(picked):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        column = indent + max(1, (len(line.rstrip()) - indent) * (1 + n % 3) // 4)  # a quarter, half, 3/4 in
        prefix = "".join(lines[max(0, i - PREFIX_LINES) : i]) + line[:column]
        suffix = "".join(lines[i + 1 : i + 1 + SUFFIX_LINES])
        out.append({"id": f"{path.stem}:{i + 1}:{column}", "input_prefix": prefix, "input_suffix": suffix,
                    "input_extra": extra, "hole": line[column:].rstrip("\n")})  # fmt: skip
    return out


def workload(files: int, cursors: int) -> list[dict]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [stdlib / m for m in MODULES[:files]]
    return [r for k, p in enumerate(paths) for r in requests_for(p, [paths[k - 1], paths[k - 2]], cursors)]


def infill(url: str, request: dict, sampler: dict) -> dict:
    body = {k: request[k] for k in ("input_prefix", "input_suffix", "input_extra")}
    start = time.perf_counter()
    reply = httpx.post(url + "/infill", json={**body, "n_predict": N_PREDICT, **sampler}, timeout=600)
    e2e = time.perf_counter() - start
    if reply.status_code != 200:
        return {"error": f"{reply.status_code}: {reply.text[:300]}", "e2e_s": e2e}
    data = reply.json()
    t = data.get("timings", {})
    return {
        "e2e_s": round(e2e, 4),
        "content": data.get("content", ""),
        "stop_type": data.get("stop_type"),
        "prompt_n": t.get("prompt_n"),
        "cache_n": t.get("cache_n"),
        "prompt_ms": t.get("prompt_ms"),
        "predicted_n": t.get("predicted_n"),
        "decode_tok_s": t.get("predicted_per_second"),
        "draft_n": t.get("draft_n", 0),
        "draft_n_accepted": t.get("draft_n_accepted", 0),
    }


def summarize(rows: list[dict], systems: list[str]) -> dict:
    per = {}
    for s in systems:
        mine = [r for r in rows if r["system"] == s and "error" not in r]
        if not mine:
            continue
        lat = sorted(r["e2e_s"] for r in mine)
        per[s] = {
            "requests": len(mine),
            "p50_s": round(median(lat), 3),
            "p95_s": round(quantiles(lat, n=20)[-1], 3) if len(lat) >= 2 else lat[0],
            "mean_prompt_n": round(mean(r["prompt_n"] or 0 for r in mine), 1),
            "mean_cache_n": round(mean(r["cache_n"] or 0 for r in mine), 1),
            "mean_prompt_ms": round(mean(r["prompt_ms"] or 0 for r in mine), 1),
            "mean_predicted_n": round(mean(r["predicted_n"] or 0 for r in mine), 1),
            "mean_decode_tok_s": round(mean(r["decode_tok_s"] or 0 for r in mine), 2),
            "drafts_accepted": f"{sum(r['draft_n_accepted'] for r in mine)}/{sum(r['draft_n'] for r in mine)}",
        }
    servers = {s: v["p50_s"] for s, v in per.items() if s.startswith("server")}
    best = min(servers, key=servers.get) if servers else None
    out = {"aggregation": "latency: p50/p95 over every request of the system; means over requests",
           "per_system": per, "server_best_by_p50": best}  # fmt: skip
    for s in ("localspec-default", "localspec-plain"):
        if s in per and best:
            out[f"{s}_p50_over_server_best"] = round(per[s]["p50_s"] / per[best]["p50_s"], 3)
    reference = {(r["case"], r["repeat"]): r.get("content") for r in rows if r["system"] == "server-plain"}
    for s in ("localspec-plain", "localspec-default"):
        pairs = [(r.get("content"), reference.get((r["case"], r["repeat"]))) for r in rows if r["system"] == s]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            out[f"{s}_equal_to_server_plain"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a .gguf path or a models.toml name")
    ap.add_argument("--files", type=int, default=FILES)
    ap.add_argument("--cursors", type=int, default=CURSORS)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=str(PEER_BIN) if PEER_BIN.is_dir() else None, help="binary or folder")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        ap.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    name, model = resolve_model(args.model)
    try:
        binary, binary_error = find_llama_server(args.llama_server), None
    except PeerError as exc:
        binary, binary_error = None, str(exc)
    sampler = {**SamplingParams(temperature=args.temperature).server_fields(), "seed": args.seed}
    cases = workload(args.files, args.cursors)
    rows, errors = [], {}
    with tempfile.TemporaryDirectory(prefix="fim-") as tmp, ExitStack() as stack:
        chosen = {s: SYSTEMS[s] for s in systems}
        procs = start_systems(chosen, model, binary, binary_error, args, Path(tmp), stack, errors, SERVER_BATCH)
        turn = 0
        for repeat in range(args.repeats):
            for case in cases:
                names = list(procs)
                shift = turn % len(names)
                for system in names[shift:] + names[:shift]:
                    row = infill(f"http://127.0.0.1:{procs[system].port}", case, sampler)
                    rows.append({"case": case["id"], "repeat": repeat, "system": system, "hole": case["hole"], **row})
                    print(f"  {case['id']:<22} {system:<20} {row.get('e2e_s')} s prompt {row.get('prompt_n')}"
                          f"+{row.get('cache_n')} cached, {row.get('predicted_n')} tokens {row.get('decode_tok_s')} "
                          f"tok/s drafts {row.get('draft_n_accepted')}/{row.get('draft_n')} "
                          f"{row.get('error', '')}", flush=True)  # fmt: skip
                turn += 1
    summary = summarize(rows, systems)
    out = args.out or ROOT / "benchmarks" / "results" / f"fim-{Path(name).stem}.json"
    report = {
        "benchmark": "fim", "model": name, "model_path": str(model), "repeats": args.repeats,
        "temperature": args.temperature, "threads": args.threads, "ctx": args.ctx, "systems": systems,
        "workload": {"modules": MODULES[: args.files], "cursors_per_file": args.cursors, "prefix_lines": PREFIX_LINES,
                     "suffix_lines": SUFFIX_LINES, "extra_lines": EXTRA_LINES, "n_predict": N_PREDICT,
                     "server_batch": SERVER_BATCH},
        "machine": machine(), "versions": versions(binary), "errors": errors, "summary": summary, "rows": rows,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in summary.items() if k != "per_system"}, indent=1))
    for s, v in summary["per_system"].items():
        print(f"  {s:<20} p50 {v['p50_s']} s p95 {v['p95_s']} s prefill {v['mean_prompt_ms']} ms "
              f"decode {v['mean_decode_tok_s']} tok/s drafts {v['drafts_accepted']}")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

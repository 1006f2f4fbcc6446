"""Decode and prefill speed of localspec's methods against llama-cpp-python's own prompt-lookup decoding,
on a chat workload (format: ../shared/bench/README.md). Writes JSON; prints a table per case kind.

    python benchmarks/workload.py --model PATH.gguf --out benchmarks/results/NAME.json

Every method runs every case in the same process, greedy, with the method order rotated per case to
spread drift. Timing is measured the same way for all methods, outside them: prefill = time to the first
emitted token (TTFT); decode tok/s = tokens after the first step / time after the first step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.bench.run import load_cases  # noqa: E402
from localspec.chat.conversation import Conversation  # noqa: E402
from localspec.drafters.table import DrafterSetup  # noqa: E402
from localspec.engine.loop import stream_generate  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)
DEFAULT_WORKLOAD = Path(__file__).resolve().parents[2] / "shared" / "bench" / "workload.jsonl"


def timed(tokens_iter):
    """Consume (n_tokens_emitted) chunks; return (ttft, decode_s, first_chunk, total tokens)."""
    start = time.perf_counter()
    first_at, first_n, total = None, 0, 0
    for n in tokens_iter:
        total += n
        if first_at is None:
            first_at, first_n = time.perf_counter(), n
    end = time.perf_counter()
    return first_at - start, end - first_at, first_n, total


def run_ours(backend, drafter, prompt, max_tokens, k, out_tokens):
    backend.truncate(0)  # measure a full prefill, as for the peer
    stats = {}

    def chunks():
        for event in stream_generate(backend, drafter, prompt, GREEDY, max_tokens=max_tokens, draft_tokens=k):
            out_tokens.extend(event.tokens)
            stats["s"] = event.stats
            yield len(event.tokens)

    ttft, decode_s, first_n, total = timed(chunks())
    s = stats["s"]
    return (
        ttft,
        decode_s,
        first_n,
        total,
        {
            "acceptance_rate": s.acceptance_rate,
            "mean_accepted_length": round(s.mean_accepted_length, 3),
            "engine_decode_tok_s": round(s.decode_tps, 2),
            "engine_prefill_tok_s": round(s.prefill_tps, 2),
            "draft_s": round(s.draft_s, 3),
            "verify_s": round(s.verify_s, 3),
            "drafter": s.drafter,
        },
    )


def run_peer(llama, prompt, max_tokens, eog, out_tokens):
    llama.reset()

    def chunks():
        for token in llama.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            out_tokens.append(token)
            yield 1
            if token in eog or len(out_tokens) >= max_tokens:
                return

    ttft, decode_s, first_n, total = timed(chunks())
    return ttft, decode_s, first_n, total, {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    ap.add_argument("--methods", default="none,ngram,peer")
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--ngram-min", type=int, default=2)
    ap.add_argument("--ngram-max", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--cases", help="comma-separated case ids (default: all)")
    ap.add_argument(
        "--passes",
        type=int,
        default=1,
        help="run the workload this many times; drafters keep their state (suffix: warm global tree)",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    name, path = resolve_model(args.model)
    cases = load_cases(str(args.workload))
    if args.cases:
        cases = [c for c in cases if c["id"] in args.cases.split(",")]
    methods = args.methods.split(",")
    # the suffix cache of a benchmark lives in a fresh folder: it starts cold and leaves the user's alone
    cache_dir = tempfile.mkdtemp(prefix="localspec-bench-suffix-")
    drafter_options = (
        DrafterSetup()
        .with_options("ngram", min=args.ngram_min, max=args.ngram_max)
        .with_options("suffix", cache_dir=cache_dir)
    )
    backend = LlamaCppBackend(path, n_ctx=args.ctx, n_threads=args.threads)
    llama = None
    if "peer" in methods:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        llama = Llama(
            str(path),
            n_ctx=args.ctx,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            logits_all=True,
            verbose=False,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
        )

    drafters = {m: drafter_options.build(m, backend) for m in methods if m != "peer"}
    results = []
    for i, (pass_no, case) in enumerate((p, c) for p in range(1, args.passes + 1) for c in cases):
        conv = Conversation()
        conv.messages = case["messages"]
        prompt = conv.prompt_tokens(backend, reserve=case["max_tokens"])
        # the peer keeps nothing between requests, so one pass of it is enough
        in_pass = [m for m in methods if m != "peer" or pass_no == 1]
        order = in_pass[i % len(in_pass) :] + in_pass[: i % len(in_pass)]
        row = {"id": case["id"], "kind": case["kind"], "pass": pass_no, "prompt_tokens": len(prompt), "methods": {}}
        outputs = {}
        for method in order:
            toks: list[int] = []
            if method == "peer":
                ttft, dec, first_n, total, extra = run_peer(
                    llama, prompt, case["max_tokens"], backend.tokenizer.eog_tokens, toks
                )
            else:
                ttft, dec, first_n, total, extra = run_ours(
                    backend, drafters[method], prompt, case["max_tokens"], args.draft_tokens, toks
                )
            outputs[method] = toks
            row["methods"][method] = {
                "tokens": total,
                "ttft_s": round(ttft, 4),
                "prefill_tok_s": round(len(prompt) / ttft, 1),
                "decode_s": round(dec, 4),
                "decode_tok_s": round((total - first_n) / dec, 2) if dec > 0 else None,
                **extra,
            }
        for method in in_pass:
            row["methods"][method]["same_as_plain"] = outputs[method] == outputs.get("none", outputs[method])
        base = row["methods"].get("none", {}).get("decode_tok_s")
        for method in in_pass:
            m = row["methods"][method]
            m["ratio_to_plain"] = round(m["decode_tok_s"] / base, 3) if base and m["decode_tok_s"] else None
        results.append(row)
        print(
            json.dumps(
                {
                    "case": case["id"],
                    "pass": pass_no,
                    **{k: (v["decode_tok_s"], v["ratio_to_plain"]) for k, v in row["methods"].items()},
                }
            ),
            flush=True,
        )

    by_kind = {
        f"pass {p}": summarize([r for r in results if r["pass"] == p], methods) for p in range(1, args.passes + 1)
    }
    report = {
        "model": name,
        "model_path": str(path),
        "machine": platform.processor() or platform.machine(),
        "threads": args.threads,
        "draft_tokens": args.draft_tokens,
        "passes": args.passes,
        "drafter_options": {"ngram_min": args.ngram_min, "ngram_max": args.ngram_max},
        "date": time.strftime("%Y-%m-%d"),
        "timing": "prefill = time to first token; decode = tokens after the first step / time after it",
        "by_kind": by_kind,
        "cases": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    for name, table in by_kind.items():
        print(name)
        print_table(table, methods)
    backend.close()


def summarize(results, methods):
    kinds = {}
    for row in results:
        kinds.setdefault(row["kind"], []).append(row)
    out = {}
    for kind, rows in kinds.items():
        out[kind] = {}
        for method in methods:
            ms = [r["methods"][method] for r in rows if method in r["methods"]]
            if not ms:
                continue
            dec_tokens = sum(m["tokens"] for m in ms)
            dec_s = sum(m["decode_s"] for m in ms)
            ratios = [m["ratio_to_plain"] for m in ms if m["ratio_to_plain"]]
            out[kind][method] = {
                "decode_tok_s": round(dec_tokens / dec_s, 2) if dec_s else None,
                "prefill_tok_s": round(sum(r["prompt_tokens"] for r in rows) / sum(m["ttft_s"] for m in ms), 1),
                "mean_ratio_to_plain": round(sum(ratios) / len(ratios), 3) if ratios else None,
                "all_same_as_plain": all(m["same_as_plain"] for m in ms),
            }
    return out


def print_table(by_kind, methods):
    print(f"{'kind':<12}" + "".join(f"{m + ' dec tok/s':>18}{'x plain':>9}{'prefill':>9}" for m in methods))
    for kind, ms in by_kind.items():
        ms = {m: ms.get(m, {"decode_tok_s": 0, "mean_ratio_to_plain": 0, "prefill_tok_s": 0}) for m in methods}
        print(
            f"{kind:<12}"
            + "".join(
                f"{ms[m]['decode_tok_s'] or 0:>18.1f}{ms[m]['mean_ratio_to_plain'] or 0:>9.2f}"
                f"{ms[m]['prefill_tok_s']:>9.0f}"
                for m in methods
            )
        )


if __name__ == "__main__":
    main()

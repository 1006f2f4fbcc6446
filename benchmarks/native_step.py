"""Issue 14 ("native step"): localspec's plain decode step against llama-bench's tg, same llama.cpp source.

    .venv/bin/python benchmarks/native_step.py                          # 5 rounds, 128 tokens at depth 256
    .venv/bin/python benchmarks/native_step.py --rounds 1 --tokens 16   # smoke test

Every round runs one sample of each variant, each in its own process, in an order that rotates per round:
  llama-bench  the peer build's `llama-bench -p 0 -n TOKENS -d DEPTH` (tg at depth, its own timing)
  localspec    LlamaCppBackend.forward([tok]) + argmax, greedy, after prefilling DEPTH random tokens
               (the wheel's libllama); per-step time by perf_counter, prefill excluded
  engine       the whole generate loop as `localspec run --drafter none` runs it (stream_generate with
               plain decoding: controller, detokenizer, stop strings, stats), end of turn disabled
  peer-lib     the same as localspec on the peer build's libllama (LLAMA_CPP_LIB_PATH): build vs calling pattern
  threadpool   localspec plus a persistent ggml threadpool attached as llama-bench does (poll = --poll)
  perf         localspec with no_perf=False: llama_perf_context's t_eval_ms / n_eval is the time inside
               llama_decode; the rest of a step is Python, ctypes, the logits copy and the argmax
n_ctx defaults to llama-bench's own (n_gen + n_depth; llama.cpp pads both to 256), n_batch = n_ubatch =
min(512, n_ctx) on both sides. --fa other than auto (the llama.cpp default, which localspec keeps) and the
perf variant rebuild the backend's context with the same parameters as LlamaCppBackend.__init__ plus the
change ("ctx_rebuilt" in the output); the localspec and peer-lib variants with --fa auto are untouched.
Writes per-variant per-round tok/s, median, IQR, ratio of medians to llama-bench and the settings to --out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PEER_BIN = Path("/root/.cache/localspec-peer/0.3.36/build/bin")
VARIANTS = ("llama-bench", "localspec", "engine", "peer-lib", "threadpool", "perf")
FA_TYPES = {"auto": -1, "off": 0, "on": 1}  # LLAMA_FLASH_ATTN_TYPE_*


class ThreadpoolParams(ctypes.Structure):  # struct ggml_threadpool_params (ggml.h)
    _fields_ = [
        ("cpumask", ctypes.c_bool * 512),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


def loaded_libs() -> dict[str, str]:
    """The llama/ggml/OpenMP libraries this process really mapped, by name: libllama -> path."""
    libs = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        name = Path(path).name.split(".so")[0]
        if ".so" in path and name in ("libllama", "libggml", "libggml-base", "libggml-cpu", "libgomp"):
            libs[name] = os.path.realpath(path)
    return libs


def worker(a) -> dict:
    """One measured greedy decode run of variant a.worker; returns its figures (printed as JSON)."""
    import numpy as np

    from localspec.backends.llama_cpp import backend as lc
    from localspec.backends.llama_cpp.capi import load_lib

    lib = load_lib()
    raw = lib.llama_cpp._lib  # the ctypes CDLL of libllama
    log_lines: list[str] = []

    @lib.llama_log_callback
    def log(level, text, user_data):
        log_lines.append(text.decode("utf-8", errors="replace").rstrip())

    lib.llama_log_set(log, ctypes.c_void_p(0))
    b = lc.LlamaCppBackend(a.model, n_ctx=a.ctx, n_threads=a.threads)
    rebuilt = a.fa != "auto" or a.worker == "perf"
    if rebuilt:  # same parameters as LlamaCppBackend.__init__, plus flash attention / perf timings
        cp = lib.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = b.n_ctx, b.n_batch, b.n_batch, 1
        cp.n_threads = cp.n_threads_batch = b.n_threads
        cp.no_perf = a.worker != "perf"
        cp.flash_attn_type = FA_TYPES[a.fa]
        lib.llama_free(b._ctx)
        b._ctx = lib.llama_init_from_model(b._model, cp)
        b._mem = lib.llama_get_memory(b._ctx)
    libs, pool = loaded_libs(), None
    if a.worker == "threadpool":  # as llama-bench: ggml_threadpool_new + llama_attach_threadpool(ctx, tp, NULL)
        base, cpu = ctypes.CDLL(libs["libggml-base"]), ctypes.CDLL(libs["libggml-cpu"])
        tpp = ThreadpoolParams()
        base.ggml_threadpool_params_init(ctypes.byref(tpp), a.threads)
        tpp.poll = a.poll
        cpu.ggml_threadpool_new.restype = ctypes.c_void_p
        pool = cpu.ggml_threadpool_new(ctypes.byref(tpp))
        raw.llama_attach_threadpool.argtypes = [ctypes.c_void_p] * 3
        raw.llama_attach_threadpool(b._ctx, pool, None)

    rng = np.random.default_rng(a.seed)
    prompt = [int(t) for t in rng.integers(0, b.vocab_size, a.depth)]
    if b.tokenizer.add_bos and b.tokenizer.bos_token is not None:
        prompt[0] = b.tokenizer.bos_token
    b.forward([prompt[0]])  # warm-up step, as llama-bench's one-token gen warm-up
    b.truncate(0)
    if a.worker == "engine":
        result = engine_run(b, prompt, a.tokens, libs)
        b.close()  # while `log` is alive: llama.cpp logs as it frees the context
        return result
    b.prefill(prompt)
    lib.llama_synchronize(b._ctx)  # book the prefill before the reset, so n_eval counts the timed steps only
    lib.llama_perf_context_reset(b._ctx)
    tok, steps, forwards = int(rng.integers(0, b.vocab_size)), [], []
    t_prev = time.perf_counter()
    for _ in range(a.tokens):
        out = b.forward([tok])
        t_mid = time.perf_counter()
        tok = int(np.argmax(out.logits[-1]))
        t_end = time.perf_counter()
        steps.append(t_end - t_prev)
        forwards.append(t_mid - t_prev)
        t_prev = t_end
    perf = lib.llama_perf_context(b._ctx)
    result = {
        "tok_s": a.tokens / sum(steps),
        "step_ms": 1e3 * statistics.mean(steps),
        "step_ms_median": 1e3 * statistics.median(steps),
        "forward_ms": 1e3 * statistics.mean(forwards),
        "argmax_ms": 1e3 * (statistics.mean(steps) - statistics.mean(forwards)),
        "n_eval": perf.n_eval,
        "n_reused": perf.n_reused,
        "eval_ms": perf.t_eval_ms / perf.n_eval if a.worker == "perf" else None,
        "n_ctx": lib.llama_n_ctx(b._ctx),
        "n_batch": lib.llama_n_batch(b._ctx),
        "ctx_rebuilt": rebuilt,
        "threadpool": pool is not None,
        "libs": libs,
        "system_info": lib.llama_print_system_info().decode(errors="replace").strip(),
        "fa_log": [line for line in log_lines if "flash_attn " in line or "Flash Attention" in line],
    }
    if pool is not None:
        raw.llama_detach_threadpool.argtypes = [ctypes.c_void_p]
        raw.llama_detach_threadpool(b._ctx)
    b.close()
    if pool is not None:
        cpu.ggml_threadpool_free.argtypes = [ctypes.c_void_p]
        cpu.ggml_threadpool_free(pool)
    return result


def engine_run(b, prompt: list[int], tokens: int, libs: dict) -> dict:
    """The decode figures of one plain turn through the engine, prefill excluded."""
    from localspec.drafters.base import NoDrafter
    from localspec.engine.loop import generate
    from localspec.sampling import SamplingParams

    b.tokenizer.eog_tokens = frozenset()  # random text may hit end-of-turn early: always decode `tokens`
    stats = generate(b, NoDrafter(), prompt, SamplingParams(temperature=0), max_tokens=tokens, draft_tokens=1).stats
    step = stats.decode_s / stats.steps
    return {
        "tok_s": stats.decode_tps,
        "step_ms": 1e3 * step,
        "step_ms_median": None,
        "forward_ms": None,
        "argmax_ms": None,
        "n_eval": None,
        "n_reused": None,
        "eval_ms": None,
        "n_ctx": b.n_ctx,
        "n_batch": b.n_batch,
        "ctx_rebuilt": False,
        "threadpool": False,
        "libs": libs,
        "system_info": None,
        "fa_log": [],
    }


def run_localspec(a, variant: str) -> dict:
    env = dict(os.environ)
    env.pop("LLAMA_CPP_LIB_PATH", None)
    if variant == "peer-lib":
        env["LLAMA_CPP_LIB_PATH"] = str(a.peer_bin)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        variant,
        "--model",
        str(a.model),
        "--tokens",
        str(a.tokens),
        "--depth",
        str(a.depth),
        "--threads",
        str(a.threads),
        "--fa",
        a.fa,
        "--ctx",
        str(a.ctx),
        "--poll",
        str(a.poll),
        "--seed",
        str(a.seed),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_bench(a) -> dict:
    batch = min(512, a.ctx)
    cmd = [
        str(a.peer_bin / "llama-bench"),
        "-m",
        str(a.model),
        "-p",
        "0",
        "-n",
        str(a.tokens),
        "-d",
        str(a.depth),
        "-t",
        str(a.threads),
        "-fa",
        a.fa,
        "-b",
        str(batch),
        "-ub",
        str(batch),
        "--poll",
        str(a.poll),
        "-r",
        str(a.bench_reps),
        "-o",
        "json",
    ]
    env = dict(os.environ, LD_LIBRARY_PATH=str(a.peer_bin))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    r = json.loads(proc.stdout)[0]
    keep = (
        "build_commit",
        "n_batch",
        "n_ubatch",
        "n_threads",
        "poll",
        "flash_attn",
        "repack",
        "avg_ts",
        "stddev_ts",
        "samples_ts",
    )
    return {
        "tok_s": statistics.median(r["samples_ts"]),
        "step_ms": 1e3 / statistics.median(r["samples_ts"]),
        "argv": cmd,
        **{k: r.get(k) for k in keep},
    }


def spread(values: list[float]) -> dict:
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (values[0],) * 3
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "iqr": q3 - q1}


def summarise(runs: dict[str, list[dict]]) -> dict:
    out = {}
    base = statistics.median(r["tok_s"] for r in runs["llama-bench"]) if runs.get("llama-bench") else None
    for v, rs in runs.items():
        s = {"tok_s": [r["tok_s"] for r in rs], **spread([r["tok_s"] for r in rs])}
        s["ratio_to_llama_bench"] = s["median"] / base if base else None
        for key in ("step_ms", "forward_ms", "argmax_ms", "eval_ms"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                s[key + "_median"] = statistics.median(vals)
        if s.get("eval_ms_median") is not None:
            s["outside_decode_ms_median"] = s["step_ms_median"] - s["eval_ms_median"]
        out[v] = s
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF path or alias (default: the smollm2-135m alias)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128, help="generated tokens per sample (llama-bench -n)")
    ap.add_argument("--depth", type=int, default=256, help="prompt tokens before the timed decode (llama-bench -d)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fa", choices=sorted(FA_TYPES), default="auto", help="flash attention, both sides")
    ap.add_argument("--ctx", type=int, default=0, help="localspec n_ctx (default: depth + tokens, as llama-bench)")
    ap.add_argument("--poll", type=int, default=50, help="threadpool poll level (llama-bench's default 50)")
    ap.add_argument("--bench-reps", type=int, default=1, help="llama-bench -r per round")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list from " + ",".join(VARIANTS))
    ap.add_argument("--peer-bin", type=Path, default=PEER_BIN)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/native_step.json")
    ap.add_argument("--worker", choices=VARIANTS[1:], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return 0
    if a.model is None or not Path(a.model).exists():
        from localspec.models.registry import resolve_model

        a.model = resolve_model(a.model)[1]
    a.ctx = a.ctx or a.depth + a.tokens
    variants = [v for v in a.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    load = [os.getloadavg()]
    if load[0][0] > 0.5:
        print(
            f"warning: load average {load[0][0]:.2f}; with OpenMP and threads = cores, other work on the "
            f"machine stalls every barrier (seen: seconds per step) - use an idle machine",
            file=sys.stderr,
        )
    for r in range(a.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            res = run_bench(a) if v == "llama-bench" else run_localspec(a, v)
            runs[v].append(res)
            print(f"round {r + 1}/{a.rounds} {v:<12} {res['tok_s']:7.1f} tok/s", file=sys.stderr)
    load.append(os.getloadavg())
    summary = summarise(runs)
    first = next((rs[0] for v, rs in runs.items() if v != "llama-bench"), {})
    settings = {
        "model": str(a.model),
        "rounds": a.rounds,
        "tokens": a.tokens,
        "depth": a.depth,
        "threads": a.threads,
        "fa": a.fa,
        "n_ctx_requested": a.ctx,
        "n_ctx": first.get("n_ctx"),
        "n_batch": first.get("n_batch"),
        "llama_bench_n_ctx": f"{a.tokens + a.depth} (n_gen + n_depth, padded to 256 by llama.cpp)",
        "poll": a.poll,
        "bench_reps": a.bench_reps,
        "peer_bin": str(a.peer_bin),
        "variant_order": "rotating",
        "libs": {v: rs[0].get("libs") for v, rs in runs.items() if v != "llama-bench"},
        "system_info": {v: rs[0].get("system_info") for v, rs in runs.items() if v != "llama-bench"},
        "fa_log": first.get("fa_log"),
        "llama_bench": runs["llama-bench"][0] if runs.get("llama-bench") else None,
        "cpu_count": os.cpu_count(),
        "loadavg_start_end": load,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"settings": settings, "summary": summary, "runs": runs}, indent=1) + "\n")
    print(
        f"{Path(a.model).name} · depth {a.depth} · {a.tokens} tokens · {a.threads} threads · fa {a.fa} · "
        f"n_ctx {settings['n_ctx']} · {a.rounds} rounds · load {load[0][0]:.2f}->{load[1][0]:.2f}"
    )
    print(
        f"{'variant':<12}{'median':>9}{'IQR':>7}{'x bench':>9}{'step ms':>9}{'forward':>9}{'argmax':>8}"
        f"{'decode':>8}{'outside':>9}{'reused':>8}"
    )
    for v, s in summary.items():
        cells = [
            s.get(k)
            for k in (
                "step_ms_median",
                "forward_ms_median",
                "argmax_ms_median",
                "eval_ms_median",
                "outside_decode_ms_median",
            )
        ]
        reused = runs[v][-1].get("n_reused")
        print(
            f"{v:<12}{s['median']:>9.1f}{s['iqr']:>7.1f}{s['ratio_to_llama_bench'] or 0:>9.3f}"
            + "".join(
                f"{c:>{w}.3f}" if c is not None else f"{'-':>{w}}" for c, w in zip(cells, (9, 9, 8, 8, 9), strict=False)
            )
            + f"{reused if reused is not None else '-':>8}"
        )
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

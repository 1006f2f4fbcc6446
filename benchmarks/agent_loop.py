"""An agent loop over the OpenAI-compatible HTTP API: localspec's server against llama.cpp's own llama-server.

A scripted coding agent (no network beyond loopback) holds one growing conversation per system: round 1 is a
system prompt and a source file (benchmarks/data/agent_loop/inventory.py.txt) with an edit request ("add type
hints and a docstring to restock, reply with the whole file"); every later round appends the system's own
answer, then a tool-result style user message (test output, `cat` of the tests, a diff) and the next edit
request. Requests go through the real `openai` client, streamed, with the same sampler settings and seed for
every system (--temperature, default 0, and --seed; localspec's sampler defaults, one source:
SamplingParams.server_fields), so TTFT is the time to the first content chunk and the final chunk's
llama-server-style `timings` give prefilled tokens (prompt_n), decode tok/s (predicted_per_second) and draft_n /
draft_n_accepted.

Every system is a server process of its own, started and stopped by PID (localspec.bench.peer), all with the same
context and threads and all up at once: localspec --drafter none / suffix / ngram with the default settings
(each with its own temporary cache folder: an empty suffix cache, the measured costs and guard copied from
yours; the -exact systems add --exact), llama-server plain and --spec-type ngram-mod (its default cache_prompt,
so it reuses the conversation's prefix like localspec). The systems take turns round by round, in a rotating
order (these machines drift), and the whole conversation is held --repeats times (each repeat a new one). The
summary gives, per system, the median over repeats of mean decode tok/s and end-to-end latency over rounds 2+,
the ratio to the same family's plain server, and whether its answers equal that plain server's (informational).

    .venv/bin/python benchmarks/agent_loop.py [--model PATH.gguf] [--rounds 5] [--max-tokens 400] [--repeats 3]
        [--temperature 0] [--seed 0] [--systems localspec-plain,localspec-suffix,...] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import mean, median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

import localspec  # noqa: E402
from localspec.bench.peer import LlamaServer, PeerError, find_llama_server, server_version  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402
from localspec.places import cache_root  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "agent_loop"
DEFAULT_MODEL = "/root/.cache/localspec-bench-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PEER_BIN = Path("/root/.cache/localspec-peer/0.3.36/build/bin")
SYSTEMS = {  # name -> (family, localspec serve flags | llama-server spec type)
    "localspec-plain": ("localspec", ["--drafter", "none"]),
    "localspec-suffix": ("localspec", ["--drafter", "suffix"]),
    "localspec-ngram": ("localspec", ["--drafter", "ngram"]),
    # bit-identical greedy output: batch-invariant kernels on unrepacked weights (slower)
    "localspec-suffix-exact": ("localspec", ["--drafter", "suffix", "--exact"]),
    "localspec-ngram-exact": ("localspec", ["--drafter", "ngram", "--exact"]),
    "server-plain": ("server", "plain"),
    "server-ngram-mod": ("server", "ngram-mod"),
}
PLAIN = {"localspec": "localspec-plain", "server": "server-plain"}
SYSTEM_PROMPT = (
    "You are a coding agent working in a Python repository. You see files and tool output in the user's "
    "messages. When asked for a file, reply with the complete file in one ```python code block and nothing else."
)
TESTS_FAIL = """$ pytest -q tests/test_inventory.py
..F.
FAILED tests/test_inventory.py::test_restock_orders - AssertionError: assert {'C3': 8, 'A1': 16} == ...
1 failed, 3 passed in 0.04s"""
DIFF = """$ git diff --stat
 inventory.py | 31 +++++++++++++++++++++----------
 1 file changed, 21 insertions(+), 10 deletions(-)"""
TESTS_PASS = "$ pytest -q\n....\n4 passed in 0.03s"


def script() -> list[str]:
    """The user's message of each round (the rounds after the last repeat the last two)."""
    source, tests = ((DATA / name).read_text() for name in ("inventory.py.txt", "test_inventory.py.txt"))
    return [
        f"Here is `inventory.py`:\n```python\n{source}```\nAdd type hints and a docstring to the function "
        "`restock`. Reply with the whole file.",
        f"I ran the tests:\n```\n{TESTS_FAIL}\n```\nNow rename `low_stock` to `items_below_threshold` everywhere "
        "in the file. Reply with the whole file.",
        f"$ cat tests/test_inventory.py\n```python\n{tests}```\nUpdate these tests for the rename, and add a test "
        "that `by_tag` sorts by name. Reply with the whole test file.",
        f"```\n{DIFF}\n```\nIn `inventory.py`, add a method `remove(self, sku)` to `Inventory` that raises "
        "KeyError with a clear message when the sku is unknown. Reply with the whole `inventory.py`.",
        f"```\n{TESTS_PASS}\n```\nFinally, log every adjustment with `log.info` in `Inventory.adjust` and give "
        "`load_csv` and `save_report` type hints. Reply with the whole `inventory.py`.",
    ]


class LocalspecServer(LlamaServer):
    """`localspec serve` started, health-checked and stopped the way localspec.bench.peer handles llama-server."""

    def __init__(self, model: Path, flags: list[str], cache: Path, **kw) -> None:
        super().__init__(Path(sys.executable), model, "plain", **kw)
        self.flags, self.cache = flags, cache

    def argv(self, port: int) -> list[str]:
        os.environ["LOCALSPEC_CACHE"] = str(self.cache)  # read by the child started right after this call
        return [sys.executable, "-m", "localspec", "serve", "--model", str(self.model), "--ctx", str(self.n_ctx),
                "--threads", str(self.threads), "--host", "127.0.0.1", "--port", str(port), *self.flags]  # fmt: skip


def own_cache(folder: Path) -> Path:
    """A LOCALSPEC_CACHE for one localspec server: no suffix answers, your measured costs and guard."""
    folder.mkdir(parents=True)
    for kind in ("costs", "guard"):
        if (cache_root() / kind).is_dir():
            shutil.copytree(cache_root() / kind, folder / kind)
    return folder


def ask(client: openai.OpenAI, model: str, messages: list[dict], max_tokens: int, sampler: dict) -> dict:
    """One streamed request with the sampler settings (and seed) every system gets: the answer, TTFT,
    end-to-end latency and the server's figures."""
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, extra_body=sampler,
    )  # fmt: skip
    ttft, parts, timings, usage, finish, calls = None, [], {}, None, None, {}
    for chunk in stream:
        timings = (chunk.model_extra or {}).get("timings") or timings
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.delta and (choice.delta.content or choice.delta.tool_calls):
                ttft = ttft if ttft is not None else time.perf_counter() - start
                parts.append(choice.delta.content or "")
            for call in (choice.delta.tool_calls or []) if choice.delta else []:  # streamed whole or in parts
                got = calls.setdefault(call.index, {"name": "", "arguments": ""})
                got["name"] += (call.function and call.function.name) or ""
                got["arguments"] += (call.function and call.function.arguments) or ""
            finish = choice.finish_reason or finish
    e2e = time.perf_counter() - start
    prompt = usage.prompt_tokens if usage else timings.get("prompt_n", 0) + timings.get("cache_n", 0)
    return {
        "prompt_tokens": prompt,
        "prefilled_tokens": timings.get("prompt_n"),
        "generated_tokens": usage.completion_tokens if usage else timings.get("predicted_n"),
        "ttft_s": round(ttft, 4) if ttft is not None else None,
        "decode_tok_s": round(timings["predicted_per_second"], 2) if "predicted_per_second" in timings else None,
        "e2e_s": round(e2e, 4),
        "draft_n": timings.get("draft_n", 0),
        "draft_n_accepted": timings.get("draft_n_accepted", 0),
        "finish_reason": finish,
        "timings_missing": not timings,
        "answer": "".join(parts),
        **({"calls": [calls[i] for i in sorted(calls)]} if calls else {}),
    }


class Conversation:
    """One system's side of a repeat: its client and the conversation it holds."""

    def __init__(self, proc: LlamaServer) -> None:
        self.client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{proc.port}/v1", api_key="none", max_retries=0, timeout=3600
        )
        self.model = self.client.models.list().data[0].id
        self.messages, self.rows = [{"role": "system", "content": SYSTEM_PROMPT}], []

    def round(self, i: int, max_tokens: int, sampler: dict) -> dict:
        turns = script()
        self.messages.append({"role": "user", "content": turns[i if i < len(turns) else 3 + (i - 3) % 2]})
        row = {"round": i + 1, **ask(self.client, self.model, self.messages, max_tokens, sampler)}
        self.messages.append({"role": "assistant", "content": row["answer"]})
        self.rows.append(row)
        return row


def run_repeat(procs: dict, repeat: int, rounds: int, max_tokens: int, sampler: dict) -> dict[str, list[dict]]:
    """Every system holds a new conversation; round by round they take turns, the order rotating."""
    talks = {name: Conversation(proc) for name, proc in procs.items()}
    names = list(talks)
    for i in range(rounds):
        shift = (repeat * rounds + i) % len(names)
        for name in names[shift:] + names[:shift]:
            row = talks[name].round(i, max_tokens, {**sampler, "seed": sampler["seed"] + repeat * rounds + i})
            print(f"  r{repeat} round {row['round']} {name}: {row['prompt_tokens']} prompt / {row['prefilled_tokens']} "
                  f"prefilled, {row['generated_tokens']} tokens, ttft {row['ttft_s']} s, {row['decode_tok_s']} tok/s, "
                  f"e2e {row['e2e_s']} s, drafts {row['draft_n_accepted']}/{row['draft_n']}", flush=True)  # fmt: skip
    return {name: talk.rows for name, talk in talks.items()}


def summarize_repeat(runs: dict) -> dict:
    summary = {}
    for name, rounds in runs.items():
        later = rounds[1:] or rounds
        summary[name] = {
            "decode_tok_s_r2plus": mean(r["decode_tok_s"] or 0 for r in later),
            "e2e_s_r2plus": mean(r["e2e_s"] for r in later),
            "ttft_s_r2plus": mean(r["ttft_s"] or 0 for r in later),
            "prefilled_r2plus": mean(r["prefilled_tokens"] or 0 for r in later),
            "acceptance": sum(r["draft_n_accepted"] for r in rounds) / max(1, sum(r["draft_n"] for r in rounds)),
        }
    for name, s in summary.items():
        plain = PLAIN[SYSTEMS[name][0]]
        base = summary.get(plain)
        s["decode_ratio_to_plain"] = s["decode_tok_s_r2plus"] / base["decode_tok_s_r2plus"] if base else None
        s["e2e_speedup_to_plain"] = base["e2e_s_r2plus"] / s["e2e_s_r2plus"] if base else None
        if plain in runs:
            same = [a["answer"] == b["answer"] for a, b in zip(runs[name], runs[plain], strict=False)]
            s["answers_match_plain"] = all(same)
    return summary


def summarize(repeats: list[dict]) -> dict:
    """Per system, the median over repeats of each repeat's figures, and those figures per repeat."""
    per = [summarize_repeat(runs) for runs in repeats]
    out = {}
    for name in per[0] if per else {}:
        rows = [p[name] for p in per if name in p]
        out[name] = {
            key: (median(r[key] for r in rows) if isinstance(rows[0][key], (int, float)) and not isinstance(
                rows[0][key], bool) else all(r[key] for r in rows) if isinstance(rows[0][key], bool) else None)
            for key in rows[0]
        }  # fmt: skip
        out[name]["per_repeat"] = rows
    return out


def start_systems(
    systems: dict,
    model: Path,
    binary: Path | None,
    binary_error: str | None,
    args,
    tmp: Path,
    stack: ExitStack,
    errors: dict,
    server_batch: int = 512,
    n_parallel: int = 1,
) -> dict:
    """Every system ({name: (family, localspec serve flags | llama-server spec type)}) started and entered into
    ``stack``, all with ``args.ctx`` and ``args.threads`` (llama-server with ``server_batch`` as -b and -ub and
    ``n_parallel`` slots of ``args.ctx`` each); a
    system that is skipped or fails to start is said in ``errors``."""
    procs = {}
    for system, (family, how) in systems.items():
        if family == "server" and binary is None:
            errors[system] = f"skipped: {binary_error}"
            print(f"{system}: {errors[system]}", flush=True)
            continue
        kw = {"n_ctx": args.ctx, "threads": args.threads, "log_path": tmp / f"{system}.log"}
        if family == "server":
            proc = LlamaServer(binary, model, how, n_batch=server_batch, n_parallel=n_parallel, **kw)
        else:
            proc = LocalspecServer(model, how, own_cache(tmp / f"{system}-cache"), **kw)
        try:
            procs[system] = stack.enter_context(proc)
        except (PeerError, OSError) as exc:
            errors[system] = f"{type(exc).__name__}: {exc}; log: {proc.log_tail()}"
            print(f"{system} failed to start: {errors[system]}", flush=True)
    os.environ.pop("LOCALSPEC_CACHE", None)
    return procs


def machine() -> dict:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return {"cpu_count": os.cpu_count(), "cpu": cpu, "platform": platform.platform(), "python": sys.version.split()[0]}


def versions(binary: Path | None) -> dict:
    import llama_cpp

    return {"localspec": localspec.__version__, "openai": openai.__version__, "llama_cpp_python": llama_cpp.__version__,
            "llama_server": server_version(binary) if binary else None}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a .gguf path or a models.toml name")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--temperature", type=float, default=0.0, help="every system's (localspec's sampler defaults)")
    ap.add_argument("--seed", type=int, default=0, help="the first request's seed (every system the same)")
    ap.add_argument("--systems", default=",".join(s for s in SYSTEMS if not s.endswith("exact")))
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=str(PEER_BIN) if PEER_BIN.is_dir() else None, help="binary or folder")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    sampler = {**SamplingParams(temperature=args.temperature).server_fields(), "seed": args.seed}
    name, model = resolve_model(args.model)
    out = args.out or ROOT / "benchmarks" / "results" / f"agent-loop-{Path(name).stem}.json"
    try:
        binary, binary_error = find_llama_server(args.llama_server), None
    except PeerError as exc:
        binary, binary_error = None, str(exc)
    repeats, errors = [], {}
    with tempfile.TemporaryDirectory(prefix="agent-loop-") as tmp, ExitStack() as stack:
        chosen = {system: SYSTEMS[system] for system in systems}
        procs = start_systems(chosen, model, binary, binary_error, args, Path(tmp), stack, errors)
        for r in range(args.repeats):
            try:
                repeats.append(run_repeat(procs, r, args.rounds, args.max_tokens, sampler))
            except (PeerError, openai.OpenAIError, OSError) as exc:
                errors[f"repeat {r}"] = f"{type(exc).__name__}: {exc}"
                print(f"  failed: {errors[f'repeat {r}']}", flush=True)
    summary = summarize(repeats)
    report = {
        "benchmark": "agent_loop", "model": name, "model_path": str(model), "rounds": args.rounds,
        "repeats": args.repeats, "sampler": sampler, "max_tokens": args.max_tokens, "ctx": args.ctx,
        "threads": args.threads, "machine": machine(), "versions": versions(binary),
        "llama_server": str(binary) if binary else None, "errors": errors, "summary": summary, "runs": repeats,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print_table(summary)
    print(f"wrote {out}")
    return 0


def print_table(summary: dict) -> None:
    fmt = "{:<18} {:>10} {:>7} {:>7} {:>9} {:>6} {:>6} {:>6} {:>6}"
    head = ["decode t/s", "e2e s", "ttft s", "prefilled", "ratio", "e2e x", "accept", "same"]
    print(fmt.format("system (rounds 2+)", *head))
    for name, s in summary.items():
        ratio, speed = s["decode_ratio_to_plain"], s["e2e_speedup_to_plain"]
        cells = [f"{s['decode_tok_s_r2plus']:.1f}", f"{s['e2e_s_r2plus']:.2f}", f"{s['ttft_s_r2plus']:.2f}"]
        cells += [f"{s['prefilled_r2plus']:.0f}", f"{ratio:.2f}" if ratio else "-", f"{speed:.2f}" if speed else "-"]
        print(fmt.format(name, *cells, f"{s['acceptance']:.2f}", str(s.get("answers_match_plain", "-"))))


if __name__ == "__main__":
    sys.exit(main())

"""Decode speed inside the Textual app against the same turn without it (what `chat --plain` runs).

    python benchmarks/tui_speed.py --model smollm2-135m --out benchmarks/results/tui-speed.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.backends.llama_cpp import LlamaCppBackend  # noqa: E402
from localspec.chat_store import SavedChat  # noqa: E402
from localspec.drafters import DrafterOptions, make_drafter  # noqa: E402
from localspec.engine import generate  # noqa: E402
from localspec.registry import resolve_model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import Session  # noqa: E402
from localspec.tui.app import ChatApp  # noqa: E402

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring and an example."


def app_turn(open_session, tmp) -> float:
    async def run():
        app = ChatApp(open_session, SavedChat.new("bench"), save_dir=Path(tmp))
        async with app.run_test(size=(100, 30)) as pilot:
            while app.session is None:
                await pilot.pause(0.05)
            app.query_one("#input").text = PROMPT
            await pilot.press("enter")
            await pilot.pause(0.2)
            while app.generating:
                await asyncio.sleep(0.5)  # poll rarely: the benchmark must not load the UI itself
            return app.chat.stats[-1]["decode_tok_s"]
    return asyncio.run(run())


def one_run(mode: str, model: str, drafter: str, tokens: int) -> float:
    """Decode tok/s of one turn, in this process: 'plain' on the main thread as `chat --plain` does,
    'app' inside the Textual app (its engine thread)."""
    _, path = resolve_model(model)
    tmp = tempfile.mkdtemp()
    options = DrafterOptions(suffix_cache_dir=tmp)
    greedy = SamplingParams(temperature=0)
    if mode == "plain":
        backend = LlamaCppBackend(path, n_ctx=2048)
        prompt = backend.chat_tokens([{"role": "user", "content": PROMPT}])
        return generate(backend, make_drafter(drafter, backend, options), prompt, greedy,
                        max_tokens=tokens).stats.decode_tps

    def open_session(progress):  # on the app's engine thread, as `localspec chat` loads it
        backend = LlamaCppBackend(path, n_ctx=2048)
        return Session(backend, make_drafter(drafter, backend, options), greedy, model, max_tokens=tokens,
                       drafter_options=options)
    return app_turn(open_session, tmp)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--drafter", default="none")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", choices=["plain", "app"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.model, args.drafter, args.tokens)))
        return
    runs = {"plain": [], "app": []}
    for _ in range(args.repeats):  # each run in a fresh process, interleaved
        for mode in runs:
            out = subprocess.run([sys.executable, __file__, "--one", mode, "--model", args.model, "--drafter",
                                  args.drafter, "--tokens", str(args.tokens)], capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"{mode} run failed:\n{out.stderr[-3000:]}")
            runs[mode].append(round(json.loads(out.stdout.strip().splitlines()[-1]), 2))
    report = {"model": args.model, "drafter": args.drafter, "tokens": args.tokens, "date": time.strftime("%Y-%m-%d"),
              "plain_chat_tok_s": runs["plain"], "in_app_tok_s": runs["app"],
              "ratio_median": round(statistics.median(runs["app"]) / statistics.median(runs["plain"]), 3)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()

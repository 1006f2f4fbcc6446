"""Decode speed inside the Textual app (`localspec chat`, headless through App.run_test) against the same
turn as `localspec run` streams it (Session.answer on the main thread), each in a fresh process,
interleaved; medians and the ratio of medians.

    python benchmarks/tui_speed.py --model smollm2-135m --repeats 5 --out benchmarks/results/tui-speed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.apps.cli.common import stream_answer  # noqa: E402
from localspec.apps.tui.app import ChatApp  # noqa: E402
from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.chat.conversation import Conversation  # noqa: E402
from localspec.chat.store import SavedChat  # noqa: E402
from localspec.drafters.table import DrafterSetup  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import Session  # noqa: E402

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
    """Decode tok/s of one turn, in this process: 'run' on the main thread as `localspec run` streams it,
    'app' inside the Textual app (its engine thread)."""
    _, path = resolve_model(model)
    tmp = tempfile.mkdtemp()
    options = DrafterSetup().with_options("suffix", cache_dir=tmp)
    greedy = SamplingParams(temperature=0)

    def open_session(progress=None):  # in the app: on its engine thread, as `localspec chat` loads it
        backend = LlamaCppBackend(path, n_ctx=2048)
        return Session(backend, options.build(drafter, backend), greedy, model, max_tokens=tokens, drafters=options)

    if mode == "run":
        conversation = Conversation()
        conversation.add("user", PROMPT)
        with open_session() as session:
            return stream_answer(session, conversation, None)[1].decode_tps
    import localspec.apps.tui.app as app_module

    for knob in ("UPDATE_S", "STATS_S", "MARKDOWN_S"):  # experiments: BENCH_UPDATE_S=1000 etc.
        if os.environ.get("BENCH_" + knob):
            setattr(app_module, knob, float(os.environ["BENCH_" + knob]))
    return app_turn(open_session, tmp)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--drafter", default="none")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one", choices=["run", "app"], help=argparse.SUPPRESS)
    ap.add_argument("--modes", default="run,app", help="run (as `localspec run`), app (as `localspec chat`)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.model, args.drafter, args.tokens)))
        return
    runs: dict[str, list[float]] = {mode: [] for mode in args.modes.split(",")}
    for r in range(args.repeats):  # each run in a fresh process, interleaved, the order rotated
        modes = list(runs)[r % len(runs) :] + list(runs)[: r % len(runs)]
        for mode in modes:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    mode,
                    "--model",
                    args.model,
                    "--drafter",
                    args.drafter,
                    "--tokens",
                    str(args.tokens),
                ],
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(f"{mode} run failed:\n{out.stderr[-3000:]}")
            runs[mode].append(round(json.loads(out.stdout.strip().splitlines()[-1]), 2))
    report = {
        "model": args.model,
        "drafter": args.drafter,
        "tokens": args.tokens,
        "date": time.strftime("%Y-%m-%d"),
        "tok_s": runs,
        "median": {m: statistics.median(v) for m, v in runs.items()},
        "ratio_to_run": {m: round(statistics.median(v) / statistics.median(runs["run"]), 3) for m, v in runs.items()},
        "paired_ratio_median": {
            m: round(statistics.median(a / b for a, b in zip(v, runs["run"], strict=False)), 3) for m, v in runs.items()
        },
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()

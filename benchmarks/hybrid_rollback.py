"""What a rollback costs on a hybrid (recurrent) target: a cut within llama.cpp's n_rs_seq snapshots against
one past them, which prefills the kept positions again; and, for architectures without snapshots, the
checkpoint mode (a state saved before each verify window, restored on a cut, the kept tokens fed again):
what the save adds to a 32-token window and what a cut costs; and a new turn that cuts into the last answer
past the snapshots (back to the state saved where the prompt ended, against prefilling everything again:
the turn point switched off). Runs on the tiny random Qwen3.5-layout GGUF
the tests write (no real hybrid model downloads here). Writes JSON.
    python benchmarks/hybrid_rollback.py [--out benchmarks/results/hybrid-rollback-tiny-qwen35.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.tiny_hybrid import write_tiny_qwen35  # noqa: E402

import localspec.backends.llama_cpp.backend as llama  # noqa: E402
from localspec.backends.llama_cpp.backend import RS_SNAPSHOTS, LlamaCppBackend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/hybrid-rollback-tiny-qwen35.json")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    path = write_tiny_qwen35(Path(tempfile.mkdtemp()) / "qwen35.gguf")
    rows = []
    with LlamaCppBackend(path, n_ctx=args.context + 64, n_threads=2) as b:
        tokens = [(i * 7) % 250 for i in range(args.context + 32)]
        for back in (1, 4, 8, RS_SNAPSHOTS, RS_SNAPSHOTS + 1, 32):
            times, window = [], []
            for _ in range(args.repeats):
                b.truncate(0)
                b.prefill(tokens[: args.context])
                b.prompt_cached()  # as the engine says after a prompt's prefill
                w0 = time.perf_counter()
                b.forward(tokens[args.context : args.context + 32])
                t0 = time.perf_counter()
                b.truncate(args.context + 32 - back)
                times.append(time.perf_counter() - t0)
                window.append(t0 - w0)
            median_ms = statistics.median(times) * 1e3
            rows.append(
                {
                    "rollback": back,
                    "within_snapshots": back <= RS_SNAPSHOTS,
                    "median_ms": median_ms,
                    "window_ms": statistics.median(window) * 1e3,  # the 32-token forward, snapshots kept
                }
            )
            print(rows[-1])
    report = {
        "model": "tiny random qwen35 (tests/support/tiny_hybrid.py)",
        "context": args.context,
        "n_rs_seq": RS_SNAPSHOTS,
    }
    checkpoints = checkpoint_rows(path, args)
    turns = turn_rows(path, args)
    report |= {"rows": rows, "checkpoint_mode": checkpoints, "new_turn": turns}
    Path(args.out).write_text(json.dumps(report, indent=1))


def turn_rows(path: Path, args) -> list[dict]:
    """A prompt of ``context`` tokens, a 40-token answer decoded a token per step, then a cut 3 tokens into the
    answer (a template re-rendering it without its reasoning): with the prompt's saved state, and without."""
    rows = []
    with LlamaCppBackend(path, n_ctx=args.context + 64, n_threads=2) as b:
        tokens = [(i * 7) % 250 for i in range(args.context + 40)]
        for turn_point in (True, False):
            cuts = []
            for _ in range(args.repeats):
                b.truncate(0)
                b.prefill(tokens[: args.context])
                b.prompt_cached()  # as the engine says after a prompt's prefill
                for token in tokens[args.context :]:
                    b.forward([token])
                saved, b._turn_point = b._turn_point, b._turn_point if turn_point else None
                t0 = time.perf_counter()
                b.truncate(args.context + 3)
                cuts.append(time.perf_counter() - t0)
                b._turn_point = saved
            rows.append(
                {"cut_into_answer": 3, "prompt_state_saved": turn_point, "cut_ms": statistics.median(cuts) * 1e3}
            )
            print(rows[-1])
    return rows


def checkpoint_rows(path: Path, args) -> list[dict]:
    """The same model made without snapshots: the window with its saved state, and cuts within it."""
    llama.RS_SNAPSHOTS = 0
    try:
        b = LlamaCppBackend(path, n_ctx=args.context + 64, n_threads=2)
    finally:
        llama.RS_SNAPSHOTS = RS_SNAPSHOTS
    rows = []
    with b:
        assert b.capabilities.checkpoints
        tokens = [(i * 7) % 250 for i in range(args.context + 32)]
        for back in (0, 1, 8, 31):
            window, cut = [], []
            for _ in range(args.repeats):
                b.truncate(0)
                b.prefill(tokens[: args.context])
                b.prompt_cached()  # as the engine says after a prompt's prefill
                t0 = time.perf_counter()
                b.forward(tokens[args.context : args.context + 32])  # saves the state first
                t1 = time.perf_counter()
                b.truncate(args.context + 32 - back)
                window.append(t1 - t0)
                cut.append(time.perf_counter() - t1)
            rows.append(
                {
                    "rollback": back,
                    "window_ms": statistics.median(window) * 1e3,
                    "cut_ms": statistics.median(cut) * 1e3,
                }
            )
            print(rows[-1])
    return rows


if __name__ == "__main__":
    main()

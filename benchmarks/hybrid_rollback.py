"""What a rollback costs on a hybrid (recurrent) target: a cut within llama.cpp's n_rs_seq snapshots against
one past them, which prefills the kept positions again. Runs on the tiny random Qwen3.5-layout GGUF the tests
write (no real hybrid model downloads here). Writes JSON.
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

from tiny_hybrid import write_tiny_qwen35  # noqa: E402

from localspec.backends.llama_cpp import RS_SNAPSHOTS, LlamaCppBackend  # noqa: E402


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
            times = []
            for _ in range(args.repeats):
                b.truncate(0)
                b.prefill(tokens[: args.context])
                b.forward(tokens[args.context : args.context + 32])
                t0 = time.perf_counter()
                b.truncate(args.context + 32 - back)
                times.append(time.perf_counter() - t0)
            median_ms = statistics.median(times) * 1e3
            rows.append({"rollback": back, "within_snapshots": back <= RS_SNAPSHOTS, "median_ms": median_ms})
            print(rows[-1])
    report = {"model": "tiny random qwen35 (tests/tiny_hybrid.py)", "context": args.context, "n_rs_seq": RS_SNAPSHOTS}
    Path(args.out).write_text(json.dumps({**report, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

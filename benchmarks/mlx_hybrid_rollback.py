"""What a rollback costs on a hybrid model on MLX (mlx_rollback.py): after a prefilled context and a 32-token
verify window, a cut of ``back`` tokens puts the recurrent states of the snapshot before the window back
and runs the kept tokens again; a cut before the window rebuilds the cache from the whole kept context.
Runs a random model of mlx-lm's qwen3_5 class (no real hybrid model downloads here), on whatever device MLX
uses (its CPU build on Linux). Writes JSON.
    python benchmarks/mlx_hybrid_rollback.py [--out benchmarks/results/mlx-hybrid-rollback.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.fakes import ScriptedTokenizer  # noqa: E402
from support.tiny_mlx_hybrid import qwen3_5_model  # noqa: E402

from localspec.backends.mlx.backend import MlxBackend  # noqa: E402

WINDOW = 32


def main() -> None:
    import mlx.core as mx

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/mlx-hybrid-rollback.json")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    vocab = 4096
    model = qwen3_5_model(args.width, args.layers, vocab, head_dim=64, interval=4)
    b = MlxBackend.from_model(model, ScriptedTokenizer(vocab_size=vocab), args.context + 64)
    tokens = [(i * 7) % vocab for i in range(args.context + WINDOW)]
    rows = []
    for back in (1, 8, 16, 31, WINDOW, WINDOW + 1):
        cuts, windows = [], []
        for _ in range(args.repeats):
            b.truncate(0)
            b.prefill(tokens[: args.context])
            w0 = time.perf_counter()
            b.forward(tokens[args.context :])
            t0 = time.perf_counter()
            b.truncate(args.context + WINDOW - back)
            mx.eval([c.state for c in b.cache])
            cuts.append(time.perf_counter() - t0)
            windows.append(t0 - w0)
        rows.append(
            {
                "rollback": back,
                "how": "snapshot + replay" if back <= WINDOW else "rebuild (before every snapshot)",
                "median_ms": statistics.median(cuts) * 1e3,
                "window_ms": statistics.median(windows) * 1e3,
            }
        )
        print(rows[-1])
    report = {
        "model": f"random qwen3_5 (tests/support/tiny_mlx_hybrid.py), width {args.width}, {args.layers} layers",
        "device": str(mx.default_device()),
        "context": args.context,
        "window": WINDOW,
        "repeats": args.repeats,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

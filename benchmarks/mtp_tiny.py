"""MTP drafting on the tiny Qwen3.5-layout GGUFs the tests write (no real MTP model downloads here): tokens per
step (tau), acceptance and whether greedy output equals plain decoding, per MTP block kind and K. Correctness
evidence, not speed: the "token" block on an identity trunk predicts every token (tau = K + 1 when the pairing
is right), the "hidden" block repeats the pending token (tau near 1), the token block on a random trunk is
right part of the time, a random block is a random drafter. Chained layers (tiny Step-3.5-layout GGUFs with
three MTP blocks, tests/support/tiny_step35.py) draft at most three tokens: three token-reading layers on an identity
trunk give tau = min(K, 3) + 1.
    python benchmarks/mtp_tiny.py [--out benchmarks/results/mtp-tiny-qwen35.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.tiny_hybrid import write_tiny_qwen35  # noqa: E402
from support.tiny_step35 import write_tiny_step35  # noqa: E402

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.context import DrafterContext  # noqa: E402
from localspec.drafters.mtp.drafter import build  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.engine.speclen import FixedK  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

MODELS = {  # kind -> how its GGUF is written
    "token": lambda path: write_tiny_qwen35(path, mtp="token", trunk="identity"),
    "hidden": lambda path: write_tiny_qwen35(path, mtp="hidden", trunk="identity"),
    # right part of the time: acceptance in between
    "token-on-random-trunk": lambda path: write_tiny_qwen35(path, mtp="token", trunk="random"),
    "random": lambda path: write_tiny_qwen35(path, mtp="random", trunk="random"),
    "chained-3-token (step35)": lambda path: write_tiny_step35(path, heads=("token",) * 3, trunk="identity"),
    "chained-3-random (step35)": lambda path: write_tiny_step35(path, heads=("random",) * 3),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/mtp-tiny-qwen35.json")
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args()
    greedy, rows = SamplingParams(temperature=0), []
    folder = Path(tempfile.mkdtemp())
    for i, (kind, write) in enumerate(MODELS.items()):
        path = write(folder / f"model-{i}.gguf")
        with LlamaCppBackend(path, n_ctx=1024, n_threads=2) as backend:
            prompt = backend.tokenizer.tokenize("the quick brown fox jumps over the lazy dog and")
            plain = generate(backend, NoDrafter(), prompt, greedy, max_tokens=args.tokens)
            drafter = build(backend, None, DrafterContext(seed=0))
            try:
                for k in (1, 2, 4, 8):
                    out = generate(backend, drafter, prompt, greedy, max_tokens=args.tokens, draft_tokens=FixedK(k))
                    s = out.stats
                    rows.append(
                        {
                            "block": kind,
                            "k": k,
                            "tau": round(s.generated / max(1, s.steps), 3),
                            "acceptance": round(s.accepted / max(1, s.drafted), 3),
                            "same_as_plain": out.tokens == plain.tokens,
                        }
                    )
                    print(rows[-1], flush=True)
            finally:
                drafter.close()
    model = "tiny random qwen35 + MTP block; step35 + 3 MTP blocks"
    Path(args.out).write_text(json.dumps({"model": model, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""What saving one served answer to the global suffix cache costs on the engine thread.

A cache filled to its default bound (200 000 tokens, answers of 400 tokens, random ids) gets answers one at
a time; each ``SuffixDrafter.end()`` (add to the tree + save to disk) is timed. Eviction rewrites the file
once per tenth of the bound; the report gives the median, the 95th percentile and the worst case.

    python benchmarks/suffix_persist.py --out benchmarks/results/suffix-persist.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions  # noqa: E402
from localspec.drafters.suffix.store import AnswerStore  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=200, help="answers saved and timed")
    parser.add_argument("--answer-tokens", type=int, default=400)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    bound = SuffixOptions.cache_tokens
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache.bin"
        store = AnswerStore(path, "bench", bound)
        for _ in range(bound // args.answer_tokens):  # a full cache, as after weeks of use
            store.add(rng.integers(0, 49152, args.answer_tokens))
        store.save()
        drafter = SuffixDrafter(SuffixOptions(), AnswerStore(path, "bench", bound))
        times = []
        for _ in range(args.answers):
            drafter.begin([1, 2, 3])
            drafter._answer = rng.integers(0, 49152, args.answer_tokens).tolist()  # what observe() collects
            started = time.perf_counter()
            drafter.end()
            times.append(time.perf_counter() - started)
        drafter.close()
        ms = np.array(times) * 1e3
        report = {
            "what": "SuffixDrafter.end() per answer (tree + disk) with a full cache",
            "cache_tokens": bound,
            "answer_tokens": args.answer_tokens,
            "answers": args.answers,
            "file_bytes": path.stat().st_size,
            "median_ms": round(float(np.median(ms)), 3),
            "p95_ms": round(float(np.percentile(ms, 95)), 3),
            "max_ms": round(float(ms.max()), 3),
            "rewrites": int((ms > 10 * np.median(ms)).sum()),
        }
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Python time per plain decoding step: the generate loop's own cost around llama.cpp's decode.

Runs plain decoding (drafter none, greedy) of N tokens with SmolLM2-135M under cProfile and reports, per
step, the loop's wall time, the time inside llama.cpp's C calls (llama_decode, the logits copy) and the
rest: Python. Written as JSON; run it before and after a change to the loop (issue 16: within +0.05 ms).

    python benchmarks/step_overhead.py [--tokens 1024] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

NATIVE = ("llama_decode", "llama_get_logits")  # the C calls of a step (ctypes calls are invisible to cProfile)


class TimedLib:
    """llama.cpp's library with its step calls timed."""

    def __init__(self, lib) -> None:
        self._lib, self.seconds = lib, 0.0

    def __getattr__(self, name):
        function = getattr(self._lib, name)
        if name not in NATIVE:
            return function

        def timed(*args):
            start = time.perf_counter()
            try:
                return function(*args)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def one_run(backend, tokens: int) -> dict:
    from localspec.drafters.base import NoDrafter

    # a plain-text prompt the model goes on counting from, so that no end-of-turn token stops it early
    prompt = backend.tokenizer.tokenize(", ".join(str(i) for i in range(1, 41)) + ",")
    backend.truncate(0)
    lib = backend._lib = TimedLib(backend._lib)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    out = generate(backend, NoDrafter(), prompt, SamplingParams(temperature=0), max_tokens=tokens, stop=())
    profile.disable()
    wall = time.perf_counter() - start
    backend._lib = lib._lib
    steps = len(out.tokens)
    native = lib.seconds
    calls = pstats.Stats(profile).total_calls / steps  # Python function calls per step: the work, without noise
    return {
        "steps": steps,
        "wall_ms_per_step": 1e3 * wall / steps,
        "python_ms_per_step": 1e3 * (wall - native) / steps,
        "calls_per_step": round(calls, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", dest="out")
    args = parser.parse_args()
    _, path = resolve_model("smollm2-135m")
    backend = LlamaCppBackend(path, n_ctx=4096)
    runs = [one_run(backend, args.tokens) for _ in range(args.repeats)]
    report = {
        "model": "smollm2-135m",
        "tokens": args.tokens,
        "runs": runs,
        "python_ms_per_step_median": round(statistics.median(r["python_ms_per_step"] for r in runs), 4),
        "python_ms_per_step_min": round(min(r["python_ms_per_step"] for r in runs), 4),
        "wall_ms_per_step_median": round(statistics.median(r["wall_ms_per_step"] for r in runs), 4),
        "note": "python = loop wall time (under cProfile) minus the time inside llama_decode and llama_get_logits",
    }
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

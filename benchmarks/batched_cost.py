"""What a forward pass of two sequences costs, against one sequence's window of as many tokens.

`serve --parallel` prices a slot's verify window as the pass it joins: with B tokens of the other slots in it,
a window of L + 1 tokens is priced T(L + 1 + B) off the lone cost curve (engine/speclen/policy.py). This
measures whether that holds: two slots of one llama.cpp context (or of one torch model, `--backend torch`: its
packed pass, backends/torch/slots.py), each holding its own prompt, decode windows of a and b tokens in one pass
(the Batcher's batch, as serve runs it), against a lone window of a + b tokens, and the marginal cost of one more
token of slot 0 in either case. Rounds interleave the shapes (this machine drifts).

    python benchmarks/batched_cost.py MODEL.gguf [--backend torch] [--rounds 7] [--prompt 600] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

SHAPES = [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (3, 3)]


def timed_pass(slots, fibers_of, shape) -> float:
    """One pass of windows ``shape`` (tokens per slot; 0: the slot sits out), then each slot cut back."""
    windows = [[11 + i for i in range(n)] for n in shape]
    keep = [len(s.cached_tokens) for s in slots]
    fibers = fibers_of()
    for slot, window in zip(slots, windows, strict=True):
        if window:
            fibers.start(lambda slot=slot, window=window: slot.forward(window))
    start = time.perf_counter()
    while fibers.live:
        fibers.step()
    seconds = time.perf_counter() - start
    for slot, n in zip(slots, keep, strict=True):
        slot.truncate(n)
    return seconds


def compare(ms: dict, a: int, b: int) -> dict:
    """Shape (a, b)'s median, beside a lone window of a + b tokens and each one's cost of one more token."""
    row = {"slot0": a, "slot1": b, "ms": round(ms[(a, b)], 2)}
    if b:
        row["lone_same_tokens_ms"] = round(ms[(a + b, 0)], 2) if (a + b, 0) in ms else None
        if (a - 1, b) in ms and a > 1:
            row["marginal_ms"] = round(ms[(a, b)] - ms[(a - 1, b)], 2)
        if (a + b - 1, 0) in ms and (a + b, 0) in ms:
            row["lone_marginal_ms"] = round(ms[(a + b, 0)] - ms[(a + b - 1, 0)], 2)
    print(json.dumps(row))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompt", type=int, default=600, help="tokens each slot holds before the windows")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--backend", choices=("llama.cpp", "torch"), default="llama.cpp")
    parser.add_argument("--json", dest="json_out")
    opts = parser.parse_args()
    from localspec.engine.fibers import Fibers

    if opts.backend == "torch":
        from localspec.backends.torch.backend import TorchBackend

        backend = TorchBackend(opts.model, n_ctx=2 * 2048, n_threads=opts.threads, steps="off")
    else:
        from localspec.backends.llama_cpp.backend import LlamaCppBackend

        backend = LlamaCppBackend(opts.model, n_ctx=2 * 4096, n_threads=opts.threads)
    slots, flush = backend.slots(2)
    text = "def f(x):\n    return x * 2\n" * 200
    for i, slot in enumerate(slots):
        slot.prefill(backend.tokenizer.tokenize(f"# file {i}\n" + text)[: opts.prompt])
    for shape in SHAPES:  # warm-up
        timed_pass(slots, lambda: Fibers(flush), shape)
    times: dict[tuple, list[float]] = {s: [] for s in SHAPES}
    for r in range(opts.rounds):
        for shape in SHAPES[r % len(SHAPES) :] + SHAPES[: r % len(SHAPES)]:
            times[shape].append(timed_pass(slots, lambda: Fibers(flush), shape))
    ms = {s: statistics.median(v) * 1e3 for s, v in times.items()}
    rows = [compare(ms, a, b) for a, b in SHAPES]
    result = {
        "model": backend.model_name,
        "backend": backend.name,
        "build": backend.build_id(),
        "threads": backend.n_threads,
        "prompt_tokens_per_slot": opts.prompt,
        "rounds": opts.rounds,
        "statistic": "median ms over rounds",
        "shapes": rows,
        "raw_ms": {f"{a}+{b}": [round(t * 1e3, 2) for t in v] for (a, b), v in times.items()},
    }
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump(result, f, indent=1)
    for slot in slots:
        slot.close()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What verifying a tree costs on llama.cpp against a chain of the same number of tokens, and what accepting
a branch off the first-child chain adds (it is decoded again into the cells after the pending token).

Trees: the first-child chain of depth d plus one sibling at each depth (n = 2d + 1 tokens with the pending
one). Timed after a prompt of P tokens, batch-invariant kernels (the greedy default), median of R repeats.

    python benchmarks/tree_cost.py --model qwen2.5-coder-1.5b --out benchmarks/results/tree-cost-NAME.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402


def tree(depth: int) -> tuple[int, ...]:
    """Parents of a first-child chain of ``depth`` with a sibling at every depth, listed by depth."""
    parents, chain = [], -1
    for _ in range(depth):
        parents += [chain, chain]
        chain = len(parents) - 2
    return tuple(parents)


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1e3, 2)


def measure(backend, prompt: list[int], depth: int, repeats: int) -> dict:
    p, parents = len(prompt), tree(depth)
    tokens = [prompt[i % p] for i in range(len(parents) + 1)]

    def chain(n: int) -> None:
        backend.forward(tokens[:n])
        backend.truncate(p)

    def verify_tree(path: list[int]) -> None:
        backend.forward_tree(tokens, parents)
        backend.accept_path(path)
        backend.truncate(p)

    main_path = [2 * i for i in range(depth)]
    side_path = main_path[:-1] + [2 * depth - 1]  # the sibling at the last depth: all `depth` decoded again
    return {
        "depth": depth,
        "tree_tokens": len(tokens),
        "chain_same_tokens_ms": timed(lambda: chain(len(tokens)), repeats),
        "chain_same_depth_ms": timed(lambda: chain(depth + 1), repeats),
        "tree_main_path_ms": timed(lambda: verify_tree(main_path), repeats),
        "tree_side_path_ms": timed(lambda: verify_tree(side_path), repeats),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--depths", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    name, path = resolve_model(args.model)
    rows = []
    with LlamaCppBackend(path, n_ctx=2048, n_threads=args.threads, batch_invariant=True) as backend:
        backend.set_batch_invariant(True)
        prompt = (backend.tokenizer.tokenize("def f(x):\n    return x * 2\n") * 400)[: args.prompt_tokens]
        backend.prefill(prompt)
        for depth in [int(d) for d in args.depths.split(",")]:
            rows.append(measure(backend, prompt, depth, args.repeats))
            print(rows[-1], flush=True)
    report = {"model": name, "prompt_tokens": args.prompt_tokens, "kernels": "batch-invariant", "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

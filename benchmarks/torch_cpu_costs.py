"""Where the time goes for the torch backend and an EAGLE head on this machine; writes JSON.

    python benchmarks/torch_cpu_costs.py --model SmolLM2.gguf --eagle-head DIR --out benchmarks/results/X.json

Per dtype: one target step and a 13-token verify window (ms) and the largest logit difference to fp32;
for the head: one vocabulary scoring (fp32 weights are scored in fp16 on CPU), a 3-token chain draft and a
depth-3 tree draft of 12 tokens.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from localspec.backends.torch.backend import TorchBackend
from localspec.drafters.eagle.drafter import EagleDrafter
from localspec.types import Features, Step

TEXT = "Explain how a hash table works. It maps keys to values using a hash function. " * 4


def ms(fn, repeats: int = 8) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return round((time.perf_counter() - started) / repeats * 1e3, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--eagle-head", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    report, reference = {"model": args.model, "dtypes": {}}, None
    for dtype in ("float32", "bfloat16", "float16"):
        backend = TorchBackend(args.model, n_ctx=1024, dtype=dtype)
        tokens = backend.tokenizer.tokenize(TEXT)
        backend.prefill(tokens[:-13])
        keep = len(tokens) - 13

        def window(k, backend=backend, tokens=tokens, keep=keep):
            backend.truncate(keep)
            return backend.forward(tokens[keep : keep + k]).logits

        logits = window(13)
        reference = logits if reference is None else reference
        report["dtypes"][dtype] = {
            "step_ms": ms(lambda: window(1)),
            "window13_ms": ms(lambda: window(13)),
            "max_logit_diff_to_fp32": float(np.abs(logits - reference).max()),
        }
        if dtype == "float32":
            drafter = EagleDrafter(backend, args.eagle_head, tree_nodes=12)
            drafter.begin(tokens)
            backend.truncate(0)
            drafter.observe(Step(tokens, features=Features(0, backend.prefill_features(tokens[:-1]))))
            drafter._catch_up()  # the head takes the prompt's features (a proposal would do it first)
            head = drafter.head
            report["eagle"] = {
                "score_vocab_ms": ms(lambda head=head, drafter=drafter: head.logits(drafter._last)),
                "chain3_ms": ms(lambda drafter=drafter: drafter._chain(3)),
                "tree12_depth3_ms": ms(lambda drafter=drafter: drafter._tree(3)),
            }
        backend.close()
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

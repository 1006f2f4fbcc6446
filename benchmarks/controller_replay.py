"""The speculation controller on recorded answers, on a virtual clock: Qwen2.5-Coder-1.5B's greedy answers to the
workload (benchmarks/results/answers-qwen2.5-coder-1.5b.jsonl) replayed in order through the default drafter
(suffix, a fresh cache in memory) and the controller (AdaptiveK, the same one `chat`, `serve` and `bench` run),
each window priced by a measured verify-cost curve (a localspec cost-cache file: the controller starts from it,
and the clock charges it). No model runs (localspec.bench.simulate: the oracle accepts the draft tokens that
match the answer), so two controllers compare exactly, free of this machine's noise; what it cannot show is the
drafting and bookkeeping time a real step adds, nor sampled answers.

Per case: tokens, steps, virtual seconds and tok/s with speculation and plain (every token one 1-token step).
``--oracle`` replaces the controller by one that knows the answer: each step it verifies the number of the
proposal's correct tokens that makes the most tokens per second of that window (greedy, step by step). The
same drafter, the same curve: the gap between the two is what a better controller could still win.

    .venv/bin/python benchmarks/controller_replay.py --costs ~/.cache/localspec/costs/FILE.json \\
        [--model GGUF] [--answers FILE.jsonl] [--out benchmarks/results/controller-replay-qwen2.5-coder-1.5b-DATE.json]

``--answers benchmarks/results/answers-fim-qwen2.5-coder-1.5b.jsonl`` replays the editor-autocomplete completions
(recorded by ``record_answers.py --fim``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.backends.llama_cpp.vocab import LlamaVocab  # noqa: E402
from localspec.bench.simulate import cost_curve, simulate  # noqa: E402
from localspec.drafters.table import DrafterSetup  # noqa: E402
from localspec.engine.speclen import AdaptiveK  # noqa: E402

ANSWERS = ROOT / "benchmarks/results/answers-qwen2.5-coder-1.5b.jsonl"
MODEL = Path.home() / ".cache/localspec-bench-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def cases(tokenizer: LlamaVocab, path: Path) -> list[dict]:
    """Each recorded conversation: the prompt (all messages but the last answer, the model's own template) and
    the answer's tokens; or a record of token ids as they were (``record_answers.py --fim``)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "prompt_tokens" in record:
            prompt, answer_tokens = record["prompt_tokens"], record["answer_tokens"]
        else:
            *asked, answer = record["messages"]
            prompt = tokenizer.template_tokens(tokenizer.chat_text(asked))
            answer_tokens = tokenizer.tokenize(answer["content"])
        out.append({"id": record["id"], "kind": record["kind"], "prompt": prompt, "answer": answer_tokens})
    return out


class Oracle:
    """The drafter's proposal cut where the answer says a window pays most (see the module doc)."""

    def __init__(self, drafter, step_cost) -> None:
        self.drafter, self.step_cost = drafter, step_cost
        self.prompt_len, self.answer = 0, []

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def propose(self, context, max_tokens):
        draft = self.drafter.propose(context, max_tokens)
        done = len(context) - self.prompt_len
        truth = self.answer[done : done + len(draft)]
        pairs = enumerate(zip(draft.tokens, truth, strict=False))
        right = next((i for i, (a, b) in pairs if a != b), min(len(draft), len(truth)))
        return draft.cut(max(range(right + 1), key=lambda n: (n + 1) / self.step_cost(n + 1)))


def replay(recorded: list[dict], curve: dict, drafter_name: str, k: int, oracle: bool = False) -> dict:
    """One pass over the cases in order (the drafter learns across them, as in `localspec bench`)."""
    step_cost = cost_curve({n: s * 1000 for n, s in curve.items()})  # seconds of an n-token window
    with tempfile.TemporaryDirectory() as cache:
        setup = DrafterSetup().with_options("suffix", cache_dir=cache)
        drafter = setup.build(drafter_name)
        policy = None if oracle else AdaptiveK()
        if policy is not None:
            policy.load_costs({"verify_s": curve})
        else:
            drafter = Oracle(drafter, step_cost)
        per_case = {}
        for case in recorded:
            if oracle:
                drafter.prompt_len, drafter.answer = len(case["prompt"]), case["answer"]
            stats = simulate(drafter, [(case["prompt"], case["answer"])], k, step_cost, policy)
            plain_s = len(case["answer"]) * step_cost(1)
            per_case[case["id"]] = {
                "kind": case["kind"],
                "tokens": stats.generated,
                "steps": stats.steps,
                "seconds": round(stats.verify_s, 3),
                "tok_s": round(stats.generated / stats.verify_s, 2),
                "plain_tok_s": round(len(case["answer"]) / plain_s, 2),
                "speedup": round(plain_s / stats.verify_s, 3),
            }
        drafter.close()
    return per_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--costs", type=Path, required=True, help="a localspec cost-cache file (its verify_s curve)")
    parser.add_argument("--model", type=Path, default=MODEL, help="the GGUF whose vocabulary tokenizes (vocab only)")
    parser.add_argument("--answers", type=Path, default=ANSWERS)
    parser.add_argument("--drafter", default="suffix")
    parser.add_argument("-k", type=int, default=64)
    parser.add_argument("--oracle", action="store_true", help="a controller that knows the answer (module doc)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    curve = {int(n): s for n, s in json.loads(args.costs.read_text())["data"]["verify_s"].items()}
    tokenizer = LlamaVocab.load(args.model)
    recorded = cases(tokenizer, args.answers)
    per_case = replay(recorded, curve, args.drafter, args.k, args.oracle)
    by_kind: dict[str, list[float]] = {}
    for figures in per_case.values():
        by_kind.setdefault(figures["kind"], []).append(figures["seconds"])
    report = {
        "what": "controller replay on a virtual clock (benchmarks/controller_replay.py)",
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model.name,
        "drafter": args.drafter,
        "controller": "oracle" if args.oracle else "AdaptiveK",
        "k": args.k,
        "curve_ms": {n: round(curve[n] * 1000, 1) for n in sorted(curve) if n in (1, 2, 4, 8, 16, 32, 48, 64)},
        "seconds_by_kind": {kind: round(sum(s), 3) for kind, s in by_kind.items()},
        "seconds_total": round(sum(f["seconds"] for f in per_case.values()), 3),
        "per_case": per_case,
    }
    for name, figures in per_case.items():
        print(
            f"{name:18} {figures['tokens']:5} tokens {figures['steps']:4} steps {figures['seconds']:7.2f} s "
            f"{figures['tok_s']:6.1f} tok/s ({figures['speedup']:.2f}x plain)"
        )
    print("by kind:", report["seconds_by_kind"], "total", report["seconds_total"])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

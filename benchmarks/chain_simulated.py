"""A drafter chain against each of its members on simulated machines (virtual clock, scripted models: the
setup of tests/drafters/test_chain.py): a 300-token greedy answer with two repeated spans (120 tokens) that a copy
drafter knows, on a GPU-like machine where a draft model (the target's logits plus noise, about half its
picks right) pays, and on this project's 2-core CPU shape where it does not. Seconds are virtual: exact and
repeatable, so they show the controller's choices, not a machine's speed. Writes JSON.
    python benchmarks/chain_simulated.py [--out benchmarks/results/chain-simulated.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import support.fakes as fakes  # noqa: E402
import test_chain as scenario  # noqa: E402
from support.draft_machine import CPU_SHAPE, GPU_SHAPE, machine  # noqa: E402

from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.chain import ChainDrafter  # noqa: E402
from localspec.drafters.draft_model import DraftModelDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.engine.speclen import AdaptiveK  # noqa: E402

# (target step s, draft step s, draft prefill s/token, curve shape)
MACHINES = {"gpu-like": (0.01, 0.0005, 0.00005, GPU_SHAPE), "cpu-2core": (0.09, 0.03, 0.0045, CPU_SHAPE)}


def turn(clock, machine_spec, drafter_for) -> tuple[float, dict]:
    step, draft_step, draft_prefill, shape = machine_spec
    window = machine(step, shape)
    policy = AdaptiveK()
    sizes = (1, 2, 3, 5, 9, 17, 33, 65)
    policy.load_costs({"verify_s": {str(n): window(n) for n in sizes}, "count": {str(n): 9 for n in sizes}})
    target = fakes.TimedBackend(clock, window, step / 4, vocab_size=scenario.V, seed=0)
    draft = scenario.NoisyDraft(clock, machine(draft_step, shape), draft_prefill, vocab_size=scenario.V, seed=0)
    model = DraftModelDrafter(draft, scenario.V, scenario.V, seed=1)
    start = clock.now
    out = generate(target, drafter_for(model), scenario.PROMPT, scenario.GREEDY, max_tokens=300, draft_tokens=policy)
    s = out.stats
    return clock.now - start, {
        "steps": s.steps,
        "tau": round(s.generated / s.steps, 3),
        "model_steps": s.speclen.get("model_steps"),
        "same_as_plain": out.tokens == scenario.reference(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/chain-simulated.json")
    args = ap.parse_args()
    clock = fakes.VirtualClock()
    time.perf_counter = clock  # the timed fakes move it; nothing else does
    truth = scenario.reference()
    methods = {
        "none": lambda model: NoDrafter(),
        "copy": lambda model: scenario.SpanCopyDrafter(truth),
        "draft": lambda model: model,
        "copy+draft": lambda model: ChainDrafter(scenario.SpanCopyDrafter(truth), model),
    }
    results = {}
    for name, spec in MACHINES.items():
        rows = {m: turn(clock, spec, f) for m, f in methods.items()}
        plain = rows["none"][0]
        results[name] = {
            m: {"seconds": round(t, 4), "speedup": round(plain / t, 3), **info} for m, (t, info) in rows.items()
        }
        print(name, {m: r["speedup"] for m, r in results[name].items()}, flush=True)
    Path(args.out).write_text(
        json.dumps({"setup": __doc__.strip().splitlines()[0], "machines": results}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()

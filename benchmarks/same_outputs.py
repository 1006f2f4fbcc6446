"""Before and after a refactor: `localspec bench` run from two source trees, interleaved round by round, and
every answer's tokens compared.

A refactor that moves code must not change what any method answers. Each round runs the same bench command
once from the BEFORE tree and once from the AFTER tree (order alternating per round, so that neither always
runs on a warmer machine), each in a fresh process, and compares `output_ids` per case, method and repeat.
Use methods whose windows do not depend on timing (a fixed K, NAME@K, or NAME+exact, whose batch-invariant
kernels make every window's rows 1-token steps): an adaptive K on the default kernels may legitimately take
another token at a near-tie when the machine is slower. Decode tok/s of both trees are reported beside.

    python benchmarks/same_outputs.py BEFORE_TREE AFTER_TREE --rounds 2 --json OUT -- \
        --model smollm2-135m --drafters none,ngram@4,suffix@4,suffix+exact --max-tokens 64

A tree is a checkout with its compiled extensions built in place (a `git worktree` of the old commit, with the
`.so` files copied in); the command runs `python -m localspec bench ARGS --json FILE` with PYTHONPATH=TREE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_bench(tree: Path, args: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "localspec", "bench", *args, "--json", str(out)]
    subprocess.run(cmd, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def answers(report: dict) -> dict[tuple[str, str, int], list[int]]:
    """(case, method, repeat) -> the answer's token ids."""
    return {
        (row["id"], method, row["repeat"]): figures["output_ids"]
        for row in report["cases"]
        for method, figures in row["methods"].items()
    }


def tok_s(report: dict) -> dict[str, float]:
    per = {}
    for row in report["cases"]:
        for method, figures in row["methods"].items():
            per.setdefault(method, []).append(figures["decode_tok_s"])
    return {m: round(statistics.median(v), 2) for m, v in per.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", dest="json_out", type=Path)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts, bench_args = parser.parse_args(argv[:split]), argv[split + 1 :]  # after --: the bench command's
    rounds, mismatches, compared = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.rounds):
            order = [("before", opts.before), ("after", opts.after)]
            reports = {}
            for name, tree in order if r % 2 == 0 else order[::-1]:
                reports[name] = run_bench(tree.resolve(), bench_args, Path(tmp) / f"{name}-{r}.json")
            old, new = answers(reports["before"]), answers(reports["after"])
            if old.keys() != new.keys():
                mismatches.append({"round": r, "keys": sorted(map(str, old.keys() ^ new.keys()))})
            for key in old.keys() & new.keys():
                compared += 1
                if old[key] != new[key]:
                    case, method, repeat = key
                    pairs = enumerate(zip(old[key], new[key], strict=False))
                    first = next((i for i, (a, b) in pairs if a != b), min(len(old[key]), len(new[key])))
                    mismatches.append({"round": r, "case": case, "method": method, "repeat": repeat, "at": first})
            rounds.append(
                {"order": [n for n, _ in (order if r % 2 == 0 else order[::-1])]}
                | {f"{name}_decode_tok_s": tok_s(report) for name, report in reports.items()}
            )
    result = {
        "bench_args": bench_args,
        "before": str(opts.before),
        "after": str(opts.after),
        "answers_compared": compared,
        "identical": not mismatches,
        "mismatches": mismatches,
        "rounds": rounds,
    }
    text = json.dumps(result, indent=2)
    if opts.json_out:
        opts.json_out.write_text(text + "\n")
    print(text)
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())

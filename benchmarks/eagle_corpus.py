"""Write a self-distillation corpus for `localspec train-eagle`: chat prompts answered by the target itself.

EAGLE heads learn best from the target's own outputs (the features they will see at inference), so this
asks the model (through llama.cpp, the fast backend here) a few hundred prompts made from templates and
topics, and writes one {"messages": [...]} line per conversation. None of the prompts is in the benchmark
workload. Usage:
    python benchmarks/eagle_corpus.py --model MODEL.gguf --out corpus.jsonl [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.drafters.table import DrafterSetup
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams

TOPICS = [
    "photosynthesis",
    "the water cycle",
    "binary search",
    "hash tables",
    "the French Revolution",
    "black holes",
    "compound interest",
    "vaccines",
    "recursion",
    "climate change",
    "the Roman Empire",
    "machine learning",
    "volcanoes",
    "the stock market",
    "sleep",
    "coffee",
    "electric cars",
    "DNA",
    "the internet",
    "gravity",
    "linked lists",
    "sorting algorithms",
    "healthy breakfast ideas",
    "learning a new language",
    "time management",
    "the moon landing",
    "renewable energy",
    "bread baking",
    "chess openings",
    "public speaking",
    "rainforests",
    "the printing press",
    "password security",
    "regular expressions",
    "SQL joins",
    "git branches",
    "HTTP requests",
    "unit testing",
    "prime numbers",
    "the Pythagorean theorem",
]
TEMPLATES = [
    "Explain {t} in simple terms.",
    "Give me three interesting facts about {t}.",
    "Write a short paragraph about {t} for a school newsletter.",
    "What are the pros and cons of {t}?",
    "Summarize the history of {t} in a few sentences.",
    "How would you teach {t} to a ten-year-old?",
    "Write a list of five questions a student might ask about {t}.",
    "Write a short poem about {t}.",
]
CODE = [
    "Write a Python function that reverses a string.",
    "Write a Python function to check if a number is prime.",
    "Write a Python class for a simple bank account with deposit and withdraw.",
    "Write a JavaScript function that returns the largest number in an array.",
    "Write a Python function that counts the words in a sentence.",
    "Write a Python script that reads a CSV file and prints the number of rows.",
    "Write a function in Python that merges two sorted lists.",
    "Write a SQL query that lists customers by total spend.",
    "Write a Python function that computes the factorial of n recursively.",
    "Write a bash script that prints the ten largest files in a folder.",
    "Write a Python function that removes duplicates from a list while keeping order.",
    "Write a Python function that converts Celsius to Fahrenheit, with a docstring.",
    "Write a C function that computes the length of a string.",
    "Write a Python generator that yields Fibonacci numbers.",
    "Write a Python function that validates an email address with a regular expression.",
    "Write a JSON object describing a book with title, author, year and tags.",
]


def prompts(seed: int) -> list[str]:
    items = [tpl.format(t=t) for t, tpl in itertools.product(TOPICS, TEMPLATES)] + CODE * 3
    random.Random(seed).shuffle(items)
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--limit", type=int, default=0, help="at most this many prompts (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    backend = LlamaCppBackend(args.model, n_ctx=2048)
    items = prompts(args.seed)[: args.limit or None]
    started, total = time.perf_counter(), 0
    with open(args.out, "w", encoding="utf-8") as out:
        for i, prompt in enumerate(items):
            # every other answer greedy, the rest sampled: the head sees both kinds of continuation
            sampling = SamplingParams(temperature=0.0 if i % 2 == 0 else 0.7)
            messages = [{"role": "user", "content": prompt}]
            done = generate(
                backend,
                DrafterSetup().build("none"),
                backend.tokenizer.chat_tokens(messages),
                sampling,
                max_tokens=args.max_tokens,
            )
            total += len(done.tokens)
            out.write(json.dumps({"messages": messages + [{"role": "assistant", "content": done.text}]}) + "\n")
            if (i + 1) % 20 == 0:
                print(
                    f"{i + 1}/{len(items)} answers, {total} tokens, {time.perf_counter() - started:.0f} s", flush=True
                )
    print(f"wrote {len(items)} conversations ({total} answer tokens) to {args.out}")


if __name__ == "__main__":
    main()

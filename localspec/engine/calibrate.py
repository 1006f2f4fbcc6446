"""`localspec calibrate`: measure the exact guard's near-tie margin for a model, backend and build.

A plain greedy run (1-token steps, as plain decoding) records every position's top-1/top-2 gap; then the
same tokens are fed again, teacher-forced, in windows of each size the controller verifies, whose KV rows
are written by windows as in speculative decoding. The margin is twice the largest difference of a
position's gap between the plain run and any windowed run, over at least MIN_POSITIONS positions. It is
cached per cost_key (model file, backend, build, threads); a backend with nothing cached uses
exact_guard.DEFAULT_MARGIN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from localspec.backends.base import Backend
from localspec.cost_cache import cost_key
from localspec.engine.exact import MarginCache
from localspec.rows import top_gaps

MIN_POSITIONS = 512
WINDOWS = (2, 3, 5, 9, 17, 33, 65)  # verify windows (pending token + draft) the controller uses
PER_PROMPT = 128  # most positions one prompt contributes
PROMPTS = (  # the first is measured always: past 256 tokens llama.cpp's 1-token attention takes another kernel
    "Add a docstring to each function:\n"
    + "\n".join(f"def scale_{i}(x):\n    return x * {i} + {i * 7 % 10}" for i in range(30)),
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in a few sentences why the sky is blue.",
    "List five fruits and one fact about each.",
    "Rewrite this sentence more formally: gonna grab food, back in 10.",
    "What is the difference between a list and a tuple in Python?",
    "Write a short story about a lighthouse keeper and a storm.",
    "Return a JSON object with the fields name, age and city for a fictional person.",
    "Summarise the causes of the French Revolution in three bullet points.",
)


def _start(backend: Backend, prompt: Sequence[int], reuse: bool) -> None:
    """The cache holding the prompt but its last token, prefilled from position 0 as plain decoding does;
    reuse: keep it if the cache holds exactly that already (the plain run's own prefill)."""
    head = tuple(prompt[:-1])
    if reuse and backend.cached_tokens[: len(head)] == head:
        backend.truncate(len(head))
    else:
        backend.truncate(0)
        backend.prefill(list(head))


def _plain_rows(backend: Backend, prompt: Sequence[int], limit: int, stop: bool = True) -> tuple[list[int], np.ndarray]:
    """Greedy 1-token steps, as plain decoding: (tokens fed after the prompt's last, logits row per position).
    stop: at an end-of-generation token or a full context, as an answer would."""
    _start(backend, prompt, reuse=False)
    token, fed, rows = prompt[-1], [], []
    for _ in range(limit):
        rows.append(backend.forward([token]).logits[-1])
        token = int(np.argmax(rows[-1]))
        if stop and (token in backend.tokenizer.eog_tokens or len(prompt) + len(fed) + 2 >= backend.n_ctx):
            break
        fed.append(token)
    return fed, np.array(rows)


def _windowed_rows(
    backend: Backend, prompt: Sequence[int], fed: list[int], window: int, keep: int | None = None
) -> np.ndarray:
    """The same positions, teacher-forced in windows of `window` tokens, as speculative decoding writes them;
    keep: each window keeps only its first `keep` positions in the cache (a rejected draft's rollback)."""
    _start(backend, prompt, reuse=True)
    sequence, rows, i = [prompt[-1], *fed], [], 0
    while i < len(sequence):
        out = backend.forward(sequence[i : i + window]).logits
        kept = min(keep or len(out), len(out))
        rows.append(out[:kept])
        backend.truncate(len(prompt) - 1 + i + kept)
        i += kept
    return np.concatenate(rows)


def measure(
    backend: Backend,
    prompts: Sequence[Sequence[int]],
    windows: Sequence[int] = WINDOWS,
    positions: int = MIN_POSITIONS,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """The margin and what it rests on, from prompts (token ids) cycled until `positions` are measured.
    A backend with batch-invariant kernels is measured with them: its gap differences should be 0."""
    invariant = backend.capabilities.batch_invariant
    backend.set_batch_invariant(invariant)
    runs, total, i = [], 0, 0
    while total < positions and i < 4 * len(prompts):
        prompt = prompts[i % len(prompts)]
        fed, rows = _plain_rows(backend, prompt, min(PER_PROMPT, positions - total))
        runs.append((prompt, fed, top_gaps(rows), np.argmax(rows, axis=1)))
        total += len(rows)
        i += 1
    if progress:
        progress(f"plain run: {total} positions")
    worst, flips = 0.0, 0
    per_window = {}
    for w in windows:
        delta_w = 0.0
        for prompt, fed, gaps, tops in runs:
            w_rows = _windowed_rows(backend, prompt, fed, w)
            w_gaps, w_tops = top_gaps(w_rows), np.argmax(w_rows, axis=1)
            n = len(gaps)
            delta_w = max(delta_w, float(np.max(np.abs(w_gaps[:n] - gaps))))
            flips += int(np.sum(w_tops[:n] != tops))
        per_window[w] = round(delta_w, 4)
        worst = max(worst, delta_w)
        if progress:
            progress(f"window {w}: largest gap difference {delta_w:.3f}")
    backend.truncate(0)
    return {
        "margin": round(max(2 * worst, 1e-3), 4),
        "max_gap_difference": round(worst, 4),
        "kernels": "batch-invariant" if invariant else "default",
        "positions": total,
        "windows": list(windows),
        "per_window": per_window,
        "argmax_flips": flips,
    }


def calibrate(backend: Backend, progress: Callable[[str], None] | None = None, positions: int = MIN_POSITIONS) -> dict:
    """Measure on the built-in prompts (chat-formatted) and cache the result for this backend."""
    prompts = [backend.tokenizer.chat_tokens([{"role": "user", "content": p}]) for p in PROMPTS]
    result = measure(backend, prompts, positions=positions, progress=progress)
    MarginCache(cost_key(backend)).save(result)
    return result


def window_differences(
    backend: Backend, prompt: Sequence[int], steps: int, windows: Sequence[int], rollback: bool = False
) -> dict[int, float]:
    """Largest |logit difference| between 1-token steps and teacher-forced windows of each size over the
    same positions (0.0: bit-identical); rollback: each window keeps only its first 2 positions, as a
    rejected draft does. A check of batch-invariant kernels (tests, benchmarks/kernel_costs.py)."""
    fed, plain = _plain_rows(backend, prompt, steps, stop=False)
    keep = 2 if rollback else None
    return {w: float(np.max(np.abs(_windowed_rows(backend, prompt, fed, w, keep)[:steps] - plain))) for w in windows}

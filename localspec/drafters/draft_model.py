"""A smaller model of the same family drafts for the target (`--drafter draft --draft-model NAME|PATH`).

It drafts autoregressively with its own KV cache and reports its distributions q (the same sampler
settings as the target's, applied to its own logits), so verification can accept with min(1, p/q) and
resample from the residual. Its cache follows the target's context lazily: each proposal cuts the draft
cache back to what it shares with the context (the accepted prefix) and feeds only what is new, usually
the target's bonus/residual token; after steps without drafting it catches up in one batched prefill.

That catch-up is the price of drafting after a pause, so the controller is told what it would cost
(``costs``) before it asks for a draft: tokens behind times the draft model's prefill cost per
token, timed once at load and then on every catch-up. A draft model that does not pay is not fed at all.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backends.base import Backend
from localspec.drafters.base import DEFAULT_TURN, Costs, Drafter, Turn
from localspec.drafters.picking import GREEDY, pick_token
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft, Step, common_prefix

CALIBRATION_TOKENS = 32  # prefilled once at load to time a catch-up per token
TIMING_EMA = 0.3  # weight of the newest catch-up in the per-token estimate
TIMED_CATCHUP = 16  # catch-ups at least this long update the estimate (shorter ones are mostly overhead)


@dataclass(frozen=True)
class DraftOptions:
    model: str | None = option(
        None,
        "the draft model, a name or a .gguf path (default: the first of the target's 'drafts' in models.toml)",
        toml=False,
        kind=str,
    )


def build(target: Backend | None, options: DraftOptions, context) -> DraftModelDrafter:
    """The draft model loaded on the target's backend, checked to share the target's vocabulary."""
    from localspec.backends import load_backend
    from localspec.drafters.vocab import shared_vocab

    if target is None:
        raise ConfigError("the draft drafter needs a loaded target model")
    spec = options.model or (context.known_drafts[0] if context.known_drafts else None)
    if not spec:
        raise ConfigError(
            "--drafter draft needs --draft-model NAME|PATH (a smaller model with the same tokenizer); "
            "models.toml lists no draft for this model"
        )
    path = context.find_model(spec) if context.find_model else spec
    draft = load_backend(target.name, path, n_ctx=target.n_ctx, n_threads=target.n_threads)
    try:
        shared = shared_vocab(target, draft, context.known_drafts)
    except BaseException:
        draft.close()
        raise
    return DraftModelDrafter(draft, shared, target.vocab_size, context.seed)


class DraftModelDrafter(Drafter):
    name = "draft"

    def __init__(self, draft: Backend, shared_vocab: int, target_vocab: int, seed: int | None = None) -> None:
        self.draft, self.shared, self.target_vocab = draft, shared_vocab, target_vocab
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self.catchup_tokens = 0  # tokens fed in batched catch-ups this turn (after steps without drafting)
        self._synced = 0  # context tokens known to be in the draft cache
        self.catchup_per_token, self.cost_per_token = self._time_model()

    def _time_model(self) -> tuple[float, float]:
        """(seconds per catch-up token, seconds per drafted token), timed on a throwaway sequence."""
        tokens = [i % self.shared for i in range(1, CALIBRATION_TOKENS + 2)]
        self.draft.truncate(0)
        self.draft.forward(tokens[:1])  # the first call of a context allocates: not timed
        t0 = time.perf_counter()
        self.draft.prefill(tokens[1:-1])
        t1 = time.perf_counter()
        self.draft.forward(tokens[-1:])
        t2 = time.perf_counter()
        self.draft.truncate(0)
        return (t1 - t0) / (len(tokens) - 2), t2 - t1

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        self.sampling = turn.sampling
        self._synced = common_prefix(self.draft.cached_tokens, prompt)

    def costs(self, context: Sequence[int]) -> Costs:
        behind = len(context) - 1 - self._synced
        return Costs(self.cost_per_token, behind * self.catchup_per_token if behind > 1 else 0.0)

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if max_tokens <= 0:  # nothing to catch up on before it drafts again
            return EMPTY_DRAFT
        sampling, catchup = self.sampling, 0.0
        keep = min(common_prefix(self.draft.cached_tokens, context), len(context) - 1)
        self.draft.truncate(keep)
        new = list(context[keep:])
        if len(new) > 2:  # a gap (steps without drafting, or a new turn): one batched prefill, no logits
            t0 = time.perf_counter()
            self.draft.prefill(new[:-1])
            catchup = time.perf_counter() - t0
            self.catchup_tokens += len(new) - 1
            if len(new) - 1 >= TIMED_CATCHUP:
                per_token = catchup / (len(new) - 1)
                self.catchup_per_token += TIMING_EMA * (per_token - self.catchup_per_token)
            new = new[-1:]
        self._synced = len(context)
        row = self.draft.forward(new).rows.row(-1)
        self.draft.checkpoint()  # a recurrent draft model: its drafts are cut back to here next time
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for i in range(max_tokens):
            # ids past the shared range are padding of the bigger vocabulary
            token = pick_token(row[: self.shared], sampling, self.rng, self.target_vocab, rows)
            tokens.append(token)
            if i + 1 < max_tokens:
                row = self.draft.forward([token]).rows.row(-1)
        return Draft.chain(tokens, np.stack(rows) if rows else None).with_catchup(catchup)

    def observe(self, step: Step) -> None:
        self._synced += step.accepted  # accepted draft tokens are in the draft cache already

    def end(self) -> dict:
        figures = {
            "draft_model": self.draft.model_name,
            "draft_memory_mb": round(self.draft.memory_bytes() / 2**20, 1),
            "catchup_tokens": self.catchup_tokens,
            "catchup_ms_per_token": round(self.catchup_per_token * 1e3, 3),
        }
        self.catchup_tokens = 0
        return figures

    def close(self) -> None:
        self.draft.close()

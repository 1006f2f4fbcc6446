"""A loaded model with its drafter and generation settings, answering a conversation turn by turn."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from localspec.backends import load_backend
from localspec.backends.base import Backend, Progress
from localspec.chat import Conversation
from localspec.drafters import DrafterOptions, check_drafter_name, make_drafter
from localspec.drafters.base import Drafter
from localspec.engine import check_draft_tokens, stream_generate
from localspec.registry import ModelEntry, load_registry, model_entry, resolve_model
from localspec.sampling import SamplingParams
from localspec.types import TokenEvent


@dataclass
class Session:
    backend: Backend
    drafter: Drafter
    sampling: SamplingParams
    model_name: str
    max_tokens: int = 512
    draft_tokens: int = 4
    stop: tuple[str, ...] = ()
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    drafter_options: DrafterOptions = field(default_factory=DrafterOptions)

    @classmethod
    def from_args(cls, args, on_load=None) -> "Session":
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p)
        check_drafter_name(args.drafter)  # bad options fail before the (slow) model load
        check_draft_tokens(args.draft_tokens)
        registry = load_registry()
        entry = model_entry(args.model, registry)
        name, path = resolve_model(args.model, registry)
        backend = load_backend("llama.cpp", path, n_ctx=args.ctx, n_threads=args.threads,
                               n_gpu_layers=args.gpu_layers, on_load=on_load)
        options = drafter_options(args, entry)
        try:
            drafter = make_drafter(args.drafter, backend, options)
        except BaseException:
            backend.close()
            raise
        return cls(backend, drafter, sampling, name, args.max_tokens, args.draft_tokens, tuple(args.stop),
                   np.random.default_rng(args.seed), options)

    def answer(self, conversation: Conversation, on_prefill: Progress = None) -> Iterator[TokenEvent]:
        """Stream the assistant's answer to the conversation's last user message. The caller adds the
        answer to the conversation (so an interrupted answer can be kept, too)."""
        prompt = conversation.prompt_tokens(self.backend, reserve=self.max_tokens)
        return stream_generate(self.backend, self.drafter, prompt, self.sampling, max_tokens=self.max_tokens,
                               draft_tokens=self.draft_tokens, stop=self.stop, rng=self.rng,
                               on_prefill=on_prefill)

    def close(self) -> None:
        self.drafter.close()
        self.backend.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SUFFIX_ARGS = {"suffix_max_depth": "max_depth", "suffix_min_prob": "min_token_prob",
                "suffix_factor": "max_spec_factor", "suffix_offset": "max_spec_offset",
                "suffix_cache_tokens": "cache_tokens"}


def drafter_options(args, entry: Optional[ModelEntry]) -> DrafterOptions:
    """Drafter settings: the command line over the model's models.toml entry over the defaults."""
    suffix = dict(entry.suffix) if entry else {}
    suffix.update({key: getattr(args, arg) for arg, key in _SUFFIX_ARGS.items() if getattr(args, arg) is not None})
    return DrafterOptions(ngram_min=args.ngram_min, ngram_max=args.ngram_max, suffix=suffix)

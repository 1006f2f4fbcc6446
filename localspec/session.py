"""A loaded model with its drafter and generation settings, answering a conversation turn by turn."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localspec.backends import load_backend
from localspec.backends.base import Backend, Progress
from localspec.baseline import PlainBaseline
from localspec.chat import Conversation
from localspec.cost_cache import CostCache, cache_disabled
from localspec.drafters import DrafterOptions, check_drafter_name, make_drafter
from localspec.drafters.base import Drafter
from localspec.engine import stream_generate
from localspec.exact_guard import exact_mode
from localspec.registry import ModelEntry, load_registry, model_entry, resolve_model
from localspec.sampling import SamplingParams
from localspec.speclen import AdaptiveK, FixedK, make_policy
from localspec.types import TokenEvent


@dataclass
class Session:
    backend: Backend
    drafter: Drafter
    sampling: SamplingParams
    model_name: str
    max_tokens: int = 512
    speclen: FixedK | AdaptiveK = field(default_factory=AdaptiveK)  # kept across turns: what it learnt
    stop: tuple[str, ...] = ()
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    drafter_options: DrafterOptions = field(default_factory=DrafterOptions)
    costs: CostCache | None = None  # the measured verify-cost curve on disk (None: not kept)
    plain: PlainBaseline = field(default_factory=PlainBaseline)  # what the speedup is measured against
    exact_guard: float | None = None  # the near-tie margin at temperature 0 (None: no guard)
    exact_guard_source: str = ""  # 'calibrated' or 'default'
    kernels_invariant: bool = False  # the kernels the cost curve in `costs` was measured with

    @classmethod
    def from_args(cls, args, on_load=None) -> Session:
        sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p)
        check_drafter_name(args.drafter)  # bad options fail before the (slow) model load
        speclen = make_policy(args.draft_tokens)
        registry = load_registry()
        entry = model_entry(args.model, registry)
        backend_name = getattr(args, "backend", None) or choose_backend(args.model, entry)
        name, path = resolve_model(args.model, registry, backend=backend_name)
        guarded = not getattr(args, "no_exact_guard", False)
        backend = load_backend(
            backend_name,
            path,
            n_ctx=args.ctx,
            n_threads=args.threads,
            n_gpu_layers=args.gpu_layers,
            on_load=on_load,
            batch_invariant=guarded,
        )
        options = drafter_options(args, entry, registry)
        try:
            drafter = make_drafter(args.drafter, backend, options)
        except BaseException:
            backend.close()
            raise
        session = cls(
            backend,
            drafter,
            sampling,
            name,
            args.max_tokens,
            speclen,
            tuple(args.stop),
            np.random.default_rng(args.seed),
            options,
        )
        if guarded:
            from localspec.calibrate import margin_for

            session.exact_guard, session.exact_guard_source = margin_for(backend)
        session.kernels_invariant = session.invariant_now()
        session.costs = session.cost_cache(session.kernels_invariant)
        session.speclen = session.new_policy(speclen)
        return session

    def invariant_now(self) -> bool:
        """Whether this turn runs batch-invariant kernels (greedy, guarded, and the backend has them)."""
        return exact_mode(self.backend, self.sampling, self.exact_guard)[0]

    def cost_cache(self, invariant: bool) -> CostCache:
        """The verify-cost curve on disk for the backend and the kernels in use: batch-invariant windows
        cost more than the default kernels' (localspec/backends/llama_cpp_exact.py), so each has its own."""
        key = None if cache_disabled() else self.backend.cost_key()
        if key is not None and invariant:
            key += "|batch-invariant kernels"
        return CostCache(key)

    def _follow_kernels(self) -> None:
        """A temperature change can switch the kernels: the controller then plans on their cost curve."""
        invariant = self.invariant_now()
        if invariant == self.kernels_invariant:
            return
        self.save_costs()
        self.kernels_invariant = invariant
        self.costs = self.cost_cache(invariant)
        self.speclen.swap_costs(self.costs.load())

    def new_policy(self, draft_tokens, costs: CostCache | None = None) -> FixedK | AdaptiveK:
        """A speculation-length policy; an adaptive one starts from the cost curve measured on this machine
        in earlier sessions (``costs``, else the session's)."""
        policy = make_policy(draft_tokens)
        costs = costs or self.costs
        if isinstance(policy, AdaptiveK) and costs is not None:
            policy.load_costs(costs.load())
        return policy

    def answer(self, conversation: Conversation, on_prefill: Progress = None) -> Iterator[TokenEvent]:
        """Stream the assistant's answer to the conversation's last user message. The caller adds the
        answer to the conversation (so an interrupted answer can be kept, too)."""
        prompt = conversation.prompt_tokens(self.backend, reserve=self.max_tokens)
        self._follow_kernels()
        try:
            yield from stream_generate(
                self.backend,
                self.drafter,
                prompt,
                self.sampling,
                max_tokens=self.max_tokens,
                draft_tokens=self.speclen,
                stop=self.stop,
                rng=self.rng,
                on_prefill=on_prefill,
                plain=self.plain,
                exact_guard=self.exact_guard,
            )
        finally:  # what this turn measured is there for the next start, even after Ctrl-C
            self.save_costs()

    def save_costs(self) -> None:
        if self.costs is not None:
            self.costs.save(self.speclen.costs())

    def load_report(self) -> str:
        """What is loaded and how much memory each model's weights take."""
        text = f"{self.model_name} {self.backend.memory_bytes() / 2**20:.0f} MB ({self.backend.name})"
        draft = self.draft_model()
        if draft:
            text += f" + draft {draft}"
        about = self.drafter.describe()
        text += f" · drafter {self.drafter.name}{f' ({about})' if about else ''}, {self.speclen.label}"
        if self.invariant_now():
            text += " · exact: batch-invariant kernels"
        elif self.exact_guard is not None and self.sampling.greedy:
            text += f" · exact guard ({self.exact_guard_source}"
            text += ", `localspec calibrate` measures it)" if self.exact_guard_source == "default" else ")"
        return text

    def draft_model(self) -> str | None:
        """'NAME N MB' of the drafter's own model, if it has one."""
        draft = getattr(self.drafter, "draft", None)
        return None if draft is None else f"{draft.model_name} {draft.memory_bytes() / 2**20:.0f} MB"

    def set_drafter(self, drafter: Drafter) -> None:
        """Switch drafters mid-chat; the controller forgets the old one's acceptance, not the machine's costs."""
        self.drafter.close()
        self.drafter = drafter
        self.speclen.reset_drafter()

    def set_draft_tokens(self, value) -> None:
        """A fixed K or 'auto'. Switching to 'auto' keeps no acceptance evidence, only the cost curve."""
        self.save_costs()
        self.speclen = self.new_policy(value)

    def close(self) -> None:
        self.drafter.close()
        self.backend.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SUFFIX_ARGS = {
    "suffix_max_depth": "max_depth",
    "suffix_min_prob": "min_token_prob",
    "suffix_factor": "max_spec_factor",
    "suffix_offset": "max_spec_offset",
    "suffix_cache_tokens": "cache_tokens",
}


def choose_backend(spec: str | None, entry: ModelEntry | None) -> str:
    """MLX on Apple silicon for an alias with an MLX source (or a model folder); a folder elsewhere goes to
    torch; everything else to llama.cpp."""
    from localspec.hub import default_backend, on_apple_silicon

    if entry is not None:
        return default_backend(entry)
    if spec and Path(spec).expanduser().is_dir():
        return "mlx" if on_apple_silicon() else "torch"
    return "llama.cpp"


def drafter_options(args, entry: ModelEntry | None, registry=None) -> DrafterOptions:
    """Drafter settings: the command line over the model's models.toml entry over the defaults."""
    suffix = dict(entry.suffix) if entry else {}
    suffix.update({key: getattr(args, arg) for arg, key in _SUFFIX_ARGS.items() if getattr(args, arg) is not None})
    known = entry.drafts if entry else ()
    draft_spec = getattr(args, "draft_model", None)
    backend = getattr(args, "backend", None) or choose_backend(args.model, entry)
    registry = registry or load_registry()

    def find_model(name: str) -> str:
        return str(resolve_model(name, registry, backend=backend)[1])

    draft_path = find_model(draft_spec) if draft_spec else None
    ngram = entry.ngram if entry else {}
    return DrafterOptions(
        ngram_min=args.ngram_min or ngram.get("min", DrafterOptions.ngram_min),
        ngram_max=args.ngram_max or ngram.get("max", DrafterOptions.ngram_max),
        suffix=suffix,
        draft_model=draft_path,
        draft_name=draft_spec,
        known_drafts=known,
        find_model=find_model,
        seed=args.seed,
        eagle_head=getattr(args, "eagle_head", None) or (entry.eagle.get("torch") if entry else None),
        eagle_tree=getattr(args, "eagle_tree", 0) or 0,
    )

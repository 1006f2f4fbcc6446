"""A loaded model with its drafter and generation settings, answering a conversation turn by turn."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from localspec.backends import load_backend
from localspec.backends.base import Backend, Progress
from localspec.chat.conversation import Conversation
from localspec.chat.model_text import ModelText
from localspec.chat.prompt_states import PromptStates
from localspec.chat.reasoning import SWITCH
from localspec.config import MAX_TOKENS, Settings
from localspec.cost_cache import CostCache
from localspec.drafters.base import Drafter, check_fit
from localspec.drafters.grammar import GrammarDrafter
from localspec.drafters.table import DRAFTERS, DrafterSetup
from localspec.engine.baseline import PlainBaseline
from localspec.engine.exact import Exact
from localspec.engine.logprobs import MAX_TOP as MAX_LOGPROBS  # noqa: F401 (the server's limit)
from localspec.engine.loop import stream_generate
from localspec.engine.speclen import AdaptiveK, FixedK, make_policy
from localspec.engine.stats import TokenEvent
from localspec.engine.stopping import StopStrings
from localspec.errors import ConfigError, LocalspecError, ModelError
from localspec.sampling import SamplingParams
from localspec.structured.constraint import Constraint
from localspec.structured.grammar import Grammar


def thinking_options(backend: Backend, model: str, think: bool | None) -> dict:
    """The chat template variables for --think/--no-think, or a ConfigError for a template without the switch."""
    if think is None:
        return {}
    if SWITCH not in (backend.tokenizer.chat_template or ""):
        flag = "--think" if think else "--no-think"
        raise ConfigError(
            f"{flag}: {model}'s chat template has no thinking switch ({SWITCH}); it applies to reasoning models "
            "whose template has one (Qwen3, SmolLM3, GLM-4.5, ...). Leave the flag out for this model"
        )
    return {SWITCH: think}


def drafter_summaries() -> list[tuple[str, str]]:
    """(name, what it does) of every drafter, in the table's order."""
    return [(kind.name, kind.summary) for kind in DRAFTERS.values()]


@dataclass(frozen=True)
class Request:
    """One request's own generation settings; None (or empty) leaves the session's."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    stop: tuple[str, ...] = ()  # in addition to the session's
    seed: int | None = None  # a seed of its own: the same request and seed give the same answer
    logprobs: int | None = None  # the answer tokens' log-probabilities, with this many alternatives each
    grammar: Grammar | None = None  # structured output: what the answer must follow (None: the session's)
    min_indent: int = 0  # editors' completions: a later line indented less ends the answer (engine/stopping.py)
    time_limit_s: float | None = None  # ...and past this much decoding, the next newline does

    @property
    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p}


@dataclass
class Session:
    backend: Backend
    drafter: Drafter
    sampling: SamplingParams
    model_name: str
    max_tokens: int = MAX_TOKENS
    speclen: FixedK | AdaptiveK = field(default_factory=AdaptiveK)  # kept across turns: what it learnt
    stop: tuple[str, ...] = ()
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    drafters: DrafterSetup = field(default_factory=DrafterSetup)  # builds any drafter by name, with its options
    costs: CostCache | None = None  # the measured verify-cost curve on disk, for exact.kernels (None: not kept)
    plain: PlainBaseline = field(default_factory=PlainBaseline)  # what the speedup is measured against
    exact: Exact = field(default_factory=Exact)  # `--exact`: greedy output bit-identical to plain decoding
    states: PromptStates | None = None  # conversation states kept in RAM (the server's), else one live cache
    template_options: dict = field(default_factory=dict)  # the chat template's own variables (enable_thinking)
    fallback: str = ""  # why the recommended drafter gave way to another (the load report says it)
    grammar: Grammar | None = None  # what every answer follows unless a request says (--json-schema, --grammar)
    text: ModelText = field(init=False)  # the model's templates, special tokens and card (the server's prompts)

    def __post_init__(self) -> None:
        self.text = ModelText(self.backend, self.model_name, self.max_tokens, self.template_options)

    @classmethod
    def open(cls, settings: Settings, on_load=None) -> Session:
        """Load the model and the drafter the settings name (config.py built them)."""
        backend = load_backend(
            settings.backend,
            settings.require_model(),
            n_ctx=settings.ctx,
            n_threads=settings.threads,
            n_gpu_layers=settings.gpu_layers,
            steps="auto" if settings.cuda_graphs else "off",
            on_load=on_load,
            batch_invariant=settings.exact,
        )
        try:
            options = thinking_options(backend, settings.model, settings.think)
            drafter, fallback = _drafter_for(settings, backend)
        except BaseException:
            backend.close()
            raise
        session = cls(
            backend,
            drafter,
            settings.sampling,
            settings.model,
            settings.max_tokens,
            make_policy(settings.draft_tokens),
            settings.stop,
            np.random.default_rng(settings.seed),
            settings.drafters,
            exact=Exact.of(backend, settings.exact),
            template_options=options,
            fallback=fallback,
            grammar=settings.grammar,
        )
        session.costs = CostCache.of(backend, session.exact.kernels)
        session.speclen = make_policy(settings.draft_tokens, session.costs.load())
        return session

    def set_exact(self, on: bool) -> None:
        """Switch `--exact` (the backend's kernels must allow it: llama.cpp's weight layout is fixed at load,
        Backend.reload_for_exact). Where the kernels change, the controller plans on their own cost curve."""
        was, self.exact = self.exact.kernels, Exact.of(self.backend, on)
        if self.costs is not None and self.exact.kernels != was:
            self.save_costs()
            self.costs = CostCache.of(self.backend, self.exact.kernels)
            self.speclen.swap_costs(self.costs.load())

    def answer(self, conversation: Conversation, on_prefill: Progress = None) -> Iterator[TokenEvent]:
        """Stream the assistant's answer to the conversation's last user message. The caller adds the
        answer to the conversation (so an interrupted answer can be kept, too)."""
        prompt = conversation.prompt_tokens(self.backend, reserve=self.max_tokens, options=self.template_options)
        return self.complete(prompt, Request(), on_prefill)

    def complete(self, prompt: list[int], request: Request, on_prefill: Progress = None) -> Iterator[TokenEvent]:
        """Stream the continuation of ``prompt`` with the request's settings over the session's (the server's
        requests; a chat turn is a request with none of its own)."""
        sampling = replace(
            self.sampling,
            **{k: v for k, v in request.sampling.items() if v is not None},
        )
        rng = self.rng if request.seed is None else np.random.default_rng(request.seed)
        tokens = request.max_tokens or self.max_tokens
        grammar = request.grammar or self.grammar
        stop = StopStrings(self.stop + tuple(request.stop), request.min_indent, request.time_limit_s)
        return self._stream(prompt, sampling, tokens, stop, rng, on_prefill, request.logprobs, grammar)

    def keep_states(self, budget_bytes: int) -> Session:
        """Keep conversation states in RAM up to ``budget_bytes`` (where the backend can save its cache)."""
        if budget_bytes > 0 and self.backend.capabilities.snapshots:
            self.states = PromptStates(self.backend, budget_bytes)
        return self

    def idle(self) -> None:
        """The server has no request waiting: save the live conversation's state now (PromptStates.keep_live)."""
        if self.states is not None:
            self.states.keep_live(self.drafter)

    def _stream(
        self, prompt, sampling, max_tokens, stop, rng, on_prefill, logprobs=None, grammar=None
    ) -> Iterator[TokenEvent]:
        constraint, drafter = self._constrained(grammar)
        if self.states is not None:
            self.states.prepare(prompt, self.drafter)
        try:
            yield from stream_generate(
                self.backend,
                drafter,
                prompt,
                sampling,
                max_tokens=max_tokens,
                draft_tokens=self.speclen,
                stop=stop,
                rng=rng,
                on_prefill=on_prefill,
                plain=self.plain,
                exact_guard=self.exact.margin,
                logprobs=logprobs,
                constraint=constraint,
            )
        finally:  # what this turn measured is there for the next start, even after Ctrl-C
            self.save_costs()

    def _constrained(self, grammar: Grammar | None) -> tuple[Constraint | None, Drafter]:
        """The answer's matcher and the drafter that runs under it: the grammar's forced tokens in front of the
        session's drafter (grammar+suffix), or no constraint and the session's drafter."""
        if grammar is None:
            return None, self.drafter
        if not self.backend.tokenizer.eog_tokens:
            raise ModelError("this model has no end-of-generation token, so a grammar could never end its answer")
        constraint = Constraint(grammar, self.backend.tokenizer.grammar_tokenizer(), self.backend.vocab_size)
        return constraint, GrammarDrafter(self.drafter)

    def save_costs(self) -> None:
        if self.costs is not None:
            self.costs.save(self.speclen.costs())

    def load_report(self) -> str:
        """What is loaded and how much memory each model's weights take."""
        text = f"{self.model_name} {self.backend.memory_bytes() / 2**20:.0f} MB ({self.backend.name})"
        draft = self.draft_model()
        if draft:
            text += f" + draft {draft}"
        if self.backend.info.placement:
            text += f" · {self.backend.info.placement}"
        about = self.drafter.describe()
        text += f" · drafter {self.drafter.name}{f' ({about})' if about else ''}, {self.speclen.label}"
        rollback = self.backend.capabilities.max_rollback  # a recurrent state: drafts as long as its snapshots
        if self.backend.capabilities.checkpoints:
            text += " · recurrent state: saved before each verify window, restored on a rejection"
        elif rollback is not None:
            snapshots = self.backend.info.snapshot_bytes
            size = f" ({rollback} snapshots of it, {snapshots / 2**20:.0f} MB)" if snapshots else ""
            text += f" · recurrent state{size}: " + (
                f"drafts of at most {rollback} tokens" if rollback else "no speculation"
            )
        if self.fallback:
            text += f" · {self.fallback}"
        return f"{text} · {self.exact.describe()}"

    def draft_model(self) -> str | None:
        """'NAME N MB' of the drafter's own model, if it has one."""
        draft = getattr(self.drafter, "draft", None)
        return None if draft is None else f"{draft.model_name} {draft.memory_bytes() / 2**20:.0f} MB"

    def set_drafter(self, drafter: Drafter) -> None:
        """Switch drafters mid-chat; the controller forgets the old one's acceptance, not the machine's costs."""
        self.drafter.close()
        self.drafter = drafter
        self.speclen.reset_drafter()

    def switch_drafter(self, name: str) -> None:
        """Build the drafter ``name`` with the run's options for it and switch to it (the old one stays on
        an error)."""
        self.set_drafter(self.drafters.build(name, self.backend))

    def set_temperature(self, temperature: float) -> None:
        self.sampling = replace(self.sampling, temperature=temperature)

    def set_draft_tokens(self, value) -> None:
        """A fixed K or 'auto'. Switching to 'auto' keeps no acceptance evidence, only the cost curve."""
        self.save_costs()
        self.speclen = make_policy(value, self.costs.load() if self.costs is not None else None)

    def close(self) -> None:
        self.drafter.close()
        self.backend.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _drafter_for(settings: Settings, backend: Backend) -> tuple[Drafter, str]:
    """The settings' drafter, checked against the loaded model. One the user named is built or refused; one
    only recommended (models.toml, the default) gives way to suffix, then to plain decoding, where this model
    or backend cannot run it (an MTP chain on a GGUF without the layer, any drafter on a cache that cannot be
    rolled back): (drafter, what gave way and why, '' when nothing did)."""
    chosen = dict((name, source) for name, _, source in settings.rows).get("drafter") == "flag"
    names = [settings.drafter] if chosen else list(dict.fromkeys([settings.drafter, "suffix", "none"]))
    refused = []
    for name in names:
        drafter = None
        try:
            drafter = settings.drafters.build(name, backend)
            check_fit(backend, drafter)
        except LocalspecError as exc:
            if drafter is not None:
                drafter.close()
            if chosen:
                raise
            refused.append(f"{name} cannot run here ({exc})")
            continue
        instead = "plain decoding" if name == "none" else name
        return drafter, "; ".join(refused) + (f": {instead} instead" if refused else "")
    raise ConfigError("; ".join(refused))  # plain decoding always fits: not reached

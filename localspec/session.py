"""A loaded model with its drafter and generation settings, answering a conversation turn by turn."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from localspec.backends import load_backend
from localspec.backends.base import Backend, Progress
from localspec.chat.conversation import Conversation
from localspec.chat.fim import Infill, infill_tokens
from localspec.chat.prompt_states import PromptStates
from localspec.chat.reasoning import SWITCH, ReasoningFormat, reasoning_format
from localspec.config import MAX_TOKENS, Settings
from localspec.cost_cache import CostCache, cache_disabled
from localspec.drafters.base import Drafter, check_fit
from localspec.drafters.grammar import GrammarDrafter
from localspec.drafters.table import DRAFTERS, DrafterSetup
from localspec.engine.baseline import PlainBaseline
from localspec.engine.exact import exact_mode
from localspec.engine.logprobs import MAX_TOP as MAX_LOGPROBS  # noqa: F401 (the server's limit)
from localspec.engine.loop import stream_generate
from localspec.engine.speclen import AdaptiveK, FixedK, make_policy
from localspec.engine.stats import TokenEvent
from localspec.engine.stopping import StopStrings
from localspec.errors import ConfigError, LocalspecError, ModelError
from localspec.sampling import SamplingParams
from localspec.structured.constraint import Constraint, special_token
from localspec.structured.grammar import Grammar


def thinking_options(backend: Backend, model: str, think: bool | None) -> dict:
    """The chat template variables for --think/--no-think, or a ConfigError for a template without the switch."""
    if think is None:
        return {}
    if SWITCH not in (backend.chat_template or ""):
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
class Runner:
    """A drafter with a speculation-length policy of its own, run on the session's model outside the chat:
    what `localspec bench` times side by side."""

    label: str
    drafter: Drafter
    policy: FixedK | AdaptiveK
    exact: bool = False  # bit-identical greedy output (NAME+exact): the session's exact machinery applies
    plain: PlainBaseline = field(default_factory=PlainBaseline)  # its in-session speedup baseline


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
    costs: CostCache | None = None  # the measured verify-cost curve on disk (None: not kept)
    plain: PlainBaseline = field(default_factory=PlainBaseline)  # what the speedup is measured against
    exact: bool = False  # `--exact`: greedy output bit-identical to plain decoding (docs/exactness.md)
    exact_guard: float | None = None  # with exact, the near-tie margin at temperature 0 (None: no guard)
    exact_guard_source: str = ""  # 'calibrated' or 'default'
    kernels_invariant: bool = False  # the kernels the cost curve in `costs` was measured with
    states: PromptStates | None = None  # conversation states kept in RAM (the server's), else one live cache
    template_options: dict = field(default_factory=dict)  # the chat template's own variables (enable_thinking)
    fallback: str = ""  # why the recommended drafter gave way to another (the load report says it)
    grammar: Grammar | None = None  # what every answer follows unless a request says (--json-schema, --grammar)

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
            template_options=options,
            fallback=fallback,
            grammar=settings.grammar,
        )
        session.set_exact(settings.exact)
        session.kernels_invariant = session.invariant_now()
        session.costs = session.cost_cache(session.kernels_invariant)
        session.speclen = session.new_policy(settings.draft_tokens)
        return session

    def set_exact(self, on: bool) -> None:
        """Switch `--exact` (the backend's kernels must allow it: llama.cpp's weight layout is fixed at load,
        see exact_switch). Without batch-invariant kernels greedy turns run the near-tie guard."""
        self.exact = on
        self.exact_guard, self.exact_guard_source = self._guard_margin() if on else (None, "")
        if self.costs is not None:
            self._follow_kernels(self.sampling)

    def exact_switch(self, on: bool) -> str:
        """What turning `--exact` on or off takes: 'now', or 'reload' where the weight layout it needs is fixed
        at load (llama.cpp on the CPU: repacked weights for speed, unrepacked ones for batch-invariant kernels)."""
        return "reload" if self.backend.reload_for_exact(on) else "now"

    def exact_mode(self) -> str:
        """Which mode greedy turns run, in words: what the load report, stats and TUI show."""
        if not self.exact:
            return "fast (greedy may differ from plain decoding at near-ties; --exact for bit-identical)"
        if self.backend.capabilities.batch_invariant:
            return "exact: batch-invariant kernels (greedy and seeded answers whatever the drafter)"
        return (
            f"exact: {self.backend.name} has no batch-invariant kernels here, so greedy turns take no token from "
            f"a verify row whose top two logits are within {self.exact_guard:g} ({self.exact_guard_source}; "
            "`localspec calibrate` measures it): flips become rare, not impossible"
        )

    def exact_notice(self) -> str:
        """One line where --exact cannot give bit-identical output on this backend, saying what it does instead."""
        return self.exact_mode() if self.exact and not self.backend.capabilities.batch_invariant else ""

    def invariant_now(self, sampling: SamplingParams | None = None) -> bool:
        """Whether a turn with ``sampling`` (default: the session's) runs batch-invariant kernels (--exact, and
        the backend has them: at every temperature, so that seeded sampled answers are drafter-invariant too)."""
        return exact_mode(self.backend, sampling or self.sampling, self.exact_guard)[0]

    def cost_cache(self, invariant: bool) -> CostCache:
        """The verify-cost curve on disk for the backend and the kernels in use: batch-invariant windows
        cost more than the default kernels' (localspec/backends/llama_cpp/exact.py), so each has its own."""
        key = None if cache_disabled() else self.backend.cost_key()
        if key is not None and invariant:
            key += "|batch-invariant kernels"
        return CostCache(key)

    def _follow_kernels(self, sampling: SamplingParams) -> None:
        """A temperature change can switch the kernels: the controller then plans on their cost curve."""
        invariant = self.invariant_now(sampling)
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

    def _stream(
        self, prompt, sampling, max_tokens, stop, rng, on_prefill, logprobs=None, grammar=None
    ) -> Iterator[TokenEvent]:
        self._follow_kernels(sampling)
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
                exact_guard=self.exact_guard,
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
        if not self.backend.eog_tokens:
            raise ModelError("this model has no end-of-generation token, so a grammar could never end its answer")
        constraint = Constraint(grammar, self.backend.grammar_tokenizer(), self.backend.vocab_size)
        return constraint, GrammarDrafter(self.drafter)

    @property
    def chat_template(self) -> str | None:
        return self.backend.chat_template

    def chat_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        return self.backend.chat_text(messages, tools=tools, options=self.template_options)

    @cached_property
    def reasoning(self) -> ReasoningFormat | None:
        """The markers this model's reasoning comes between (reasoning.py), None for a model without them."""
        hello = [{"role": "user", "content": "Hello"}]
        return reasoning_format(self.chat_template, lambda: self.chat_text(hello))

    def special_token(self, text: str) -> int | None:
        """The special token that is ``text`` in this model's vocabulary (as a grammar sees it), else None."""
        ids = self.backend.tokenize(text, special=True)
        return special_token(self.backend.grammar_tokenizer(), ids)

    def template_tokens(self, text: str) -> list[int]:
        return self.backend.template_tokens(text)

    def text_prompt(self, text: str) -> list[int]:
        return self.backend.with_bos(self.backend.tokenize(text))

    def infill_prompt(self, infill: Infill, max_tokens: int | None) -> list[int]:
        """A fill-in-the-middle prompt in this model's FIM tokens (chat/fim.py), room left for the answer."""
        b = self.backend
        marks = b.fim_tokens()
        if marks is None:
            raise ModelError(
                f"{self.model_name} has no fill-in-the-middle tokens (prefix, suffix and middle markers), so it "
                "cannot fill in code; serve a code model that has them (Qwen2.5-Coder, StarCoder 2, CodeLlama, "
                "DeepSeek-Coder)"
            )
        bos = b.bos_token if b.add_bos else None
        room = min(max_tokens or self.max_tokens, b.n_ctx // 2)  # clients send 4096 whatever the context: clipped
        return infill_tokens(infill, marks, b.tokenize, b.n_ctx, room, bos)

    @property
    def context_size(self) -> int:
        return self.backend.n_ctx

    def model_card(self) -> dict:
        """What the model is, in llama-server's `/v1/models` `meta` names (on the thread that owns the model)."""
        b = self.backend
        card = {"n_ctx": b.n_ctx, "n_vocab": b.vocab_size, "n_params": b.n_params, "size": b.size_bytes}
        return {"n_ctx_train": b.train_ctx, **card} if b.train_ctx else card

    def token_bytes(self, token: int) -> bytes:
        return self.backend.token_bytes(token)

    def ends_generation(self, token: int) -> bool:
        return token in self.backend.eog_tokens

    def save_costs(self) -> None:
        if self.costs is not None:
            self.costs.save(self.speclen.costs())

    def load_report(self) -> str:
        """What is loaded and how much memory each model's weights take."""
        text = f"{self.model_name} {self.backend.memory_bytes() / 2**20:.0f} MB ({self.backend.name})"
        draft = self.draft_model()
        if draft:
            text += f" + draft {draft}"
        if self.backend.placement:
            text += f" · {self.backend.placement}"
        about = self.drafter.describe()
        text += f" · drafter {self.drafter.name}{f' ({about})' if about else ''}, {self.speclen.label}"
        rollback = self.backend.max_rollback  # a recurrent state: drafts no longer than its snapshots reach
        if self.backend.checkpoints:
            text += " · recurrent state: saved before each verify window, restored on a rejection"
        elif rollback is not None:
            snapshots = self.backend.snapshot_bytes
            size = f" ({rollback} snapshots of it, {snapshots / 2**20:.0f} MB)" if snapshots else ""
            text += f" · recurrent state{size}: " + (
                f"drafts of at most {rollback} tokens" if rollback else "no speculation"
            )
        if self.fallback:
            text += f" · {self.fallback}"
        return f"{text} · {self.exact_mode()}"

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

    def draft_model_path(self) -> str | None:
        """The draft model's file the draft drafter would load (--draft-model, else the model's first
        recommended draft), or None if there is none."""
        options, context = self.drafters.options_of("draft"), self.drafters.context
        if not options.model:
            return None
        return context.find_model(options.model) if context.find_model else options.model

    def runner(self, label: str, drafter: str, draft_tokens, exact: bool = False, **options) -> Runner:
        """A fresh drafter ``drafter`` (its options replaced by ``options``) with its own controller, which
        starts from the machine's measured cost curve for the kernels it will run, as a user's chat does after
        its first session. ``exact``: bit-identical greedy output, which needs a session opened with --exact
        where the backend's weight layout is fixed at load."""
        if exact and not self.exact and self.exact_switch(True) == "reload":
            raise ConfigError(
                f"{label}: bit-identical greedy output needs the model loaded for it ({self.backend.name} fixes its "
                "weight layout at load); add --exact to the bench command (the other methods then run the same "
                "weights with the default kernels)"
            )
        costs = self.cost_cache(self._invariant_for(exact))
        built = self.drafters.build(drafter, self.backend, **options)
        return Runner(label, built, self.new_policy(draft_tokens, costs), exact)

    def _invariant_for(self, exact: bool) -> bool:
        """Whether a runner's turns run batch-invariant kernels: its cost curve's kernels."""
        return exact and self.backend.capabilities.batch_invariant

    def _guard_margin(self) -> tuple[float, str]:
        """--exact's near-tie margin for this backend, model and build, and where it comes from."""
        from localspec.engine.calibrate import margin_for

        return margin_for(self.backend)

    def _margin(self, exact: bool) -> float | None:
        """The exact machinery's margin for a runner's turn (see exact_guard.exact_mode), None without --exact
        (a NAME+exact method of a session opened without it has its own)."""
        if not exact:
            return None
        return self.exact_guard if self.exact_guard is not None else self._guard_margin()[0]

    def run(self, runner: Runner, prompt: list[int], max_tokens: int, seed: int) -> Iterator[TokenEvent]:
        """A runner's answer to a whole prompt, prefilled from scratch as a new chat's is."""
        self.backend.truncate(0)
        return stream_generate(
            self.backend,
            runner.drafter,
            prompt,
            self.sampling,
            max_tokens=max_tokens,
            draft_tokens=runner.policy,
            rng=np.random.default_rng(seed),
            plain=runner.plain,
            exact_guard=self._margin(runner.exact),
        )

    def keep_costs(self, runners: list[Runner]) -> None:
        """Save the cost curves the runners measured: per kernel choice, that of the runner that measured
        most window sizes."""
        by_kernels: dict[bool, list[AdaptiveK]] = {}
        for r in runners:
            if isinstance(r.policy, AdaptiveK):
                by_kernels.setdefault(self._invariant_for(r.exact), []).append(r.policy)
        for invariant, measured in by_kernels.items():
            costs = self.cost_cache(invariant)
            if costs is not None:
                costs.save(max(measured, key=lambda p: len(p.costs()["verify_s"])).costs())

    def prompt_tokens(self, messages: list[dict], reserve: int) -> list[int]:
        conversation = Conversation()
        conversation.messages = [dict(m) for m in messages]
        return conversation.prompt_tokens(self.backend, reserve=reserve, options=self.template_options)

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

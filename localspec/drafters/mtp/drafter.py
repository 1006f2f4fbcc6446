"""MTP drafting (`--drafter mtp`): the target's own multi-token-prediction layer drafts for it. On llama.cpp
(below, with mtp_llama.py); on torch for MiMo's layout, through the EAGLE drafter (mtp_torch.py).

The layer reads, for position P, the token at P and the target's final hidden state (after the output norm)
at P - 1, and predicts the token at P + 1. So the drafter is fed the target's rows of every cached position
(``needs.hidden_states``; the backend hands out the MTP rows, ``use_mtp_features``): each step's accepted
positions are paired with the rows before them and put into the layer's cache, and then the layer drafts
from the pending token, chaining on its own hidden row for every further token. Its draft tokens come with
their probability under the layer as confidence, and at temperature > 0 with the layer's distributions q
(the target's sampler settings on the layer's logits), so verification is the usual rejection sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, Costs, Drafter, DrafterNeeds, Turn, head_for
from localspec.drafters.picking import GREEDY, pick_token, token_probability
from localspec.errors import ConfigError, ModelError
from localspec.models.registry import hf_cached, hub_file
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft, Features, Step, common_prefix

HISTORY = 128  # the target's rows of the latest positions kept (a new turn resumes within them)


@dataclass(frozen=True)
class MtpOptions:
    assistant: str | None = option(
        None,
        "a Gemma-4 assistant drafter (a gemma4-assistant GGUF, a name or a path) instead of the target's own MTP layer",
        toml=False,
        kind=str,
    )


def build(target, options: MtpOptions | None, context) -> Drafter:
    """The MTP layer of the target: llama.cpp's (a GGUF that carries it), or MiMo's on torch (``BUILDS``)."""
    if target is None:
        raise ConfigError("the mtp drafter needs a loaded target model")
    return head_for(BUILDS, target, "MTP drafters (a GGUF that carries the MTP layers; MiMo on torch)")(
        target, options, context
    )


def _build_torch(target, options: MtpOptions | None, context) -> Drafter:
    from localspec.drafters.mtp.torch_head import TorchMtpDrafter

    return TorchMtpDrafter(target, context.seed)


def _build_llama(target, options: MtpOptions | None, context) -> Drafter:
    from localspec.drafters.mtp.llama_head import LlamaMtpHead

    spec = options.assistant if options else None
    if spec:
        from localspec.drafters.mtp.llama_head import LlamaAssistantHead

        head = LlamaAssistantHead(_assistant_file(spec, target, context), target)
    else:
        head = LlamaMtpHead(target)
    try:
        target.use_mtp_features()
        return MtpDrafter(head, target, context.seed)
    except BaseException:
        head.close()
        raise


def _assistant_file(spec: str, target, context):
    """The assistant GGUF: a path, a models.toml name, or the 'owner/repo/file.gguf' models.toml gives a model
    (in the Hugging Face cache once `localspec pull` has downloaded it)."""
    on_hub = hub_file(spec)
    if on_hub and not Path(spec).expanduser().exists():
        found = hf_cached(*on_hub)
        if found is None:
            pull = f"`localspec pull {context.model}` downloads the one models.toml names, or " if context.model else ""
            raise ModelError(
                f"the MTP assistant {spec} is neither a file nor downloaded: {pull}pass --mtp-assistant PATH.gguf "
                f"(a gemma4-assistant GGUF)"
            )
        return found
    return context.find_model(spec) if context.find_model else spec


class MtpDrafter(Drafter):
    name = "mtp"
    needs = DrafterNeeds(hidden_states=True)

    def __init__(self, head, target, seed: int | None = None) -> None:
        self.head, self.target = head, target
        self.vocab = target.vocab_size
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self._rows: dict[int, np.ndarray] = {}  # position -> the target's row there (the latest HISTORY)
        self._zero = np.zeros(head.hidden_size, np.float32)
        self._held: list[int] = []  # the tokens of the positions its cache holds
        self._pending: list[tuple[Sequence[int], Features]] = []  # observed, not yet put into the layer's cache
        self._costs = Costs(head.time_step(), 0.0)
        self.drafted = 0

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> int:
        """The positions its cache holds of ``prompt``: a prompt cached while another drafter (or none) ran
        is handed over again, else the layer would draft from a cache with a hole. An assistant keeps no
        cache (it reads the target's): it needs only the target's row before the pending token."""
        self.sampling = turn.sampling
        self.target.use_mtp_features()  # another drafter (a bench method, a chat's earlier one) may have switched
        self._catch_up()
        held = common_prefix(self._held, prompt[:-1])
        if not self.head.own_cache and held < len(prompt) - 1:
            return max(len(prompt) - 2, 0)
        return held

    def costs(self, context: Sequence[int]) -> Costs:
        return self._costs

    @property
    def state(self):
        return list(self._held), dict(self._rows), self.head.save()

    @state.setter
    def state(self, saved) -> None:
        held, rows, cache = saved if saved is not None else ([], {}, None)
        if not self.head.load(cache):
            held, rows = [], {}  # refused, or nothing saved: its cache holds nothing now
        self._held, self._rows, self._pending = list(held), dict(rows), []

    def _row(self, pos: int) -> np.ndarray:
        """The target's row at ``pos``; zeros before the start or where it is no longer kept (that pair
        then drafts worse, never wrongly: every draft is verified)."""
        return self._rows.get(pos, self._zero)

    def observe(self, step: Step) -> None:
        """The step's features go into the layer's cache with the next proposal (drafting or not: each feed
        cuts the cache back to what the target kept, so no verdict is needed) or at the end of the turn."""
        if step.features is not None:
            self._pending.append((step.context, step.features))

    def _catch_up(self) -> None:
        pending, self._pending = self._pending, []
        for context, features in pending:
            self._feed(context, features)

    def _feed(self, context: Sequence[int], features: Features) -> None:
        start, rows = features.start, np.asarray(features.rows, np.float32)
        tokens = list(context[start : start + len(rows)])
        inputs = np.stack([self._row(start - 1), *rows[: len(tokens) - 1]]) if tokens else rows[:0]
        self.head.feed(tokens, inputs, start)
        self._held[start:] = tokens
        for i, row in enumerate(rows[: len(tokens)]):
            self._rows[start + i] = row
        last = start + len(tokens) - 1
        for pos in [p for p in self._rows if p <= last - HISTORY or p > last]:
            del self._rows[pos]

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        self._catch_up()
        if max_tokens <= 0:
            return EMPTY_DRAFT
        sampling = self.sampling
        pos = len(context) - 1  # the pending token's position (an assistant drafts every token there)
        step = 0 if self.head.same_position else 1
        token, row = int(context[-1]), self._row(pos - 1)
        tokens, q_rows, confidence = [], [], []
        for index in range(min(max_tokens, self.head.max_draft or max_tokens)):
            logits, row = self.head.step(token, row, pos, index)
            token = pick_token(logits[: self.vocab], sampling, self.rng, self.vocab, q_rows)
            tokens.append(token)
            confidence.append(token_probability(logits, token))
            pos += step
        self.drafted += len(tokens)
        return Draft.chain(tokens, np.stack(q_rows) if q_rows else None, confidence)

    def end(self) -> dict:
        self._catch_up()  # the turn's last features: the layer's cache stays whole for the next turn
        figures = {"mtp_layers": self.target.capabilities.mtp_layers, "mtp_drafted": self.drafted}
        self.drafted = 0
        return figures

    def describe(self) -> str:
        return self.head.describe()

    def close(self) -> None:
        self.head.close()


# the drafter's builder per backend (the table row's; its keys are the backends mtp runs on): on torch the
# MTP layer drafts as an EAGLE head does, on llama.cpp in a side context of the target's own model
BUILDS = {"llama.cpp": _build_llama, "torch": _build_torch}

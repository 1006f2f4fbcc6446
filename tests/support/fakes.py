"""Scripted stand-ins for a model and for drafters, so the engine can be tested without weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backends.base import Backend, Capabilities
from localspec.backends.tokenizer import Tokenizer
from localspec.drafters.base import Drafter, DrafterNeeds
from localspec.drafters.random import RandomDrafter  # noqa: F401  (tests import it from here)
from localspec.types import Draft, ForwardOut, Step, Verdict

_ROWS: dict[tuple, np.ndarray] = {}
_Q_ROWS: dict[tuple, np.ndarray] = {}


def _frozen(row: np.ndarray) -> np.ndarray:
    row.setflags(write=False)
    return row


def _row(key: tuple, size: int, scale: float) -> np.ndarray:
    """normal(size) * scale from a generator seeded by ``key``'s hash (ints only: the same in every process),
    memoized: the chi-square tests ask for the same few rows hundreds of thousands of times, and seeding a
    generator per row was most of their time. Read-only, as every caller shares it."""
    row = _ROWS.get((key, size, scale))
    if row is None:
        row = _ROWS[(key, size, scale)] = _frozen(
            np.random.default_rng(abs(hash(key)) % 2**32).normal(size=size) * scale
        )
    return row


class ScriptedTokenizer(Tokenizer):
    """Token i's text is chr(ord('a') + i); token ``eog`` (if set) ends a turn and renders as nothing; a chat
    is its messages' contents, one after another."""

    def __init__(self, vocab_size: int = 12, eog: int | None = None) -> None:
        self.vocab_size, self.model_name = vocab_size, "scripted"
        self.eog_tokens = frozenset() if eog is None else frozenset({eog})

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return [ord(c) - ord("a") for c in text]

    def token_bytes(self, token: int) -> bytes:
        return b"" if token in self.eog_tokens else chr(ord("a") + token).encode()

    def chat_tokens(self, messages, add_generation_prompt: bool = True, options=None) -> list[int]:
        return [t for m in messages for t in self.tokenize(m["content"])]


class ScriptedBackend(Backend):
    """A 'model' whose next-token logits are a fixed pseudo-random function of the last ``order`` tokens,
    with a ScriptedTokenizer (or ``tokenizer``). ``forward_calls`` records the window sizes asked for, to check
    the engine never asks for more than it verifies.
    """

    name = "scripted"

    def __init__(
        self,
        vocab_size: int = 12,
        order: int = 2,
        scale: float = 2.0,
        n_ctx: int = 4096,
        eog: int | None = None,
        seed: int = 0,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size, self.order, self.scale, self.n_ctx, self.seed = vocab_size, order, scale, n_ctx, seed
        self.tokenizer = tokenizer or ScriptedTokenizer(vocab_size, eog)
        self.forward_calls: list[int] = []
        self.prefilled: list[int] = []
        self.model_name = "scripted"

    def logits_after(self, context: Sequence[int]) -> np.ndarray:
        """The row after ``context`` (read-only: rows are computed once per key and shared, see _row)."""
        return _row((self.seed, *context[-self.order :]), self.vocab_size, self.scale)

    def truncate(self, keep: int) -> None:
        del self._tokens[max(0, keep) :]

    def prefill(self, tokens, progress=None) -> None:
        self.prefilled.append(len(tokens))
        self._tokens.extend(tokens)

    def forward(self, tokens, return_hidden: bool = False) -> ForwardOut:
        self.forward_calls.append(len(tokens))
        rows = []
        for t in tokens:
            self._tokens.append(int(t))
            rows.append(self.logits_after(self._tokens))
        return ForwardOut(np.array(rows, dtype=np.float32))


class ScriptedTreeBackend(ScriptedBackend):
    """ScriptedBackend with tree verification: each node's row follows its own branch."""

    capabilities = Capabilities(tree_attention=True)

    def forward_tree(self, tokens, parents, return_hidden: bool = False) -> ForwardOut:
        self.forward_calls.append(len(tokens))
        base = list(self._tokens)
        branches = [[tokens[0]]]
        for i, parent in enumerate(parents):
            branches.append(branches[parent + 1] + [tokens[i + 1]])
        self._tokens.extend(int(t) for t in tokens)
        self._tree = (len(base), list(tokens))
        return ForwardOut(np.array([self.logits_after(base + b) for b in branches], dtype=np.float32))

    def accept_path(self, path) -> None:
        start, tokens = self._tree
        self._tokens[start:] = [tokens[0]] + [tokens[i + 1] for i in path]


class OracleDrafter(Drafter):
    """Drafts from a known greedy continuation: right for the first ``right`` tokens of every draft, then
    wrong (``right=None``: always right). Used to show speculation never changes greedy output."""

    name = "oracle"

    def __init__(self, reference: Sequence[int], prompt_len: int, vocab_size: int, right: int | None = None) -> None:
        self.reference, self.prompt_len, self.vocab_size, self.right = list(reference), prompt_len, vocab_size, right

    def propose(self, context, max_tokens) -> Draft:
        done = len(context) - self.prompt_len
        truth = self.reference[done : done + max_tokens]
        n_right = len(truth) if self.right is None else min(self.right, len(truth))
        wrong = [(t + 1) % self.vocab_size for t in truth[n_right:]]
        return Draft.chain(truth[:n_right] + wrong)


class OracleTreeDrafter(Drafter):
    """Trees from a known greedy continuation: under the right node of each depth, the right token and a wrong
    sibling in random order; under each wrong node, a wrong child (so the first-child chain is always full
    depth). Acceptance has to take branches that are not the first."""

    name = "oracle-tree"
    needs = DrafterNeeds(tree_attention=True)

    def __init__(self, reference: Sequence[int], prompt_len: int, vocab_size: int, seed: int = 0) -> None:
        self.reference, self.prompt_len, self.vocab_size = list(reference), prompt_len, vocab_size
        self.rng = np.random.default_rng(seed)

    def _wrong(self, truth: int) -> int:
        return (truth + 1 + int(self.rng.integers(self.vocab_size - 1))) % self.vocab_size

    def propose(self, context, max_tokens) -> Draft:
        done = len(context) - self.prompt_len
        tokens, parents, right, wrongs = [], [], -1, []
        for truth in self.reference[done : done + max_tokens]:
            pair = [truth, self._wrong(truth)]
            self.rng.shuffle(pair)
            level = [(right, t) for t in pair] + [(w, self._wrong(truth)) for w in wrongs]
            first = len(tokens)
            for parent, token in level:
                tokens.append(int(token))
                parents.append(parent)
            right = first + pair.index(truth)
            wrongs = [i for i in range(first, len(tokens)) if i != right]
        return Draft(tuple(tokens), tuple(parents))


class DistributionDrafter(Drafter):
    """Samples drafts from its own fixed-seed distributions q (a function of the context) and reports q."""

    name = "qdraft"

    def __init__(self, vocab_size: int, k: int, seed: int = 1, temperature: float = 1.5) -> None:
        self.vocab_size, self.k, self.seed, self.temperature = vocab_size, k, seed, temperature
        self.rng = np.random.default_rng(seed + 1000)
        self.steps: list[Step] = []

    def q_after(self, context) -> np.ndarray:
        key = (self.seed, self.vocab_size, self.temperature, *context[-2:])
        q = _Q_ROWS.get(key)
        if q is None:
            z = _row((self.seed, *context[-2:]), self.vocab_size, 1.0)
            e = np.exp(z / self.temperature)
            q = _Q_ROWS[key] = _frozen(e / e.sum())
        return q

    def propose(self, context, max_tokens) -> Draft:
        ctx, tokens, rows = list(context), [], []
        for _ in range(min(self.k, max_tokens)):
            q = self.q_after(ctx)
            t = int(self.rng.choice(self.vocab_size, p=q))
            tokens.append(t)
            rows.append(q)
            ctx.append(t)
        return Draft.chain(tokens, np.array(rows) if rows else None)

    def observe(self, step: Step) -> None:
        self.steps.append(step)


class TreeDrafter(Drafter):
    """Proposes trees the way a draft head does: under each node the ``shape[d]`` tokens a scripted draft
    model ranks highest after that branch (distinct point masses, best first), listed by depth."""

    name = "tree"
    needs = DrafterNeeds(tree_attention=True)

    def __init__(self, model: ScriptedBackend, shape=(3, 2)) -> None:
        self.model, self.shape = model, shape

    def propose(self, context, max_tokens) -> Draft:
        tokens, parents, branches, level = [], [], {-1: []}, [-1]
        for width in self.shape[:max_tokens]:
            nxt = []
            for parent in level:
                ranked = np.argsort(-self.model.logits_after(list(context) + branches[parent]))
                for t in ranked[:width]:
                    tokens.append(int(t))
                    parents.append(parent)
                    branches[len(tokens) - 1] = branches[parent] + [int(t)]
                    nxt.append(len(tokens) - 1)
            level = nxt
        return Draft(tuple(tokens), tuple(parents))


def step_of(
    verified, accepted, emitted, draft_s=0.0, verify_s=0.0, step_s=0.0, *, window=None, tree=False, target_p=()
) -> Step:
    """A step record as the engine makes one, for the controller: ``verified`` draft tokens judged (a tree: its
    depth), ``accepted`` of them passed, ``emitted`` output; the forward took ``window`` positions (default
    verified + 1), a tree's when ``tree``; drafting, verifying and the whole step took so many seconds;
    ``target_p``: the target's probability of each draft token the verdict reached (Verdict.target_p)."""
    n = (window or verified + 1) - 1
    parents = tuple(range(-1, verified - 1)) + (-1,) * (n - verified) if tree else tuple(range(-1, n - 1))
    return Step(
        list(emitted),
        proposed=draft_s,
        verified=draft_s + verify_s,
        end=step_s,
        draft=Draft((0,) * n, parents),
        judged=verified,
        verdict=Verdict(verified, accepted, tuple(emitted), target_p=tuple(target_p)),
        emitted=list(emitted),
        accepted=min(accepted, len(emitted)),
    )


def plain_step(context_len: int, seconds: float) -> Step:
    """A plain step (no draft) at a context of ``context_len`` tokens that took ``seconds``."""
    return Step([0] * (context_len + 1), end=seconds, emitted=[0], verdict=Verdict(0, 0, (0,)))


class VirtualClock:
    """Stands in for time.perf_counter in a test: time passes only when a timed fake says so, so a
    simulated machine's costs are exact and the controller's decisions repeatable."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TimedBackend(ScriptedBackend):
    """ScriptedBackend on a simulated machine: a forward of n positions takes window(n) seconds and a
    prefill prefill_per_token seconds a token, on a VirtualClock."""

    def __init__(self, clock: VirtualClock, window, prefill_per_token: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clock, self.window, self.prefill_per_token = clock, window, prefill_per_token

    def prefill(self, tokens, progress=None) -> None:
        self.clock.advance(self.prefill_per_token * len(tokens))
        super().prefill(tokens, progress)

    def forward(self, tokens, return_hidden: bool = False) -> ForwardOut:
        self.clock.advance(self.window(len(tokens)))
        return super().forward(tokens, return_hidden)

    def fed(self) -> int:
        """Tokens fed so far, by prefill and forward."""
        return sum(self.prefilled) + sum(self.forward_calls)


WEATHER = {  # a tool, as clients send it
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}  # a tool without parameters

"""The drafter interface. A drafter proposes tokens to follow the context; the engine verifies them.

Lifecycle per turn: ``begin(prompt, turn)``, then per step ``propose(context, max_tokens)`` and
``observe(step)``, then ``end()``. ``context`` is always the whole token sequence so far (prompt plus
emitted tokens); it only grows within a turn. Every step asks for a proposal, ``max_tokens`` 0 when the
controller wants none: the drafter then only catches up on what it observed (a layer that must take every
cached position) and proposes nothing. ``observe`` gets the step's one record (``Step``, types.py): the
window, the verdict, the emitted tokens, and what the drafter's ``needs`` ask of the target: the features of
the newly cached positions (hidden states; the prompt's come in a record of features alone after the
prefill), the target's argmax after every draft node (outputs).

What a drafter requires of the target backend is declared in ``needs`` (``DrafterNeeds``) and compared with
the backend's ``Capabilities`` by ``check_fit``: by the engine before generating, and by a drafter that
takes the target in its constructor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.types import EMPTY_DRAFT, Draft, Step

if TYPE_CHECKING:
    from localspec.backends.base import Backend, Capabilities
    from localspec.structured.constraint import Constraint


def match_confidence(match_len: int) -> float:
    """The confidence a copy drafter (n-gram, suffix) gives the tokens after a match of ``match_len``
    tokens: a longer match is stronger evidence that the text goes on as it did before. It only has to
    rank matches; the controller learns what each confidence level is really worth."""
    return match_len / (match_len + 4)


@dataclass(frozen=True)
class DrafterNeeds:
    """What a drafter requires of the target backend (its ``Capabilities``, backends/base.py)."""

    rollback: bool = True  # the cache is cut back after rejected draft tokens (can_truncate): any drafting
    hidden_states: bool = False  # the target's features of every cached position (Step.features)
    feature_layers: bool = False  # ... of the layers the drafter picks (set_feature_layers)
    tree_attention: bool = False  # tree drafts, verified by forward_tree and accept_path
    outputs: bool = False  # the target's argmax after every verified draft node, in the step record (lookahead)


def head_for(heads: Mapping[str, Callable], target: Backend, what: str) -> Callable:
    """A head drafter's loader for the target's backend, from its family's ``HEADS`` (backend name -> loader;
    the family's table row carries it, and the backends it runs on are its keys)."""
    try:
        return heads[target.name]
    except KeyError:
        choices = ", ".join(f"--backend {b}" for b in heads)
        on = f"the {' and '.join(heads)} backend{'s' if len(heads) > 1 else ''}"
        raise ConfigError(f"{what} run on {on}, not on the {target.name} backend ({choices})") from None


def check_fit(backend: Backend | None, drafter: Drafter) -> None:
    """Raise ConfigError when ``backend`` lacks something ``drafter.needs``: what is missing, and what to do."""
    if backend is None:
        raise ConfigError(f"the {drafter.name} drafter needs a loaded target model")
    needs, caps = drafter.needs, backend.capabilities
    model = f"{backend.model_name}: " if backend.model_name else ""
    if needs.rollback and not caps.can_truncate:
        raise ConfigError(
            f"{model}the {backend.name} cache of this model cannot be rolled back, which speculative decoding "
            f"needs; use --drafter none"
        )
    lacks = _lacks_features(needs, caps)
    if lacks:
        raise ConfigError(
            f"{model}the {backend.name} backend {lacks}, which the {drafter.name} drafter needs; "
            f"use --backend torch (or mlx), or pick another drafter"
        )
    if needs.tree_attention and not caps.tree_attention:
        raise ConfigError(
            f"{model}the {backend.name} backend has no tree attention, which tree drafts need; draft chains "
            f"instead (--eagle-tree 0)"
        )


def _lacks_features(needs: DrafterNeeds, caps: Capabilities) -> str:
    """What the backend lacks of the features the drafter is fed, in words ('' when nothing)."""
    if needs.hidden_states and not caps.hidden_states:
        return "gives no hidden states"
    if needs.feature_layers and not caps.feature_layers:
        return "cannot pick the layers it gives hidden states of"
    return ""


class ChainPolicy(Protocol):
    """What a chain asks of the turn's controller (engine/speclen's FixedK or AdaptiveK): to be told the model
    member's cost per drafted token, so the copy member is asked first where it is cheaper."""

    def chain(self, cost_per_token: float | None) -> None: ...


@dataclass(frozen=True)
class Turn:
    """What a drafter is told as a turn begins (``Drafter.begin``)."""

    sampling: SamplingParams = SamplingParams(temperature=0)  # the target's: a drafter's own q is drawn with them
    # the turn's controller (speclen), for a drafter that asks it which of its members drafts a step (a chain)
    policy: ChainPolicy | None = None
    constraint: Constraint | None = None  # the answer's grammar (structured output), None: free text


class Costs(NamedTuple):
    """What drafting costs, as the drafter knows it, for the controller's plan."""

    # seconds per drafted token until the controller has timed drafting: 0 for a lookup (n-gram, suffix),
    # None when unknown (a network: the first call drafts a short window to find out)
    per_token: float | None
    catchup_s: float  # seconds a proposal now would first spend catching up on the context (a draft model)
    # leading tokens of the next proposal the drafter is certain of (a grammar's forced tokens): the engine asks
    # for and verifies at least these, whatever the controller would plan
    sure: int = 0


DEFAULT_TURN = Turn()  # greedy, no controller: a drafter driven outside the engine (a replay, a test)
FREE = Costs(0.0, 0.0)
UNTIMED = Costs(None, 0.0)


class Drafter:
    """Proposes tokens for the target to verify (see the module doc): ``begin``, ``propose``, ``observe`` and
    ``end`` make a turn; ``costs`` and ``state`` serve the controller and the server's saved conversations."""

    name = "none"
    needs = DrafterNeeds()  # what it requires of the target backend, checked by check_fit

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> int | None:
        """A new turn on ``prompt``. Returns how many leading prompt positions a feature-fed drafter that keeps
        the target's rows itself holds (the prefill recomputes the rest to hand their features over, so a
        new turn need not recompute a cached prompt: on a recurrent target that cut can cost a whole
        prefill); None: the default, all but the last prompt position."""
        return None

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        """Up to ``max_tokens`` tokens to follow ``context`` (0: catch up on what was observed, draft nothing)."""
        return EMPTY_DRAFT

    def observe(self, step: Step) -> None:
        """The step as it went (after its tokens were emitted): see the module doc."""

    def end(self) -> dict:
        """The turn is over (or cut short); returns the drafter's own figures of it for the turn's stats."""
        return {}

    def costs(self, context: Sequence[int]) -> Costs:
        """What drafting after ``context`` costs, as far as the drafter knows (the controller weighs it)."""
        return FREE

    @property
    def state(self) -> object | None:
        """What the drafter keeps of the conversation in its own cache, saved with the target's state when the
        server switches conversations (prompt_states.py); None when it keeps nothing. Setting it puts a saved
        state back (None: a drafter with a cache starts it empty)."""
        return None

    @state.setter
    def state(self, saved: object | None) -> None:
        pass

    def describe(self) -> str:
        """A few words on the drafter's setup for the load report ('' when its name says it all)."""
        return ""

    def close(self) -> None:
        pass


class NoDrafter(Drafter):
    """Plain decoding: proposes nothing, so every step is one ordinary target forward."""

    needs = DrafterNeeds(rollback=False)

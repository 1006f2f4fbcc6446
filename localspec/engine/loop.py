"""The generate loop: plain decoding and speculative decoding are the same loop; plain decoding simply
uses a drafter that proposes nothing.

Cache invariant (held after every step, and restored in ``finally`` on Ctrl-C or an error):
    the target's cache holds ``context[:-1]``; the last token of the context is *pending* — emitted but
    not yet fed to the model. Each step feeds [pending, *draft] in one forward pass, keeps the pending
    token and the accepted draft tokens, and cuts the rejected ones with ``truncate``. The next turn
    reuses whatever prefix of its prompt is still in the cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backends.base import Backend, Progress
from localspec.drafters.base import Costs, Drafter, Turn, check_fit
from localspec.engine.baseline import PlainBaseline
from localspec.engine.exact import exact_mode, guard
from localspec.engine.logprobs import step_logprobs
from localspec.engine.speclen import AdaptiveK, FixedK, make_policy
from localspec.engine.stats import TokenEvent, TurnStats
from localspec.engine.stopping import StopStrings
from localspec.engine.verify import verify_draft
from localspec.errors import ConfigError, ContextOverflow
from localspec.sampling import SamplingParams, Streams
from localspec.structured.constraint import Constraint
from localspec.types import EMPTY_DRAFT, Draft, Features, ForwardOut, Step, Verdict, common_prefix


def stream_generate(
    backend: Backend,
    drafter: Drafter,
    prompt: Sequence[int],
    sampling: SamplingParams,
    *,
    max_tokens: int = 512,
    draft_tokens: int | str | FixedK | AdaptiveK = 4,
    stop: Sequence[str] | StopStrings = (),
    rng: np.random.Generator | None = None,
    on_prefill: Progress = None,
    plain: PlainBaseline | None = None,
    exact_guard: float | None = None,
    logprobs: int | None = None,
    constraint: Constraint | None = None,
) -> Iterator[TokenEvent]:
    """Generate a continuation of ``prompt``, one event per target forward pass. ``draft_tokens`` is a
    fixed K, 'auto', or a policy object, and ``plain`` the plain-step timings the speedup is measured
    against (a session passes its own of both, so what it measured carries over). ``exact_guard``: `--exact`'s
    near-tie margin, below which a window row decides nothing at temperature 0 on a backend without
    batch-invariant kernels (those run instead where the backend has them); None: the fast default, no guard
    and the backend's fastest kernels. ``logprobs``: each event carries its tokens' log-probabilities with that
    many alternatives (0: the tokens' own only; None: none computed). ``constraint``: the answer's grammar
    (structured/constraint.py): every verified row is masked to what it allows, drafts are cut where it forbids.

    Each step is plan, propose, verify, accept, emit, record, written into one ``Step`` that the drafter
    observes and the stats, the plain baseline and the controller record."""
    policy = make_policy(draft_tokens)
    plain = plain if plain is not None else PlainBaseline()
    _check_request(backend, drafter, prompt, max_tokens)
    rng = rng if rng is not None else np.random.default_rng()
    streams = Streams(int(rng.integers(2**63)))  # this turn's draws, by token position
    stats = TurnStats(prompt_tokens=len(prompt))
    invariant, margin = exact_mode(backend, sampling, exact_guard)
    backend.set_batch_invariant(invariant)
    stats.guard_margin, stats.guard_kernels, stats.exact = margin, invariant, exact_guard is not None
    context = list(prompt)
    detok, stopper = backend.tokenizer.detokenizer(), stop if isinstance(stop, StopStrings) else StopStrings(stop)
    need_hidden, need_outputs = drafter.needs.hidden_states, drafter.needs.outputs
    started = time.perf_counter()
    try:
        policy.begin_turn(drafter.costs(context).per_token)
        # first: a feature-fed one picks the target's rows
        rows_held = drafter.begin(context, Turn(sampling, policy, constraint))
        features = _prefill(backend, drafter, context, rows_held, on_prefill, stats)
        if features is not None:  # the prompt's features, in a record of nothing else
            drafter.observe(Step(context, features=features))
        started = last = time.perf_counter()
        finish, held = None, False
        while finish is None:
            step = Step(context, since=last, start=time.perf_counter())
            # plan
            costs = drafter.costs(context)
            sure = 0 if held else costs.sure  # tokens it is certain of (a grammar's forced ones)
            k = _plan(policy, costs, backend, context, max_tokens - stats.generated - 1, held, sure)
            step.planned = time.perf_counter()
            # propose (every step asks: with k = 0 the drafter only catches up on what it observed)
            proposal = drafter.propose(context, k)
            step.proposed, step.catchup_s = time.perf_counter(), proposal.catchup_s
            proposal = proposal if len(proposal) <= k else proposal.cut(k)
            draft, step.judged = _window(policy, proposal, step.drafting_s, backend.n_ctx - len(context), sure)
            draft = draft if constraint is None else constraint.cut(draft)
            step.draft = draft
            # verify
            if (
                margin and len(draft) and backend.capabilities.max_rollback
            ):  # a held first row cuts the whole window off,
                backend.checkpoint()  # which a recurrent state's snapshots do not reach
            out = _forward(backend, context, draft, need_hidden)
            if need_outputs and len(draft):  # lookahead: the target's guess after every node, before the verdict
                step.outputs = out.rows.argmax()
            rows = out.rows if constraint is None else constraint.rows(out.rows, draft)
            verdict = verify_draft(draft, rows, sampling, streams.after(len(context) - len(prompt)), stats.rules)
            if margin and len(draft):
                verdict, step.gap = guard(verdict, rows, margin)
            step.verdict, step.forced, held = verdict, held, verdict.held
            # accept: the kept positions stay in the cache (and their features go into the record)
            step.features = _accept(backend, context, draft, out, verdict, need_hidden)
            step.verified = time.perf_counter()
            # emit
            stopper.expire(time.perf_counter() - started)
            step.emitted, text, draft_chars, finish = _emit(
                verdict, context, backend, detok, stopper, max_tokens - stats.generated
            )
            if finish == "stop" and stopper.limited:  # an editor's limit (indent, time), not the answer's end
                finish = "length"
            step.accepted = min(verdict.accepted, len(step.emitted))  # what was really emitted of the draft
            if constraint is not None:
                constraint.commit(step.emitted)
            # record: the drafter, the stats, the plain baseline and the controller read the one record
            drafter.observe(step)
            step.end = last = time.perf_counter()
            stats.record(step)
            plain.record(step)
            policy.record(step)
            stats.plain = plain.at(len(prompt) + stats.generated // 2)  # the turn's mean context length
            stats.decode_s = last - started
            scores = None if logprobs is None else step_logprobs(out.rows, verdict.path, step.emitted, logprobs)
            shown = min(draft_chars, len(text))
            yield TokenEvent(tuple(step.emitted), text, step.accepted, stats, finish, shown, scores)
    finally:
        backend.truncate(len(context) - 1)  # restore the invariant, whatever happened mid-step
        stats.method, stats.drafter = drafter.name, drafter.end()
        stats.speclen = policy.figures()
        if constraint is not None:
            stats.grammar = constraint.figures(stats.generated)
        if stats.generated:
            stats.decode_s = time.perf_counter() - started


def _plan(policy, costs: Costs, backend: Backend, context: list[int], left: int, held: bool, sure: int) -> int:
    """How many tokens to ask the drafter for: no further than the context can hold and than the answer may
    still grow (``left`` tokens after the target's own); after the guard held a near-tie back, none: a
    single-token step decides it, as plain decoding does. At least the ``sure`` tokens the drafter is certain
    of, whatever the controller would plan. Beside other sequences (a slot) the controller prices the window as
    the pass it joins, judged by the last one (Backend.batch_load)."""
    policy.share(*backend.batch_load())
    cap = min(policy.max_k, left, backend.n_ctx - len(context))
    if backend.capabilities.max_rollback is not None:  # a recurrent state rolls back so far: rejections must fit
        cap = min(cap, backend.capabilities.max_rollback)
    planned = policy.plan(cap, costs.catchup_s) if cap > 0 and not held else 0
    return max(planned, min(sure, cap))


def _window(policy, proposal: Draft, drafting_s: float, room: int, sure: int = 0) -> tuple[Draft, int]:
    """What of the proposal the target verifies, and the depth the controller judged it by.

    The controller sizes a tree by depth, judging it by its main branch; side branches deeper than the main
    one are cut too, so that what it measures per depth stays one kind of window (verifying them whole
    measured 0.84-0.99x plain on cases where EAGLE is weak, cut 0.95-1.10x); a tree also needs a cache slot
    per node (``room``: the context bounds its size, not only its depth), and is costed by its node count; a
    whole draft (lookahead) is verified whole or not at all. The ``sure`` leading tokens (a grammar's forced
    ones) are verified whatever the costs say."""
    main = proposal.main_chain()
    depth = policy.trim(main, drafting_s, None if proposal.is_chain else proposal.sizes(len(main)), proposal.whole)
    depth = max(depth, min(sure, len(main)))  # what the drafter is certain of is verified whatever the costs
    draft = (proposal if depth else EMPTY_DRAFT) if proposal.whole else proposal.cut(depth)
    draft = draft.prefix(room)
    return draft, len(main) if draft.whole and len(draft) else max(draft.depths(), default=0)


def _check_request(backend: Backend, drafter: Drafter, prompt: Sequence[int], max_tokens: int) -> None:
    if max_tokens < 1:
        raise ConfigError(f"--max-tokens must be at least 1, got {max_tokens}")
    if not prompt:
        raise ConfigError("the prompt is empty")
    if len(prompt) >= backend.n_ctx:
        raise ContextOverflow(
            f"the prompt has {len(prompt)} tokens but the context holds {backend.n_ctx}; shorten it or raise --ctx"
        )
    check_fit(backend, drafter)  # what the drafter needs of the backend


def _prefill(
    backend: Backend, drafter: Drafter, context: list[int], held: int | None, on_prefill: Progress, stats: TurnStats
) -> Features | None:
    """Cache the prompt but its last token (reusing what the cache already holds of it); the features of a
    feature-fed drafter's prompt (EAGLE) from the first position it does not hold (``held``, None: all but
    the last prompt position), or None."""
    started = time.perf_counter()
    reuse = common_prefix(backend.cached_tokens, context[:-1])
    if drafter.needs.hidden_states:  # it is handed the features of the positions it lacks
        reuse = min(reuse, max(len(context) - 2, 0) if held is None else held)
    backend.truncate(reuse)
    features = None
    if drafter.needs.hidden_states:
        rows = backend.prefill_features(context[reuse:-1], progress=on_prefill)
        features = Features(reuse, rows) if len(rows) else None
    else:
        backend.prefill(context[reuse:-1], progress=on_prefill)
    if len(context) - 1 > reuse:
        backend.prompt_cached()
    stats.prefill_tokens = len(context) - 1 - reuse
    stats.prefill_s = time.perf_counter() - started
    return features


def _forward(backend: Backend, context: list[int], draft: Draft, need_hidden: bool) -> ForwardOut:
    """The target's forward pass over the pending token and the draft (a chain, or a tree)."""
    if draft.is_chain:
        return backend.forward([context[-1], *draft.tokens], return_hidden=need_hidden)
    return backend.forward_tree([context[-1], *draft.tokens], draft.parents, return_hidden=need_hidden)


def _accept(
    backend: Backend, context: list[int], draft: Draft, out: ForwardOut, verdict: Verdict, need_hidden: bool
) -> Features | None:
    """Keep the positions the verdict decided in the cache; their target features for the next proposal
    (a feature-fed drafter), else None."""
    if not draft.is_chain:
        backend.accept_path(verdict.path)
    kept = verdict.accepted + (0 if verdict.held else 1)  # positions fed this step that stay in the cache
    features = None
    if need_hidden:
        rows = out.hidden[[0, *(i + 1 for i in verdict.path)]][:kept]
        features = Features(len(context) - 1, rows) if kept else None
    backend.truncate(len(context) - 1 + kept)
    return features


def _emit(verdict: Verdict, context: list[int], backend: Backend, detok, stopper: StopStrings, room: int):
    """Append the verdict's tokens to the context up to an end of generation, ``room`` tokens or a stop
    string: (tokens, their text, how much of it came from the draft, finish reason or None)."""
    emitted, text, draft_chars, finish = [], "", 0, None
    for token in verdict.tokens:
        emitted.append(token)
        context.append(token)
        if token in backend.tokenizer.eog_tokens:
            finish = "stop"
            break
        text += detok.push(token)
        if len(emitted) <= verdict.accepted:
            draft_chars = len(text)
        if len(emitted) >= room:
            finish = "length"
            break
    if finish is None and len(context) > backend.n_ctx:
        finish = "context"
    text, hit = stopper.feed(text)
    if hit:
        finish = "stop"
    elif finish is not None:
        text += stopper.feed(detok.flush())[0] + stopper.flush()
    return emitted, text, draft_chars, finish


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: tuple[int, ...]
    finish_reason: str
    stats: TurnStats


def generate(
    backend: Backend, drafter: Drafter, prompt: Sequence[int], sampling: SamplingParams, **options
) -> Completion:
    """Run ``stream_generate`` to the end and collect its output."""
    text, tokens, finish, stats = [], [], "length", None
    for event in stream_generate(backend, drafter, prompt, sampling, **options):
        text.append(event.text)
        tokens.extend(event.tokens)
        finish, stats = event.finish_reason or finish, event.stats
    return Completion("".join(text), tuple(tokens), finish, stats)

"""The server's conversation states: which one is live before a request, and the RAM bound."""

from dataclasses import replace

from support.fakes import ScriptedBackend

from localspec.chat.prompt_states import MIN_TOKENS, PromptStates


class Snapshotting(ScriptedBackend):
    """A scripted model whose cache can be saved (one byte per token, tagged) and loaded back."""

    capabilities = replace(ScriptedBackend.capabilities, snapshots=True)

    def save_state(self) -> bytes:
        return bytes(t % 256 for t in self._tokens)

    def load_state(self, tokens, state) -> None:
        assert bytes(t % 256 for t in tokens) == state  # the state saved with these tokens
        self._tokens[:] = list(tokens)


def conversation(tag: int, n: int = 3 * MIN_TOKENS) -> list[int]:
    return [tag] * 4 + list(range(n))


def run(states: PromptStates, prompt: list[int]) -> int:
    """What the engine does with a request: prefill from the reused part, keep the answer in the cache."""
    reuse = states.prepare(prompt)
    states.backend.truncate(reuse)
    states.backend._tokens.extend(prompt[reuse:-1])
    return len(prompt) - 1 - reuse  # tokens prefilled


def test_conversations_taking_turns_reuse_their_own_states():
    backend = Snapshotting(vocab_size=300)
    states = PromptStates(backend, budget_bytes=10**6)
    firsts = [conversation(tag) for tag in (1, 2, 3, 4)]
    assert [run(states, p) for p in firsts] == [len(p) - 1 for p in firsts]  # nothing to reuse yet
    assert len(states.saved) == 3  # A, B, C kept while D is live
    seconds = [p + [7, 8, 9] for p in firsts]
    assert [run(states, p) for p in seconds] == [3, 3, 3, 3]  # each only its new tokens
    assert states.loads == 4


def test_a_short_difference_keeps_the_live_cache_and_the_budget_drops_the_oldest():
    backend = Snapshotting(vocab_size=300)
    states = PromptStates(backend, budget_bytes=2 * len(conversation(1)) + 10)
    run(states, conversation(1))
    run(states, conversation(1)[:-3] + [5, 5, 5])  # cuts 3 tokens: cheaper to prefill than to save
    assert states.saved == []
    for tag in (2, 3, 4):
        run(states, conversation(tag))
    assert [s.tokens[0] for s in states.saved] == [2, 3]  # room for two: conversation 1 went first
    assert states.bytes <= states.budget


def test_alternating_prompts_that_share_a_prefix_keep_both_tails():
    """aider's whole and diff formats taking turns, each followed by a short unrelated request (a commit
    message): a saved state loaded to start a prompt that leaves it early stays saved, so the next request
    that follows it all the way prefills only its new tokens."""
    backend = Snapshotting(vocab_size=300)
    states = PromptStates(backend, budget_bytes=10**6)
    shared = list(range(2 * MIN_TOKENS))
    whole, diff = shared + [101] * 3 * MIN_TOKENS, shared + [102] * 3 * MIN_TOKENS
    commit = [250] * (MIN_TOKENS + 5)
    for prompt in (whole, commit, diff, commit):
        run(states, prompt)
    assert run(states, whole + [7]) == 1  # all of the whole-format conversation is still held
    assert run(states, commit) == 0
    assert run(states, diff + [7]) == 1


class Counting(Snapshotting):
    saves = 0

    def save_state(self) -> bytes:
        self.saves += 1
        return super().save_state()


def test_a_state_saved_while_idle_spares_the_next_request_its_copy():
    """keep_live (the server between requests), where the last request left the conversation before it: a next
    request that cuts the live one then copies nothing before its prefill, and it is still there to come back
    to. Where the last request continued the conversation, nothing is saved ahead; a copy made redundant by a
    conversation that went on goes when a longer state of it is kept."""
    backend = Counting(vocab_size=300)
    states = PromptStates(backend, budget_bytes=10**6)
    first, other = conversation(1), conversation(2)
    run(states, first)
    states.keep_live()
    assert backend.saves == 0  # the first request cut nothing: no sign that the next one will
    run(states, other)  # cuts the first conversation: saved now, before the prefill
    assert backend.saves == 1
    states.keep_live()
    assert backend.saves == 2 and states.saved[-1].tokens == tuple(other[:-1])
    states.keep_live()  # nothing new to save
    assert backend.saves == 2
    assert run(states, first + [7, 8]) == 2 and backend.saves == 2  # back to the first: no copy before it
    states.keep_live()
    assert backend.saves == 3
    longer = first + [7, 8, 9, 10]
    assert run(states, longer) == 2  # continues the live conversation: the idle copy was not needed
    states.keep_live()
    assert backend.saves == 3  # and after a request that continued, nothing is saved ahead
    run(states, other + [5])  # cuts it: the longer state is kept and the idle copy, its prefix, goes
    assert [s.tokens for s in states.saved if s.tokens[0] == 1] == [tuple(longer[:-1])]

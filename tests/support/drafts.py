"""Watching a real drafter from a test."""


def record_first_drafts(drafter) -> list[tuple[int, int]]:
    """Wraps ``drafter.propose`` so that every draft's (pending token, first draft token) is appended to the list
    returned: what a layer that reads the target's row of the position before drafts after each token."""
    pairs, propose = [], drafter.propose

    def recording(context, max_tokens):
        draft = propose(context, max_tokens)
        if draft.tokens:
            pairs.append((context[-1], draft.tokens[0]))
        return draft

    drafter.propose = recording
    return pairs

"""Can one model draft for another? Only if their token ids mean the same thing.

Checked before the first token: the tokenizer kind, the special tokens, and the text of every token over
the shared id range. Vocabularies may differ in size only by padding (Qwen2.5's GGUFs list 151936 ids of
which the last ~270 are unused); drafting is then restricted to the shared ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backends.base import Backend
from localspec.errors import ConfigError


def shared_vocab(target: Backend, draft: Backend, known_drafts: Sequence[str] = ()) -> int:
    """The number of leading token ids both models share; raises ConfigError naming the first difference."""
    problem, shared = _first_difference(target, draft)
    if problem:
        listed = ", ".join(known_drafts) if known_drafts else "none listed in models.toml"
        raise ConfigError(
            f"the draft model {draft.model_name} cannot draft for {target.model_name}: {problem}. "
            f"A draft model must share the target's tokenizer; drafts known for it: {listed}"
        )
    return shared


def _first_difference(target: Backend, draft: Backend) -> tuple[str, int]:
    tt, td = target.tokenizer, draft.tokenizer
    kind_t, kind_d = tt.kind(), td.kind()
    if kind_t != kind_d:
        return f"tokenizer {kind_d!r} vs the target's {kind_t!r}", 0
    shared = min(target.vocab_size, draft.vocab_size)
    bigger = target if target.vocab_size > draft.vocab_size else draft
    for token in range(shared, bigger.vocab_size):
        if not bigger.tokenizer.is_padding(token):
            return (
                f"vocabulary sizes {draft.vocab_size} vs {target.vocab_size}, and id {token} of "
                f"{bigger.model_name} is a real token ({bigger.tokenizer.token_text(token)!r}), not padding"
            ), 0
    for what, a, b in (
        ("bos token", tt.bos_token, td.bos_token),
        ("eos token", tt.eos_token, td.eos_token),
    ):
        if a != b:
            return f"{what} {b} vs the target's {a}", 0
    eog_t = {t for t in tt.eog_tokens if t < shared}
    eog_d = {t for t in td.eog_tokens if t < shared}
    if eog_t != eog_d:
        return f"end-of-generation tokens {sorted(eog_d)} vs the target's {sorted(eog_t)}", 0
    if tt.key(target.vocab_size) == td.key(draft.vocab_size):
        return "", shared
    for token in range(shared):
        a, b = tt.token_text(token), td.token_text(token)
        if a != b:
            return f"token {token} is {b!r} in the draft but {a!r} in the target", 0
    return "", shared

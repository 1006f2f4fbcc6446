"""Conversations within the context: the documented truncation policy."""

import pytest
from support.fakes import ScriptedBackend

from localspec.chat.conversation import Conversation
from localspec.errors import ContextOverflow


def conversation(n_exchanges, size=10):
    conv = Conversation(system="s" * 5)
    for _ in range(n_exchanges):
        conv.add("user", "u" * size)
        conv.add("assistant", "a" * size)
    conv.add("user", "q" * size)
    return conv


def test_fits_whole():
    backend = ScriptedBackend(n_ctx=200)
    conv = conversation(3)
    assert len(conv.prompt_tokens(backend, reserve=20)) == 5 + 70 and conv.dropped == 0


def test_oldest_exchanges_are_dropped_first_and_the_system_prompt_stays():
    backend = ScriptedBackend(n_ctx=80)
    conv = conversation(5)  # 5 + 110 tokens
    tokens = conv.prompt_tokens(backend, reserve=20)
    assert len(tokens) + 20 <= 80
    assert conv.dropped % 2 == 0 and conv.dropped > 0  # whole exchanges
    kept = conv.messages[conv.dropped :]
    assert kept[0]["role"] == "user" and kept[-1]["content"] == "q" * 10
    assert tokens[:5] == backend.tokenizer.tokenize("s" * 5)


def test_a_message_larger_than_the_context_is_a_clear_error():
    backend = ScriptedBackend(n_ctx=40)
    conv = Conversation()
    conv.add("user", "x" * 60)
    with pytest.raises(ContextOverflow, match="raise --ctx"):
        conv.prompt_tokens(backend, reserve=10)

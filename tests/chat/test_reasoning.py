"""Reasoning models (localspec/chat/reasoning.py): markers read from the chat template, the thinking kept apart from
the answer in `run`, the plain chat, saved chats and the Textual chat, --think/--no-think, and the stats still
counting every generated token. A scripted model answers with a fixed text, one character a token."""

import asyncio
import io
import json

import numpy as np
import pytest
from support.fakes import ScriptedBackend, ScriptedTokenizer
from support.tui import send, wait_for

from localspec.apps.cli.common import stream_answer
from localspec.apps.tui.app import ChatApp, Turn
from localspec.chat.conversation import Conversation
from localspec.chat.reasoning import ANSWER, REASONING, ReasoningSplitter, reasoning_format
from localspec.chat.store import SavedChat, load_chat
from localspec.drafters.base import NoDrafter
from localspec.engine.speclen import FixedK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.session import Session, thinking_options

ALPHABET = "".join(chr(c) for c in range(32, 127)) + "\n"
# a Qwen3-style template: reasoning_content of earlier turns, the thinking switch, <think> markers
QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
R1_LIKE = (  # opens the reasoning in the prompt; keeps only what follows </think> of earlier answers
    "{% for m in messages %}{{ m.role }}: {{ m.content.split('</think>')[-1] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: <think>\n{% endif %}"
)
MAGISTRAL_LIKE = "{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}[THINK] ... [/THINK]"
PLAIN = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


class Rendering(ScriptedTokenizer):
    """One character of ALPHABET a token; renders prompts with ``template`` (each kept in ``rendered``) and
    ends them with the separator token."""

    def __init__(self, template: str) -> None:
        super().__init__(vocab_size=len(ALPHABET) + 2, eog=len(ALPHABET))
        self.sep, self.chat_template, self.rendered = len(ALPHABET) + 1, template, []

    def tokenize(self, text, special=False):
        return [ALPHABET.index(c) for c in text if c in ALPHABET]

    def token_bytes(self, token):
        return ALPHABET[token].encode() if token < len(ALPHABET) else b""

    def chat_tokens(self, messages, add_generation_prompt=True, options=None):
        text = self.chat_text(messages, add_generation_prompt, options=options)
        self.rendered.append(text)
        return [*self.tokenize(text), self.sep]


class ReplyingBackend(ScriptedBackend):
    """Answers every prompt with ``reply``, one character a token."""

    def __init__(self, reply: str, template: str) -> None:
        tokenizer = Rendering(template)
        super().__init__(vocab_size=tokenizer.vocab_size, tokenizer=tokenizer)
        self.reply = reply

    def logits_after(self, context):
        said = len(context) - 1 - max(i for i, t in enumerate(context) if t == self.tokenizer.sep)
        reply = self.tokenizer.tokenize(self.reply)
        logits = np.full(self.vocab_size, -10.0)
        logits[reply[said] if said < len(reply) else next(iter(self.tokenizer.eog_tokens))] = 10.0
        return logits


def session_for(reply: str, template: str, think=None) -> Session:
    backend = ReplyingBackend(reply, template)
    options = thinking_options(backend, "replying", think)
    return Session(
        backend, NoDrafter(), SamplingParams(temperature=0), "replying", speclen=FixedK(4), template_options=options
    )


THOUGHT = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello! How can I help?"


def test_markers_and_their_opening_are_read_from_the_template():
    def prompt(template):
        return Rendering(template).chat_text([{"role": "user", "content": "Hi"}])

    qwen = reasoning_format(QWEN3_LIKE, lambda: prompt(QWEN3_LIKE))
    assert (qwen.start, qwen.end, qwen.opens_in_prompt, qwen.switch) == ("<think>", "</think>", False, True)
    r1 = reasoning_format(R1_LIKE, lambda: prompt(R1_LIKE))
    assert r1.opens_in_prompt and not r1.switch  # the answer begins inside the reasoning
    assert reasoning_format(MAGISTRAL_LIKE, lambda: prompt(MAGISTRAL_LIKE)).end == "[/THINK]"
    assert reasoning_format(PLAIN, lambda: prompt(PLAIN)) is None and reasoning_format(None, str) is None


@pytest.mark.parametrize("seed", range(8))
def test_the_split_does_not_depend_on_how_the_text_is_chopped(seed):
    fmt = reasoning_format(QWEN3_LIKE, lambda: "")
    text = THOUGHT + " Quoting <think> later is answer."
    rng = np.random.default_rng(seed)
    cuts = sorted(rng.choice(range(1, len(text)), size=12, replace=False))
    splitter = ReasoningSplitter(fmt)
    pieces = [p for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) for p in splitter.feed(text[a:b])]
    pieces += splitter.finish()
    joined = {kind: "".join(t for k, t in pieces if k == kind) for kind in (REASONING, ANSWER)}
    assert joined[REASONING] == "The user greets me.\nI greet back."
    assert joined[ANSWER] == "Hello! How can I help? Quoting <think> later is answer."


@pytest.mark.parametrize("template", [PLAIN, QWEN3_LIKE])
def test_an_answer_without_reasoning_keeps_its_white_space(template):
    code = "    x = 1\n    <tag> y = 2\n\n"
    splitter = ReasoningSplitter(reasoning_format(template, lambda: ""))
    pieces = [p for i in range(0, len(code), 3) for p in splitter.feed(code[i : i + 3])] + splitter.finish()
    assert {kind for kind, _ in pieces} == {ANSWER} and "".join(text for _, text in pieces) == code


def test_run_keeps_the_thinking_apart_and_the_stats_count_every_token():
    session = session_for(THOUGHT, QWEN3_LIKE)
    conversation = Conversation()
    conversation.add("user", "Hi")
    out, thoughts = io.StringIO(), io.StringIO()
    answered = stream_answer(session, conversation, out, thoughts)
    assert answered.text == "Hello! How can I help?" == out.getvalue()
    assert answered.reasoning == "The user greets me.\nI greet back." and "greets" in thoughts.getvalue()
    assert answered.stats.generated == len(THOUGHT) + 1  # markers and thinking are generated tokens (+ the end)


def test_an_answer_that_starts_inside_the_reasoning():
    session = session_for("Let me think.\n</think>\n\n42", R1_LIKE)
    conversation = Conversation()
    conversation.add("user", "Six times seven?")
    answered = stream_answer(session, conversation, None)
    assert (answered.reasoning, answered.text) == ("Let me think.", "42")


def test_a_model_without_markers_answers_as_before():
    session = session_for("Hi there", PLAIN)
    conversation = Conversation()
    conversation.add("user", "Hi")
    answered = stream_answer(session, conversation, None)
    assert (answered.reasoning, answered.text) == ("", "Hi there") and session.text.reasoning is None


def test_think_and_no_think_set_the_templates_switch_or_are_refused():
    backend = ReplyingBackend("", QWEN3_LIKE)
    assert thinking_options(backend, "m", None) == {}
    assert thinking_options(backend, "m", False) == {"enable_thinking": False}
    with pytest.raises(ConfigError, match="--no-think: plain's chat template has no thinking switch"):
        thinking_options(ReplyingBackend("", PLAIN), "plain", False)
    session = session_for("Hello", QWEN3_LIKE, think=False)
    conversation = Conversation()
    conversation.add("user", "Hi")
    stream_answer(session, conversation, None)
    assert session.backend.tokenizer.rendered[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not session_for("Hello", QWEN3_LIKE, think=True).text.chat_text([]).endswith("</think>\n\n")


def test_saved_chats_keep_reasoning_apart_and_the_next_prompt_gets_it_as_reasoning_content(tmp_path):
    session = session_for(THOUGHT, QWEN3_LIKE)
    chat = SavedChat.new("replying")
    chat.add("user", "Hi")
    answered = stream_answer(session, chat.conversation, None)
    chat.add("assistant", answered.text, answered.stats.to_dict(), reasoning=answered.reasoning)
    saved = json.loads(chat.save(tmp_path / "c.json").read_text())["messages"][1]
    assert saved["content"] == "Hello! How can I help?" and saved["reasoning"].startswith("The user greets")
    again = load_chat(str(tmp_path / "c.json"))
    assert again.conversation.messages[1]["reasoning"] == answered.reasoning
    assert "<details><summary>reasoning</summary>" in again.to_markdown()
    again.add("user", "Thanks")
    stream_answer(session, again.conversation, None)
    assert (
        "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello! How" in session.backend.tokenizer.rendered[-1]
    )


def test_the_chat_folds_the_thinking_and_f3_shows_it(tmp_path):
    async def run():
        app = ChatApp(lambda progress: session_for(THOUGHT, QWEN3_LIKE), SavedChat.new("replying"), save_dir=tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "Hi")
            await wait_for(pilot, lambda: not app.generating and len(app.chat.conversation.messages) == 2)
            turn = list(app.query(Turn))[-1]
            assert turn.text == "Hello! How can I help?" and turn.reasoning.startswith("The user greets")
            assert turn.thought_head.display and not turn.thought.display
            assert "reasoning, 2 lines · F3 shows it" in str(turn.thought_head.render())
            await pilot.press("f3")
            assert turn.thought.display and "I greet back." in str(turn.thought.render())
            saved = json.loads((tmp_path / f"{app.chat.id}.json").read_text())["messages"][1]
            assert saved["reasoning"] == turn.reasoning and saved["content"] == turn.text

    asyncio.run(run())


@pytest.mark.model
def test_no_think_on_a_model_without_the_switch_is_one_clear_line():
    from support.cli import assert_one_line_error, run_cli

    result = run_cli("run", "--no-think", "--max-tokens", "4", "Hi")  # SmolLM2's template has no switch
    assert_one_line_error(result, "--no-think", "has no thinking switch (enable_thinking)")

"""The Textual chat driven by a pilot, on a scripted model (no weights)."""

import asyncio
import json
import time

import pytest
from support.fakes import ScriptedBackend
from support.tui import send, wait_for  # noqa: F401

from localspec.apps.tui.app import ChatApp, Turn
from localspec.apps.tui.panels import StatsPanel, StatusBar
from localspec.chat.store import SavedChat, load_chat
from localspec.drafters.table import DrafterSetup
from localspec.engine.speclen import FixedK
from localspec.errors import ModelError
from localspec.sampling import SamplingParams
from localspec.session import Session


class SlowBackend(ScriptedBackend):
    def forward(self, tokens, return_hidden=False):
        time.sleep(0.01)
        return super().forward(tokens, return_hidden)


def make_app(tmp_path, backend=None, max_tokens=40, chat=None, fail=False, drafter="ngram"):
    backend = backend or ScriptedBackend()

    def open_session(progress):
        if fail:
            raise ModelError("model file not found: /nowhere.gguf; check the path")
        progress("loading the model 100%")
        options = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path / "suffix"))
        return Session(
            backend,
            options.build(drafter, backend),
            SamplingParams(temperature=0),
            "scripted-model",
            max_tokens=max_tokens,
            speclen=FixedK(4),
            drafters=options,
        )

    return ChatApp(open_session, chat or SavedChat.new("scripted-model"), save_dir=tmp_path)


def text_of(widget):
    return str(widget.render())


def test_send_a_message_streams_the_answer_and_updates_stats(tmp_path):
    async def run():
        app = make_app(tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "abcabc")
            await wait_for(pilot, lambda: not app.generating and len(app.chat.conversation.messages) == 2)
            answer = app.chat.conversation.messages[1]["content"]
            turns = list(app.query(Turn))
            assert turns[-1].text == answer and len(answer) == 40
            panel = text_of(app.query_one(StatsPanel))
            assert "accepted" in panel and "tok/s" in panel and "speedup" in panel
            assert "scripted-model" in text_of(app.query_one(StatusBar))
            saved = json.loads((tmp_path / f"{app.chat.id}.json").read_text())
            assert saved["messages"][1]["content"] == answer and saved["messages"][1]["stats"]["generated_tokens"] == 40

    asyncio.run(run())


def test_escape_stops_the_answer_and_keeps_what_was_said(tmp_path):
    async def run():
        backend = SlowBackend()
        app = make_app(tmp_path, backend=backend, max_tokens=2000)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: app.current is not None and len(app.current.text) > 5)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.generating)
            kept = app.chat.conversation.messages[-1]["content"]
            assert 5 < len(kept) < 2000
            assert any("stopped" in text_of(w) for w in app.query(".note"))
            # the cache was rolled back to the context minus the pending token: the next turn works
            await send(pilot, app, "bca")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 4 and not app.generating, 30)

    asyncio.run(run())


def test_slash_commands(tmp_path):
    async def run():
        app = make_app(tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "/drafter suffix")
            await wait_for(pilot, lambda: any("drafter: suffix" in text_of(w) for w in app.query(".note")))
            assert app.session.drafter.name == "suffix" and "suffix" in text_of(app.query_one(StatusBar))
            await send(pilot, app, "/drafter draft")  # no draft model known for the scripted model
            await wait_for(pilot, lambda: any("--draft-model" in text_of(w) for w in app.query(".error")))
            assert app.session.drafter.name == "suffix"
            await send(pilot, app, "/k 6")
            await send(pilot, app, "/temp 0.5")
            await pilot.pause(0.1)
            assert app.session.speclen.label == "K=6" and app.session.sampling.temperature == 0.5
            await send(pilot, app, "/k auto")
            await pilot.pause(0.1)
            assert app.session.speclen.adaptive and "adaptive" in text_of(app.query_one(StatusBar))
            await send(pilot, app, "/drafter magic")
            await pilot.pause(0.1)
            assert any("/drafter needs one of" in text_of(w) for w in app.query(".error"))
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 2 and not app.generating)
            await send(pilot, app, f"/save {tmp_path / 'out.md'}")
            await pilot.pause(0.1)
            md = (tmp_path / "out.md").read_text()
            assert "**assistant:**" in md and "tok/s" in md
            await send(pilot, app, "/clear")
            await pilot.pause(0.1)
            assert app.chat.conversation.messages == [] and not list(app.query(Turn))

    asyncio.run(run())


def test_schema_and_grammar_commands_hold_every_later_answer(tmp_path):
    async def run():
        app = make_app(tmp_path, backend=ScriptedBackend(vocab_size=20, eog=19))  # a grammar's answer must end
        (tmp_path / "abc.lark").write_text('start: "cab" ("ba" | "ca")\n')
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, f"/grammar {tmp_path / 'abc.lark'}")
            await wait_for(
                pilot, lambda: any("every answer follows this lark" in text_of(w) for w in app.query(".note"))
            )
            for turn in range(2):
                await send(pilot, app, "abcabc")
                await wait_for(
                    pilot, lambda t=turn: len(app.chat.conversation.messages) == 2 * t + 2 and not app.generating
                )
                assert app.chat.conversation.messages[-1]["content"] in ("cabba", "cabca")
            assert "forced" in text_of(app.query_one(StatsPanel))  # the grammar's figures in the panel
            await send(pilot, app, "/grammar off")
            await send(pilot, app, '/schema {"type": "strin"}')
            await send(pilot, app, "/schema nowhere.json")
            await pilot.pause(0.2)
            errors = [text_of(w) for w in app.query(".error")]
            assert any("Invalid type: strin" in e for e in errors) and any("no such file" in e for e in errors)
            await send(pilot, app, '/schema {"type": "object"}')
            await pilot.pause(0.1)
            assert app.session.grammar is not None and app.session.grammar.kind == "json_schema"
            await send(pilot, app, "/schema off")
            await pilot.pause(0.1)
            assert app.session.grammar is None and any("free text again" in text_of(w) for w in app.query(".note"))

    asyncio.run(run())


def test_resume_shows_the_saved_chat_and_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_DATA", str(tmp_path / "data"))
    chat = SavedChat.new("scripted-model")
    chat.add("user", "abc")
    chat.add("assistant", "hello there", {"generated_tokens": 2})
    chat.save()
    resumed = load_chat(chat.id)

    async def run():
        app = make_app(tmp_path, chat=resumed)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            assert [t.text for t in app.query(Turn)] == ["abc", "hello there"]
            await send(pilot, app, "cab")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 4 and not app.generating)

    asyncio.run(run())


def test_a_model_error_is_shown_and_the_app_stays_up(tmp_path):
    async def run():
        app = make_app(tmp_path, fail=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: bool(list(app.query(".error"))))
            assert "model file not found" in text_of(app.query(".error").first())
            await send(pilot, app, "/help")
            await pilot.pause(0.1)
            assert any("/drafter NAME" in text_of(w) for w in app.query(".note"))

    asyncio.run(run())


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_layout_fits_small_and_large_terminals(tmp_path, size):
    async def run():
        app = make_app(tmp_path)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 2 and not app.generating)
            for selector in ("#conversation", "#stats", "#input", "#status"):
                region = app.query_one(selector).region
                assert region.width > 0 and region.height > 0, selector
                assert region.right <= size[0] and region.bottom <= size[1], selector
            assert app.query_one("#conversation").region.width >= size[0] - 36
            app.save_screenshot(str(tmp_path / f"chat-{size[0]}x{size[1]}.svg"))

    asyncio.run(run())


@pytest.mark.model
def test_real_smollm2_answers_in_the_app(tmp_path):
    from localspec.backends.llama_cpp.backend import LlamaCppBackend
    from localspec.models.registry import resolve_model

    def open_session(progress):
        _, path = resolve_model("smollm2-135m")
        backend = LlamaCppBackend(path, n_ctx=1024, on_load=lambda f: progress(f"loading {f:.0%}"))
        options = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path / "suffix"))
        return Session(
            backend,
            options.build("suffix", backend),
            SamplingParams(temperature=0),
            "smollm2-135m",
            max_tokens=32,
            drafters=options,
        )

    async def run():
        app = ChatApp(open_session, SavedChat.new("smollm2-135m"), save_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.session is not None, timeout=60)
            await send(pilot, app, "Count from 1 to 5.")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 2 and not app.generating, 60)
            answer = app.chat.conversation.messages[1]
            assert answer["content"].strip() and app.chat.stats[1]["generated_tokens"] > 0
            assert "smollm2-135m · llama.cpp · suffix" in text_of(app.query_one(StatusBar))

    asyncio.run(run())


def test_quitting_mid_answer_keeps_the_answer_so_far(tmp_path):
    async def run():
        app = make_app(tmp_path, backend=SlowBackend(), max_tokens=2000)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: app.current is not None and len(app.current.text) > 5)
            await pilot.press("ctrl+q")
        saved = json.loads((tmp_path / f"{app.chat.id}.json").read_text())
        assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
        assert len(saved["messages"][1]["content"]) > 5

    asyncio.run(run())


class BreakableBackend(ScriptedBackend):
    broken = False

    def forward(self, tokens, return_hidden=False):
        if self.broken:
            raise RuntimeError("boom")
        return super().forward(tokens, return_hidden)


def test_an_unexpected_engine_error_is_reported_and_the_chat_goes_on(tmp_path):
    async def run():
        backend = BreakableBackend()
        app = make_app(tmp_path, backend=backend)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            backend.broken = True
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: bool(list(app.query(".error"))) and not app.generating)
            assert "boom" in text_of(app.query(".error").first()) and app.chat.conversation.messages == []
            backend.broken = False  # the same chat keeps working
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 2 and not app.generating)

    asyncio.run(run())


class LayoutBackend(ScriptedBackend):
    """A backend whose weight layout for --exact is fixed at load, as llama.cpp's on a CPU."""

    def __init__(self, exact: bool) -> None:
        super().__init__()
        self.loaded_exact = exact
        self.closed = False

    def reload_for_exact(self, exact: bool) -> bool:
        return exact != self.loaded_exact

    def close(self) -> None:
        self.closed = True
        super().close()


def test_exact_switches_at_once_or_loads_the_model_again_keeping_drafter_and_sampling(tmp_path):
    """/exact on a backend that can switch does it at once; on one whose layout is fixed at load the model is
    loaded again (the same drafter and temperature) and the note says why; the chat goes on either way."""
    loads = []

    def open_session(progress, exact=False, drafter="ngram", sampling=None):
        sampling = sampling or SamplingParams(temperature=0)
        loads.append((exact, drafter, sampling.temperature))
        backend = LayoutBackend(exact)
        options = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path / "suffix"))
        session = Session(backend, options.build(drafter, backend), sampling, "scripted-model", drafters=options)
        session.set_exact(exact)
        return session

    async def run():
        app = ChatApp(open_session, SavedChat.new("scripted-model"), save_dir=tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            first = app.session
            await send(pilot, app, "/drafter suffix")
            await wait_for(pilot, lambda: app.session.drafter.name == "suffix")
            await send(pilot, app, "/temp 0.3")
            await send(pilot, app, "/exact")
            await wait_for(pilot, lambda: any("loaded again" in text_of(w) for w in app.query(".note")))
            assert loads[-1] == (True, "suffix", 0.3) and first.backend.closed
            assert app.session.exact.on and "exact" in text_of(app.query_one(StatusBar))
            await send(pilot, app, "abc")
            await wait_for(pilot, lambda: len(app.chat.conversation.messages) == 2 and not app.generating)
            assert app.chat.stats[1]["mode"] == "exact"
            app.session.backend.loaded_exact = False  # now a backend that switches without a reload
            await send(pilot, app, "/exact off")
            await wait_for(pilot, lambda: not app.session.exact.on)
            assert len(loads) == 2  # no third load
            await send(pilot, app, "/exact maybe")
            await wait_for(pilot, lambda: any("/exact takes on, off" in text_of(w) for w in app.query(".error")))

    asyncio.run(run())

"""`localspec chat`: a Textual chat with live speculation stats.

The engine runs in one long-lived worker thread: loading and every turn. It talks to the UI
only by posting messages; token updates are coalesced to at most one every UPDATE_S, so a fast model
cannot flood the UI. One thread, not one per turn: llama.cpp's OpenMP thread team belongs to the thread
that calls it, and a second caller's team fights the first one's spinning threads for the cores
(measured: decoding from a second thread ran at 0.70x, 0.26x with OMP_WAIT_POLICY=active).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Markdown, Static, TextArea

from localspec.apps.tui.panels import StatsPanel, StatusBar, process_memory_mb
from localspec.apps.tui.slash import SlashError, help_text, parse_slash
from localspec.chat.reasoning import ANSWER, ReasoningSplitter
from localspec.chat.store import SavedChat
from localspec.engine.stats import TurnView
from localspec.errors import LocalspecError
from localspec.session import Session

# Every UI update takes the GIL from the engine thread and, on a machine whose cores all decode, CPU time
# from one of llama.cpp's threads, which the others then wait for at every barrier; so updates are
# rationed (benchmarks/tui_speed.py, SmolLM2-135M on 2 cores: 20 updates/s with live Markdown cost 47% of
# decode speed; 3.3/s 11-14%; a layout pass cost ~27 ms and a redraw ~12 ms of UI time there).
UPDATE_S = 0.5  # seconds between UI updates while tokens stream
STATS_S = 1.0  # seconds between stats panel redraws while tokens stream
MARKDOWN_S = 2.0  # seconds between Markdown redraws of a streaming answer
TAIL_ROWS = 8  # the streaming tail's height grows in steps of this many rows


def warm_highlighters() -> None:
    """Compile the code highlighters of the common languages now, while nothing streams: Pygments builds
    a lexer's regexes on first use, which cost ~80 ms of the UI's time (and decode speed) in the middle of
    the first answer with a code block."""
    from pygments.lexers import get_lexer_by_name

    for name in ("python", "bash", "json", "javascript", "c", "rust", "markdown", "text"):
        with contextlib.suppress(Exception):  # a missing lexer only means no warm-up for it
            get_lexer_by_name(name)


# -- messages from the worker threads -------------------------------------------------------------------
class Loaded(Message):
    def __init__(self, session: Session, quiet: bool = False) -> None:
        super().__init__()
        self.session, self.quiet = session, quiet  # quiet: loaded again (/exact), no greeting


class Progress(Message):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


class Delta(Message):
    """New answer text since the last Delta, split into (text, from an accepted draft) pieces, and new
    reasoning text (a reasoning model's thinking before its answer)."""

    def __init__(self, pieces: list[tuple[str, bool]], stats: TurnView, reasoning: str = "") -> None:
        super().__init__()
        self.pieces, self.stats, self.reasoning = pieces, stats, reasoning


class TurnDone(Message):
    def __init__(self, stats: TurnView | None, finish: str, error: str | None = None) -> None:
        super().__init__()
        self.stats, self.finish, self.error = stats, finish, error


class Noted(Message):
    """A line for the conversation from the engine thread (after a drafter switch, say)."""

    def __init__(self, text: str, error: bool = False) -> None:
        super().__init__()
        self.text, self.error = text, error


class Failed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


def _split_event(split: list[tuple[str, str]], event, pieces: list[tuple[str, bool]], thinking: list[str]) -> None:
    """A step's text, split by the reasoning splitter, into answer pieces (with the characters that came
    from accepted drafts marked, where the answer ends with the step's text unchanged) and reasoning text."""
    if event is not None and len(split) == 1 and split[0][0] == ANSWER and split[0][1].endswith(event.text):
        held = split[0][1][: len(split[0][1]) - len(event.text)]  # text the splitter held back from earlier steps
        if held:
            pieces.append((held, False))
        if event.draft_chars:
            pieces.append((event.text[: event.draft_chars], True))
        if event.text[event.draft_chars :]:
            pieces.append((event.text[event.draft_chars :], False))
        return
    for kind, text in split:
        if kind == ANSWER:
            pieces.append((text, False))
        else:
            thinking.append(text)


# -- widgets --------------------------------------------------------------------------------------------
class ChatInput(TextArea):
    """Multi-line input: Enter sends, Ctrl+J inserts a new line, Ctrl+P / Ctrl+N walk the history."""

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sent: list[str] = []
        self._at = 0

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.prevent_default()
            event.stop()
            text = self.text.strip()
            if text:
                self.sent.append(text)
                self._at = len(self.sent)
                self.text = ""
                self.post_message(self.Submitted(text))
            return
        if event.key == "ctrl+j":
            event.prevent_default()
            event.stop()
            self.insert("\n")
            return
        if event.key in ("ctrl+p", "ctrl+n") and self.sent:
            event.prevent_default()
            event.stop()
            self._at = max(0, min(len(self.sent), self._at + (-1 if event.key == "ctrl+p" else 1)))
            self.text = self.sent[self._at] if self._at < len(self.sent) else ""
            return
        await super()._on_key(event)


class Turn(Vertical):
    """One message. A streaming answer is Markdown (highlighted code) that catches up every MARKDOWN_S,
    followed by the newest text as plain text until then: redrawing Markdown on every update cost most of
    the UI's share of decode time. The colour view marks the text that came from accepted drafts."""

    def __init__(self, role: str, text: str = "", reasoning: str = "", show_reasoning: bool = False) -> None:
        super().__init__(classes=f"turn {role}")
        self.role, self.text = role, text
        self.reasoning, self.show_reasoning = reasoning, show_reasoning
        self.thought_head = Static("", classes="thought-head", markup=False)
        self.thought = Static("", classes="thought", markup=False)
        self.pieces: list[tuple[str, bool]] = [(text, False)] if text else []
        self.markdown = Markdown(text)
        self.live = Static("", classes="live")
        self.colours = False
        self._stream = None
        self._tail = ""  # streamed text the Markdown view does not show yet
        self._md_at = time.perf_counter()
        self._streaming = False
        self._rows = 0  # rows reserved for the streaming tail (0: its natural height)

    def compose(self) -> ComposeResult:
        yield Static("you" if self.role == "user" else "assistant", classes="who")
        yield self.thought_head
        yield self.thought
        yield self.markdown
        yield self.live

    def on_mount(self) -> None:
        self._show()
        self._show_reasoning()

    def _show_reasoning(self) -> None:
        """A reasoning model's thinking, folded to one line unless shown (F3)."""
        self.thought_head.display = bool(self.reasoning)
        self.thought.display = bool(self.reasoning) and self.show_reasoning
        if not self.reasoning:
            return
        if self._streaming and not self.text:
            head = "thinking…"
        else:
            head = f"reasoning, {self.reasoning.count(chr(10)) + 1} lines"
        self.thought_head.update(
            f"{'▾' if self.show_reasoning else '▸'} {head} · F3 {'hides' if self.show_reasoning else 'shows'} it"
        )
        if self.show_reasoning:
            self.thought.update(Text(self.reasoning))

    def set_show_reasoning(self, on: bool) -> None:
        self.show_reasoning = on
        self._show_reasoning()

    def _show(self) -> None:
        self.markdown.display = not self.colours
        self.live.display = self.colours or self._streaming
        if self.colours:
            self._reserve(0)
            self.live.update(self.coloured_text())
        elif self._streaming:
            # A layout pass is the costliest part of an update, and a growing tail would need one for
            # every new line: while the answer streams the tail keeps its rows (in steps of TAIL_ROWS, empty
            # right after a catch-up), so its text updates in place.
            lines = sum(1 + len(line) // max(1, self.live.size.width or 80) for line in self._tail.split("\n"))
            self._reserve(max(self._rows, -(-(lines + 1) // TAIL_ROWS) * TAIL_ROWS))
            self.live.update(Text(self._tail), layout=False)

    def _reserve(self, rows: int) -> None:
        """Fix the tail's height at `rows` (0: back to its natural height)."""
        if rows != self._rows:
            self._rows = rows
            self.live.styles.height = rows or "auto"

    async def append(self, pieces: list[tuple[str, bool]], reasoning: str = "") -> None:
        answer_starts = bool(self.reasoning or reasoning) and not self.text and bool(pieces)
        self.reasoning += reasoning
        chunk = "".join(p for p, _ in pieces)
        self.text += chunk
        self.pieces.extend(pieces)
        self._tail += chunk
        self._streaming = True
        if reasoning or answer_starts:
            self._show_reasoning()
        if time.perf_counter() - self._md_at >= MARKDOWN_S:
            await self._catch_up()
        self._show()

    async def _catch_up(self) -> None:
        if self._tail:
            if self._stream is None:
                self._stream = Markdown.get_stream(self.markdown)
            await self._stream.write(self._tail)
            self._tail = ""
        self._md_at = time.perf_counter()

    async def finish(self) -> None:
        await self._catch_up()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self._streaming = False
        self._reserve(0)
        self._show()
        self._show_reasoning()

    def coloured_text(self) -> Text:
        t = Text()
        for piece, drafted in self.pieces:
            t.append(piece, style="bold green" if drafted else "")
        return t

    def show_colours(self, on: bool) -> None:
        self.colours = on
        self._show()


# -- the app --------------------------------------------------------------------------------------------
class ChatApp(App):
    TITLE = "localspec"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #main { height: 1fr; }
    #conversation { width: 1fr; padding: 0 1; }
    #stats { width: 34; height: 1fr; border-left: solid $primary-darken-2; padding: 0 1; }
    .turn { height: auto; margin-bottom: 1; }
    .who { color: $text-muted; text-style: bold; }
    .user .who { color: $accent; }
    .turn Markdown { margin: 0; padding: 0; }
    .note { color: $text-muted; height: auto; margin-bottom: 1; }
    .thought-head { color: $text-muted; text-style: italic; }
    .thought { color: $text-muted; height: auto; border-left: solid $primary-darken-2; padding-left: 1; }
    .error { color: $error; height: auto; margin-bottom: 1; }
    ChatInput { height: 4; border: tall $primary-darken-2; }
    StatusBar { height: 1; background: $primary-darken-3; color: $text; }
    """
    BINDINGS = [
        Binding("escape", "stop", "stop answer", show=False),
        Binding("ctrl+c", "stop", "stop answer", show=False, priority=True),
        Binding("f2", "toggle_colours", "colour drafted tokens", show=False),
        Binding("f3", "toggle_reasoning", "show reasoning", show=False),
        Binding("ctrl+q", "quit", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        open_session: Callable[[Callable[[str], None]], Session],
        chat: SavedChat,
        *,
        save_dir: Path | None = None,
        owns_session: bool = True,
    ) -> None:
        super().__init__()
        self.owns_session = owns_session
        self.open_session, self.chat = open_session, chat
        self.save_dir = save_dir
        self.session: Session | None = None
        self.history: list[tuple[float, float]] = []
        self.current: Turn | None = None
        self.last_stats: TurnView | None = None
        self.colours = False
        self.show_reasoning = False
        self._stop = threading.Event()
        self._stats_at = 0.0
        self.generating = False
        self._jobs: queue.Queue = queue.Queue()
        self._engine = threading.Thread(target=self._engine_loop, name="localspec-engine", daemon=True)

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield VerticalScroll(id="conversation")
            yield StatsPanel(id="stats")
        yield ChatInput(id="input")
        yield StatusBar(id="status")

    async def on_mount(self) -> None:
        conversation = self.query_one("#conversation")
        for message in self.chat.conversation.messages:  # a resumed chat
            await conversation.mount(Turn(message["role"], message["content"], message.get("reasoning", "")))
        self.query_one(StatsPanel).show(None, self.history)
        self.query_one(StatusBar).update(" loading the model…")
        self.query_one(ChatInput).focus()
        self._engine.start()
        self._jobs.put(self._load)

    # -- the engine thread: it only posts messages ---------------------------------------------------
    def _engine_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except Exception as exc:  # a bug must not leave the app waiting forever: report it, keep going
                error = f"internal error: {exc!r} (please report it)"
                self.post_message(TurnDone(None, "error", error) if self.generating else Failed(error))

    def _load(self) -> None:
        try:
            session = self.open_session(lambda label: self.post_message(Progress(label)))
            warm_highlighters()
            self.post_message(Loaded(session))
        except LocalspecError as exc:
            self.post_message(Failed(str(exc)))

    def _switch_drafter(self, name: str) -> None:
        session = self.session
        try:
            session.switch_drafter(name)
        except LocalspecError as exc:
            self.post_message(Noted(str(exc), error=True))
            return
        draft = session.draft_model()
        self.post_message(Noted(f"drafter: {name}" + (f" ({draft})" if draft else "")))

    def _switch_exact(self, on: bool) -> None:
        """--exact on or off: at once where the backend allows, else by loading the model again with the same
        drafter and sampling (llama.cpp fixes its weight layout at load); the old session stays on an error."""
        session = self.session
        if not session.backend.reload_for_exact(on):
            session.set_exact(on)
        else:
            self.post_message(Progress("loading the model again for the weight layout --exact needs"))
            try:
                new = self.open_session(
                    lambda label: self.post_message(Progress(label)),
                    exact=on,
                    drafter=session.drafter.name,
                    sampling=session.sampling,
                )
            except LocalspecError as exc:
                self.post_message(Noted(str(exc), error=True))
                return
            new.grammar = session.grammar  # what /schema or /grammar set holds on
            session.close()
            self.session = session = new  # here too: the next job on this thread must not get the closed one
            self.post_message(Loaded(new, quiet=True))
            self.post_message(
                Noted(f"{new.exact.describe()} (the model was loaded again: llama.cpp fixes its weight layout at load)")
            )
            return
        self.post_message(Noted(session.exact.describe()))

    def _answer(self) -> None:
        session, stats, finish = self.session, None, "interrupted"
        pieces: list[tuple[str, bool]] = []
        thinking: list[str] = []
        last = time.perf_counter()
        events_ = None
        try:
            splitter = ReasoningSplitter(session.text.reasoning)  # reads the chat template, which may refuse
            events_ = session.answer(
                self.chat.conversation,
                on_prefill=lambda done, total: self.post_message(Progress(f"reading the prompt {done}/{total}")),
            )
            for event in events_:
                _split_event(splitter.feed(event.text), event, pieces, thinking)
                stats = event.stats  # the turn's live counters; a frozen view of them is what is posted
                finish = event.finish_reason or finish
                now = time.perf_counter()
                if (pieces or thinking) and now - last >= UPDATE_S:
                    self.post_message(Delta(pieces, stats.view(), "".join(thinking)))
                    pieces, thinking, last = [], [], now
                if self._stop.is_set():
                    break
        except LocalspecError as exc:
            self.post_message(TurnDone(stats.view() if stats else None, "error", str(exc)))
            return
        finally:
            if events_ is not None:
                events_.close()  # rolls the cache back if we left early, and completes the stats
        final = stats.view() if stats else None
        _split_event(splitter.finish(), None, pieces, thinking)
        if pieces or thinking:
            self.post_message(Delta(pieces, final, "".join(thinking)))
        self.post_message(TurnDone(final, "interrupted" if self._stop.is_set() else finish))

    # -- messages --------------------------------------------------------------------------------------
    def on_progress(self, message: Progress) -> None:
        self.query_one(StatusBar).update(f" {message.label}")

    async def on_failed(self, message: Failed) -> None:
        await self._note(message.error, error=True)
        self.query_one(StatusBar).update(" no model loaded — fix the problem above and restart (Ctrl+Q quits)")

    async def on_loaded(self, message: Loaded) -> None:
        self.session = message.session
        self._refresh_status()
        draft = message.session.draft_model()
        if message.quiet:
            return
        if draft:
            await self._note(f"draft model {draft} loaded")
        if not self.chat.conversation.messages:
            await self._note("Type a message. /help lists commands; F2 colours tokens from accepted drafts.")

    async def on_noted(self, message: Noted) -> None:
        await self._note(message.text, error=message.error)
        self._refresh_status()

    async def on_chat_input_submitted(self, message: ChatInput.Submitted) -> None:
        try:
            slash = parse_slash(message.text)
        except SlashError as exc:
            await self._note(str(exc), error=True)
            return
        if slash is not None:
            await self._run_slash(slash)
            return
        if self.session is None or self.generating:
            await self._note("wait for the model to load / the answer to finish (Esc stops it)", error=True)
            return
        self.chat.add("user", message.text)
        self._save()
        await self.query_one("#conversation").mount(Turn("user", message.text))
        self.current = Turn("assistant", show_reasoning=self.show_reasoning)
        await self.query_one("#conversation").mount(self.current)
        self.current.show_colours(self.colours)
        self._scroll()
        self._stop.clear()
        self.generating = True
        self._jobs.put(self._answer)

    async def on_delta(self, message: Delta) -> None:
        if self.current is not None:
            await self.current.append(message.pieces, message.reasoning)
        self.last_stats = message.stats
        now = time.perf_counter()
        if now - self._stats_at >= STATS_S:  # the panel is costlier to redraw than the text
            self._stats_at = now
            self._show_stats()
        self._scroll()

    async def on_turn_done(self, message: TurnDone) -> None:
        self.generating = False
        turn, self.current = self.current, None
        if turn is not None:
            await turn.finish()
        if message.error:
            self.chat.conversation.messages.pop()  # the message could not be answered; keep chatting
            self.chat.stats.pop()
            await self._note(message.error, error=True)
        elif turn is not None:
            stats = message.stats
            self.chat.add("assistant", turn.text, stats.record if stats else None, reasoning=turn.reasoning)
            self._save()
            if stats and stats.generated:
                self.last_stats = stats
                self.history.append((stats.decode_tok_s, stats.acceptance_rate or 0.0))
            if message.finish == "interrupted":
                await self._note("(stopped — the answer so far is kept)")
            elif message.finish == "context":
                await self._note("(the context is full: /clear starts a new chat, or restart with a larger --ctx)")
            if self.chat.conversation.dropped:
                await self._note(
                    f"({self.chat.conversation.dropped} oldest messages no longer fit the context "
                    f"and were left out of the prompt)"
                )
        self._show_stats()
        self._refresh_status()

    memory_mb = staticmethod(process_memory_mb)  # replaceable, e.g. for reproducible screenshots

    # -- actions ---------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.generating:
            self._stop.set()
        else:
            self.query_one(StatusBar).update(" nothing to stop · Ctrl+Q quits (the chat is saved)")

    def action_toggle_colours(self) -> None:
        self.colours = not self.colours
        for turn in self.query(Turn):
            if turn.role == "assistant":
                turn.show_colours(self.colours)

    def action_toggle_reasoning(self) -> None:
        self.show_reasoning = not self.show_reasoning
        for turn in self.query(Turn):
            turn.set_show_reasoning(self.show_reasoning)

    async def _run_slash(self, slash) -> None:
        anytime = {
            "help": self._slash_help,
            "quit": self._slash_quit,
            "save": self._slash_save,
            "system": self._slash_system,
        }
        if slash.name in anytime:
            await anytime[slash.name](slash.arg)
        elif self.generating:
            await self._note(f"/{slash.name} has to wait until the answer is done (Esc stops it)", error=True)
        elif slash.name == "clear":
            self.chat = SavedChat.new(self.chat.model, self.chat.conversation.system)
            await self.query_one("#conversation").remove_children()
            await self._note("new chat")
        elif self.session is None:
            await self._note("the model is not loaded yet", error=True)
        elif slash.name == "drafter":  # on the engine thread: a draft model loads there, and runs there
            self.query_one(StatusBar).update(f" switching to the {slash.arg} drafter…")
            self._jobs.put(lambda: self._switch_drafter(slash.arg))
            return
        elif slash.name == "k":
            self.session.set_draft_tokens(slash.arg)
            await self._note(f"draft tokens per step: {self.session.speclen.label}")
        elif slash.name == "exact":  # on the engine thread: llama.cpp loads the model again there
            on = not self.session.exact.on if slash.arg is None else slash.arg
            self.query_one(StatusBar).update(f" switching --exact {'on' if on else 'off'}…")
            self._jobs.put(lambda: self._switch_exact(on))
            return
        elif slash.name == "temp":
            self.session.set_temperature(slash.arg)
            await self._note(f"temperature: {slash.arg:g}" + (" (greedy)" if slash.arg == 0 else ""))
        elif slash.name in ("schema", "grammar"):  # every later answer follows it (drafted grammar+drafter)
            self.session.grammar = slash.arg
            what = "free text again" if slash.arg is None else f"every answer follows this {slash.arg.kind}"
            await self._note(f"/{slash.name}: {what}")
        self._refresh_status()

    async def _slash_help(self, arg) -> None:
        await self._note(help_text())

    async def _slash_quit(self, arg) -> None:
        self.exit()

    async def _slash_save(self, arg) -> None:
        path = Path(arg).expanduser() if arg else None
        try:
            await self._note(f"saved to {self.chat.save(path or self._default_path())}")
        except OSError as exc:
            await self._note(f"could not save: {exc}", error=True)

    async def _slash_system(self, arg) -> None:
        self.chat.conversation.system = arg
        self._save()
        await self._note(f"system prompt {'set' if arg else 'cleared'}")

    # -- helpers ---------------------------------------------------------------------------------------
    def _default_path(self) -> Path:
        from localspec.chat.store import chats_dir

        return (self.save_dir or chats_dir()) / f"{self.chat.id}.json"

    def _save(self) -> None:
        try:
            self.chat.save(self._default_path())
        except OSError as exc:
            self.query_one(StatusBar).update(f" could not save the chat: {exc}")

    async def _note(self, text: str, error: bool = False) -> None:
        await self.query_one("#conversation").mount(Static(text, classes="error" if error else "note", markup=False))
        self._scroll()

    def _scroll(self) -> None:
        self.query_one("#conversation").scroll_end(animate=False)

    def _show_stats(self) -> None:
        self.query_one(StatsPanel).show(self.last_stats, self.history)

    def _refresh_status(self) -> None:
        s = self.session
        if s is None:
            return
        self.query_one(StatusBar).show(
            s.model_name,
            s.backend.name,
            s.drafter.name,
            s.speclen.label,
            len(s.backend.cached_tokens),
            s.backend.n_ctx,
            self.memory_mb(),
            f"T={s.sampling.temperature:g}" + (" · exact" if s.exact.on else ""),
        )

    async def action_quit(self) -> None:
        self._stop.set()
        if self.generating and self.current is not None and self.current.text:
            record = self.last_stats.record if self.last_stats else None
            self.chat.add("assistant", self.current.text, record, reasoning=self.current.reasoning)  # so far
            self.generating = False
        self._save()
        self.exit()

    def on_unmount(self) -> None:
        self._stop.set()
        if self.owns_session:
            self._jobs.put(lambda: self.session.close() if self.session is not None else None)
        self._jobs.put(None)
        if self._engine.is_alive():
            self._engine.join(timeout=5)

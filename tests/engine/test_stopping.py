from localspec.engine.stopping import StopStrings


def feed_all(stopper, pieces):
    shown, stopped = [], False
    for piece in pieces:
        text, stopped = stopper.feed(piece)
        shown.append(text)
        if stopped:
            break
    if not stopped:
        shown.append(stopper.flush())
    return "".join(shown), stopped


def test_stop_string_split_across_pieces_is_never_shown():
    assert feed_all(StopStrings(["</end>"]), ["hello </", "en", "d> more"]) == ("hello ", True)


def test_partial_match_that_turns_out_not_to_be_a_stop_is_released():
    assert feed_all(StopStrings(["</end>"]), ["a </e", "x b"]) == ("a </ex b", False)


def test_earliest_of_several_stops_wins():
    assert feed_all(StopStrings(["ZZ", "Q"]), ["abQcdZZ"]) == ("ab", True)


def test_no_stops_passes_everything():
    assert feed_all(StopStrings(), ["a", "b"]) == ("ab", False)


def test_a_dedented_line_after_the_first_ends_the_text_before_it():
    # the first line is the cursor's own (its indentation is not a line start); blank lines do not count
    pieces = ["x = 1\n", "    y", " = 2\n\n  ", "  z = 3\n  ", "w = 4\n"]
    assert feed_all(StopStrings(min_indent=4), pieces) == ("x = 1\n    y = 2\n\n    z = 3\n", True)
    assert feed_all(StopStrings(min_indent=2), pieces) == ("".join(pieces), False)
    stopper = StopStrings(["zz"], min_indent=4)
    assert stopper.feed("a\n    b zz") == ("a\n    b ", True) and not stopper.limited  # a stop string: the end
    stopper = StopStrings(["zz"], min_indent=4)
    assert stopper.feed("a\nb zz") == ("a\n", True) and stopper.limited  # the dedent came first: a limit
    stopper = StopStrings(min_indent=4)
    assert stopper.feed("a\n  ") == ("a", False)  # a new line's indentation waits for its first character


def test_past_the_time_limit_the_text_ends_just_after_its_next_newline():
    stopper = StopStrings(time_limit_s=0.5)
    stopper.expire(0.4)
    assert stopper.feed("ab\ncd") == ("ab\ncd", False)
    stopper.expire(0.6)
    assert stopper.feed("ef") == ("ef", False) and not stopper.limited
    assert stopper.feed("g\nh\n") == ("g\n", True) and stopper.limited  # not the rest of the piece
    held = StopStrings(min_indent=4, time_limit_s=0.1)
    assert held.feed("x = 1") == ("x = 1", False)
    held.expire(1.0)
    assert held.feed("\n    ") == ("\n", True)  # a newline held for its indentation ends it too
    unlimited = StopStrings()
    unlimited.expire(99.0)
    assert unlimited.feed("a\nb") == ("a\nb", False)


def test_blank_lines_with_carriage_returns_do_not_count_as_dedented():
    pieces = ["x = 1\r\n", "    y = 2\r\n", "\r\n", "    z = 3\r\n", "w\r\n"]
    assert feed_all(StopStrings(min_indent=4), pieces) == ("x = 1\r\n    y = 2\r\n\r\n    z = 3\r\n", True)


def test_generation_with_an_indent_limit_is_the_unlimited_answer_cut_at_its_first_dedented_line():
    import re

    from support.fakes import ScriptedBackend, ScriptedTokenizer

    from localspec.drafters.base import NoDrafter
    from localspec.drafters.ngram import NgramDrafter
    from localspec.engine.loop import generate
    from localspec.sampling import SamplingParams

    class LineTokens(ScriptedTokenizer):  # token 0 is a newline, 1 two spaces, the others letters
        def token_bytes(self, token: int) -> bytes:
            return {0: b"\n", 1: b"  "}.get(token) or super().token_bytes(token)

    def Lines(**kw):  # noqa: N802 - reads as the backend it builds
        return ScriptedBackend(**kw, tokenizer=LineTokens(kw["vocab_size"], kw["eog"]))

    greedy, prompt = SamplingParams(temperature=0), [2, 3, 4]
    full = generate(Lines(vocab_size=8, eog=7, order=2, scale=2.0, seed=5), NoDrafter(), prompt, greedy, max_tokens=120)
    first = re.search(r"\n[ \t]{0,3}(?=[^ \t\n])", full.text)  # a line after the first, indented less than 4
    assert first is not None, full.text
    for drafter in (NoDrafter(), NgramDrafter(1, 4)):
        backend = Lines(vocab_size=8, eog=7, order=2, scale=2.0, seed=5)
        cut = generate(backend, drafter, prompt, greedy, max_tokens=120, stop=StopStrings(min_indent=4))
        assert cut.text == full.text[: first.start() + 1] and cut.finish_reason == "length"  # a limit
        backend = Lines(vocab_size=8, eog=7, order=2, scale=2.0, seed=5)
        timed = generate(backend, drafter, prompt, greedy, max_tokens=120, stop=StopStrings(time_limit_s=0.0))
        assert timed.text == full.text[: full.text.index("\n") + 1] and timed.finish_reason == "length"

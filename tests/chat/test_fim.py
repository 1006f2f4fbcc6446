"""Fill-in-the-middle prompts (chat/fim.py) on a character tokenizer: the repository-level layout with file
markers, the snippet layout without them, what is cut when it does not fit, and the markers found by their text
in a vocabulary; the suffix drafter drafts from the other files the prompt holds."""

from localspec.backends.tokenizer import Tokenizer
from localspec.chat.fim import CURRENT_FILE, REPO, SNIPPET, WINDOW, Infill, infill_tokens
from localspec.drafters.suffix.drafter import SuffixDrafter
from localspec.types import FimTokens

PRE, SUF, MID, REP, SEP, BOS = 1001, 1002, 1003, 1004, 1005, 1000
MARKS = FimTokens(PRE, SUF, MID, REP, SEP)


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_the_repository_level_layout_holds_every_part_in_order():
    infill = Infill("def f(x):\n    return ", "\n\nprint(f(2))\n", (("util.py", "X = 1\n"), ("b.py", "Y")), "x +")
    got = infill_tokens(infill, MARKS, chars, n_ctx=8192, answer_room=128, bos=BOS)
    files = [REP, *chars(REPO + "\n"), SEP, *chars("util.py\n"), *chars("X = 1\n"), SEP, *chars("b.py\nY")]
    current = [SEP, *chars(CURRENT_FILE + "\n")]
    middle = [PRE, *chars(infill.prefix), *chars("x +"), SUF, *chars(infill.suffix), MID]
    assert got == [BOS, *files, *current, *middle]


def test_a_model_without_file_markers_gets_snippet_lines_and_no_repository():
    infill = Infill("a = ", "\n", (("util.py", "X = 1\n"),))
    got = infill_tokens(infill, FimTokens(PRE, SUF, MID), chars, n_ctx=8192, answer_room=128)
    assert got == [*chars(SNIPPET + "X = 1\n"), PRE, *chars("a = "), SUF, *chars("\n"), MID]


def test_what_does_not_fit_is_cut_far_from_the_cursor():
    prefix, suffix = "p" * 5000 + "NEAR", "NEXT" + "s" * 5000
    extra = (("old.py", "o" * 3000), ("new.py", "n" * 3000 + "LAST"))
    n_ctx, room = 6000, 200
    got = infill_tokens(Infill(prefix, suffix, extra), MARKS, chars, n_ctx=n_ctx, answer_room=room)
    mid = got.index(PRE)
    kept_prefix = got[mid + 1 : got.index(SUF)]
    kept_suffix = got[got.index(SUF) + 1 : -1]
    assert len(kept_prefix) == 3 * WINDOW // 4 and kept_prefix[-4:] == chars("NEAR")  # the prefix's end
    assert len(kept_suffix) == WINDOW // 4 - 2 and kept_suffix[:4] == chars("NEXT")  # the suffix's start
    files = got[:mid]
    assert len(got) + room == n_ctx  # the newest files' ends fill what the context has left
    assert files[-(4 + 1 + len(CURRENT_FILE) + 1) :][:4] == chars("LAST") and REP not in files
    small = infill_tokens(Infill(prefix, "", extra), MARKS, chars, n_ctx=2048, answer_room=128)
    assert len(small) == 2048 - 128 and small[-6:-2] == chars("NEAR")  # a small context


class Vocabulary(Tokenizer):
    """Single characters, plus the whole-token markers ``specials`` (parsed only with special=True)."""

    def __init__(self, specials: list[str]) -> None:
        self.specials = specials

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        if special and text in self.specials:
            return [1000 + self.specials.index(text)]
        return chars(text)

    def token_text(self, token: int) -> str:
        return self.specials[token - 1000] if token >= 1000 else chr(token)


def test_markers_are_found_by_their_text_as_single_tokens():
    qwen = Vocabulary(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"])
    assert qwen.fim_tokens() == FimTokens(1000, 1001, 1002, 1003, 1004)
    codellama = Vocabulary(["▁<PRE>", "▁<SUF>", "▁<MID>"])
    assert codellama.fim_tokens() == FimTokens(1000, 1001, 1002)
    assert Vocabulary(["<|fim_prefix|>", "<|fim_suffix|>"]).fim_tokens() is None  # no middle marker
    assert Vocabulary([]).fim_tokens() is None


def test_the_suffix_drafter_drafts_a_line_from_another_file():
    line = "    total = sum(values) / len(values)\n"
    infill = Infill("def mean(values):\n", "\n", (("stats.py", "def avg(values):\n" + line),))
    prompt = infill_tokens(infill, MARKS, chars, n_ctx=8192, answer_room=64)
    drafter = SuffixDrafter()
    drafter.begin(prompt)
    typed = chars(line[:12])  # the model wrote the line's start; the rest is in the other file
    drafted = list(drafter.propose(prompt + typed, 16).tokens)
    assert len(drafted) >= 8 and drafted == chars(line[12 : 12 + len(drafted)])

"""Fill-in-the-middle prompts: the code before and after the cursor, and other files of the project, written in
the model's FIM tokens (llama-server's `/infill`, `/v1/completions` with `suffix`).

The layout is the repository-level one of Qwen2.5-Coder's report (arXiv 2409.12186), which llama-server writes
too, so that both servers see the same prompt for a request that fits (but for a BOS token, which goes first)::

    [REP]myproject\\n [SEP]name\\n text ... [SEP]filename\\n [PRE]prefix prompt [SUF]suffix [MID]

A model without the repository and file markers gets each extra file after a `--- snippet ---` line instead.
What is kept when it does not all fit: the prefix's last tokens (the lines nearest the cursor) and the suffix's
first, within a window of ``WINDOW`` tokens split 3:1 between them (llama-server's default batch and its split),
and the other files' last tokens in what the context has left beside them and the answer (llama-server keeps a
whole batch free for them instead, so it may keep less of the other files). The copy drafters index the whole
prompt, so they draft from the prefix, the suffix and the other files alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from localspec.types import FimTokens

WINDOW = 2048  # tokens of prefix + suffix (+ the request's prompt), prefix:suffix 3:1
REPO, CURRENT_FILE = "myproject", "filename"  # the names llama-server's prompts carry
SNIPPET = "\n\n--- snippet ---\n\n"  # before each extra file, for models without file markers


@dataclass(frozen=True)
class Infill:
    prefix: str  # the code before the cursor
    suffix: str  # the code after it
    extra: tuple[tuple[str, str], ...] = ()  # (file name, text) of other files, nearest last
    prompt: str = ""  # text after the prefix that the answer continues (llama-server's `prompt`)


def infill_tokens(
    infill: Infill,
    marks: FimTokens,
    tokenize: Callable[[str], list[int]],
    n_ctx: int,
    answer_room: int,
    bos: int | None = None,
) -> list[int]:
    """The prompt's tokens; ``answer_room`` tokens of the context are left for the answer."""
    prompt = tokenize(infill.prompt) if infill.prompt else []
    window = max(0, min(WINDOW, n_ctx - answer_room))
    prefix, suffix = tokenize(infill.prefix), tokenize(infill.suffix)
    prefix = prefix[len(prefix) - min(len(prefix), 3 * (window // 4)) :]
    suffix = suffix[: max(0, min(len(suffix), window // 4 - 2 - len(prompt)))]
    head = [bos] if bos is not None else []
    middle = [marks.pre, *prefix, *prompt, marks.suf, *suffix, marks.mid]
    files = _files(infill.extra, marks, tokenize)
    room = max(0, n_ctx - answer_room - len(head) - len(middle))
    return head + files[len(files) - min(len(files), room) :] + middle


def _files(extra: tuple[tuple[str, str], ...], marks: FimTokens, tokenize) -> list[int]:
    """The other files (and the current file's name), repository-level where the model has the markers."""
    out = [marks.rep, *tokenize(REPO + "\n")] if marks.rep is not None else []
    for name, text in extra:
        out += [marks.sep, *tokenize(name + "\n")] if marks.sep is not None else tokenize(SNIPPET)
        out += tokenize(text)
    return out + ([marks.sep, *tokenize(CURRENT_FILE + "\n")] if marks.sep is not None else [])

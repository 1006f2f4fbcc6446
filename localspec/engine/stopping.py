"""Where an answer stops in its text: stop strings, and the two limits editors put on a completion.

Text that might be the start of a stop string is held back until the next piece shows whether it is, so a stop
string never reaches the user even when split across tokens. ``min_indent`` (llama-server's `n_indent`): a line
after the first that starts less indented ends the answer before it (the completion stays inside the block the
cursor is in); a new line's indentation is held back until its first other character shows it. ``time_limit_s``
(llama-server's `t_max_predict_ms`): past that much decoding (``expire``), the answer ends just after its next
newline (a completion of whole lines, as soon as possible). Both are limits, not the answer's own end:
``limited`` says that one of them stopped it.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStrings:
    def __init__(self, stops: Sequence[str] = (), min_indent: int = 0, time_limit_s: float | None = None) -> None:
        self.stops = tuple(s for s in stops if s)
        self.min_indent, self.time_limit_s = min_indent, time_limit_s
        self._held, self._expired, self.limited = "", False, False

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to show now, whether a stop string or a dedented line was reached)."""
        buf = self._held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if self.min_indent and (cut := self._dedented(buf)) is not None:
            hits.append(cut)
        if hits:
            first = min(hits)
            self._held, self.limited = "", first not in [buf.find(s) for s in self.stops]
            return buf[:first], True
        if self._expired and "\n" in buf:  # past the time limit: whole lines only
            self._held, self.limited = "", True
            return buf[: buf.index("\n") + 1], True
        keep = max((_overlap(buf, s) for s in self.stops), default=0)
        if self.min_indent:
            keep = max(keep, _open_line(buf))
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held

    def expire(self, decoding_s: float) -> None:
        """The answer has been decoding this long: past the time limit, it ends at its next newline."""
        self._expired = self.time_limit_s is not None and decoding_s > self.time_limit_s

    def _dedented(self, buf: str) -> int | None:
        """Where the first line (after a newline in ``buf``) that starts less indented than ``min_indent``
        begins; blank lines do not count."""
        at = buf.find("\n")
        while at >= 0:
            start = at + 1
            body = len(buf) - len(buf[start:].lstrip(" \t\r"))
            if body < len(buf) and buf[body] not in "\r\n" and body - start < self.min_indent:
                return start
            at = buf.find("\n", start)
        return None


def _open_line(text: str) -> int:
    """Length of the tail of ``text`` from its last newline when all after it is indentation (a line whose
    indentation is not known yet), else 0."""
    at = text.rfind("\n")
    return len(text) - at if at >= 0 and not text[at + 1 :].strip(" \t\r") else 0


def _overlap(text: str, stop: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``stop``."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0

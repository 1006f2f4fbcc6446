"""Read-only panels: the live stats of the turn and the status bar. They render what they are given."""

from __future__ import annotations

import sys

from rich.text import Text
from textual.widgets import Static

from localspec.engine.stats import TurnView

BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 16) -> str:
    values = values[-width:]
    if not values:
        return ""
    top = max(values) or 1.0
    return "".join(BLOCKS[min(8, int(round(v / top * 8)))] for v in values)


def bar(fraction: float, width: int = 10) -> str:
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "█" * filled + "·" * (width - filled)


class StatsPanel(Static):
    """This turn's speculation figures, the per-position acceptance and the last turns' trend."""

    def show(self, stats: TurnView | None, history: list[tuple[float, float]]) -> None:
        t = Text()
        t.append("This turn\n", style="bold")
        if stats is None or not stats.steps:
            t.append(" waiting for a message\n", style="dim")
        else:
            rate = stats.acceptance_rate
            t.append(f" accepted  {'-' if rate is None else f'{rate:.0%}'} ({stats.accepted}/{stats.drafted})\n")
            t.append(f" tau       {stats.mean_accepted_length:.2f} tok/step\n")
            t.append(f" verified  {stats.drafted / stats.steps:.2f} draft tok/step\n")
            t.append(f" decode    {stats.decode_tok_s:.1f} tok/s\n")
            if stats.speedup is not None and stats.plain_tok_s is not None:
                t.append(f" speedup   {stats.speedup:.2f}x", style="bold")
                t.append(f" vs {stats.plain_tok_s:.1f}\n")
                t.append(f"  plain: {stats.plain_steps} steps here, {age(stats.plain_age_s)}\n", style="dim")
            else:
                t.append(" speedup   -\n")
                t.append("  plain: under 16 steps at this length\n", style="dim")
            t.append(f" draft {stats.draft_s * 1e3:.0f} ms · verify {stats.verify_s * 1e3:.0f} ms\n")
            t.append(f" prefill   {stats.prefill_tokens} tok, {stats.prefill_tok_s:.0f} tok/s\n")
            t.append(f" mode      {stats.mode}\n", style="dim")
            grammar = stats.record.get("grammar")
            if grammar:  # structured output: forced tokens drafted for free, what the masks cost
                forced = f"forced {grammar['forced_accepted']}/{grammar['forced_drafted']}"
                t.append(f" {grammar['kind']}  {forced}, mask {grammar['mask_ms_per_token']:.2f} ms/tok\n", style="dim")
            by_pos = stats.acceptance_by_position
            if by_pos:
                t.append("Per draft position\n", style="bold")
                # as many positions as fit above the trend lines (8 in a tall terminal, fewer at 80x24)
                room = self.size.height - 14 if self.size.height else 8
                for i, r in enumerate(by_pos[: max(2, min(8, room))]):
                    t.append(f" {i + 1:>2} {bar(r)} {r:4.0%}\n")
        if history:
            t.append("Last turns\n", style="bold")
            t.append(f" tok/s  {sparkline([h[0] for h in history])}\n")
            t.append(f" accept {sparkline([h[1] for h in history])}\n")
        self.update(t, layout=False)  # a fixed-size panel: no layout pass (it is what a redraw costs most)


def age(seconds: float) -> str:
    """'now', '40 s ago', '3 min ago', '2 h ago'."""
    if seconds < 2:
        return "now"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago" if seconds < 7200 else f"{seconds / 3600:.0f} h ago"


class StatusBar(Static):
    def show(
        self,
        model: str,
        backend: str,
        drafter: str,
        k: str,
        ctx_used: int,
        ctx_size: int,
        memory_mb: float,
        note: str = "",
    ) -> None:
        text = f" {model} · {backend} · {drafter} {k} · ctx {ctx_used}/{ctx_size}"
        text += f" · mem {memory_mb:.0f} MB" if memory_mb else ""  # 0: not known on this system
        self.update(text + (f" · {note}" if note else ""), layout=False)


def process_memory_mb() -> float:
    """Resident memory of this process (the model's mapped weights included): /proc on Linux, the peak from
    getrusage elsewhere on POSIX (kilobytes on Linux, bytes on macOS), 0 where neither exists (Windows)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        import os

        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024

"""/metrics: Prometheus text of what the server did (tokens, drafts, acceptance per position, steps,
queue, latency). Updated by the engine thread, read by the HTTP side: guarded by a lock."""

from __future__ import annotations

import threading

POSITIONS = 16  # draft positions reported one by one


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.prompt_tokens = 0
        self.generated = 0
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.waiting = 0
        self.latency_s = 0.0
        self.accepted_at = [0.0] * POSITIONS  # sum over requests of acceptance at position i, times drafts
        self.drafted_at = [0] * POSITIONS

    def queued(self, waiting: int) -> None:
        with self._lock:
            self.waiting = waiting

    def answered(self, record: dict, latency_s: float) -> None:
        with self._lock:
            self.requests += 1
            self.latency_s += latency_s
            self.prompt_tokens += record.get("prompt_tokens", 0)
            self.generated += record.get("generated_tokens", 0)
            self.drafted += record.get("drafted", 0)
            self.accepted += record.get("accepted", 0)
            self.steps += record.get("steps", 0)
            for i, rate in enumerate(record.get("acceptance_by_position", [])[:POSITIONS]):
                self.drafted_at[i] += 1
                self.accepted_at[i] += rate

    def text(self) -> str:
        with self._lock:
            lines = [
                _counter("requests_total", "answered requests", self.requests),
                _counter("prompt_tokens_total", "prompt tokens", self.prompt_tokens),
                _counter("generation_tokens_total", "generated tokens", self.generated),
                _counter("draft_tokens_total", "drafted tokens verified", self.drafted),
                _counter("accepted_draft_tokens_total", "drafted tokens accepted", self.accepted),
                _counter("verify_steps_total", "target forward passes while decoding", self.steps),
                _counter("request_latency_seconds_total", "queue + prefill + decode time", round(self.latency_s, 4)),
                "# HELP localspec_queue_length requests waiting for the engine",
                "# TYPE localspec_queue_length gauge",
                f"localspec_queue_length {self.waiting}",
                "# HELP localspec_acceptance_by_position mean acceptance at each draft position over requests",
                "# TYPE localspec_acceptance_by_position gauge",
            ]
            lines += [
                f'localspec_acceptance_by_position{{position="{i + 1}"}} {self.accepted_at[i] / n:.4f}'
                for i, n in enumerate(self.drafted_at)
                if n
            ]
        return "\n".join(lines) + "\n"


def _counter(name: str, help: str, value) -> str:
    return f"# HELP localspec_{name} {help}\n# TYPE localspec_{name} counter\nlocalspec_{name} {value}"

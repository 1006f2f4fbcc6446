"""The exact guard: at temperature 0, a window row whose top two logits are closer than the margin decides
nothing, so batched rounding that flips near-ties cannot change greedy output."""

from dataclasses import replace

import numpy as np
import pytest
from support.fakes import OracleDrafter, ScriptedBackend

from localspec.cost_cache import cost_key
from localspec.drafters.base import NoDrafter
from localspec.engine.calibrate import measure
from localspec.engine.exact import DEFAULT_MARGIN, MarginCache, exact_mode, guard, margin_for
from localspec.engine.loop import generate
from localspec.rows import top_gaps
from localspec.sampling import SamplingParams
from localspec.types import Verdict

GREEDY = SamplingParams(temperature=0)
EPS = 0.3  # how far batched rounding moves a logit in the fake


class BatchedRounding(ScriptedBackend):
    """A target whose verify windows round differently from its single-token steps: in a window of more
    than one token, every row's runner-up gains EPS, which flips the ties closer than that."""

    def forward(self, tokens, return_hidden=False):
        out = super().forward(tokens, return_hidden)
        if len(tokens) > 1:
            rows = out.logits
            runner_up = np.argsort(rows, axis=1)[:, -2]
            rows[np.arange(len(rows)), runner_up] += EPS
        return out


def greedy_runs(margin, prompts=8):
    same, fired = 0, 0
    for p in range(prompts):
        prompt = [p, (p * 5) % 12, 3]
        plain = generate(BatchedRounding(seed=p), NoDrafter(), prompt, GREEDY, max_tokens=150).tokens
        out = generate(
            BatchedRounding(seed=p),
            OracleDrafter(plain, len(prompt), 12),
            prompt,
            GREEDY,
            max_tokens=150,
            draft_tokens=6,
            exact_guard=margin,
        )
        same += out.tokens == plain
        guard_stats = out.stats.to_dict()["exact_guard"]
        fired += guard_stats["fired"] if guard_stats else 0
        if guard_stats:
            assert all(g < margin for g in guard_stats["gaps"])
            assert guard_stats["forced_steps"] >= min(1, guard_stats["fired"])
    return same, fired


def test_greedy_output_equals_plain_with_the_guard_and_not_without():
    without, _ = greedy_runs(None)
    with_guard, fired = greedy_runs(2 * EPS)
    assert with_guard == 8 and fired > 0
    assert without < 8  # the fake really flips ties: without the guard some answers differ


def test_the_guard_cuts_before_the_first_near_tie_row():
    logits = np.array([[5.0, 1.0, 0.0], [2.0, 1.9, 0.0], [3.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    verdict = Verdict(3, 3, (0, 0, 0, 0), (0, 1, 2))  # all three accepted, then the bonus token
    cut, gap = guard(verdict, logits, margin=0.5)
    assert cut.accepted == 1 and cut.tokens == (0,) and cut.held and gap == pytest.approx(0.1)
    same, none = guard(verdict, logits, margin=0.05)
    assert same is verdict and none is None
    assert list(top_gaps(logits)) == pytest.approx([4.0, 0.1, 3.0, 4.0])


def test_calibration_measures_twice_the_largest_gap_difference():
    backend = BatchedRounding(seed=3)
    result = measure(backend, [[1, 2, 3], [4, 5, 6]], windows=(2, 4), positions=64)
    assert result["positions"] >= 64
    # a window moves the runner-up by EPS: gaps shrink by EPS (or the order flips), never more than that
    assert EPS * 0.99 <= result["max_gap_difference"] <= EPS + 1e-6
    assert result["margin"] == pytest.approx(2 * result["max_gap_difference"], abs=1e-3)
    assert result["argmax_flips"] > 0


def test_a_cached_margin_is_keyed_by_model_backend_and_build(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    a, b = ScriptedBackend(), ScriptedBackend()
    model_a, model_b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    model_a.write_bytes(b"GGUF a")
    model_b.write_bytes(b"GGUF bb")
    a.path, b.path = model_a, model_b
    assert margin_for(a) == (max(DEFAULT_MARGIN.values()), "default")  # no default of its own
    MarginCache(cost_key(a)).save({"margin": 0.7, "per_window": {"3": 0.0, "17": 0.1, "65": 0.35}})
    assert margin_for(a) == (0.7, "calibrated")  # the largest, for every window size
    assert margin_for(b)[1] == "default"  # another model file
    a.build_id = lambda: "another build"
    assert margin_for(a)[1] == "default"


def test_a_batch_invariant_backend_needs_no_margin_and_runs_its_kernels_at_every_temperature():
    class Invariant(ScriptedBackend):
        capabilities = replace(ScriptedBackend.capabilities, batch_invariant=True)

    sampled = SamplingParams(temperature=0.8)
    assert exact_mode(Invariant(), GREEDY, 0.5) == (True, None)
    assert exact_mode(Invariant(), sampled, 0.5) == (True, None)  # seeded answers no drafter changes
    assert exact_mode(Invariant(), GREEDY, None) == (False, None)  # --no-exact-guard: the fast kernels
    assert exact_mode(ScriptedBackend(), GREEDY, 0.5) == (False, 0.5)
    assert exact_mode(ScriptedBackend(), sampled, 0.5) == (False, None)


class RecordingBackend(BatchedRounding):
    """A llama.cpp-like backend that records how it was loaded and which kernels each turn asked for."""

    name = "llama.cpp"

    def __init__(self, exact_layout: bool, **kw) -> None:
        super().__init__(**kw)
        self.loaded_for_exact = exact_layout  # llama.cpp: unrepacked weights (the default repacks them)
        self.capabilities = replace(self.capabilities, batch_invariant=exact_layout)
        self.kernels: list[bool] = []

    def set_batch_invariant(self, on: bool) -> None:
        self.kernels.append(on)

    def reload_for_exact(self, exact: bool) -> bool:
        return exact != self.loaded_for_exact


def open_session(monkeypatch, exact: bool):
    from pathlib import Path

    from localspec import session as session_module
    from localspec.config import Settings
    from localspec.drafters.table import DrafterSetup

    loads = []

    def load_backend(name, path, **kw):
        loads.append(kw)
        return RecordingBackend(kw["batch_invariant"], seed=1)

    monkeypatch.setattr(session_module, "load_backend", load_backend)
    settings = Settings("scripted", Path("scripted.gguf"), "llama.cpp", "ngram", DrafterSetup(), exact=exact)
    return session_module.Session.open(settings), loads


@pytest.mark.parametrize("exact", [False, True])
def test_the_default_loads_fast_weights_and_runs_no_guard_at_any_temperature_and_exact_turns_both_on(
    monkeypatch, exact
):
    from localspec.session import Request

    session, loads = open_session(monkeypatch, exact)
    assert loads[0]["batch_invariant"] is exact  # llama.cpp: unrepacked weights only for --exact
    for temperature in (0.0, 0.8):
        events = list(session.complete([1, 2, 3, 1, 2, 3, 1, 2], Request(max_tokens=40, temperature=temperature)))
        stats = events[-1].stats
        assert session.backend.kernels[-1] is exact  # batch-invariant kernels: --exact's turns at any temperature
        assert (stats.to_dict()["exact_guard"] is not None) is exact
        assert stats.to_dict()["mode"] == ("exact" if exact else "fast")
    assert ("exact: batch-invariant kernels" in session.load_report()) is exact
    assert ("fast (greedy may differ" in session.load_report()) is not exact
    assert session.backend.reload_for_exact(not exact)  # llama.cpp's weight layout is fixed at load


def test_exact_without_batch_invariant_kernels_says_what_it_does_instead(monkeypatch):
    session, _ = open_session(monkeypatch, True)
    session.backend.capabilities = replace(session.backend.capabilities, batch_invariant=False)  # a GPU offload
    session.set_exact(True)  # --exact for the backend as it is now
    notice = session.exact.notice()
    assert "no batch-invariant kernels" in notice and f"within {DEFAULT_MARGIN['llama.cpp']:g}" in notice
    assert "\n" not in notice and "exact: llama.cpp" in session.load_report()
    session.set_exact(False)  # switches at once where no reload is needed
    assert session.exact.notice() == "" and session.exact.margin is None

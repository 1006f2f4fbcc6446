"""The controller's verify-cost curve on disk: kept per machine/model key, reused by the next session,
a damaged file ignored with a warning."""

import json
from dataclasses import replace

from support.fakes import ScriptedBackend, step_of

from localspec.chat.conversation import Conversation
from localspec.cost_cache import CostCache, cost_key
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.exact import Exact
from localspec.engine.speclen import AdaptiveK, make_policy
from localspec.sampling import SamplingParams
from localspec.session import Session

COSTS = {"verify_s": {"1": 0.05, "9": 0.3}, "count": {"1": 40, "9": 3}}


def test_round_trip_and_one_file_per_key(tmp_path):
    a, b = CostCache("llama.cpp|model|threads 2", tmp_path), CostCache("llama.cpp|model|threads 4", tmp_path)
    a.save(COSTS)
    assert a.load() == COSTS
    assert b.load() == {} and a.path != b.path  # another thread count is another machine
    assert CostCache(None, tmp_path).load() == {}  # a backend without a key keeps nothing


def test_a_damaged_file_is_ignored_with_a_warning_and_replaced(tmp_path, capsys):
    cache = CostCache("key", tmp_path)
    cache.save(COSTS)
    cache.path.write_text('{"version": 2, "key": "key", "data": {"verify_s": {"1": -3}}}')
    assert cache.load() == {}
    cache.path.write_text("{not json")
    assert cache.load() == {}
    assert "damaged cost cache" in capsys.readouterr().err
    cache.save(COSTS)
    assert json.loads(cache.path.read_text())["data"] == COSTS


def test_loaded_costs_count_as_measured_but_yield_to_new_timings():
    ctl = AdaptiveK()
    ctl.load_costs(COSTS)
    assert ctl.verify_cost(9) == 0.3 and ctl.figures()["costs_loaded"] == 2
    for _ in range(10):  # the machine is slower now (another process, a different power state)
        ctl.record(step_of(8, 8, list(range(9)), 0.0, 0.6, 0.6))
    assert ctl.verify_cost(9) > 0.55


def test_a_session_saves_its_curve_after_each_turn_and_the_next_one_starts_from_it(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    backend = ScriptedBackend(vocab_size=20)
    backend.path = model  # what a real backend keys its curve by
    key = cost_key(backend)
    assert key is not None and str(model) in key

    def session():
        s = Session(backend, NgramDrafter(), SamplingParams(temperature=0), "scripted", max_tokens=40)
        s.costs = CostCache(key, tmp_path)
        s.speclen = make_policy("auto", s.costs.load())
        return s

    first = session()
    conv = Conversation()
    conv.add("user", "hello")
    events = first.answer(conv)
    next(events)
    events.close()  # an interrupted turn still saves what it measured
    saved = first.costs.load()
    assert saved["verify_s"]
    second = session()
    assert second.speclen.figures()["costs_loaded"] == len(saved["verify_s"])


def test_a_curve_saved_on_a_busier_machine_is_rescaled_by_the_first_new_timing():
    ctl = AdaptiveK()
    ctl.load_costs({"verify_s": {"1": 0.10, "9": 0.60, "17": 0.80}, "count": {"1": 9, "9": 9, "17": 9}})
    ctl.record(step_of(0, 0, [1], 0.0, 0.05, 0.05))  # one step now takes half what it took then
    assert abs(ctl.verify_cost(17) - 0.40) < 1e-9 and abs(ctl.verify_cost(9) - 0.30) < 1e-9
    ctl.record(step_of(0, 0, [1], 0.0, 0.05, 0.05))
    assert abs(ctl.verify_cost(17) - 0.40) < 1e-9  # once: later timings only move their own size


def test_exact_and_fast_turns_plan_on_their_own_kernels_cost_curves(tmp_path, monkeypatch):
    """A backend with batch-invariant kernels runs them in --exact turns at every temperature, and their
    windows cost more: leaving --exact swaps the controller onto the other kernels' curve, each kept on disk
    under its own key."""
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")

    class Invariant(ScriptedBackend):
        capabilities = replace(ScriptedBackend.capabilities, batch_invariant=True)
        switched: list = []

        def set_batch_invariant(self, on):
            self.switched.append(on)

    backend = Invariant(vocab_size=20)
    backend.path = model
    exact = Exact(kernels=True, margin=0.5, backend=backend.name)
    session = Session(backend, NgramDrafter(), SamplingParams(temperature=0.8), "scripted", max_tokens=20, exact=exact)
    session.costs = CostCache.of(backend, session.exact.kernels)
    session.speclen = make_policy("auto", session.costs.load())
    conv = Conversation()
    conv.add("user", "hello")
    list(session.answer(conv))
    assert backend.switched[-1] is True and session.exact.kernels  # sampled, --exact: invariant kernels
    exact_key = session.costs.key
    session.set_exact(False)
    list(session.answer(conv))
    assert backend.switched[-1] is False and not session.exact.kernels
    sampled_key = session.costs.key
    assert exact_key != sampled_key and "batch-invariant" in exact_key
    assert CostCache(exact_key).load()["verify_s"], "the exact turn's curve was saved before the swap"
    assert session.costs.load()["verify_s"]
    assert "fast (greedy may differ" in session.load_report()

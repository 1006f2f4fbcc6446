"""Medusa heads and MLP speculators on tiny random torch models: random checkpoints in each released layout
load through localspec's own code and compute what the layout means, chains and trees are exact under greedy
decoding and in distribution under sampling, bad heads are refused, and train-drafter learns heads that
load and draft."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.distribution import chi_square_p  # noqa: E402
from support.eagle_heads import DEEP, PROMPT, SMALL, backend_for, exact, word_corpus  # noqa: E402
from support.tiny_torch import GREEDY, tiny  # noqa: E402

from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.multihead.medusa import MedusaDrafter, MedusaHeads  # noqa: E402
from localspec.drafters.multihead.mlp_speculator import MlpDrafter, MlpSpeculator, stage_weights  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.errors import ConfigError, ModelError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


def medusa_state(target, heads=4, layers=1, seed=5, scale=0.5):
    """Released names: {i}.{j}.linear.{weight,bias} per residual block, {i}.{L}.weight to the vocabulary."""
    torch.manual_seed(seed)
    h, v = target.model.cfg.hidden_size, target.vocab_size
    state = {}
    for i in range(heads):
        for j in range(layers):
            state[f"{i}.{j}.linear.weight"] = torch.randn(h, h) * scale / h**0.5
            state[f"{i}.{j}.linear.bias"] = torch.randn(h) * 0.1
        state[f"{i}.{layers}.weight"] = torch.randn(v, h) * 2.0
    return state


def write_medusa(folder, target, layout="pt", said_heads=2, **kw):
    state = medusa_state(target, **kw)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"medusa_num_heads": said_heads, "medusa_num_layers": 1, "base_model_name_or_path": "tiny"}
    (folder / "config.json").write_text(json.dumps(config))
    if layout == "pt":
        torch.save(state, folder / "medusa_lm_head.pt")
    elif layout == "prefixed":
        from safetensors.torch import save_file

        save_file({f"medusa_head.{k}": v for k, v in state.items()}, str(folder / "medusa_lm_head.safetensors"))
    else:  # vLLM's names
        from safetensors.torch import save_file

        renamed = {}
        for key, value in state.items():
            parts = key.split(".")
            if len(parts) == 4:
                renamed[f"blocks.{parts[0]}.layers.{parts[1]}.{parts[3]}"] = value
            else:
                renamed[f"lm_heads.{parts[0]}.weight"] = value
        save_file(renamed, str(folder / "model.safetensors"))
    return state


def mlp_state(target, n=3, inner=40, tied=False, seed=6):
    torch.manual_seed(seed)
    h, v = target.model.cfg.hidden_size, target.vocab_size
    state = {}
    for i in range(n):
        state[f"emb.{i}.weight"] = torch.randn(v, inner)
        state[f"proj.{i}.weight"] = torch.randn(inner, h if i == 0 else inner) / inner**0.5
        state[f"ln.{i}.weight"] = 1 + 0.1 * torch.randn(inner)
        state[f"ln.{i}.bias"] = 0.1 * torch.randn(inner)
        state[f"head.{i}.weight"] = torch.randn(v, inner) * 2.0
    if tied:  # one embedding, head and norm; stages >= 1 share stage 1's projection: stored once
        state = {k: val for k, val in state.items() if k.endswith(".0.weight") or k in ("ln.0.bias", "proj.1.weight")}
    return state


def write_mlp(folder, target, n=3, inner=40, tied=False, model_type="mlp_speculator", **kw):
    from safetensors.torch import save_file

    state = mlp_state(target, n, inner, tied, **kw)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": model_type,
        "emb_dim": target.model.cfg.hidden_size,
        "inner_dim": inner,
        "n_predict": n,
        "vocab_size": target.vocab_size,
        "scale_input": True,
        "tie_weights": tied,
    }
    (folder / "config.json").write_text(json.dumps(config))
    save_file(state, str(folder / "model.safetensors"))
    return state


# -- loading: the layouts and what they mean -------------------------------------------------------------
def test_medusa_layouts_load_the_same_heads_counted_from_the_tensors(tmp_path):
    backend = backend_for(DEEP)
    row = np.random.default_rng(0).standard_normal(DEEP.hidden_size).astype(np.float32)
    state = write_medusa(tmp_path / "pt", backend, "pt")
    heads = MedusaHeads(tmp_path / "pt", backend)
    assert heads.depth == 4 and "config.json says 2" in heads.describe()
    h = torch.from_numpy(row)
    for i in range(4):  # head i: x + SiLU(W x + b), then its own projection to the vocabulary
        x = h + torch.nn.functional.silu(state[f"{i}.0.linear.weight"] @ h + state[f"{i}.0.linear.bias"])
        np.testing.assert_allclose(heads.prepare(row)[i], (state[f"{i}.1.weight"] @ x).numpy(), rtol=1e-4, atol=1e-4)
    for layout in ("prefixed", "vllm"):
        write_medusa(tmp_path / layout, backend, layout)
        np.testing.assert_allclose(MedusaHeads(tmp_path / layout, backend).prepare(row), heads.prepare(row), rtol=1e-5)


def test_an_mlp_speculator_computes_its_stages_and_tied_weights_stored_once_load(tmp_path):
    backend = backend_for(DEEP)
    row = np.random.default_rng(1).standard_normal(DEEP.hidden_size).astype(np.float32)
    state = write_mlp(tmp_path / "full", backend)
    spec = MlpSpeculator(tmp_path / "full", backend)
    state_w, emb_w = stage_weights(3, 40)
    # stage 0 by hand: the input RMS-normalised and over sqrt 2, projected, plus the weighted token embedding
    h = torch.from_numpy(row)
    x = h / h.pow(2).mean().add(1e-6).sqrt() / 2**0.5
    z = state["proj.0.weight"] @ x + (emb_w / state_w) * state["emb.0.weight"][7]
    z = z / z.pow(2).mean().add(1e-6).sqrt() * state["ln.0.weight"] + state["ln.0.bias"]
    logits, after = spec.stage(spec.prepare(row), 7, 0)
    np.testing.assert_allclose(logits, (state["head.0.weight"] @ torch.nn.functional.gelu(z)).numpy(), atol=1e-4)
    # tie_weights: tensors stored once serve every stage
    tied = write_mlp(tmp_path / "tied", backend, tied=True)
    assert "emb.2.weight" not in tied and "proj.2.weight" not in tied
    spec = MlpSpeculator(tmp_path / "tied", backend)
    assert torch.equal(spec.stages[2]["proj"], tied["proj.1.weight"])
    assert torch.equal(spec.stages[2]["emb"], tied["emb.0.weight"])


def test_heads_for_another_model_or_broken_folders_are_refused(tmp_path):
    backend = backend_for(DEEP)
    other = backend_for(SMALL)  # vocabulary 6, not 24
    write_medusa(tmp_path / "medusa", other)
    with pytest.raises(ConfigError, match="trained for another model"):
        MedusaHeads(tmp_path / "medusa", backend)
    with pytest.raises(ModelError, match="no such Medusa heads folder"):
        MedusaHeads(tmp_path / "missing", backend)
    (tmp_path / "medusa" / "medusa_lm_head.pt").unlink()
    with pytest.raises(ModelError, match="no Medusa heads weights"):
        MedusaHeads(tmp_path / "medusa", backend)
    write_mlp(tmp_path / "mlp", backend, model_type="llama")
    with pytest.raises(ConfigError, match="not 'mlp_speculator'"):
        MlpSpeculator(tmp_path / "mlp", backend)
    write_mlp(tmp_path / "mlp2", other)
    with pytest.raises(ConfigError, match="another model"):
        MlpSpeculator(tmp_path / "mlp2", backend)
    write_mlp(tmp_path / "broken", backend)
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\0" * 40)
    with pytest.raises(ModelError, match="download it again"):
        MlpSpeculator(tmp_path / "broken", backend)


def test_the_drafters_run_on_torch_only_and_say_what_they_need():
    from support.fakes import ScriptedBackend

    from localspec.drafters.context import DrafterContext
    from localspec.drafters.table import DrafterSetup

    for name, flag in (("medusa", "--medusa-head"), ("mlp", "--mlp-head")):
        with pytest.raises(ConfigError, match="torch backend"):
            DrafterSetup(context=DrafterContext()).build(name, ScriptedBackend())
        with pytest.raises(ConfigError, match=flag):
            DrafterSetup(context=DrafterContext()).build(name, tiny("llama-gqa"))


# -- exactness and distribution --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["medusa", "mlp"])
def test_chains_and_trees_are_exact_under_greedy(tmp_path, kind):
    backend = backend_for(DEEP)
    if kind == "medusa":
        write_medusa(tmp_path / "head", backend)
        make = lambda **kw: MedusaDrafter(backend, MedusaHeads(tmp_path / "head", backend), **kw)  # noqa: E731
    else:
        write_mlp(tmp_path / "head", backend, n=4)
        make = lambda **kw: MlpDrafter(backend, MlpSpeculator(tmp_path / "head", backend), **kw)  # noqa: E731
    plain = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=60).tokens
    for tree in (0, 10):
        backend.truncate(0)
        drafter = make(tree_nodes=tree)
        out = generate(backend, drafter, PROMPT, GREEDY, max_tokens=60, draft_tokens=4)
        assert out.tokens == plain
        assert out.stats.drafted > 0 and out.stats.drafter[f"{kind}_stages"] == 4
        if tree:
            assert drafter.trees > 0 and out.stats.drafted > 4 * out.stats.steps * 0.5  # real trees, not chains


@pytest.mark.parametrize(
    "kind,tree,sampling",
    [
        ("medusa", 0, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)),
        ("mlp", 0, SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.0)),
        ("medusa", 5, SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)),
        ("mlp", 5, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)),
    ],
    ids=["medusa-chain-T1", "mlp-chain-T0.8-p0.9", "medusa-tree-T1-k3", "mlp-tree-T1"],
)
def test_sampling_matches_the_targets_distribution(tmp_path, kind, tree, sampling):
    backend = backend_for(SMALL, seed=1, vocab=6, scale=1.5)
    if kind == "medusa":
        write_medusa(tmp_path / "head", backend, heads=2, scale=0.3)
        drafter = MedusaDrafter(backend, MedusaHeads(tmp_path / "head", backend), seed=3, tree_nodes=tree, width=2)
    else:
        write_mlp(tmp_path / "head", backend, n=2, inner=16)
        drafter = MlpDrafter(backend, MlpSpeculator(tmp_path / "head", backend), seed=3, tree_nodes=tree, width=2)
    rng, counts, accepted = np.random.default_rng(7), {}, 0
    for _ in range(3000):
        out = generate(backend, drafter, PROMPT[:4], sampling, max_tokens=3, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        accepted += out.stats.accepted
    assert accepted > 3000 * 0.1  # drafts were accepted (and rejected: the heads are random)
    assert chi_square_p(counts, exact(backend, sampling)) > 1e-3


# -- train-drafter ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["medusa", "mlp"])
def test_train_drafter_learns_heads_that_load_and_draft(tmp_path, kind):
    from localspec.train.driver import TrainConfig, train_eagle

    backend = tiny("llama-gqa")
    docs = word_corpus(tmp_path / "corpus.txt")
    lines = []
    config = TrainConfig(max_steps=1440, epochs=20, seq_len=128, lr=1e-2, holdout=0.1, layout=kind)
    report = train_eagle(backend, tmp_path / "corpus.txt", tmp_path / "head", config, log=lines.append)
    start, end = report["start_val_top1_per_stage"], report["val_top1_per_stage"]
    # a random target's greedy tokens two and more places ahead are hard to tell from one row: Medusa's
    # stages go ~0.07 -> 0.12-0.17, MLP's (which see the tokens between) ~0.05 -> 0.26
    assert len(end) == 4 and end[0] > 2 * start[0] and np.mean(end) > np.mean(start) + 0.05, (start, end)
    assert any("per stage" in line for line in lines)
    weights = "medusa_lm_head.safetensors" if kind == "medusa" else "model.safetensors"
    assert (tmp_path / "head" / weights).is_file() and (tmp_path / "head" / "config.json").is_file()
    heads = (MedusaHeads if kind == "medusa" else MlpSpeculator)(tmp_path / "head", backend)
    prompt = backend.tokenizer.tokenize(docs[0][:40])
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    backend.truncate(0)
    drafter = (MedusaDrafter if kind == "medusa" else MlpDrafter)(backend, heads)
    out = generate(backend, drafter, prompt, GREEDY, max_tokens=40, draft_tokens=3)
    assert out.tokens == plain and out.stats.accepted > 0

"""`localspec convert-dflash`: a DFlash / DSpark head in the Hugging Face layout (dflash_layout.py) written
as the GGUF llama.cpp's `dflash` loader reads (src/models/dflash.cpp), for one target GGUF.

What the loader wants: metadata `dflash.target_layers` (the layers whose *inputs* it reads: the released
`target_layer_ids` + 1), `dflash.block_size`, the usual attention/rope keys, the target's tokenizer plus
`tokenizer.ggml.mask_token_id`; for DSpark `dflash.sample_from_anchor` and `dflash.has_confidence_head`.
Tensors: `fc`, `enc.output_norm` (the hidden norm after fc), `output_norm`, per layer `attn_norm`, q/k/v/o,
`attn_q_norm`/`attn_k_norm`, `ffn_norm`, gate/up/down; DSpark's `markov_w1`, `markov_w2`, `conf_proj`; a
draft vocabulary's `output` with `d2t` as absolute target ids. The rotary layout is NeoX (rotate-half), as
Hugging Face stores it, so q/k rows are written as they are.

A llama.cpp run given a Hugging Face head converts it once into localspec's cache (``gguf_head_for``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from localspec.drafters.dflash.layout import (
    CONF_B,
    CONF_W,
    MARKOV_W1,
    MARKOV_W2,
    dflash_layout,
    draft_to_target,
    load_state,
    read_config,
)
from localspec.drafters.heads.gguf import TYPES, copy_tokenizer, head_header, rope_factors, scalar
from localspec.errors import ConfigError, ModelError
from localspec.places import cache_root

_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_NAMED = {
    "fc.weight": "fc.weight",
    "hidden_norm.weight": "enc.output_norm.weight",
    "norm.weight": "output_norm.weight",
    MARKOV_W1: "markov_w1.weight",
    MARKOV_W2: "markov_w2.weight",
    CONF_W: "conf_proj.weight",
    CONF_B: "conf_proj.bias",
    "lm_head.weight": "output.weight",
}


def convert_dflash(folder: Path, target: Path, out: Path, dtype: str = "f16") -> dict:
    """Write the GGUF head; returns what it wrote for the command's report."""
    import gguf

    from localspec.backends.llama_cpp.capi import check_gguf

    if dtype not in TYPES:
        raise ConfigError(f"--type must be one of {', '.join(TYPES)}, not {dtype!r}")
    reader = gguf.GGUFReader(str(check_gguf(target)))
    fields = reader.fields
    arch = scalar(fields, "general.architecture")
    config, state = read_config(folder), load_state(folder)
    vocab = len(fields["tokenizer.ggml.tokens"].data)
    try:
        layout = dflash_layout(
            config, state, int(scalar(fields, f"{arch}.embedding_length")), int(scalar(fields, f"{arch}.block_count")),
            vocab,
        )  # fmt: skip
        to_target = draft_to_target(state, vocab)
    except (ConfigError, ModelError) as exc:
        raise type(exc)(f"{folder} for {Path(target).name}: {exc}") from exc
    if max(layout.extract_layers) >= int(scalar(fields, f"{arch}.block_count")):
        raise ConfigError(f"{folder} reads the last layer's output, which llama.cpp's dflash graph cannot take")
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # a cut-short run leaves no half-written head
    try:
        _write(tmp, reader, config, state, layout, to_target, dtype)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"kind": layout.kind, "layers": list(layout.extract_layers), "block_size": layout.block_size}


def _write(path: Path, reader, config: dict, state: dict, layout, to_target, dtype: str) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "dflash")
    head_dim, rope_base = _write_metadata(w, reader, config, state, layout)
    _write_tensors(w, state, layout, dtype)
    factors = rope_factors(config, head_dim, rope_base)
    if factors is not None:
        w.add_tensor("rope_freqs.weight", factors)
    if to_target is not None:
        w.add_tensor("d2t", np.asarray(to_target, np.int64), raw_dtype=gguf.GGMLQuantizationType.I64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_metadata(w, reader, config: dict, state: dict, layout) -> tuple[int, float]:
    """The head's hyperparameters and the target's tokenizer; returns (head dimension, RoPE base)."""
    ffn = int(state["layers.0.mlp.gate_proj.weight"].shape[0])
    _, _, head_dim, rope_base = head_header(
        w, reader, config, f"{layout.kind} head", layout.hidden, layout.n_layers, ffn
    )
    w.add_uint32("dflash.block_size", layout.block_size)
    w.add_array("dflash.target_layers", list(layout.extract_layers))
    if layout.causal:
        w.add_bool("dflash.attention.causal", True)
    if layout.embed_scale != 1.0:
        w.add_float32("dflash.embedding_scale", layout.embed_scale)
    if layout.kind == "dspark":
        w.add_bool("dflash.sample_from_anchor", layout.sample_from_anchor)
        w.add_bool("dflash.has_confidence_head", layout.confidence)
    copy_tokenizer(reader, w)
    w.add_uint32("tokenizer.ggml.mask_token_id", layout.mask_token)
    return head_dim, rope_base


def _write_tensors(w, state: dict, layout, dtype: str) -> None:
    matrix = np.float16 if dtype == "f16" else np.float32

    def put(name: str, tensor, as_matrix: bool) -> None:
        t = np.asarray(tensor.float().numpy() if hasattr(tensor, "float") else tensor)
        w.add_tensor(name, np.ascontiguousarray(t, dtype=matrix if as_matrix and t.ndim == 2 else np.float32))

    for i in range(layout.n_layers):
        for src, dst in _LAYER.items():
            key = f"layers.{i}.{src}.weight"
            if key not in state:
                raise ModelError(f"the head has no {key}")
            put(f"blk.{i}.{dst}.weight", state[key], True)
    for src, dst in _NAMED.items():
        if src in state:  # markov_w1 is a lookup table: llama.cpp reads its rows in float32
            put(dst, state[src], src != MARKOV_W1)


def gguf_head_for(folder: Path, target: Path) -> Path:
    """The GGUF of a Hugging Face head for this target, converted once into localspec's cache (keyed by the
    head's files and the target's, so a changed head or another target converts again)."""
    folder, target = Path(folder), Path(target)
    read_config(folder)  # a clear error for what is not a head folder
    key = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")) + [folder / "config.json", target]:
        stat = path.stat()
        key.update(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    out = cache_root() / "heads" / f"{folder.name}-{key.hexdigest()[:16]}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        convert_dflash(folder, target, out, "f16")
    return out

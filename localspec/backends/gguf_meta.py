"""Read a GGUF file's header and metadata in pure Python: is it a GGUF file at all, and what model is it.

Layout (GGUF v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
then metadata entries (string key, u32 type, value), then per tensor its name, u32 dimension count, u64
dimensions, u32 type and u64 offset. Arrays are skipped element by element, so the big token lists cost a
read but no memory.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from localspec.errors import ModelError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
WANTED = ("general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre")


# llama_ftype values (llama.h) of the quantizations people download, by the name they go by
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11,
    "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
    "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32,
}  # fmt: skip
FTYPE_NAMES = {v: k for k, v in FTYPES.items()}


def file_type(path: Path) -> str | None:
    """The quantization a GGUF file declares (general.file_type) by the name it goes by (Q4_K_M), None where
    it declares none."""
    ftype = read_metadata(path).get("general.file_type")
    return None if ftype is None else FTYPE_NAMES.get(ftype, f"type {ftype}")


def read_metadata(path: Path) -> dict:
    """The scalar and string metadata of a GGUF file (arrays left out); ModelError if it is not valid."""
    return _read(path, tensors=False)[0]


def read_tensor_names(path: Path) -> tuple[dict, list[str]]:
    """The metadata and the names of the tensors a GGUF file holds."""
    return _read(path, tensors=True)


def mtp_layers(path: Path) -> int:
    """MTP ("nextn") layers the GGUF carries: ``{arch}.nextn_predict_layers``, if the last block's
    ``nextn.eh_proj`` tensor is really there (converters that drop the layer may keep the key)."""
    meta, names = read_tensor_names(path)
    arch = meta.get("general.architecture", "")
    n, blocks = int(meta.get(f"{arch}.nextn_predict_layers", 0)), int(meta.get(f"{arch}.block_count", 0))
    return n if n and f"blk.{blocks - 1}.nextn.eh_proj.weight" in names else 0


def _read(path: Path, tensors: bool) -> tuple[dict, list[str]]:
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
            (version,) = _unpack(f, "<I")
            if version not in (2, 3):
                raise ModelError(f"{path}: GGUF version {version} is not supported (2 or 3)")
            n_tensors, n_kv = _unpack(f, "<QQ")
            meta = {}
            for _ in range(n_kv):
                key = _string(f)
                (kind,) = _unpack(f, "<I")
                value = _value(f, kind)
                if value is not None:
                    meta[key] = value
            names = []
            for _ in range(n_tensors if tensors else 0):
                names.append(_string(f))
                (dims,) = _unpack(f, "<I")
                _unpack(f, f"<{dims}QIQ")
            return meta, names
    except (struct.error, UnicodeDecodeError, EOFError) as exc:
        raise ModelError(f"{path} is a damaged GGUF file ({exc}); download it again") from exc
    except OSError as exc:
        raise ModelError(f"{path}: {exc.strerror}") from exc


def describe(path: Path) -> dict:
    """architecture, name, tokenizer and context length of a GGUF file, for the registry."""
    meta = read_metadata(path)
    arch = meta.get("general.architecture", "")
    return {
        "architecture": arch,
        "name": meta.get("general.name", Path(path).stem),
        "tokenizer": f"{meta.get('tokenizer.ggml.model', '')}/{meta.get('tokenizer.ggml.pre', '')}",
        "context": meta.get(f"{arch}.context_length"),
    }


def _unpack(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError("the file ends inside its header")
    return struct.unpack(fmt, data)


def _string(f: BinaryIO) -> str:
    (n,) = _unpack(f, "<Q")
    if n > 1 << 24:
        raise EOFError(f"a string of {n} bytes in the header")
    data = f.read(n)
    if len(data) != n:
        raise EOFError("the file ends inside its header")
    return data.decode("utf-8")


def _value(f: BinaryIO, kind: int):
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])[0]
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, n = _unpack(f, "<IQ")
        for _ in range(n):
            _value(f, item)
        return None
    raise EOFError(f"unknown metadata type {kind}")

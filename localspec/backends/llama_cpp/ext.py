"""libllama functions that llama-cpp-python does not bind: hidden-state access declared in llama.cpp's
`src/llama-ext.h`, which has C++ linkage, so the exported symbols carry mangled names (`nm -D libllama.so`).

Each is looked up once, by its plain name and by its mangled (Itanium, then MSVC) names; a library without
it gets a ConfigError naming the llama-cpp-python version that has it.
"""

from __future__ import annotations

import ctypes
from functools import cache

from localspec.errors import ConfigError

NEEDS = "llama-cpp-python 0.3.36"  # the first release whose libllama exports all of these

_P, _U32, _B, _F = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool, ctypes.POINTER(ctypes.c_float)
# name: (mangled names, argument types, result type)
_SIGNATURES = {
    "llama_set_embeddings_layer_inp": (
        (
            "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
            "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
        ),
        [_P, _U32, _B],
        None,
    ),
    "llama_get_embeddings_layer_inp": (
        (
            "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
            "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
        ),
        [_P, _U32],
        _F,
    ),
    "llama_set_embeddings_nextn": (
        (
            "_Z26llama_set_embeddings_nextnP13llama_contextbb",
            "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z",
        ),
        [_P, _B, _B],
        None,
    ),
    "llama_get_embeddings_nextn": (
        (
            "_Z26llama_get_embeddings_nextnP13llama_context",
            "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z",
        ),
        [_P],
        _F,
    ),
    "llama_set_nextn_layer_offset": (
        (
            "_Z28llama_set_nextn_layer_offsetP13llama_contexti",
            "?llama_set_nextn_layer_offset@@YAXPEAUllama_context@@H@Z",
        ),
        [_P, ctypes.c_int32],
        None,
    ),
    "llama_model_target_layer_ids": (
        (
            "_Z28llama_model_target_layer_idsPK11llama_model",
            "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z",
        ),
        [_P],
        ctypes.POINTER(ctypes.c_int32),
    ),
    "llama_model_target_layer_ids_n": (
        (
            "_Z30llama_model_target_layer_ids_nPK11llama_model",
            "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z",
        ),
        [_P],
        _U32,
    ),
}


@cache
def ext(name: str):
    """The libllama function ``name`` (one of _SIGNATURES), typed."""
    import llama_cpp

    mangled, argtypes, restype = _SIGNATURES[name]
    for symbol in (name, *mangled):
        try:
            func = getattr(llama_cpp.llama_cpp._lib, symbol)
        except AttributeError:
            continue
        func.argtypes, func.restype = argtypes, restype
        return func
    version = getattr(llama_cpp, "__version__", "?")
    raise ConfigError(
        f"this libllama (llama-cpp-python {version}) does not export {name}, which EAGLE-3 and MTP on "
        f"llama.cpp need; install {NEEDS} (`make setup` builds it) or use --backend torch"
    )


def target_layer_ids(model) -> list[int]:
    """The target layers an EAGLE-3 (or DFlash) GGUF model reads the inputs of."""
    n = ext("llama_model_target_layer_ids_n")(model)
    ptr = ext("llama_model_target_layer_ids")(model)
    return [int(ptr[i]) for i in range(n)] if n and ptr else []

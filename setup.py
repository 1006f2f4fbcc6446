"""Only the compiled part of localspec lives here; everything else is in pyproject.toml.

The suffix trie's C extension is optional: where it cannot be compiled (no C compiler, as on many Windows
and macOS machines), the install goes on without it and suffix decoding uses the pure-Python trie
(localspec/drafters/suffix/trie_py.py: the same drafts, slower)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "localspec.drafters.suffix._suffixtree",
            ["localspec/drafters/suffix/_suffixtree.c"],
            # no contracted multiply-adds: the pure-Python trie must compute the same float32 figures
            extra_compile_args=[
                "-O2",
                "-std=c99",
                "-ffp-contract=off",
                "-Wall",
                "-Wextra",
                "-Wno-missing-field-initializers",
            ],
            optional=True,
        )
    ]
)

"""Only the compiled part of localspec lives here; everything else is in pyproject.toml.

The C extensions (the suffix trie, the sampling shortlist) are optional: where they cannot be compiled (no C
compiler, as on many Windows and macOS machines), the install goes on without them; suffix decoding then uses the
pure-Python trie (localspec/drafters/suffix/trie_py.py: the same drafts, slower) and sampling numpy's partition
(localspec/shortlist.py: the same candidates, slower)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "localspec.drafters.suffix._suffixtree",
            ["localspec/drafters/suffix/_suffixtree.c"],
            include_dirs=["localspec"],
            depends=["localspec/export.h"],  # rebuilt when it changes, and carried in the sdist
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
        ),
        # a sampled row's candidates in one scan (localspec/shortlist.py has the numpy fallback); -O3 for the
        # chunk tests' vector compares
        Extension(
            "localspec._shortlist",
            ["localspec/_shortlist.c"],
            include_dirs=["localspec"],
            depends=["localspec/export.h"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)

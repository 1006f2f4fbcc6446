"""Only the compiled part of localspec lives here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "localspec.drafters._suffixtree",
            ["localspec/drafters/_suffixtree.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        )
    ]
)

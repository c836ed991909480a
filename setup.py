"""The compiled size bound; everything else is configured in pyproject.toml.

The extension is optional: where it cannot be built the encoder uses its Python walk,
which gives the same results more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "jsonbudget._encode._speedups",
            ["src/jsonbudget/_encode/_speedups.c"],
            optional=True,
        )
    ]
)

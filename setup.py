"""The compiled size bound, constructor and number check; the rest is in pyproject.toml.

The extensions are optional: where they cannot be built the library uses their Python
twins, which give the same results more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "jsonbudget._encode._speedups",
            ["src/jsonbudget/_encode/_speedups.c"],
            depends=["src/jsonbudget/_encode/_fill.c"],
            optional=True,
        ),
        Extension("jsonbudget._fastnew", ["src/jsonbudget/_fastnew.c"], optional=True),
        Extension(
            "jsonbudget._sources._numbers", ["src/jsonbudget/_sources/_numbers.c"], optional=True
        ),
    ]
)

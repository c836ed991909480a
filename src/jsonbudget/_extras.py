"""What to say when an optional dependency is missing: one wording, everywhere.

jsonbudget is installed from its source tree, so the hint names the extra as pip takes it
there; once a release is published, ``pip install 'jsonbudget[EXTRA]'`` works too.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(extra: str, module: str, what: str) -> ImportError:
    """The `ImportError` for *what* needing *module*, which the *extra* extra installs."""
    return ImportError(
        f"{what} needs {module}: install the '{extra}' extra"
        f" (in jsonbudget's source tree: python3 -m pip install '.[{extra}]')",
        name=module,
    )

"""What to say when an optional dependency is missing: one wording, everywhere.

The hint names the extra both ways pip takes it: ``'jsonbudget[EXTRA]'`` wherever
jsonbudget is installed (from a wheel, pip adds the extra's packages to the installed
jsonbudget), ``'.[EXTRA]'`` only in jsonbudget's source tree, where ``.`` is jsonbudget
and not the user's own project.
"""

from __future__ import annotations

import importlib

__all__ = ["missing_extra", "require_extra"]


def missing_extra(extra: str, module: str, what: str) -> ImportError:
    """The `ImportError` for *what* needing *module*, which the *extra* extra installs."""
    return ImportError(
        f"{what} needs {module}: install the '{extra}' extra"
        f" (pip install 'jsonbudget[{extra}]', or in jsonbudget's source tree:"
        f" pip install '.[{extra}]')",
        name=module,
    )


def require_extra(extra: str, module: str, what: str) -> None:
    """Import *module*, or raise `missing_extra`: called where an optional dependency is
    imported on use, before the plain ``import`` that gives mypy the module's types."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(extra, module, what) from exc

"""``python -m jsonbudget``: the same as the ``jsonbudget`` command."""

from __future__ import annotations

from ._cli import run

if __name__ == "__main__":
    raise SystemExit(run())

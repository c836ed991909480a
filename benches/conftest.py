"""Collect ``bench_*.py`` as test modules, so ``pytest benches`` runs the suites.

pytest's default ``python_files`` only matches ``test_*.py``; changing it in pyproject
would also change what ``tests/`` collects. ``pytest benches --benchmark-disable`` runs
every benchmark once as a smoke test (each asserts its output is correct).
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    # A file named on the command line is collected by pytest itself already.
    if parent.session.isinitpath(file_path):
        return None
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None

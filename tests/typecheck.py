"""Programs a user would write, checked by ``mypy --strict`` as the user's own run
would check them: one run for many programs, their errors by program name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def strict_errors(root: Path, programs: dict[str, str]) -> dict[str, list[str]]:
    """mypy --strict's errors (notes left out) for each of *programs* (name: source,
    dedented here), written to *root* and checked in one run."""
    programs = {name: textwrap.dedent(src) for name, src in programs.items()}
    for name, src in programs.items():
        (root / f"{name}.py").write_text(src, encoding="utf-8")
    # An empty configuration: what a user's strict run reports, not the project's.
    (root / "mypy.ini").write_text("[mypy]\n", encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(root / "mypy.ini"),
            "--cache-dir",
            str(root / ".mypy_cache"),
            "--no-error-summary",
            "--hide-error-context",
            *sorted(f"{name}.py" for name in programs),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 2: mypy itself failed
    errors: dict[str, list[str]] = {name: [] for name in programs}
    for line in proc.stdout.splitlines():
        name = line.split(".py:", 1)[0]
        assert name in errors, f"an error outside the programs: {line}\n{proc.stdout}"
        if ": note: " not in line:
            errors[name].append(line)
    return errors

"""Without an optional dependency, users get one line that says which extra to install."""

from __future__ import annotations

import subprocess
import sys


def test_command_without_the_cli_extra_says_which_extra() -> None:
    code = (
        "import sys; sys.modules['rich'] = None; "  # import rich now fails
        "from jsonbudget._cli import run; raise SystemExit(run())"
    )
    cp = subprocess.run(
        [sys.executable, "-c", code, "demo"], capture_output=True, text=True, check=False
    )
    assert cp.returncode == 2
    assert cp.stderr == (
        "jsonbudget: error: the command line needs rich: install the 'cli' extra"
        " (pip install 'jsonbudget[cli]', or in jsonbudget's source tree:"
        " pip install '.[cli]')\n"
    )
    assert cp.stdout == ""

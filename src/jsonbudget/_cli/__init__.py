"""The tools wing: the ``jsonbudget`` command line, its demo and the limit tuner."""

from __future__ import annotations

import sys

__all__ = ["run"]


def run() -> int:
    """The ``jsonbudget`` command: a one-line error, not a traceback, without the extra."""
    try:
        from .main import main  # noqa: PLC0415 - rich is imported only for the command
    except KeyboardInterrupt:
        # Ctrl-C while rich and the command load (a tenth of a second): as main() says it.
        print("jsonbudget: interrupted", file=sys.stderr)
        return 130  # main.EXIT_INTERRUPTED, which is not loaded yet
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "rich":
            raise
        from .._extras import missing_extra  # noqa: PLC0415 - only on the error path

        print(
            f"jsonbudget: error: {missing_extra('cli', 'rich', 'the command line')}",
            file=sys.stderr,
        )
        return 2
    return main()

"""Where jsonbudget keeps files of its own by default: one rule for every default."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_home"]


def cache_home() -> Path | None:
    """``$XDG_CACHE_HOME``, else ``~/.cache``; None where neither is an absolute path.

    A relative ``XDG_CACHE_HOME`` is ignored, as the XDG Base Directory spec says, and a
    home that is not absolute (HOME unset with no passwd entry, as a container's user,
    or a relative HOME) is no home: a default under either would be wherever the
    process ran, and what one directory kept another would not find. The caller then
    falls back to a directory of its own under the temporary directory.
    """
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    home = os.path.expanduser("~")
    return Path(home, ".cache") if os.path.isabs(home) else None

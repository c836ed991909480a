"""What to say when an optional dependency is missing, or a client of one is not the
kind asked for: one wording, everywhere.

The hint names the extra both ways pip takes it: ``'jsonbudget[EXTRA]'`` wherever
jsonbudget is installed (from a wheel, pip adds the extra's packages to the installed
jsonbudget), ``'.[EXTRA]'`` only in jsonbudget's source tree, where ``.`` is jsonbudget
and not the user's own project.
"""

from __future__ import annotations

import importlib

__all__ = ["missing_extra", "not_a_client", "require_extra"]


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


def not_a_client(value: object, wanted: str) -> TypeError:
    """The `TypeError` for *value* given a Redis store as ``url_or_client``: neither a URL
    nor one of the sync clients *wanted* names ("redis.Redis"...). One wording for both
    stores (`RedisCursorStore`, `RedisSpillStore`).

    redis-py's asyncio client is named ``Redis`` too: "a redis.Redis client, not Redis"
    did not say what was wrong. It is named as the asyncio client it is.
    """
    import redis.asyncio  # noqa: PLC0415 - an optional dependency, imported on use

    kind = type(value)
    shown = kind.__name__
    for asyncio_client in (redis.asyncio.Redis, redis.asyncio.RedisCluster):
        if isinstance(value, asyncio_client):
            public = f"redis.asyncio.{asyncio_client.__name__}"
            which = public if kind is asyncio_client else f"{shown}, a {public}"
            shown = f"the asyncio client {which} (the store calls Redis synchronously)"
            break
    return TypeError(f"url_or_client must be a redis URL or a sync {wanted} client, not {shown}")

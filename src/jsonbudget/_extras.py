"""What to say when an optional dependency is missing, or a client of one is not the
kind asked for: one wording, everywhere.

The hint names the extra both ways pip takes it: ``'jsonbudget[EXTRA]'`` wherever
jsonbudget is installed (from a wheel, pip adds the extra's packages to the installed
jsonbudget), ``'.[EXTRA]'`` only in jsonbudget's source tree, where ``.`` is jsonbudget
and not the user's own project.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys

__all__ = ["missing_extra", "not_a_client", "require_extra"]


def missing_extra(
    extra: str, module: str, what: str, *, cause: ImportError | None = None
) -> ImportError:
    """The `ImportError` for *what* needing *module*, which the *extra* extra installs.

    *cause* is the `ImportError` that import raised: where the package it failed in is
    installed (a release without a name jsonbudget imports, say), the message names the
    release found, the range the extra asks for and the error, since "install the extra"
    alone read as if nothing were installed.
    """
    hint = (
        f"install the '{extra}' extra (pip install 'jsonbudget[{extra}]', or in jsonbudget's"
        f" source tree: pip install '.[{extra}]')"
    )
    found = None if cause is None else _installed(extra, module, cause)
    return ImportError(f"{what} needs {found or module}: {hint}", name=module)


def _installed(extra: str, module: str, cause: ImportError) -> str | None:
    """ "<dist><range>; <dist> <version> is installed, and importing from it failed
    (<cause>)" for the installed distribution the import failed in (*cause*'s module,
    else *module*), or None where none is installed: the plain hint is then all there is
    to say. A module set to None in `sys.modules` is one the program keeps out, as if
    it were not installed."""
    top = (cause.name or module).partition(".")[0]
    if top in sys.modules and sys.modules[top] is None:
        return None
    for dist in importlib.metadata.packages_distributions().get(top, ()):
        # A half-removed install may name no distribution (a dist-info without its
        # METADATA), one that cannot be found by that name, or one without a version.
        if not isinstance(dist, str):
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not isinstance(version, str) or not version:
            continue
        wanted = _wanted(extra, _normal(dist))
        return (
            f"{dist if wanted is None else dist + wanted}; {dist} {version} is installed,"
            f" and importing from it failed ({cause})"
        )
    return None


def _wanted(extra: str, dist: str) -> str | None:
    """The version range jsonbudget's *extra* (or an extra it names) asks of *dist*
    (a normalized name), "" for no range, None where it does not ask for *dist* or
    jsonbudget's metadata is not installed (run from a source tree)."""
    try:
        requires = importlib.metadata.requires("jsonbudget") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if f'extra == "{extra}"' not in marker:
            continue
        named = re.match(r"[A-Za-z0-9._-]+(\[([^]]*)\])?", spec.strip())
        if named is None:
            continue
        name = _normal(named.group(0).partition("[")[0])
        if name == "jsonbudget":  # an extra that takes another: "jsonbudget[mcp]"
            for inner in (named.group(2) or "").split(","):
                found = _wanted(inner.strip(), dist)
                if found is not None:
                    return found
        elif name == dist:
            return spec.strip()[len(named.group(0)) :].strip()
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def require_extra(extra: str, module: str, what: str) -> None:
    """Import *module*, or raise `missing_extra`: called where an optional dependency is
    imported on use, before the plain ``import`` that gives mypy the module's types."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(extra, module, what, cause=exc) from exc


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

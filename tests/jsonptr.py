"""Resolve RFC 6901 JSON Pointers in parsed documents (test helper)."""

from __future__ import annotations

from typing import Any


def resolve(doc: Any, pointer: str) -> Any:
    if pointer == "":
        return doc
    assert pointer.startswith("/"), pointer
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc

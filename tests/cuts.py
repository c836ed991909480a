"""The two balanced cuts side by side: the compiled one (`bound.fill`, for clean values)
and the renderer's, which must agree byte for byte."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jsonbudget import Encoded, Encoder
from jsonbudget._encode import bound as _bound


@contextmanager
def renderer_only() -> Iterator[None]:
    """Within it, every balanced cut is the renderer's: the compiled cut is set aside."""
    saved = _bound.fill
    _bound.fill = None
    try:
        yield
    finally:
        _bound.fill = saved


def both(obj: Any, budget: int, **options: Any) -> tuple[Encoded, Encoded]:
    """*obj* cut by the compiled balanced cut where it takes it, and by the renderer."""
    enc = Encoder(max_bytes=budget, **options)
    compiled = enc.encode(obj)
    with renderer_only():
        rendered = enc.encode(obj)
    return compiled, rendered

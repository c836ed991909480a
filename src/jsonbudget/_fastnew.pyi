from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

def maker(cls: type[_T], slots: tuple[Any, ...], /) -> Callable[..., _T]: ...

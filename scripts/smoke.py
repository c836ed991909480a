"""A smoke run of an installed jsonbudget: its extensions import, the compiled size walk
gives what its Python twin gives, and the installed files are the wheel's as declared
(the licence text, no C sources). Run by scripts/test on the other Pythons found."""

import sys
from importlib import metadata

import jsonbudget
from jsonbudget._encode import _speedups, bound

values = [
    {"a": [1, 2.5, None, True, "x" * 300], "b": {"c": "é€😀", "d": []}},
    [{"id": i, "name": f"n{i}", "tags": ["t"] * (i % 4)} for i in range(200)],
    {"nan": float("nan")},
]
caps = (64, 1 << 62, 1 << 62, 1 << 62, ())
for value in values:
    for cap in (10, 100, 10_000):
        assert bound.bound(value, cap, 0, *caps) == bound.py_bound(value, cap, 0, *caps)
installed = [str(f) for f in metadata.files("jsonbudget") or ()]
assert not [f for f in installed if f.endswith(".c")], "C sources shipped in the wheel"
assert any(f.endswith("licenses/LICENSE") for f in installed), "no licence text in the wheel"
assert metadata.metadata("jsonbudget")["License-Expression"] == "MIT"
out = jsonbudget.bounded_dumps(values, max_bytes=2000)
assert len(out) <= 2000
print(f"Python {sys.version.split()[0]}: {_speedups.__name__} imports, {len(out)} bytes, ok")

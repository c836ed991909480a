"""Docs that run: every ``python`` block in README.md and docs/ is executed, as pasted.

Each file's blocks run in document order in one fresh interpreter, in an empty temporary
directory (which is also its ``TMPDIR``), as a newcomer pasting them would run them. A
block followed by a fenced block whose info string is ``output`` must print exactly that.
In ``sh`` and ``console`` blocks, every line that starts with ``jsonbudget`` (after an
optional ``$ ``) is run in the same directory, in order with the python blocks, and its
standard output compared the same way; other shell lines (installs, the test script) are
not run. A block that is not meant to run (a signature, a sketch) is fenced as ``text``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SHELL = ("sh", "shell", "bash", "console")
#: One file's blocks together; the slowest pages (a demo database) take a few seconds.
_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    kind: str  # "python" or "shell"
    code: str
    expected: str | None
    line: int


def collect(path: Path) -> list[Block]:
    """The runnable blocks of *path*, each with the output block that follows it, if any."""
    text = path.read_text(encoding="utf-8")
    fences = list(_FENCE.finditer(text))
    blocks: list[Block] = []
    for i, m in enumerate(fences):
        lang, body = m.group(1), m.group(2)
        expected = None
        if i + 1 < len(fences) and fences[i + 1].group(1) == "output":
            between = text[m.end() : fences[i + 1].start()]
            if not between.strip():
                expected = fences[i + 1].group(2)
        line = text.count("\n", 0, m.start()) + 1
        if lang == "python":
            blocks.append(Block("python", body, expected, line))
        elif lang in _SHELL:
            commands = [
                ln.removeprefix("$ ")
                for ln in body.splitlines()
                if ln.removeprefix("$ ").startswith("jsonbudget ")
            ]
            if commands:
                blocks.append(Block("shell", "\n".join(commands), expected, line))
    return blocks


# Runs in the child: each block in one namespace, stdout captured per block.
_DRIVER = r"""
import contextlib, io, json, subprocess, sys, traceback
blocks, label = json.loads(sys.stdin.read()), sys.argv[1]
ns = {"__name__": "__main__"}
results = []
def text(out):
    out.flush()
    return out.buffer.getvalue().decode("utf-8")
for b in blocks:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n", write_through=True)
    try:
        if b["kind"] == "python":
            code = compile(b["code"], f"{label}:{b['line']}", "exec")
            with contextlib.redirect_stdout(out):
                exec(code, ns)
        else:
            for cmd in b["code"].splitlines():
                p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
                out.write(p.stdout)
                if p.returncode not in (0, 1, 3):  # 1: incomplete, 3: usage (both shown)
                    raise RuntimeError(f"{cmd!r} exited {p.returncode}: {p.stderr}")
        results.append({"ok": True, "out": text(out)})
    except BaseException:
        results.append({"ok": False, "out": text(out), "error": traceback.format_exc()})
        break
print(json.dumps(results))
"""


@pytest.mark.parametrize(
    "path",
    [p for p in DOC_FILES if collect(p)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_doc_blocks_run_as_shown(path: Path, tmp_path: Path) -> None:
    blocks = collect(path)
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, path.name],
        input=json.dumps([b.__dict__ for b in blocks]),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    for block, result in zip(blocks, results, strict=False):
        where = f"{path.name}:{block.line}"
        assert result["ok"], f"{where} raised:\n{result.get('error')}"
        if block.expected is not None:
            assert result["out"] == block.expected, f"{where} printed something else"
    assert len(results) == len(blocks)


def test_collector_pairs_output_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "```python\nprint(1)\n```\n\n```output\n1\n```\n"
        "```text\nnot run\n```\n"
        "```sh\npip install .\n$ jsonbudget --version\n```\n",
        encoding="utf-8",
    )
    blocks = collect(doc)
    assert [(b.kind, b.code, b.expected) for b in blocks] == [
        ("python", "print(1)\n", "1\n"),
        ("shell", "jsonbudget --version", None),
    ]


def test_benchmark_script_writes_only_below_its_marker(tmp_path: Path) -> None:
    from benches.ratios import DOCS, write_docs

    page = tmp_path / "benchmarks.md"
    page.write_text(DOCS.read_text(encoding="utf-8"), encoding="utf-8")
    head = page.read_text(encoding="utf-8").partition("<!-- Everything below")[0]
    write_docs("first table", "python3 benches/ratios.py", page)
    write_docs("second table", "python3 benches/ratios.py --full", page)
    text = page.read_text(encoding="utf-8")
    assert text.startswith(head)  # the prose above the marker is kept as written
    assert "second table" in text
    assert "first table" not in text
    assert "Command: `python3 benches/ratios.py --full`." in text

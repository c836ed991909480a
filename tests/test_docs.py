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

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jsonbudget

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


# Documented signatures. A signature is written `name(params)` with the names, kinds
# (`/`, `*`) and defaults of the code, as a heading's code span, an inline code span
# whose parameters hold a `*` or `/` or that is followed by `-> type`, or a line of a
# `text` block (`.method(...)` lines belong to the class above them). A span such as
# `Keyring(current, previous=())` without `*` may be a call: only its keywords are
# checked (each must be one the code takes). A parameter list that is not Python
# (`<same options>`, `2 GiB`) is not checked, and one that ends in `...` only up to there.
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)*)`(?!`)")
_NAME = r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)"
_TEXT_SIG = re.compile(rf"^[ \t]*(?:await )?(\.?){_NAME}\(", re.MULTILINE)
_SPAN_SIG = re.compile(rf"(?:await )?{_NAME}\(")
_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "/",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "*",
    inspect.Parameter.VAR_KEYWORD: "**",
}


@dataclass(frozen=True)
class Signature:
    line: int
    name: str
    params: str
    strict: bool = True


def _inside(text: str, start: int) -> str | None:
    """The text from *start* to the parenthesis that closes the one just before it."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return None


def signatures(path: Path) -> list[Signature]:
    """The documented signatures of *path* (see above), of any name."""
    text = path.read_text(encoding="utf-8")
    found: list[Signature] = []
    prose = list(text)  # the text with fenced blocks blanked, lines kept
    for fence in _FENCE.finditer(text):
        for i in range(fence.start(), fence.end()):
            if prose[i] != "\n":
                prose[i] = " "
        if fence.group(1) != "text":
            continue
        owner = None
        for m in _TEXT_SIG.finditer(fence.group(2)):
            params = _inside(fence.group(2), m.end())
            name = m.group(2)
            if m.group(1):
                if owner is None:
                    continue
                name = f"{owner}.{name}"
            else:
                owner = name
            if params is not None:
                line = text.count("\n", 0, fence.start(2) + m.start()) + 1
                found.append(Signature(line, name, params))
    blank = "".join(prose)
    for span in _SPAN.finditer(blank):
        code = span.group(1).strip()
        call = _SPAN_SIG.match(code)
        params = None if call is None else _inside(code, call.end())
        if call is None or params is None:
            continue
        rest = code[call.end() + len(params) + 1 :].strip()
        if rest and not rest.startswith("->"):
            continue
        line_start = blank.rfind("\n", 0, span.start()) + 1
        heading = blank[line_start : span.start()].lstrip().startswith("#")
        marked = re.search(r"(?:^|,)\s*[*/]", params) is not None
        line = blank.count("\n", 0, span.start()) + 1
        found.append(Signature(line, call.group(1), params, strict=heading or bool(rest) or marked))
    return found


def _public(name: str) -> Any:
    """The public object *name* names (``Class.method`` too), or None."""
    obj: Any = jsonbudget
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def _documented(params: str) -> tuple[list[tuple[str, str, ast.expr | None]], bool] | None:
    """(name, kind, default) of each documented parameter, and whether the list is only a
    beginning (it ended in ``...``); None when it is not a Python parameter list."""
    params = " ".join(params.split())
    partial = params.endswith(("...", "…"))
    params = params.removesuffix("...").removesuffix("…").rstrip().removesuffix(",")
    try:
        node = ast.parse(f"def f({params}): pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(node, ast.FunctionDef)
    args = node.args
    out: list[tuple[str, str, ast.expr | None]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    for arg, default in zip(positional, defaults, strict=True):
        out.append((arg.arg, "/" if arg in args.posonlyargs else "", default))
    if args.vararg:
        out.append((args.vararg.arg, "*args", None))
    out.extend((a.arg, "*", d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True))
    if args.kwarg:
        out.append((args.kwarg.arg, "**", None))
    return out, partial


def _real(name: str, obj: Any) -> list[inspect.Parameter]:
    params = list(inspect.signature(obj).parameters.values())
    owner_name, _, attr = name.rpartition(".")
    owner = _public(owner_name) if owner_name else None
    if isinstance(owner, type) and inspect.isfunction(inspect.getattr_static(owner, attr)):
        params = params[1:]  # an instance method, documented without its `self`
    return params


def _default_problem(name: str, doc: ast.expr, real: inspect.Parameter) -> str | None:
    if real.default is inspect.Parameter.empty:
        return f"{name}: documented with a default, the code has none"
    try:
        value = ast.literal_eval(doc)
    except ValueError:
        if not isinstance(doc, ast.Name) or not hasattr(jsonbudget, doc.id):
            return None  # a name the docs explain in words (DEFAULT_BUDGETS)
        value = getattr(jsonbudget, doc.id)
    if value != real.default:
        return f"{name}: documented default {ast.unparse(doc)}, the code's {real.default!r}"
    return None


def signature_problems(name: str, params: str, *, strict: bool = True) -> list[str]:
    """How the signature documented for public *name* differs from the code's; not
    *strict*, only the keywords it names that the code does not take."""
    obj = _public(name)
    parsed = _documented(params)
    if obj is None or parsed is None:
        return []
    documented, partial = parsed
    real = _real(name, obj)
    if not strict:
        takes = {p.name for p in real if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in real):
            return []
        return [
            f"{n}=: the code takes no such keyword"
            for n, _, d in documented
            if d and n not in takes
        ]
    if partial:
        real = real[: len(documented)]
    doc_shape = [(n, kind) for n, kind, _ in documented]
    real_shape = [(p.name, _KINDS[p.kind]) for p in real]
    if doc_shape != real_shape:
        return [f"documented {doc_shape}, the code's {real_shape}"]
    problems = []
    for (n, _, default), p in zip(documented, real, strict=True):
        if default is not None:
            problem = _default_problem(n, default, p)
        elif p.default is not inspect.Parameter.empty and p.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            problem = f"{n}: documented as required, the code's default is {p.default!r}"
        else:
            problem = None
        if problem is not None:
            problems.append(problem)
    return problems


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_signatures_match_the_code(path: Path) -> None:
    problems = [
        f"{path.name}:{sig.line} {sig.name}: {problem}"
        for sig in signatures(path)
        for problem in signature_problems(sig.name, sig.params, strict=sig.strict)
    ]
    assert not problems, "\n".join(problems)


def test_signature_check_catches_what_was_found() -> None:
    # Documented signatures had drifted from the code: positional `kid` and `window`
    # (keyword-only in the code), `acall` for `call`, and a missing `max_keys`.
    assert signature_problems("Keyring.generate", "*, kid=0") == []
    assert signature_problems("Keyring.from_secret", "secret, kid=0")
    assert signature_problems("Keyring.rotate", "new_secret, window=900")
    assert signature_problems("acall_with_output_cap", "acall, *, max_output_tokens, ...")
    tuner = "*, budgets=DEFAULT_BUDGETS, goal_truncated=0.02, sample=10000, max_items=None"
    assert signature_problems("Tuner", tuner + ", ...") == []
    assert signature_problems("Tuner", tuner + ", max_field_bytes=None, ...")
    assert signature_problems("Tuner", "*, budgets=(4096,), ...")  # a wrong default
    assert signature_problems("fit_tokens", "obj, *, max_tokens, counter, limits, **o")
    assert signature_problems("Keyring.from_secret", "secret, kid=0", strict=False) == []
    assert signature_problems("PostgresSource", "x, conninfo_connection_or_pool=1", strict=False)


def test_signature_collector(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "## `Scope(principal, query=None, *, defaults=None, page_size_keys=K)`\n"
        "Maybe a call: `Limits(1024)`, `Keyring(current, previous=())`;\n"
        'checked: `summarize(obj) -> dict`, `Encoder.fit(obj, budget, *, path="")`.\n'
        "```text\nOutputCapRetry(*, attempts=3)\n    .call(call, *, max_output_tokens)\n```\n"
        "```python\nprint(Tuner(*, budgets=1))\n```\n",
        encoding="utf-8",
    )
    assert [(s.line, s.name, s.strict) for s in signatures(doc)] == [
        (5, "OutputCapRetry", True),
        (6, "OutputCapRetry.call", True),
        (1, "Scope", True),
        (2, "Limits", False),
        (2, "Keyring", False),
        (3, "summarize", True),
        (3, "Encoder.fit", True),
    ]

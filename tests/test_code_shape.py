"""No function in cir_demo/ is longer than MAX_LINES: a long function is split into named steps.

Length: the logical lines (statements, a multi-line docstring or call counting once) and comment
lines from the `def` line (or its first decorator) to its last line, nested functions and classes
included. Logical lines, not physical ones, so that the formatter (`ruff format`), which wraps a
long call over several lines, never changes a function's length. PENDING lists long functions
that another change is splitting or moving; it may only shrink (a listed function that is no
longer long must leave the list)."""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 75
PENDING: set[tuple[str, str]] = set()  # none left


def counted_lines(source: str) -> list[int]:
    """The line numbers that end a logical line or hold only a comment."""
    out = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE or (tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#")):
            out.add(tok.start[0])
    return sorted(out)


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in logical lines) of every function in `source`, nested ones too."""
    found = []
    counted = counted_lines(source)

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    found.append((name, first, sum(first <= n <= child.end_lineno for n in counted)))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


@functools.cache  # both tests read the same sources: tokenized and parsed once per process
def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> dict[tuple[str, str], int]:
    """{(path relative to the repository, qualified name): length} of the functions over `limit` lines."""
    out = {}
    for path in sorted((root / "cir_demo").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for name, _, length in function_lengths(path.read_text(encoding="utf-8")):
            if length > limit:
                out[(rel, name)] = length
    return out


def test_no_function_is_longer_than_the_limit():
    found = {k: n for k, n in long_functions().items() if k not in PENDING}
    assert found == {}, "split into named steps: " + ", ".join(f"{p}:{f} ({n} lines)" for (p, f), n in found.items())


def test_pending_list_only_shrinks():
    long_now = long_functions()
    stale = sorted(k for k in PENDING if k not in long_now)
    assert stale == [], f"no longer over {MAX_LINES} lines (or gone): remove from PENDING: {stale}"


def test_lengths_count_decorators_nested_code_and_the_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(78))
    source = f"@decorator\ndef outer():\n{body}\n    def inner():\n        return 1\n\n\nclass C:\n    def m(self):\n        pass\n"
    lengths = {name: (first, n) for name, first, n in function_lengths(source)}
    # decorator + def + 78 body lines + inner's 2 lines = 82 logical lines
    assert lengths["outer"] == (1, 82)
    assert lengths["outer.inner"] == (81, 2)
    assert lengths["C.m"] == (86, 2)


def test_a_wrapped_call_and_a_comment_count_as_written_not_as_wrapped():
    one = "def f():\n    # why\n    return g(a, b, c)\n"
    wrapped = "def f():\n    # why\n    return g(\n        a,\n        b,\n        c,\n    )\n"
    assert function_lengths(one) == function_lengths(wrapped) == [("f", 1, 3)]

"""The ```python blocks of a markdown page, run as a reader would run them.

A block runs as written, in one namespace with the page's earlier blocks, unless its first
line says otherwise:

- ``# not run: <why>``: never executed (needs CUDA, pseudo-code, ...); the reason is required.
- ``# given: a, b, c``: a fragment of a caller's code; the names listed are the caller's
  (an engine's model, its state), which :mod:`helpers.doc_context` builds for the test. A
  list that ends with a comma goes on in the next comment line.

A line ``expression  # [literal] prose``, the expression a statement of its own at the top
level, shows its value: the literal equals the value (a tensor's ``tolist()``) as that line
runs. On any other line a ``# [...]`` comment is a shape comment, not checked.
"""

import ast
import re
from pathlib import Path
from typing import NamedTuple

_FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_NOT_RUN, _GIVEN = "# not run:", "# given:"


class Block(NamedTuple):
    line: int  # the page's line of the block's first code line, 1-based
    code: str
    not_run: str | None  # why it is not run, or None
    given: tuple[str, ...]  # the names its caller provides


def python_blocks(text: str) -> list[str]:
    return [match.group(1) for match in _FENCE.finditer(text)]


def blocks(text: str) -> list[Block]:
    """Every ```python block of ``text`` with its marker, in page order."""
    found = []
    for match in _FENCE.finditer(text):
        code = match.group(1)
        lines = [line.strip() for line in code.splitlines()] or [""]
        line = text.count("\n", 0, match.start(1)) + 1
        not_run, given = None, ()
        if lines[0].startswith(_NOT_RUN):
            not_run = lines[0].removeprefix(_NOT_RUN).strip()
            if not not_run:
                raise ValueError(f"line {line}: '{_NOT_RUN}' must say why")
        elif lines[0].startswith(_GIVEN):
            given = _given(lines, line)
        found.append(Block(line, code, not_run, given))
    return found


def _given(lines: list[str], line: int) -> tuple[str, ...]:
    """The names of a block's ``# given:`` list, which starts its ``lines``."""
    listed = lines[0].removeprefix(_GIVEN)
    for more in lines[1:]:
        if not listed.rstrip().endswith(",") or not more.startswith("#"):
            break
        listed += more.removeprefix("#")
    names = tuple(name.strip() for name in listed.split(","))
    if not all(name.isidentifier() for name in names):
        raise ValueError(f"line {line}: '{_GIVEN}' lists names, comma-separated: {listed!r}")
    return names


def shown_values(block: str) -> dict[str, object]:
    """``expression -> value`` for each line ``expression  # [literal] prose``."""
    return {code: _literal(comment) for code, comment in _bracketed(block).values()}


def _bracketed(block: str) -> dict[int, tuple[str, str]]:
    """``line in the block -> (code, comment)`` of each line with a ``# [...]`` comment: a
    shown value after a lone expression, a ``# [shape]`` comment after anything else."""
    found = {}
    for number, line in enumerate(block.splitlines(), 1):
        code, _, comment = line.partition("  # ")
        if comment.startswith("["):
            found[number] = (code.strip(), comment)
    return found


def _literal(comment: str) -> object:
    return ast.literal_eval(comment[: closing(comment) + 1])


def closing(text: str) -> int:
    """Where the bracket that opens ``text`` closes."""
    depth = 0
    for at, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return at
    raise ValueError(f"unbalanced: {text}")


def plain(value: object) -> object:
    """A value as a page shows it: a tensor as its ``tolist()``."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def run_block(block: Block, page: Path, namespace: dict[str, object]) -> int:
    """Runs ``block`` statement by statement in ``namespace``; checks each value shown after a
    lone top-level expression as that line runs. Tracebacks name the page and its line.
    Returns how many values it checked."""
    offset = block.line - 1
    tree = ast.parse(block.code, str(page))
    ast.increment_lineno(tree, offset)
    bracketed = {number + offset: found for number, found in _bracketed(block.code).items()}
    nested = [
        node.end_lineno
        for statement in tree.body
        for node in ast.walk(statement)
        if isinstance(node, ast.Expr) and node is not statement and node.end_lineno in bracketed
    ]
    if nested:
        lines = ", ".join(f"{page.name}:{number}" for number in nested)
        raise AssertionError(f"shown values inside a compound statement cannot be checked: {lines}")
    checked = 0
    for statement in tree.body:
        if not isinstance(statement, ast.Expr) or statement.end_lineno not in bracketed:
            exec(compile(ast.Module([statement], []), str(page), "exec"), namespace)
            continue
        code, comment = bracketed[statement.end_lineno]
        where = f"{page.name}:{statement.end_lineno}"
        try:
            value = _literal(comment)
        except (ValueError, SyntaxError) as error:
            raise AssertionError(f"{where}: shows no literal after {code}: # {comment}") from error
        got = plain(eval(compile(ast.Expression(statement.value), str(page), "eval"), namespace))
        assert got == value, f"{where}: {code} is {got}, the page shows {value}"
        checked += 1
    return checked

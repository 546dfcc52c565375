"""Counts the lines of input-validation code in a source tree, for issue 9's "half" figure.

A line counts when it is a non-blank, non-comment line of a validating function's body
(its docstring and ``def`` lines excluded; the issue counted function bodies), or of a
declaration: a contract, or a field of the contract engine's classes. The compile specs a
contract derives (``batch_shapes``) are not validation and do not count.

Usage: ``python scripts/validation_lines.py SRC_DIR`` (the package directory). Prints each
counted piece, then totals by kind, with the entry points that 0.1.0 did not have (sampling,
probs) apart, so that two trees compare on the same entry points.
"""

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

# Validating functions by name; whole modules whose every function validates.
NAMES = re.compile(
    r"(^_?check_|^_?require_|_fits?$|^_step_signatures$|_args$|^show$|needs_"
    r"|^mask_length$|^_temperatures$)"
)
WHOLE = {"_checks.py", "arguments.py", "contracts.py"}
NOT_VALIDATION = {"batch_shapes"}
DECLARING = {"contract", "fields"}
NEW_ENTRY_POINTS = {"sampling.py", "probs.py"}
NEW_FUNCTIONS = {"_temperatures"}  # the toy's sampled decoding
SKIP = {"config.py", "_memo.py", "_compile.py", "_dynamic.py", "__main__.py"}  # not inputs
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def code_lines(source: list[str], first: int, last: int) -> int:
    """Non-blank, non-comment lines from ``first`` to ``last`` (1-based, inclusive)."""
    lines = source[first - 1 : last]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def body_lines(source: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return code_lines(source, body[0].lineno, node.end_lineno or 0) if body else 0


def pieces(path: Path) -> Iterator[tuple[str, str, int]]:
    """``(kind, name, lines)`` for each counted piece of one module."""
    source = path.read_text().splitlines()
    tree = ast.parse("\n".join(source))
    nested = {
        id(inner)
        for outer in ast.walk(tree)
        if isinstance(outer, FUNCTIONS)
        for inner in ast.walk(outer)
        if inner is not outer
    }
    for node in ast.walk(tree):
        if not isinstance(node, FUNCTIONS) or id(node) in nested or node.name in NOT_VALIDATION:
            continue
        if path.name in WHOLE or NAMES.search(node.name):
            yield "function bodies", node.name, body_lines(source, node)
    for node in tree.body:
        call = getattr(node, "value", None)
        if (
            isinstance(node, ast.Assign)
            and getattr(getattr(call, "func", None), "id", "") in DECLARING
        ):
            name = getattr(node.targets[0], "id", "?")
            yield "declarations", name, code_lines(source, node.lineno, node.end_lineno or 0)
        if isinstance(node, ast.ClassDef) and path.name in WHOLE:
            fields = [n for n in node.body if isinstance(n, (ast.AnnAssign, ast.Assign))]
            count = sum(code_lines(source, n.lineno, n.end_lineno or 0) for n in fields)
            yield "declarations", f"{node.name} fields", count


def counted(src: str) -> Iterator[tuple[str, str, str, str, int]]:
    """``(group, module, kind, name, lines)`` for each counted piece of the package ``src``:
    the group tells 0.1.0's entry points from the new ones."""
    for path in sorted(Path(src).glob("*.py")):
        if path.name in SKIP:
            continue
        for kind, name, count in pieces(path):
            new = path.name in NEW_ENTRY_POINTS or name in NEW_FUNCTIONS
            yield "new entry points" if new else "same entry points", path.name, kind, name, count


def main(src: str) -> None:
    totals: dict[tuple[str, str], int] = {}
    for group, module, kind, name, count in counted(src):
        print(f"{module:16s} {kind:16s} {name:32s} {count:4d}")
        totals[group, kind] = totals.get((group, kind), 0) + count
    for (group, kind), count in sorted(totals.items()):
        print(f"total, {group}, {kind}: {count}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="the package directory (src/eagle_fn)")
    src = parser.parse_args().src
    if not src.is_dir():
        parser.error(f"{src} is not a directory")
    main(str(src))

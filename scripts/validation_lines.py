"""Counts the lines of input-validation code in a source tree, for issue 9's "half" figure.

A line counts when it is a non-blank, non-comment line of a validating function's body
(its docstring and ``def`` lines excluded), of a contract declaration, or of the contract
engine. Usage: ``python scripts/validation_lines.py SRC_DIR`` (the package directory).
Prints each counted piece and the totals, with the entry points that 0.1.0 did not have
(sampling, probs) apart, so two trees compare on the same entry points.
"""

import ast
import re
import sys
from pathlib import Path

# Validating functions by name; whole modules whose every function validates.
NAMES = re.compile(r"(^_?check_|^_?require_|_fits?$|^_step_signatures$|_args$|^show$|^signature$)")
WHOLE = {"_checks.py", "arguments.py", "contracts.py"}
NEW_ENTRY_POINTS = {"sampling.py", "probs.py"}
SKIP = {"config.py", "_memo.py", "_compile.py", "_dynamic.py", "__main__.py"}  # not inputs


def body_lines(source: list[str], node: ast.AST) -> int:
    """Non-blank, non-comment lines of ``node``'s body, its docstring excluded."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return 0
    lines = source[body[0].lineno - 1 : node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def node_lines(source: list[str], node: ast.AST) -> int:
    lines = source[node.lineno - 1 : node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def pieces(path: Path):
    source = path.read_text().splitlines()
    tree = ast.parse("\n".join(source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if path.name in WHOLE or NAMES.search(node.name):
                if not _nested(tree, node):
                    yield node.name, body_lines(source, node)
        elif isinstance(node, ast.Assign) and node in tree.body:
            call = node.value
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") in {"contract", "fields"}:
                yield node.targets[0].id, node_lines(source, node)
    if path.name in WHOLE:  # the classes' field declarations count too
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                fields = [n for n in node.body if isinstance(n, (ast.AnnAssign, ast.Assign))]
                yield f"{node.name} fields", sum(node_lines(source, n) for n in fields)


def _nested(tree: ast.AST, target: ast.AST) -> bool:
    """Whether ``target`` sits inside another counted function (counted with it)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not target:
            if any(child is target for child in ast.walk(node)):
                return True
    return False


def main(src: str) -> None:
    totals = {"same entry points": 0, "new entry points": 0}
    for path in sorted(Path(src).glob("*.py")):
        if path.name in SKIP:
            continue
        group = "new entry points" if path.name in NEW_ENTRY_POINTS else "same entry points"
        for name, count in pieces(path):
            print(f"{path.name:16s} {name:32s} {count:4d}")
            totals[group] += count
    for group, count in totals.items():
        print(f"total, {group}: {count}")


if __name__ == "__main__":
    main(sys.argv[1])

"""Issue 9's code figures for a source tree: the longest functions and the shape comments.

- Function length: lines from ``def`` to the last line, with and without the docstring
  (nested functions count in their parent too).
- Shape comments: of the statements that produce a tensor through one of the named calls
  (``cat``, ``gather``, ``where``... torch's and Triton's alike), the share that carries a
  ``# [shape]`` comment (a comment with a ``[``) on any of its lines.

Usage: ``python scripts/code_figures.py SRC_DIR [--missing]``; ``--missing`` lists the
statements without one.
"""

import argparse
import ast
import io
import re
import tokenize
from pathlib import Path

# The "cat, gather, topk, sort, arange, where, full, view, reshape...", with the rest
# of the calls that make a tensor of a new shape or layout.
PRODUCERS = [
    *("cat", "stack", "gather", "scatter", "scatter_", "index_put", "index_select"),
    *("take_along_dim", "topk", "sort", "argsort", "arange", "where", "full", "full_like"),
    *("zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like", "new_full"),
    *("new_zeros", "new_empty", "view", "view_as", "reshape", "flatten", "unsqueeze"),
    *("squeeze", "expand", "repeat", "permute", "cumsum", "argmax", "amin", "amax", "load"),
]
CALL = re.compile(r"(?<![\w])(?:" + "|".join(PRODUCERS) + r")\(")
SHAPE_COMMENT = re.compile(r"#.*\[")
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, *FUNCTIONS, ast.ClassDef)


def docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    value = first.value if isinstance(first, ast.Expr) else None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def statements(tree: ast.AST) -> list[ast.stmt]:
    """The simple statements, and the header line of each compound one."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.stmt)]


def header_span(node: ast.stmt) -> tuple[int, int]:
    """A simple statement's lines; a compound one's up to its body."""
    if isinstance(node, COMPOUND) and not isinstance(node, (*FUNCTIONS, ast.ClassDef)):
        test = getattr(node, "test", None) or getattr(node, "iter", None)
        end = test.end_lineno if test is not None and test.end_lineno else node.lineno
        return node.lineno, end
    return node.lineno, node.end_lineno or node.lineno


def measure(root: Path) -> tuple[list[tuple[int, int, str]], int, list[str]]:
    """Every function's ``(lines without, with the docstring, where)``, longest first; the
    tensor-producing statements with a shape comment; and those without one."""
    lengths: list[tuple[int, int, str]] = []
    commented = 0
    missing: list[str] = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        comments: dict[int, str] = {}
        code: dict[int, str] = {}
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string
            elif token.type in (tokenize.NAME, tokenize.OP):  # code, not strings
                code[token.start[0]] = code.get(token.start[0], "") + token.string
        name = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, FUNCTIONS):
                whole = (node.end_lineno or node.lineno) - node.lineno + 1
                lengths.append((whole - docstring_lines(node), whole, f"{name}:{node.name}"))
        for node in statements(tree):
            if isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            first, last = header_span(node)
            if isinstance(node, COMPOUND) or all(
                not isinstance(child, ast.stmt) for child in ast.iter_child_nodes(node)
            ):
                text = "".join(code.get(line, "") for line in range(first, last + 1))
                if not CALL.search(text):
                    continue
                span = range(first, last + 1)
                if any(SHAPE_COMMENT.search(comments.get(line, "")) for line in span):
                    commented += 1
                else:
                    missing.append(f"{name}:{first}: {lines[first - 1].strip()}")
    lengths.sort(reverse=True)
    return lengths, commented, missing


def main(root: Path, show_missing: bool) -> None:
    lengths, commented, missing = measure(root)
    produced = commented + len(missing)
    print("longest functions, lines without / with the docstring:")
    for body, whole, where in lengths[:5]:
        print(f"  {body:3d} / {whole:3d}  {where}")
    longest_whole = max(lengths, key=lambda entry: entry[1])
    print(f"  longest with the docstring: {longest_whole[1]} ({longest_whole[2]})")
    share = commented / produced if produced else 1.0
    print(
        f"tensor-producing statements with a # [shape] comment: {commented}/{produced} "
        f"= {share:.0%}"
    )
    if show_missing:
        print("\n".join(missing))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="the package directory (src/eagle_fn)")
    parser.add_argument("--missing", action="store_true", help="list the uncommented statements")
    options = parser.parse_args()
    if not options.src.is_dir():
        parser.error(f"{options.src} is not a directory")
    main(options.src, options.missing)

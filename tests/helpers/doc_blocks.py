"""The ```python blocks of a markdown page and the values their comments show."""

import ast
import re


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def shown_values(block: str) -> dict[str, object]:
    """``expression -> value`` for each line ``expression  # [literal] prose``."""
    shown = {}
    for line in block.splitlines():
        code, _, comment = line.partition("  # ")
        if comment.startswith("["):
            shown[code.strip()] = ast.literal_eval(comment[: closing(comment) + 1])
    return shown


def closing(text: str) -> int:
    """Where the bracket that opens ``text`` closes."""
    depth = 0
    for at, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return at
    raise ValueError(f"unbalanced: {text}")

"""README.md's "Use it" example runs as printed and shows what its comments say."""

import ast
import re
from pathlib import Path

import torch

from eagle_fn.profiling import OpCounter

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_the_use_it_example_runs_and_its_comments_hold():
    (block,) = python_blocks(README.read_text())
    namespace: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), namespace)
    shown = shown_values(block)
    assert set(shown) == {"tree.parent_list", "tree.top_scores_index"}
    for expression, value in shown.items():
        assert eval(expression, namespace).tolist() == value, expression
    tree, worker = namespace["tree"], namespace["worker"]
    assert tree.draft_tokens.tolist() == [[11, 0, 6], [5, 10, 3]]  # "the input itself"
    topk_p, topk_index = torch.rand(2, 3), torch.tensor([[11, 0, 6], [5, 10, 3]])
    with OpCounter() as counter:  # "cached constants: no kernel ran"
        again = worker.organize(topk_p=topk_p, topk_index=topk_index)
    assert counter.total == 0
    assert again.draft_tokens is topk_index

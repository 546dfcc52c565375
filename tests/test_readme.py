"""README.md's "Use it" example runs as printed and shows what its comments say."""

from pathlib import Path

import torch

from eagle_fn.profiling import OpCounter
from helpers.doc_blocks import python_blocks, shown_values

README = Path(__file__).resolve().parents[1] / "README.md"


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

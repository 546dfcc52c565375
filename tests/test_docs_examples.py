"""The ```python blocks of docs/*.md run as printed and show what their comments say.

A page's blocks run in order in one namespace, as a reader's session would. A block runs
unless its first line says ``# not run: <why>``; a ``# given: ...`` fragment gets the names
it lists from ``helpers/doc_context.py``; ``expression  # [literal]`` lines are checked
(``helpers/doc_blocks.py``). README.md's block is test_readme.py's.
"""

import ast
from pathlib import Path

import pytest

from helpers import doc_context
from helpers.doc_blocks import Block, blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(page for page in DOCS.glob("*.md") if blocks(page.read_text()))


def given(page: Path, block: Block) -> dict[str, object]:
    """The caller's names a ``# given:`` block lists, built for it."""
    if not block.given:
        return {}
    where = f"{page.name}:{block.line}"
    build = doc_context.PAGES.get(page.name)
    assert build is not None, f"{where}: helpers/doc_context.py has no builder for the page"
    used = {node.id for node in ast.walk(ast.parse(block.code)) if isinstance(node, ast.Name)}
    assert used >= set(block.given), f"{where}: given but unused: {set(block.given) - used}"
    values = build()
    missing = set(block.given) - set(values)
    assert not missing, f"{where}: helpers/doc_context.py builds no {sorted(missing)}"
    return {name: values[name] for name in block.given}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_python_blocks_of_a_page_run_and_show_what_their_comments_say(page):
    namespace: dict[str, object] = {"__name__": "__main__"}
    not_run = []
    for block in blocks(page.read_text()):
        if block.not_run is not None:
            not_run.append(f"line {block.line}: {block.not_run}")
            continue
        namespace.update(given(page, block))
        run_block(block, page, namespace)
    if len(not_run) == len(blocks(page.read_text())):
        pytest.skip(f"{page.name}: no block runs ({'; '.join(not_run)})")


PAGE = """Text.

```python
# not run: needs CUDA
import torch
```

```python
# given: a,
#        b, c
total = a + b + c
```

```python
x = [1, 2]
x  # [1, 2] as printed
x.append(3)
x  # [1, 2, 3]
```
"""


def test_markers_say_which_blocks_run_and_what_their_caller_gives():
    not_run, fragment, session = blocks(PAGE)
    assert (not_run.line, not_run.not_run, not_run.given) == (4, "needs CUDA", ())
    assert (fragment.line, fragment.not_run, fragment.given) == (9, None, ("a", "b", "c"))
    assert (session.line, session.not_run, session.given) == (15, None, ())
    with pytest.raises(ValueError, match="must say why"):
        blocks("```python\n# not run:\npass\n```\n")


def test_each_shown_value_is_checked_where_its_line_runs(tmp_path):
    session = blocks(PAGE)[2]
    assert run_block(session, tmp_path / "page.md", {}) == 2
    wrong = session._replace(code=session.code.replace("# [1, 2, 3]", "# [1, 2]"))
    with pytest.raises(AssertionError, match=r"page.md:18: x is \[1, 2, 3\], the page shows"):
        run_block(wrong, tmp_path / "page.md", {})
    nested = blocks("```python\nif True:\n    [1]  # [2]\n```\n")[0]
    with pytest.raises(AssertionError, match="inside a compound statement"):
        run_block(nested, tmp_path / "page.md", {})

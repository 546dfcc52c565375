"""Whether this Triton's CPU interpreter can run eagle_fn's kernels at all.

Without a GPU the kernel tests run the kernels in Triton's interpreter, which not every
Triton can do: 3.6's (torch 2.11's) holds a runtime scalar as a one-element NumPy array and
converts it with ``int()`` where Python needs an int (``range(num_steps)``), which NumPy 2.4
refuses (scripts/torch_matrix.sh installs numpy < 2.4 beside it); 3.7, 3.8 and 3.9 squeeze
the array first. Compiled kernels do not go through NumPy (``kernel_aot.py`` compiles them with
3.6 too). One tiny call of every public kernel decides: that one known limit skips the
kernel tests with its reason; any other error propagates, so that a broken kernel fails
loudly instead of skipping every kernel test.
"""

import functools

import torch

from eagle_fn._backend import interpreting

# NumPy >= 2.4's TypeError for int() of a one-element (not 0-d) array.
NUMPY_INT_REFUSAL = "only 0-dimensional arrays can be converted to Python scalars"


@functools.cache
def interpreter_problem():
    """None when the interpreter runs every kernel (or a GPU is used instead), else why not."""
    if torch.cuda.is_available() or not interpreting():
        return None
    from triton.runtime.errors import InterpreterError

    try:
        _run_every_kernel()
    except InterpreterError as error:
        if not is_numpy_int_refusal(error):
            raise
        return f"this Triton's interpreter cannot run the kernels: {root_cause(error)!r}"
    return None


def root_cause(error):
    """The innermost exception of ``error``'s ``raise ... from`` chain."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def is_numpy_int_refusal(error):
    """Whether the interpreter failed because NumPy refused ``int()`` of a 1-element array."""
    cause = root_cause(error)
    return type(cause) is TypeError and str(cause) == NUMPY_INT_REFUSAL


def _run_every_kernel():
    from eagle_fn import DraftConfig, DraftTree, draw_uniforms, kernels

    cfg = DraftConfig(2, 2, 4)
    step0 = kernels.select_top_k(cfg, 0, torch.tensor([[0.6, 0.4]]), torch.tensor([[7, 9]]))
    p, index = torch.tensor([[0.5, 0.5], [0.9, 0.1]]), torch.tensor([[1, 2], [3, 4]])
    step1 = kernels.select_top_k(cfg, 1, p, index, step0.scores)
    steps = (step0, step1)
    lists = [[s.score_entry for s in steps], [s.token_entry for s in steps]]
    tree = kernels.organize_tree(cfg, *lists, [s.parents_entry for s in steps])
    assert isinstance(tree, DraftTree)
    one = torch.tensor([1])
    vt = kernels.build_verify_tree(cfg, tree, one, one)
    kernels.verify_greedy(cfg, vt, torch.zeros(4, dtype=torch.int64))
    probs = torch.full((4, 5), 0.2)
    coins = draw_uniforms(1, 4, generator=torch.Generator().manual_seed(0))  # not the global one
    kernels.verify_sampling(cfg, vt, probs, *coins)

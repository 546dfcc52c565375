"""Inputs for the verify-kernel tests: small configs and adversarial links (malformed trees and
agreeing targets are in trees.py, shared with the torch tests)."""

import torch

from drafts import draft_configs
from eagle_fn import VerifyTree

I64 = torch.int64


# Configs small enough for the Triton interpreter: topk and num_steps <= 5, N <= 40.
SMALL_CONFIGS = draft_configs(max_topk=5, max_steps=5, max_n=40)


def scrambled_links(vt, gen, *, scramble_index=False):
    """``vt`` with random first-child and sibling links (cycles, self-links, values outside
    ``[-1, N - 1]``), tokens from a 3-letter alphabet so matches are frequent, and optionally
    a random ``retrieve_index`` (entries naming other rows' nodes, or no node at all)."""
    bs, n = vt.retrieve_index.shape
    links = (bs, n)
    vt = vt._replace(
        draft_tokens=torch.randint(0, 3, (bs * n,), generator=gen),
        retrieve_next_token=torch.randint(-3, n + 3, links, generator=gen),
        retrieve_next_sibling=torch.randint(-3, n + 3, links, generator=gen),
    )
    if scramble_index:
        vt = vt._replace(retrieve_index=torch.randint(-2, bs * n + 2, links, generator=gen))
    return vt


def sibling_ring(n, match_at):
    """One request whose root's first child is the root itself, and whose sibling links run
    0 -> 1 -> .. -> N-1 -> 0, a cycle through every node. Only node ``match_at`` carries token
    7 (``-1``: none does), so a target of 7 at the root is found after ``match_at`` hops; N - 1
    hops, the most any first match can need, for ``match_at = N - 1``.
    """
    tokens = [7 if node == match_at else 3 for node in range(n)]
    return VerifyTree(
        draft_tokens=torch.tensor(tokens),
        positions=torch.zeros(n, dtype=I64),
        tree_mask=torch.ones(n * n, dtype=torch.bool),
        retrieve_index=torch.arange(n).view(1, n),
        retrieve_next_token=torch.tensor([[0] + [-1] * (n - 1)]),
        retrieve_next_sibling=torch.tensor([[*range(1, n), 0]]),
    )


def compile_for_hopper():
    """Compiles every kernel variant to an sm_90 cubin (Triton's own ptxas, no GPU needed).

    Run in a process without TRITON_INTERPRET, so that the kernels are real Triton JIT
    functions; prints one line per variant.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from eagle_fn.kernels import _kernels_verify as kernels

    pointers = "parent selected draft bonus seq_lens tokens positions mask index next sibling"
    build = {f"{name}_ptr": "*i64" for name in pointers.split()}
    build.update(topk="i32", num_steps="i32", width="i32", n="i32", total="i64")
    greedy = {f"{name}_ptr": "*i64" for name in ["tokens", "index", "next", "sibling", "target"]}
    greedy.update({f"{name}_ptr": "*i64" for name in ["accept", "count", "predicts"]})
    greedy.update(n="i32", num_steps="i32", bs="i32")
    variants = [
        (kernels.verify_build_kernel, {**build, "mask_ptr": "*i1"}, (0, 16, 16), 1),
        (kernels.verify_build_kernel, {**build, "mask_ptr": "*i8"}, (1, 16, 16), 1),
        (kernels.verify_build_kernel, {**build, "mask_ptr": "*i32"}, (1, 32, 32), 1),
        (kernels.verify_build_kernel, {**build, "mask_ptr": "*i1"}, (2, 64, 64), 4),
        (kernels.verify_build_kernel, {**build, "mask_ptr": "*i1"}, (0, 512, 8), 4),
        (kernels.verify_greedy_kernel, greedy, (16, 8), 1),
        (kernels.verify_greedy_kernel, greedy, (512, 16), 1),
    ]
    for kernel, signature, constexprs, warps in variants:
        names = list(signature) + kernel.arg_names[len(signature) :]
        full = {**signature, **dict.fromkeys(names[len(signature) :], "constexpr")}
        values = {
            (names.index(name),): v
            for name, v in zip(names[len(signature) :], constexprs, strict=True)
        }
        source = ASTSource(fn=kernel, signature=full, constexprs=values)
        compiled = triton.compile(
            source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
        )
        print(kernel.__name__, constexprs, "cubin bytes", len(compiled.asm["cubin"]))

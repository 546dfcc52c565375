"""Slow, loop-based reference of semantics.md §3-5, written from the contract alone: the test oracle.

Every function works row by row on Python lists; products are taken on 0-d tensors so that
they round in the same dtype as the library's. Nothing here imports eagle_fn internals.
"""

import math

import torch


def rank(scores, n):
    """Indices of the n best scores: larger first, NaN counted as -inf, ties by lower index."""

    def key(g):
        s = -math.inf if math.isnan(scores[g]) else scores[g]
        return (-s, g)

    return sorted(range(len(scores)), key=key)[:n]


def select_top_k(cfg, step, topk_p, topk_index, scores=None):
    """semantics.md §3 as a dict of nested lists, one field per DraftStep field."""
    k = cfg.topk
    if step == 0:
        bs = topk_p.shape[0]
        return {
            "input_ids": [t for row in topk_index.tolist() for t in row],
            "hidden_index": [b for b in range(bs) for _ in range(k)],
            "scores": topk_p.tolist(),
            "score_entry": [[row] for row in topk_p.tolist()],
            "token_entry": topk_index.tolist(),
            "parents_entry": [[-1, *range(k)] for _ in range(bs)],
        }
    bs = scores.shape[0]
    out = {
        name: []
        for name in (
            "input_ids",
            "hidden_index",
            "scores",
            "score_entry",
            "token_entry",
            "parents_entry",
        )
    }
    for b in range(bs):
        expand = [
            [(scores[b, r] * topk_p[b * k + r, c]).item() for c in range(k)] for r in range(k)
        ]
        tokens = [topk_index[b * k + r, c].item() for r in range(k) for c in range(k)]
        flat = [v for row in expand for v in row]
        sel = rank(flat, k)
        out["input_ids"].extend(tokens[g] for g in sel)
        out["hidden_index"].extend(g // k + k * b for g in sel)
        out["scores"].append([flat[g] for g in sel])
        out["score_entry"].append(expand)
        out["token_entry"].append(tokens)
        out["parents_entry"].append([g + k * k * (step - 1) + k for g in sel])
    return out


def flatten_row(cfg, score_list, token_list, b):
    """Row b's candidates in flat-index order: (scores, tokens)."""
    scores, tokens = [], []
    for i in range(cfg.num_steps):
        scores.extend(v for row in score_list[i][b].tolist() for v in row)
        tokens.extend(token_list[i][b].tolist())
    return scores, tokens


def organize_tree(cfg, score_list, token_list, parents_list):
    """semantics.md §4 as (parent_list, top_scores_index, draft_tokens) nested lists."""
    bs = score_list[0].shape[0]
    parent_list, top_index, draft_tokens = [], [], []
    for b in range(bs):
        scores, tokens = flatten_row(cfg, score_list, token_list, b)
        top = sorted(rank(scores, cfg.num_draft_tokens - 1))
        top_index.append(top)
        draft_tokens.append([tokens[g] for g in top])
        parent_list.append(
            [p for i in range(cfg.num_steps - 1) for p in parents_list[i][b].tolist()]
        )
    return parent_list, top_index, draft_tokens


def organize_chain(num_steps, topk_index):
    """semantics.md §4 for a chain: constant parents and indices, the tokens unchanged."""
    bs = topk_index.shape[0]
    parents = [list(range(-1, num_steps - 1)) if num_steps > 1 else [] for _ in range(bs)]
    return parents, [list(range(num_steps)) for _ in range(bs)], topk_index.tolist()


def plain_organize(cfg, score_list, token_list, parents_list):
    """The engines' organization (cat/topk/sort/gather); exact only without NaN or ties."""
    scores = torch.cat(score_list, dim=1).flatten(1)
    tokens = torch.cat(token_list, dim=1)
    top = torch.sort(torch.topk(scores, cfg.num_draft_tokens - 1, dim=-1).indices).values
    if cfg.num_steps > 1:
        parent_list = torch.cat(parents_list[:-1], dim=1)
    else:
        parent_list = torch.empty(scores.shape[0], 0, dtype=torch.int64, device=scores.device)
    return parent_list, top, torch.gather(tokens, 1, top)


def as_lists(tree):
    return tuple(t.tolist() for t in tree)


def parent_node(cfg, parents, selected, j):
    """semantics.md §8: node j's parent node, 0 for the root, None when not found."""
    slot = selected[j - 1] // cfg.topk
    if slot == 0:
        return 0
    if not 0 < slot < cfg.parent_width:
        return None
    want = parents[slot]
    for position in range(len(selected)):  # this request's selected candidates only
        if selected[position] == want:
            return position + 1
    return None


def wrap64(x):
    """``x`` as int64 arithmetic gives it: two's complement, modulo ``2**64``."""
    return (x + 2**63) % 2**64 - 2**63


def full_mask(rows, seq_lens, total):
    """The FULL layout of the mask rows (``[bs][N][N]`` 0/1), cell by cell: ``[total]`` 0/1.

    Request b's block is N rows of ``seq_len + N`` cells after the earlier requests' blocks:
    cell ``(t, seq_len + j)`` sits at ``start + t * (seq_len + N) + seq_len + j`` as an int64
    (wrapping). A cell whose offset is outside ``[0, total)`` is dropped (a wrong
    ``seq_lens_sum``, a huge or negative ``seq_len``); prefix cells and cells no row reaches
    stay 1. A cell given two different values has no specified value: the reference refuses
    such inputs (:func:`full_mask_values` lists them).
    """
    values = full_mask_values(rows, seq_lens, total)
    for cell, allowed in enumerate(values):
        assert len(allowed) == 1, f"FULL cell {cell} given {sorted(allowed)}: unspecified"
    return [allowed.pop() for allowed in values]


def full_mask_values(rows, seq_lens, total):
    """Per cell of :func:`full_mask`, the set of values it may hold: ``{1}`` where no row
    reaches it, else every value written to it (two where overlapping blocks disagree)."""
    n = len(rows[0]) if rows else 0
    written, start = [set() for _ in range(total)], 0
    for block, seq_len in zip(rows, seq_lens, strict=True):
        for t, row in enumerate(block):
            for j, value in enumerate(row):
                cell = wrap64(start + t * (seq_len + n) + seq_len + j)
                if 0 <= cell < total:
                    written[cell].add(value)
        start += n * (seq_len + n)
    return [allowed or {1} for allowed in written]


def verify_tree(cfg, tree, bonus_tokens, seq_lens, mask_mode, seq_lens_sum=None):
    """semantics.md §8 row by row; links built like SGLang's kernel (front insertion, nodes descending).

    Returns a dict of nested lists keyed by VerifyTree field name; ``tree_mask`` is given per
    request as rows of 0/1 (QLEN), integers (BITPACKED), flattened by the caller, or as the
    FULL mask of length ``N * seq_lens_sum + bs * N * N`` (:func:`full_mask`; the sum of
    ``seq_lens`` when ``seq_lens_sum`` is None).
    """
    n, steps = cfg.num_draft_tokens, cfg.num_steps
    out = {
        name: []
        for name in (
            "draft_tokens",
            "positions",
            "tree_mask",
            "retrieve_index",
            "retrieve_next_token",
            "retrieve_next_sibling",
        )
    }
    for b in range(bonus_tokens.shape[0]):
        parents = tree.parent_list[b].tolist()
        selected = tree.top_scores_index[b].tolist()
        seq_len = seq_lens[b].item()
        next_token, next_sibling = [-1] * n, [-1] * n
        for i in range(n - 1, 0, -1):
            p = parent_node(cfg, parents, selected, i)
            if p is None:
                continue
            if next_token[p] != -1:
                next_sibling[i] = next_token[p]
            next_token[p] = i
        rows, positions = [], []
        for t in range(n):
            row = [1] + [0] * (n - 1)
            steps_taken, cur = 0, t
            while t > 0 and steps_taken < steps:
                row[cur] = 1
                steps_taken += 1
                p = parent_node(cfg, parents, selected, cur)
                if p is None or p == 0:
                    break
                cur = p
            rows.append(row)
            positions.append(wrap64(seq_len + steps_taken))
        out["draft_tokens"].extend([bonus_tokens[b].item(), *tree.draft_tokens[b].tolist()])
        out["positions"].extend(positions)
        out["retrieve_index"].append([b * n + j for j in range(n)])
        out["retrieve_next_token"].append(next_token)
        out["retrieve_next_sibling"].append(next_sibling)
        if mask_mode == "bitpacked":
            out["tree_mask"].extend(sum(bit << j for j, bit in enumerate(row)) for row in rows)
        elif mask_mode == "full":
            out["tree_mask"].append(rows)
        else:
            out["tree_mask"].extend(v for row in rows for v in row)
    if mask_mode == "full":
        lens = seq_lens.tolist()
        total = n * (sum(lens) if seq_lens_sum is None else seq_lens_sum) + len(lens) * n * n
        out["tree_mask"] = full_mask(out["tree_mask"], lens, total)
    return out


def is_valid_tree(cfg, tree):
    """Every selected candidate in range and reaching the root in at most num_steps hops."""
    valid = []
    for b in range(tree.top_scores_index.shape[0]):
        parents = tree.parent_list[b].tolist()
        selected = tree.top_scores_index[b].tolist()
        ok = all(0 <= g < cfg.num_candidates for g in selected)
        for j in range(1, cfg.num_draft_tokens):
            cur, hops = j, 0
            while cur not in (0, None) and hops < cfg.num_steps:
                cur, hops = parent_node(cfg, parents, selected, cur), hops + 1
            ok = ok and cur == 0
        valid.append(ok)
    return valid


def verify_greedy(cfg, vt, target_predict):
    """SGLang's greedy walk, one request at a time, sibling hops bounded by N per level.

    Bounded on any input: a link outside ``0..N-1`` ends its list. A malformed
    ``retrieve_index`` entry is read as it is: the target at it clamped into ``0..bs*N-1``,
    and a negative one, like the padding, not counted as accepted."""
    n, steps = cfg.num_draft_tokens, cfg.num_steps
    bs = vt.retrieve_index.shape[0]
    tokens = vt.draft_tokens.tolist()
    target = target_predict.flatten().tolist()
    index = vt.retrieve_index.tolist()
    next_token, next_sibling = vt.retrieve_next_token.tolist(), vt.retrieve_next_sibling.tolist()

    def link(c):
        return c if 0 <= c < n else -1

    accept, counts, predicts = [], [], [0] * (bs * n)
    for b in range(bs):
        last, cur, row = index[b][0], 0, [index[b][0]]
        for _ in range(steps):
            want = target[min(max(last, 0), bs * n - 1)]
            c, hops = link(next_token[b][cur]), 0
            while c != -1 and hops < n and tokens[b * n + c] != want:
                c, hops = link(next_sibling[b][c]), hops + 1
            if c == -1 or hops == n:
                break
            if b * n <= last < (b + 1) * n:  # a request commits only within its own row
                predicts[last] = target[last]
            last, cur = index[b][c], c
            row.append(last)
        if b * n <= last < (b + 1) * n:
            predicts[last] = target[last]
        counts.append(sum(flat >= 0 for flat in row[1:]))
        accept.append(row + [-1] * (steps + 1 - len(row)))
    return accept, counts, predicts

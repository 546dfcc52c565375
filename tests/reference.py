"""Slow, loop-based reference of SPEC §3-5, written from the contract alone: the test oracle.

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
    """SPEC §3 as a dict of nested lists, one field per DraftStep field."""
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
    """SPEC §4 as (parent_list, top_scores_index, draft_tokens) nested lists."""
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
    """SPEC §4 for a chain: constant parents and indices, the tokens unchanged."""
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

"""Slow, loop-based reference of semantics.md §9 (sampling verification), written from the contract.

One request at a time over Python lists. The accumulator and the comparisons use 0-d tensors
of the compute dtype (float32, float64 for float64 probabilities) so that they round as the
library's do; the final inverse CDF sums Python floats (float64) one entry at a time.
Nothing here imports eagle_fn internals.
"""

import math

import torch


def compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def sample_row(row, coin):
    """Inverse CDF over the positive entries of ``row`` (0-d tensors): the first index whose
    running sum exceeds ``coin * total``; else the last positive index, else V - 1."""
    mass = [float(v) if v > 0 else 0.0 for v in row]
    total = 0.0
    for v in mass:
        total += v
    u = float(coin) * total
    running, last_positive = 0.0, len(mass) - 1
    for i, v in enumerate(mass):
        running += v
        if v > 0 and running > u:
            return i
    for i, v in enumerate(mass):
        if v > 0:
            last_positive = i
    return last_positive


def children(next_token, next_sibling, node, n):
    """The first n children of ``node`` in link order; links outside 0..n-1 end the list."""
    out, c = [], next_token[node]
    while 0 <= c < n and len(out) < n:
        out.append(c)
        c = next_sibling[c]
    return out


def verify_sampling(
    cfg,
    vt,
    target_probs,
    uniforms,
    final_uniforms,
    threshold_single=1.0,
    threshold_acc=1.0,
    draft_probs=None,
):
    """semantics.md §9 row by row. Returns (accept_index, num_accepted, predicts) as nested lists."""
    n, steps = cfg.num_draft_tokens, cfg.num_steps
    bs = vt.retrieve_index.shape[0]
    dtype = compute_dtype(target_probs.dtype)
    q = target_probs.reshape(bs, n, target_probs.shape[-1]).to(dtype)
    vocab = q.shape[2]
    p = None if draft_probs is None else draft_probs.reshape(q.shape).to(dtype)
    coins = uniforms.to(dtype)
    finals = final_uniforms.to(dtype)
    # Thresholds are rounded to float32 first, as SGLang's kernel takes them.
    thr_acc = torch.tensor(max(threshold_acc, 1e-9), dtype=torch.float32).to(dtype)
    thr_single = torch.tensor(threshold_single, dtype=torch.float32).to(dtype)
    tokens = vt.draft_tokens.tolist()
    index = vt.retrieve_index.tolist()
    next_token = vt.retrieve_next_token.tolist()
    next_sibling = vt.retrieve_next_sibling.tolist()
    zero = torch.zeros((), dtype=dtype)

    def prob(table, b, node, token):
        return table[b, node, token] if 0 <= token < vocab else zero

    accept, counts, predicts = [], [], [0] * (bs * n)
    for b in range(bs):
        cur, path, removed, residual = 0, [0], [], False
        for _ in range(steps):
            kids = children(next_token[b], next_sibling[b], cur, n)
            if p is not None:
                kids = kids[:1]  # a chain node's only child: its first
            coin, acc, chosen, tried = coins[b, cur], zero, None, []
            for c in kids:
                x = tokens[b * n + c]
                qx = prob(q, b, cur, x)
                if p is None:
                    acc = acc + qx
                    ok = bool(coin <= acc / thr_acc) or bool(qx >= thr_single)
                else:  # q(x) = 0 is never accepted: min(1, q(x) / p(x)) = 0
                    ok = bool(qx > 0) and bool(coin * prob(p, b, cur, x) <= qx)
                if ok:
                    chosen = c
                    break
                tried.append(x)
            if chosen is None:  # target-only: tried tokens leave the row; draft: relu(q - p)
                removed = [x for x in tried if 0 <= x < vocab] if p is None else []
                residual = p is not None and bool(tried)
                break
            cur = chosen
            path.append(cur)
        row = [q[b, cur, v] for v in range(vocab)]
        if residual:
            row = [q[b, cur, v] - p[b, cur, v] for v in range(vocab)]
        for x in removed:
            row[x] = zero
        final = sample_row(row, finals[b])
        flat = [index[b][j] for j in path]
        emitted = [tokens[b * n + j] for j in path[1:]] + [final]
        for slot, token in zip(flat, emitted, strict=True):  # walk order: the last write wins
            if b * n <= slot < (b + 1) * n:  # a request writes only its own row
                predicts[slot] = token
        accept.append(flat + [-1] * (steps + 1 - len(flat)))
        counts.append(len(path) - 1)
    return accept, counts, predicts


def target_probs_from_logits(logits, temperature, top_k=None, top_p=None):
    """semantics.md §9's preparation, one row at a time, as nested lists of floats per flat row."""
    bs = temperature.shape[0]
    vocab = logits.shape[-1]
    dtype = compute_dtype(logits.dtype)
    rows = logits.reshape(-1, vocab).to(dtype)
    per = rows.shape[0] // bs if bs else 0
    out = []
    for r in range(rows.shape[0]):
        b = r // per
        x = [-math.inf if math.isnan(v) else v for v in rows[r].tolist()]
        t = float(temperature[b])
        if t <= 0:
            best = max(range(vocab), key=lambda i: (x[i], -i))
            out.append([1.0 if i == best else 0.0 for i in range(vocab)])
            continue
        # Taken into the computation's normal range (semantics.md §9), then into its type.
        info = torch.finfo(dtype)
        t = torch.tensor(min(max(t, info.smallest_normal), info.max), dtype=dtype)
        # NaN as -inf, infinities kept (nan_to_num would clamp them to finite extremes).
        row = torch.where(rows[r].isnan(), -math.inf, rows[r])
        # Divided after the shift to the max, so a tiny t cannot overflow. A row of only -inf
        # (and NaN), or with a +inf: inf - inf is NaN, so softmax gives NaN: no mass.
        probs = torch.softmax((row - row.max()) / t, dim=0).tolist()
        probs = [v if v > 0 else 0.0 for v in probs]
        keep = [True] * vocab
        order = sorted(range(vocab), key=lambda i: (-probs[i], i))
        if top_k is not None:
            k = int(top_k[b])
            if 0 < k < vocab:
                kth = probs[order[k - 1]]
                keep = [v >= kth for v in probs]
        if top_p is not None:
            pp = float(top_p[b])
            kept = [probs[i] if keep[i] else 0.0 for i in range(vocab)]
            total = sum(kept)
            before, boundary = 0.0, None
            for position, i in enumerate(order):
                share = kept[i] / total if total > 0 else 0.0
                if before < pp or pp >= 1 or position == 0:
                    boundary = probs[i]  # the least probable token inside the mass so far
                before += share
            # Every top-k survivor at least as probable as the boundary token stays: ties go
            # together, as SGLang's (flashinfer's) threshold keeps them.
            keep = [keep[i] and probs[i] >= boundary for i in range(vocab)]
        out.append([probs[i] if keep[i] else 0.0 for i in range(vocab)])
    return out

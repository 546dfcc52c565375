"""Memory layouts a serving engine hands over, values unchanged, and the checks that go with
them: a call reads its inputs through their strides, writes none of their memory, and hands
back views of them only where the contract says so."""

import math

import torch

NAMES = ("contiguous", "offset", "rows", "columns", "gapped", "column_major", "expanded")
# Pads and gaps hold values that would change a result if read: a token or index out of
# every range, a score above every probability.
_JUNK = {torch.int64: 10**6 + 7}
_FLOAT_JUNK = 2.0


def layouts(t):
    """``t`` in the layouts an engine hands over, each equal to ``t``: ``{name: tensor}``.

    - ``contiguous``: a fresh copy;
    - ``offset``: the tail of a larger flat buffer (a storage offset);
    - ``rows``: rows from the middle of a ``[max_bs, ...]`` buffer;
    - ``columns``: a column slice of a wider buffer (an engine's per-step buffers);
    - ``gapped``: every other element of the last dim (stride 2);
    - ``column_major``: transposed, made contiguous, transposed back;
    - ``expanded``, only where every row of ``t`` is equal: its first row expanded (stride
      0), as an engine broadcasts a per-batch constant.
    """
    junk = _JUNK.get(t.dtype, _FLOAT_JUNK)
    out = {"contiguous": t.clone()}
    flat = t.new_full((t.numel() + 5,), junk)
    flat[5:] = t.flatten()
    out["offset"] = flat[5:].view(t.shape)
    bs, width = t.shape[0], t.shape[-1]
    rows = t.new_full((bs + 4, *t.shape[1:]), junk)
    rows[2 : bs + 2] = t
    out["rows"] = rows[2 : bs + 2]
    wide = t.new_full((*t.shape[:-1], width + 5), junk)
    wide[..., 2 : width + 2] = t
    out["columns"] = wide[..., 2 : width + 2]
    gapped = t.new_full((*t.shape[:-1], 2 * width), junk)
    gapped[..., ::2] = t
    out["gapped"] = gapped[..., ::2]
    order = list(range(t.dim()))[::-1]
    out["column_major"] = t.permute(order).contiguous().permute(order)
    if bs > 1 and bool((t == t[:1]).all()):
        out["expanded"] = t[:1].clone().expand(t.shape)
    return out


def layout_cases(tensors):
    """``(name, tensors)`` pairs: every tensor in one layout, for each of :data:`NAMES` (a
    tensor without that layout, ``expanded`` with unequal rows, stays contiguous), then two
    mixes, tensor ``i`` in layout ``i + shift``."""
    each = [layouts(t) for t in tensors]
    for name in NAMES:
        yield name, [views.get(name, views["contiguous"]) for views in each]
    for shift in (1, 2):
        mixed = [views.get(NAMES[(i + shift) % 6]) for i, views in enumerate(each)]
        yield f"mixed{shift}", mixed


def one_buffer_per_list(lists):
    """A draft loop's per-step lists as an engine keeps them: each list's entries side by side
    in one preallocated ``[bs + 2, width + 3]`` buffer (junk in the pads and the rows past
    ``bs``), each entry a view of it in its own shape. Returns ``(buffers, view_lists)``."""
    buffers, view_lists = [], []
    for entries in lists:
        bs, widths = entries[0].shape[0], [math.prod(t.shape[1:]) for t in entries]
        junk = _JUNK.get(entries[0].dtype, _FLOAT_JUNK)
        buffer = entries[0].new_full((bs + 2, sum(widths) + 3), junk)
        views, start = [], 1
        for t, width in zip(entries, widths, strict=True):
            buffer[:bs, start : start + width] = t.reshape(bs, width)
            views.append(buffer[:bs, start : start + width].view(t.shape))
            start += width
        buffers.append(buffer)
        view_lists.append(views)
    return buffers, view_lists


def call_untouched(fn, inputs, *args, **kwargs):
    """``fn(*args, **kwargs)``, asserting that no byte under ``inputs`` changed (pads and
    gaps included: a kernel writing through a wrong stride would land there)."""
    before = [(t, _storage_bytes(t).clone()) for t in inputs]
    out = fn(*args, **kwargs)
    for i, (t, saved) in enumerate(before):
        assert torch.equal(_storage_bytes(t), saved), f"input {i} was written"
    return out


def _storage_bytes(t):
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def aliased_fields(result, inputs):
    """The fields of a NamedTuple result that lie in the memory of one of ``inputs``."""
    memory = {t.untyped_storage().data_ptr() for t in inputs if t.numel() > 0}
    return {
        name
        for name, field in zip(result._fields, result, strict=True)
        if field.numel() > 0 and field.untyped_storage().data_ptr() in memory
    }

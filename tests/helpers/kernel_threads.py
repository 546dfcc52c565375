"""Threads launching eagle_fn's kernels at once, for a test that runs this in a process of its
own: before the launch lock, the interpreter's shared grid state crashed the process."""

import threading

import torch

import eagle_fn
import eagle_fn.kernels
from helpers.drafts import step_inputs
from helpers.kernel_support import KERNEL_DEVICE
from helpers.threads import in_threads


def racing_launches(threads=4, calls_each=8):
    """Each thread's select_top_k kernel calls against the torch function's: what differed
    or raised, as a list (empty when every call was exact)."""
    cfg, gen = eagle_fn.DraftConfig(2, 3, 6), torch.Generator().manual_seed(0)
    inputs = [
        (cfg, 1, *(t.to(KERNEL_DEVICE) for t in step_inputs(cfg, 1, bs, gen)))
        for bs in (1, 2, 3, 4)
    ]
    failures, start = [], threading.Barrier(threads)

    def run(offset):
        start.wait()
        for i in range(calls_each):
            args = inputs[(offset + i) % len(inputs)]
            try:
                got, want = eagle_fn.kernels.select_top_k(*args), eagle_fn.select_top_k(*args)
                if not all(torch.equal(x, y) for x, y in zip(got, want, strict=True)):
                    failures.append(("wrong", offset, i))
            except Exception as error:  # any error of a thread is the finding
                failures.append((type(error).__name__, str(error)[:80]))

    in_threads(run, threads)
    return failures

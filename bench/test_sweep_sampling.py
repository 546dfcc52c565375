"""bench/sweep_sampling.py's rows, with the GPU parts replaced: it times only on CUDA."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")


def test_a_failing_shape_gets_its_error_and_the_others_their_rows(monkeypatch, capsys):
    import sweep_sampling  # the kernels' import: the interpreter is on in this process
    from bench_sampling import sampling_inputs

    # CPU inputs; the second shape fails as a GPU launch might.
    monkeypatch.setattr(sweep_sampling, "VOCABS", (32000,))
    monkeypatch.setattr(
        sweep_sampling,
        "sampling_inputs",
        lambda case, vocab, device: sampling_inputs(case, vocab, "cpu"),
    )
    shapes = sweep_sampling.SHAPES
    broken, unstable, quickest = shapes[1], shapes[0], shapes[5]
    assert (broken[0], unstable[0], quickest[0]) == (False, False, True)  # SPLIT
    # With L2 flushed, one launch takes 2 µs, split 3; the quickest split shape 0.5, the
    # unstable one 0.1. Back to back, the one-launch shapes' rows in L2 make them quickest.
    flushed = {quickest: 0.5, unstable: 0.1}

    def measure(shape, args, want):
        if shape == broken:
            raise RuntimeError("out of resources")
        us = flushed.get(shape, 3.0 if shape[0] else 2.0)
        return ((us if shape[0] else 0.25), us), True, shape != unstable

    monkeypatch.setattr(sweep_sampling, "measure", measure)
    monkeypatch.setattr(sweep_sampling, "baselines", lambda device: "baselines")
    monkeypatch.setattr(sweep_sampling, "l2_size", lambda device: "L2")

    def at_scale(device, best):
        assert best == {  # the table's picks
            (32000, "fastest"): ((0.5, 0.5), quickest),
            (32000, "one launch"): ((0.25, 2.0), shapes[2]),
        }
        raise torch.cuda.OutOfMemoryError("2.1 GB")

    monkeypatch.setattr(sweep_sampling, "at_scale", at_scale)
    monkeypatch.setattr(sweep_sampling, "kernel_times", lambda device: "kernel times")
    default = tuple(getattr(sweep_sampling.kernel, name) for name in sweep_sampling.KNOBS)
    sweep_sampling.main()
    table, after = capsys.readouterr().out.split("\n\n")
    rows = table.splitlines()[2:]
    assert len(rows) == len(shapes)
    cells = " | ".join(str(x) for x in broken)
    assert rows[1] == f"| 32000 | {cells} | failed: RuntimeError: out of resources |"
    assert rows[0].endswith(" | 0.25 | 0.10 | True | False |")
    assert rows[5].endswith(" | 0.50 | 0.50 | True | True |")
    assert rows[2].endswith(" | 0.25 | 2.00 | True | True |")

    def knobs(shape):
        return ", ".join(f"{k}={v}" for k, v in zip(sweep_sampling.KNOBS, shape, strict=True))

    # The unstable shape, though quicker, is not chosen; the first of equal times is; the
    # times with L2 flushed decide.
    assert after.splitlines() == [
        f"V 32000, fastest: 0.50 µs with L2 flushed first (0.50 µs without) at {knobs(quickest)}",
        f"V 32000, one launch: 2.00 µs with L2 flushed first (0.25 µs without) at "
        f"{knobs(shapes[2])}",
        "baselines",
        "L2",
        "at_scale: failed: OutOfMemoryError: 2.1 GB",  # the line after it still comes
        "kernel times",
    ]
    assert tuple(getattr(sweep_sampling.kernel, name) for name in sweep_sampling.KNOBS) == default


def test_a_shape_is_measured_with_its_knobs_set(monkeypatch):
    import sweep_sampling
    from bench_sampling import sampling_inputs
    from cases import TREE_TARGET

    seen = []

    def replay(us):
        def timing(fn, args):
            seen.append(tuple(getattr(sweep_sampling.kernel, n) for n in sweep_sampling.KNOBS))
            return us

        return timing

    monkeypatch.setattr(sweep_sampling, "graph_replay_us", replay(2.5))
    monkeypatch.setattr(sweep_sampling, "flushed_replay_us", replay(4.0))
    monkeypatch.setattr(sweep_sampling, "REPEATS", 1)
    case = TREE_TARGET.at_bs(2)  # its draft tokens lie below 32000
    args = (case.config, *sampling_inputs(case, 32000, "cpu"))
    want = sweep_sampling.eagle_fn.verify_sampling(*args)
    shape = (False, 4, 1, 4096, 4, None, 64, 3)  # prefetched walk (N 16 <= 64), pipelined
    with monkeypatch.context() as patch:
        for name in sweep_sampling.KNOBS:  # restored after: measure leaves the shape set
            patch.setattr(sweep_sampling.kernel, name, getattr(sweep_sampling.kernel, name))
        assert sweep_sampling.measure(shape, args, want) == ((2.5, 4.0), True, True)
        assert seen == [shape, shape]


def test_help_describes_the_sweep_without_running_it():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "bench/sweep_sampling.py", "--help"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": "src:bench"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "launch shapes on a GPU" in done.stdout
    assert "| V |" not in done.stdout  # no table: nothing was measured


def test_baselines_time_the_fill_and_an_empty_call(monkeypatch):
    import sweep_sampling

    captured = []

    def replay(fn, args):
        captured.append(fn(*args))
        return 1.25 * len(captured)

    monkeypatch.setattr(sweep_sampling, "graph_replay_us", replay)
    monkeypatch.setattr(sweep_sampling, "flushed_replay_us", replay)
    line = sweep_sampling.baselines(torch.device("cpu"))
    fill, fill_flushed, empty, empty_flushed = captured
    assert fill.dtype == fill_flushed.dtype == torch.int32
    assert fill.tolist() == fill_flushed.tolist() == [0] * sweep_sampling.TREE_TARGET.bs
    assert empty is empty_flushed is None
    assert line == (
        "the arrival counters' zero fill alone: 2.50 µs with L2 flushed first (1.25 µs "
        "without); an empty call: 5.00 µs with L2 flushed first (3.75 µs without)"
    )


def test_the_l2_line_gives_its_size_and_the_write_that_evicts_it(monkeypatch):
    import sweep_sampling

    asked = []
    props = SimpleNamespace(L2_cache_size=50 << 20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: asked.append(d) or props)
    device = torch.device("cuda", 1)
    assert sweep_sampling.l2_size(device) == "L2: 50.0 MiB, overwritten with 256 MiB"
    assert asked == [device]


@pytest.fixture
def on_cpu(monkeypatch):
    """The sweep module, its inputs built on the CPU and its largest vocabulary 32000."""
    import sweep_sampling
    from bench_sampling import sampling_inputs

    monkeypatch.setattr(sweep_sampling, "VOCABS", (5, 32000))
    monkeypatch.setattr(
        sweep_sampling,
        "sampling_inputs",
        lambda case, vocab, device: sampling_inputs(case, vocab, "cpu"),
    )
    return sweep_sampling


def test_at_scale_times_the_default_shape_as_the_batch_grows(monkeypatch, on_cpu):
    sweep_sampling = on_cpu
    # bs 1 and 2 on the CPU stand in for bs 64 to 256 on a GPU.
    monkeypatch.setattr(sweep_sampling, "SCALES", (1, 2))
    monkeypatch.setattr(sweep_sampling, "VOCABS", (40000, 32000))  # above the draft tokens
    default = tuple(getattr(sweep_sampling.kernel, name) for name in sweep_sampling.KNOBS)
    single = sweep_sampling.SHAPES[2]
    assert (default[0], single[0]) == (True, False)  # SPLIT
    measured = []

    def measure(shape, args, want):
        bs = args[1].retrieve_index.shape[0]
        measured.append((args[2].shape[-1], bs, shape))
        expected = sweep_sampling.eagle_fn.verify_sampling(*args)
        assert all(torch.equal(a, b) for a, b in zip(want, expected, strict=True))
        sweep_sampling.set_shape(shape)  # as measure does: at_scale restores the default
        return (0.01, 0.05 if bs == 1 else 0.256), bs == 1, True

    monkeypatch.setattr(sweep_sampling, "measure", measure)
    monkeypatch.setattr(sweep_sampling, "gpu_rate", lambda device: 4.3e12)  # an H200's
    # At V 32000 the fastest shape is the default: timed once. The picks come at bs 2 alone.
    split = sweep_sampling.SHAPES[5]
    assert split[0]  # SPLIT
    assert split != default
    best = {
        (40000, "fastest"): ((0.1, 0.2), split),
        (32000, "fastest"): ((0.1, 0.1), default),
        (32000, "one launch"): ((0.1, 0.3), single),
    }
    lines = sweep_sampling.at_scale(torch.device("cpu"), best)
    assert not isinstance(lines, (str, list))  # printed as they come
    lines = list(lines)
    assert measured == [
        (40000, 1, default),
        (40000, 2, default),
        (40000, 2, split),
        (32000, 1, default),
        (32000, 2, default),
        (32000, 2, single),
    ]
    assert tuple(getattr(sweep_sampling.kernel, name) for name in sweep_sampling.KNOBS) == default
    # With L2 flushed (the figure judged; 0.01 µs without, within any bound): bs 2 at
    # V 32000: 2 x 32000 x 4 bytes in 0.256 µs: 1 TB/s; twice the read at 4.3 TB/s: 0.119 µs.
    # bs 1 at V 40000: 160 kB in 0.05 µs, 3.2 TB/s; the bound 0.074 µs.
    bound = "twice their read at 4.3 TB/s: 0.1 µs, over"
    knobs = sweep_sampling.knobs(single)
    times = "0.26 µs with L2 flushed first (0.01 µs without)"
    assert lines[4:] == [
        f"bs 2, V 32000, the default shape: {times} (equal: False, stable: True), the final "
        f"rows read at 1.00 TB/s; {bound}",
        f"bs 2, V 32000, one launch ({knobs}): {times} (equal: False, stable: True), the "
        f"final rows read at 1.00 TB/s; {bound}",
    ]
    assert lines[0] == (
        "bs 1, V 40000, the default shape: 0.05 µs with L2 flushed first (0.01 µs without) "
        "(equal: True, stable: True), the final rows read at 3.20 TB/s; twice their read at "
        "4.3 TB/s: 0.1 µs, within"
    )


def test_at_scale_names_no_bound_where_the_gpus_rate_is_not_known(monkeypatch, on_cpu):
    sweep_sampling = on_cpu
    monkeypatch.setattr(sweep_sampling, "SCALES", (2,))
    monkeypatch.setattr(sweep_sampling, "VOCABS", (32000,))
    monkeypatch.setattr(sweep_sampling, "measure", lambda shape, args, want: ((1, 2), True, True))
    assert sweep_sampling.gpu_rate(torch.device("cpu")) is None  # no GPU: no rate
    assert list(sweep_sampling.at_scale(torch.device("cpu"))) == [
        "bs 2, V 32000, the default shape: 2.00 µs with L2 flushed first (1.00 µs without) "
        "(equal: True, stable: True), the final rows read at 0.13 TB/s; no DRAM rate known "
        "for this GPU, no bound"
    ]


def test_at_scale_keeps_the_other_cases_when_one_fails(monkeypatch, on_cpu):
    sweep_sampling = on_cpu
    monkeypatch.setattr(sweep_sampling, "SCALES", (1, 2))
    monkeypatch.setattr(sweep_sampling, "VOCABS", (32000,))
    build = sweep_sampling.sampling_inputs

    def inputs(case, vocab, device):
        if case.bs == 1:
            raise torch.cuda.OutOfMemoryError("2.1 GB")
        return build(case, vocab, device)

    def measure(shape, args, want):
        raise RuntimeError("out of resources")

    monkeypatch.setattr(sweep_sampling, "sampling_inputs", inputs)
    monkeypatch.setattr(sweep_sampling, "measure", measure)
    assert list(sweep_sampling.at_scale(torch.device("cpu"))) == [
        "bs 1, V 32000: failed: OutOfMemoryError: 2.1 GB",
        "bs 2, V 32000, the default shape: failed: RuntimeError: out of resources",
    ]


def test_kernel_times_name_each_kernel_of_the_default_shape(monkeypatch, on_cpu):
    sweep_sampling = on_cpu
    monkeypatch.setattr(sweep_sampling, "TREE_TARGET", sweep_sampling.TREE_TARGET.at_bs(2))
    profiled = []

    def device_us(fn, args):
        profiled.append((fn, args[0], args[2].shape))
        return {"fill " + "x" * 70: 1.25, "verify_sampling_kernel": 6.5}

    monkeypatch.setattr(sweep_sampling, "device_us_per_call", device_us)
    line = sweep_sampling.kernel_times(torch.device("cpu"))
    config = sweep_sampling.TREE_TARGET.config
    assert profiled == [(sweep_sampling.kernel.verify_sampling, config, (2, 16, 32000))]
    name = ("fill " + "x" * 70)[:60]  # long kernel names are cut
    assert line == (
        f"V 32000, the default shape, device µs a call: {name} 1.25; "
        "verify_sampling_kernel 6.50; in all 7.75"
    )

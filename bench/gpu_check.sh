#!/usr/bin/env bash
# The GPU check, in one go: the CUDA tests, the compact CUDA benchmark run, its rendered section.
#
#   PYTHONPATH=src bash bench/gpu_check.sh     # from the repository root; results in $OUT
#
# Carry .triton-cache with it where scripts/triton_cache.py made one at this commit
# (docs/benchmarks.md): the test step then loads most kernels instead of compiling them.
# Made for a machine with one GPU, torch, triton, pytest, hypothesis and pytest-benchmark
# already installed, no network and nothing to install: it runs the source tree
# (PYTHONPATH=src) and needs no matplotlib. Every step has a time limit, and a step that fails
# or runs out of time does not stop the next. The limits sum to 760 s; each is also cut to
# what is left of GPU_CHECK_SECONDS (570 by default) after the steps before it, less 10 s of
# grace for a step stopped by its limit, so the script ends within that: give the device call
# 590 s. The last step, the rest of the suite, takes what the others leave. The steps run in the order the open issues need their results, so a cut run loses
# the least. Writes under $OUT (a new temporary folder when unset) 7 files, within the device
# tool's 8:
#   summary.txt         the versions, the GPU, each step's exit status, seconds and last line
#   tests.log           pytest on the CUDA and kernel tests, bench/test_gpu.py, the rest last
#   demo.log            python -m eagle_fn --device cuda
#   bench.log           the compact benchmark run on CUDA, its rendering, the issues' targets
#                       against it (bench/targets.py), bench/sweep_sampling.py
#   launch.log          bench/launch_overhead.py: each fused stage's host time, split up
#   bench_cuda.json     the benchmark run's --benchmark-json (render it into docs/benchmarks.md
#                       with bench/report.py --device cuda --from-json)
#   benchmarks_cuda.md  the rendered CUDA section alone
# A step's exit status: 0 passed; pytest's 1 (tests failed), 2 (interrupted), 5 (nothing
# collected); 124 stopped by its limit (SIGINT, reports still written); 137 killed 10 s later.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-python}
export PYTHONPATH=${PYTHONPATH:-src}
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
export PYTHONUNBUFFERED=1  # a step killed after its grace keeps every line it printed
SUMMARY=$OUT/summary.txt
DEADLINE=$(($(date +%s) + ${GPU_CHECK_SECONDS:-570}))
# Kernels compiled ahead on a CPU (scripts/triton_cache.py), where the call carried them:
# the tests' launches load those instead of compiling. The entry count before and after the
# tests says how many were compiled here all the same (Inductor's kernels and Triton's C
# launchers included).
if [ -d .triton-cache ]; then
    export TRITON_CACHE_DIR=$PWD/.triton-cache
fi
cache_entries() {
    local dir=${TRITON_CACHE_DIR:-}
    [ -n "$dir" ] || { echo "triton cache: none carried"; return; }
    echo "triton cache $dir: $(find "$dir" -mindepth 1 -maxdepth 1 -type d | wc -l) entries $1"
}

# step NAME LOG SECONDS COMMAND...: runs COMMAND with a time limit (cut to the time left),
# its output added to $OUT/LOG, its last line copied into the summary. SIGINT first, so that
# pytest still writes its reports (the benchmark json too).
step() {
    local name=$1 log=$2 limit=$3 start rc left lines
    shift 3
    start=$(date +%s)
    left=$((DEADLINE - start - 10))
    if [ "$left" -lt 5 ]; then
        echo "step $name: skipped, no time left" >>"$SUMMARY"
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    lines=$(cat "$OUT/$log" 2>/dev/null | wc -l)
    timeout -s INT -k 10 "$limit" "$@" >>"$OUT/$log" 2>&1
    rc=$?
    echo "step $name: exit $rc after $(($(date +%s) - start)) s (limit $limit s)" >>"$SUMMARY"
    tail -n +"$((lines + 1))" "$OUT/$log" | grep -v '^[[:space:]]*$' | tail -n 1 |
        sed 's/^/    last line: /' >>"$SUMMARY"
}

{
    echo "gpu_check.sh, $(date -u '+%Y-%m-%d %H:%M:%S') UTC, commit $(git rev-parse --short HEAD 2>/dev/null)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    timeout 30 "$PY" - <<'EOF' 2>&1
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name())
for name in ("triton", "pytest", "hypothesis", "pytest_benchmark", "eagle_fn", "eagle_fn.kernels"):
    try:
        module = __import__(name, fromlist=["_"])
        print(name, getattr(module, "__version__", ""), getattr(module, "__file__", ""))
    except Exception as error:
        print(name, "NOT IMPORTABLE:", type(error).__name__, error)
EOF
    # Triton's key parts here, then those the carried cache was compiled under: they must match.
    timeout 30 "$PY" scripts/triton_cache.py --step key 2>&1 | sed 's/^/here: /'
    if [ -d .triton-cache ]; then  # carried, not a TRITON_CACHE_DIR the machine set
        sed 's/^/cache: /' "$TRITON_CACHE_DIR/key.txt" 2>&1
        timeout 30 "$PY" scripts/triton_cache.py "$TRITON_CACHE_DIR" --step place 2>&1  # moved
    fi
    cache_entries "at the start"
} >"$SUMMARY"

# (a) The tests marked gpu (tests/conftest.py: those on CUDA tensors and those of the Triton
# kernels, which compile one kernel per shape variant for real), then the CUDA checks of the
# benchmark's own measuring code (a separate run: tests/ and bench/ each have a conftest.py,
# and one pytest process cannot import both). On 14 processes where pytest-xdist is
# installed. Both H200 runs of 2026-11-30 ran out of time in the tests; the second cut this
# step at 150 s with about 1% left (its longest test took 114 s), hence 210. The other tests,
# which CI and the CPU torch matrix run too, come last (step (f)). pytest-timeout, where
# installed, fails one stuck test with its traceback instead of letting the step's limit
# hide which one it was; -v names every finished test, so the unfinished ones can be listed.
PARALLEL=()
"$PY" -c "import xdist" 2>/dev/null && PARALLEL+=(-n 14)
"$PY" -c "import pytest_timeout" 2>/dev/null && PARALLEL+=(--timeout=180)
step tests_gpu tests.log 210 "$PY" -m pytest tests -v -p no:cacheprovider "${PARALLEL[@]}" \
    -rfE --durations=15 -m gpu
cache_entries "after the gpu tests" >>"$SUMMARY"
step bench_checks tests.log 15 "$PY" -m pytest bench/test_gpu.py -q -p no:cacheprovider

# The README's demo on the GPU: every section, the cost table with kernels per call.
step demo demo.log 35 "$PY" -m eagle_fn --device cuda

# (b) The compact benchmark run on CUDA, its modules in the order the issues' targets need
# them (a run cut short by its limit still has the kernel rows). bench_compile_options.py
# measures CPU compile options only (and needs torch.fx.experimental.dynamic_spec): left out.
step bench bench.log 120 "$PY" -m pytest bench/bench_tree.py bench/bench_verify.py \
    bench/bench_steps.py bench/bench_sampling.py bench/bench_chain.py bench/bench_worker.py \
    -m report --benchmark-only -q -p no:cacheprovider \
    --device=cuda --benchmark-json="$OUT/bench_cuda.json" --benchmark-max-time=0.05 \
    --benchmark-columns=median,iqr,rounds

# (c) The CUDA section alone (rendered into a scratch copy of docs/benchmarks.md, not kept:
# render bench_cuda.json into the page where the results are taken in).
PAGE=$(mktemp)
cp docs/benchmarks.md "$PAGE"
step render bench.log 15 "$PY" bench/report.py --device cuda --from-json "$OUT/bench_cuda.json" \
    --markdown "$PAGE" --section-out "$OUT/benchmarks_cuda.md"
rm -f "$PAGE"
# Issues 10's and 11's targets against that run, met or not; its last line, the totals, goes
# into the summary (10 s from step (f)).
step targets bench.log 10 "$PY" bench/targets.py --from-json "$OUT/bench_cuda.json"

# (d) Where the fused stages' host time goes (issue 10's 50 µs target): Python or launch.
step launch launch.log 30 env PYTHONPATH="src:bench" "$PY" bench/launch_overhead.py

# (e) The fused sampling kernel's launch shapes, appended to bench.log: 28 shapes at two
# vocabularies (up to 56 compiles where no cache was carried), each replayed back to back and
# with L2 flushed first (50 replays, each after a 256 MiB write: a few ms a shape, worked out,
# not timed), then the GPU's L2 size, the default shape at bs 64, 128 and 256 and at bs 256
# the table's fastest and fastest one-launch shapes (up to 2.1 GB of target rows, made on the
# CPU), and the default's kernels' own device time (one profiler session, last). Its limit
# grew by 90 s, taken from (f).
step sweep bench.log 130 env PYTHONPATH="src:bench" "$PY" bench/sweep_sampling.py

# (f) The rest of the suite, which CI and the CPU torch matrix also run: least needed, so
# last. On 2026-12-04 (the cache carried) the steps before it took 235 s, and the whole rest,
# CPU inductor compiles included, 217 s on 14 processes; a 40 s limit without the compiled
# tests had stopped it unfinished.
step tests_rest tests.log 195 "$PY" -m pytest tests -v -p no:cacheprovider "${PARALLEL[@]}" \
    -rfE --durations=15 -m "not gpu"

cache_entries "at the end" >>"$SUMMARY"
cat "$SUMMARY"
echo "results in $OUT"

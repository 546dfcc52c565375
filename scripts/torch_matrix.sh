#!/usr/bin/env bash
# Runs the test suite once per torch release, each in its own virtual environment, and prints
# a summary table. By hand, not in CI (the PyPI wheels of torch are CUDA builds of a few GB;
# they run on a CPU too). docs/torch-versions.md describes it and holds the last results.
#
# Usage: scripts/torch_matrix.sh [VERSION ...] [-- PYTEST_ARG ...]
#   VERSION                 torch releases to test (default: 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
#   PYTEST_ARG              passed on to pytest (default: the whole suite, -q)
# Environment:
#   MATRIX_DIR              where the venvs live, one torch-<VERSION> each (default: .matrix/)
#   TORCH_VENV_<V>          an existing venv for one release, <V> with dots as underscores,
#                           e.g. TORCH_VENV_2_13_0=~/.venvs/torch213; used as it is
#   PYTHON                  the interpreter new venvs are made from (default: python3)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
matrix_dir=${MATRIX_DIR:-$repo/.matrix}
python=${PYTHON:-python3}

versions=()
while [[ $# -gt 0 && $1 != "--" ]]; do
    versions+=("$1")
    shift
done
[[ $# -gt 0 ]] && shift  # the "--"
pytest_args=("$@")
[[ ${#versions[@]} -eq 0 ]] && versions=(2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
[[ ${#pytest_args[@]} -eq 0 ]] && pytest_args=(-q)

mkdir -p "$matrix_dir/logs"

# The numpy requirement the installed Triton's interpreter can run with.
numpy_for_triton='
try:
    import triton
    old = tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 8)
except ImportError:
    old = False
print("numpy<2.4" if old else "numpy")'

# The venv's python for a release: the TORCH_VENV_<V> override, else $MATRIX_DIR/torch-<V>,
# made (or completed) when its torch is not that release.
venv_python() {
    local version=$1 override="TORCH_VENV_${1//./_}"
    if [[ -n ${!override:-} ]]; then
        echo "${!override}/bin/python"
        return
    fi
    local venv=$matrix_dir/torch-$version
    if ! installed_torch "$venv/bin/python" | grep -qx "$version"; then
        echo "making $venv (torch==$version)" >&2
        [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
        # The test extra of pyproject.toml, less its linters: the suite needs no more.
        "$venv/bin/python" -m pip install --quiet "torch==$version" \
            "pytest>=8" "hypothesis>=6.100" >&2
    fi
    # Every time (pip does nothing when it is satisfied), a venv made by hand included:
    # without NumPy, Triton's interpreter cannot import and the kernel tests fail to collect.
    # Triton 3.6 (torch 2.11's) turns scalars into ints with int(array), which numpy 2.4
    # refuses: its kernel tests would all skip. 3.7 (2.12's) squeezes the array first, as 3.8
    # does, but gets the older numpy too.
    "$venv/bin/python" -m pip install --quiet "$("$venv/bin/python" -c "$numpy_for_triton")" >&2
    echo "$venv/bin/python"
}

# The release of the torch a python imports, local build suffix (+cpu, +cu130) dropped.
installed_torch() {
    [[ -x $1 ]] || return 0
    "$1" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true
}

# passed failed errors skipped, from a pytest JUnit XML report.
junit_counts() {
    "$1" - "$2" <<'EOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
total = {key: sum(int(s.get(key, 0)) for s in suites)
         for key in ("tests", "failures", "errors", "skipped")}
passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
print(passed, total["failures"], total["errors"], total["skipped"])
EOF
}

rows=()
status=0
for version in "${versions[@]}"; do
    py=$(venv_python "$version")
    torch_version=$("$py" -c 'import torch; print(torch.__version__)')
    log=$matrix_dir/logs/pytest-$version.log
    junit=$matrix_dir/logs/junit-$version.xml
    echo "== torch $torch_version ($py): log in $log" >&2
    start=$(date +%s)
    set +e
    # No TORCHINDUCTOR_CACHE_DIR: the root conftest.py gives every session a fresh inductor
    # cache, so no release (or older code) hands its compiled artifacts to another.
    (cd "$repo" && PYTHONPATH=src "$py" -m pytest -p no:cacheprovider --junitxml="$junit" \
        "${pytest_args[@]}") >"$log" 2>&1
    rc=$?
    set -e
    seconds=$(($(date +%s) - start))
    if [[ -s $junit ]]; then
        read -r passed failed errors skipped < <(junit_counts "$py" "$junit")
    else
        passed=- failed=- errors=- skipped=-
    fi
    [[ $rc -ne 0 ]] && status=1
    rows+=("$version $torch_version $passed $failed $errors $skipped $seconds $rc")
    tail -n 3 "$log" >&2
done

printf '\n| %-8s | %-14s | %6s | %6s | %6s | %7s | %7s | %3s |\n' \
    torch build passed failed errors skipped seconds rc
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' ---------- ---------------- -------: -------: -------: \
    --------: --------: ----:
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086  # the row's fields are split on purpose
    printf '| %-8s | %-14s | %6s | %6s | %6s | %7s | %7s | %3s |\n' $row
done
exit $status

#!/usr/bin/env bash
# Chainer's own tests of the functions and links chainermn_torus.compute replaces, from a
# checkout of Chainer v7.8.1 (git clone -b v7.8.1 https://github.com/chainer/chainer), run
# twice: on Chainer's numpy and with the oneDNN path on. Prints the tests that fail with
# oneDNN and not on numpy (none is the goal: docs/compute.md, "Chainer's semantics"), and
# exits 1 if there is any. GPU, cuDNN and ChainerX cases skip or fail alike in both runs
# (this is a CPU build); iDeep's ("use_ideep": "always") fail alike too: ideep4py has no
# build for this Python.
#   bash scripts/chainer_function_tests.sh CHAINER_CHECKOUT [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: chainer_function_tests.sh CHAINER_CHECKOUT [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
py=${PY:-$here/.venv/bin/python}
t=$src/tests/chainer_tests
files=(functions_tests/activation_tests/test_relu.py
       functions_tests/connection_tests/test_convolution_2d.py
       functions_tests/connection_tests/test_deconvolution_2d.py
       functions_tests/connection_tests/test_dilated_convolution_2d.py
       functions_tests/connection_tests/test_depthwise_convolution_2d.py
       functions_tests/pooling_tests/test_max_pooling_2d.py
       functions_tests/pooling_tests/test_average_pooling_2d.py
       functions_tests/normalization_tests/test_local_response_normalization.py
       functions_tests/normalization_tests/test_batch_normalization.py
       links_tests/connection_tests/test_convolution_2d.py
       links_tests/connection_tests/test_deconvolution_2d.py
       links_tests/normalization_tests/test_batch_normalization.py)
paths=()
for f in "${files[@]}"; do
    if [ -f "$t/$f" ]; then paths+=("$t/$f"); else echo "[chainer tests] not in the checkout: $f" >&2; fi
done
[ ${#paths[@]} -gt 0 ] || { echo "[chainer tests] no test file found under $t" >&2; exit 2; }
for mode in numpy onednn; do
    (cd "$src" && CHAINER_TESTS_COMPUTE=$mode CHAINERMN_TORUS_QUIET=1 \
        PYTHONPATH="$here/scripts:$here${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" -m pytest -q -p no:cacheprovider -p chainer_tests_mode -m "not gpu and not cudnn" \
        "${paths[@]}" > "$out/$mode.log" 2>&1) || true
    grep -E '^(FAILED|ERROR) ' "$out/$mode.log" | sed 's/ - .*//' | sort > "$out/$mode.failed" || true
    echo "[chainer tests] $mode: $(tail -n 1 "$out/$mode.log")"
done
comm -13 "$out/numpy.failed" "$out/onednn.failed" > "$out/onednn-only.failed"
n=$(wc -l < "$out/onednn-only.failed")
echo "[chainer tests] failing with oneDNN and not on numpy: $n (logs in $out)"
cat "$out/onednn-only.failed"
[ "$n" = 0 ]

#!/usr/bin/env bash
# Chainer's own tests of the functions and links chainermn_torus.compute replaces, and of the
# graph and device machinery, from a checkout of Chainer v7.8.1 (git clone -b v7.8.1
# https://github.com/chainer/chainer), run three times: on Chainer's numpy, with the oneDNN
# path on, and with oneDNN and everything --gpu-to-cpu installs (scripts/chainer_tests_mode.py).
# Prints the tests that fail with oneDNN and not on numpy, and those that fail with
# --gpu-to-cpu's patches and not without them (none is the goal of each: docs/compute.md,
# "Chainer's semantics"; docs/cluster.md, "Scripts written for GPUs"), and exits 1 if there
# is any. A pytest run that does not run the tests (exit code 2 or more: a usage error, an
# error while collecting) stops the script. GPU, cuDNN and ChainerX cases skip or fail alike
# in every run (this is a CPU build); iDeep's ("use_ideep": "always") fail alike too:
# ideep4py has no build for this Python.
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
       links_tests/normalization_tests/test_batch_normalization.py
       test_link.py test_variable.py test_function_node.py test_device.py
       backends_tests/test_cpu.py backends_tests/test_cuda.py backends_tests/test_intel64.py
       backends_tests/test_chainerx.py)
paths=()
for f in "${files[@]}"; do
    if [ -f "$t/$f" ]; then paths+=("$t/$f"); else echo "[chainer tests] not in the checkout: $f" >&2; fi
done
[ ${#paths[@]} -gt 0 ] || { echo "[chainer tests] no test file found under $t" >&2; exit 2; }
for mode in numpy onednn gpu_to_cpu; do
    compute=$mode gpu=0
    [ "$mode" = gpu_to_cpu ] && compute=onednn gpu=1
    rc=0
    (cd "$src" && CHAINER_TESTS_COMPUTE=$compute CHAINER_TESTS_GPU_TO_CPU=$gpu \
        CHAINERMN_TORUS_QUIET=1 PYTHONPATH="$here/scripts:$here${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" -m pytest -q -p no:cacheprovider -p chainer_tests_mode -m "not gpu and not cudnn" \
        "${paths[@]}" > "$out/$mode.log" 2>&1) || rc=$?
    if [ "$rc" -gt 1 ]; then  # 1: some tests failed; more: the tests did not run
        echo "[chainer tests] $mode: pytest exited $rc without running the tests:" >&2
        tail -n 20 "$out/$mode.log" >&2
        exit 2
    fi
    grep -E '^(FAILED|ERROR) ' "$out/$mode.log" | sed 's/ - .*//' | sort > "$out/$mode.failed" || true
    echo "[chainer tests] $mode: $(tail -n 1 "$out/$mode.log")"
done
comm -13 "$out/numpy.failed" "$out/onednn.failed" > "$out/onednn-only.failed"
comm -13 "$out/onednn.failed" "$out/gpu_to_cpu.failed" > "$out/gpu-to-cpu-only.failed"
n=$(wc -l < "$out/onednn-only.failed")
g=$(wc -l < "$out/gpu-to-cpu-only.failed")
echo "[chainer tests] failing with oneDNN and not on numpy: $n (logs in $out)"
cat "$out/onednn-only.failed"
echo "[chainer tests] failing with --gpu-to-cpu's patches and not without them: $g"
cat "$out/gpu-to-cpu-only.failed"
[ "$n" = 0 ] && [ "$g" = 0 ]

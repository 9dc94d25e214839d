#!/usr/bin/env bash
# Chainer's own tests of the functions and links chainermn_torus.compute replaces, and of the
# graph and device machinery, from a checkout of Chainer v7.8.1 (git clone -b v7.8.1
# https://github.com/chainer/chainer), run three times:
#   plain       plain Chainer: the baseline (this package not imported)
#   onednn      the replacements on (scripts/chainer_tests_mode.py): expected values computed
#               with them off, small arrays forced through numba's kernels, every call that
#               reached a oneDNN primitive or a kernel counted
#   gpu_to_cpu  the same with everything --gpu-to-cpu installs
# Prints, per run, the tests run and the calls that reached oneDNN and the kernels; then the
# tests that fail with oneDNN and not in plain Chainer, and those that fail with
# --gpu-to-cpu's patches and not without them (none is the goal of each: docs/compute.md,
# "Chainer's semantics"; docs/cluster.md, "Scripts written for GPUs"), and exits 1 if there
# is any. It exits 2, naming the run, where a run does not run: any pytest exit code but 0
# and 1 (a usage error, an error while collecting or configuring, no test collected), no
# test run, or a oneDNN run whose calls never reached oneDNN or the kernels. GPU, cuDNN and
# ChainerX cases skip or fail alike in every run (a CPU build); iDeep's ("use_ideep":
# "always") fail alike too: ideep4py has no build for this Python.
#   bash scripts/chainer_function_tests.sh CHAINER_CHECKOUT [OUT_DIR]
# CHAINER_CHECKOUT: a full checkout of the v7.8.1 tag (git clone -b v7.8.1, or a fetched
# snapshot's `git archive v7.8.1`). pytest runs outside it (cwd OUT_DIR, `-c` its setup.cfg,
# `--rootdir` it): the checkout's own `chainer` package, not built, stays off the path, and
# its setup.cfg's settings and warning filters are in force. Chainer is imported before
# pytest reads those filters (chainer_tests_pytest.py): reading
# `ignore::chainer.warnings.PerformanceWarning` imports it while `error` is already in force.
# What Chainer's tests import beyond Chainer (mock) is installed into OUT_DIR/site where the
# venv lacks it, or the script says it is missing.
# CHAINER_TESTS_FILES (paths under tests/chainer_tests, space-separated) replaces the list.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: chainer_function_tests.sh CHAINER_CHECKOUT [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
py=${PY:-$here/.venv/bin/python}
case $py in /*) ;; */*) py=$PWD/$py ;; esac  # make's PY is relative; the runs cd into the checkout
t=$src/tests/chainer_tests
files=(functions_tests/activation_tests/test_relu.py
       functions_tests/math_tests/test_basic_math.py
       functions_tests/connection_tests/test_convolution_2d.py
       functions_tests/connection_tests/test_deconvolution_2d.py
       functions_tests/connection_tests/test_dilated_convolution_2d.py
       functions_tests/connection_tests/test_depthwise_convolution_2d.py
       functions_tests/connection_tests/test_linear.py
       functions_tests/pooling_tests/test_max_pooling_2d.py
       functions_tests/pooling_tests/test_average_pooling_2d.py
       functions_tests/normalization_tests/test_local_response_normalization.py
       functions_tests/normalization_tests/test_batch_normalization.py
       links_tests/connection_tests/test_convolution_2d.py
       links_tests/connection_tests/test_deconvolution_2d.py
       links_tests/connection_tests/test_linear.py
       links_tests/normalization_tests/test_batch_normalization.py
       test_link.py test_variable.py test_function_node.py
       backends_tests/test_cpu.py backends_tests/test_cuda.py backends_tests/test_intel64.py
       backends_tests/test_chainerx.py)
if [ -n "${CHAINER_TESTS_FILES:-}" ]; then read -r -a files <<< "$CHAINER_TESTS_FILES"; fi
paths=()
for f in "${files[@]}"; do
    if [ -f "$t/$f" ]; then paths+=("$t/$f"); else echo "[chainer tests] not in the checkout: $f" >&2; fi
done
[ ${#paths[@]} -gt 0 ] || { echo "[chainer tests] nothing ran: no test file found under $t" >&2; exit 2; }
[ -f "$src/setup.cfg" ] || { echo "[chainer tests] nothing ran: $src has no setup.cfg (Chainer's pytest settings): give a checkout of the v7.8.1 tag" >&2; exit 2; }
extra=$out/site
if grep -qE '^ *(import mock|from mock )' "${paths[@]}" && ! "$py" -c 'import mock' 2> /dev/null &&
        ! PYTHONPATH=$extra "$py" -c 'import mock' 2> /dev/null; then
    "$py" -m pip install --quiet --target "$extra" mock > "$out/mock-install.log" 2>&1 || {
        echo "[chainer tests] nothing ran: Chainer's tests import mock (test_link, test_variable, test_function_node), which $py lacks and pip could not install into $extra ($(tail -n 1 "$out/mock-install.log")); pip install mock" >&2; exit 2; }
fi
# Chainer's setup.cfg makes every warning an error; importing Chainer under numpy 1.26 and
# setuptools warns of numpy.distutils and msvccompiler, which stopped every run (exit 4)
# before a test ran. Those two only; the tests' own warnings stay errors.
warnings=(-W 'ignore::DeprecationWarning:chainer._environment_check'
          -W 'ignore:msvccompiler is deprecated:DeprecationWarning')
stop() { echo "[chainer tests] $1: $2" >&2; [ -f "$out/$1.log" ] && tail -n 20 "$out/$1.log" >&2; exit 2; }
for mode in plain onednn gpu_to_cpu; do
    plugin=() gpu=0 counts=$out/$mode.counts.json
    rm -f "$counts"
    [ "$mode" != plain ] && plugin=(-p chainer_tests_mode)
    [ "$mode" = gpu_to_cpu ] && gpu=1
    rc=0
    (cd "$out" && CHAINER_TESTS_COMPUTE=onednn CHAINER_TESTS_GPU_TO_CPU=$gpu \
        CHAINER_TESTS_COUNTS=$counts CHAINERMN_TORUS_QUIET=1 \
        PYTHONPATH="$here/scripts:$here:$extra${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" "$here/scripts/chainer_tests_pytest.py" -q -c "$src/setup.cfg" --rootdir "$src" \
        -p no:cacheprovider "${plugin[@]}" "${warnings[@]}" \
        -m "not gpu and not cudnn" "${paths[@]}" > "$out/$mode.log" 2>&1) || rc=$?
    # 0: all passed; 1: some failed; anything else: the tests did not run (2 interrupted,
    # 3 internal error, 4 usage or configuration error, 5 none collected)
    [ "$rc" -le 1 ] || stop "$mode" "pytest exited $rc without running the tests"
    summary=$(grep -E '^[=]* ?[0-9]+ (passed|failed)' "$out/$mode.log" | tail -n 1 || true)
    ran=$({ grep -oE '[0-9]+ (passed|failed|xfailed|xpassed)' <<< "$summary" || true; } \
          | awk '{s += $1} END {print s + 0}')
    [ "$ran" -gt 0 ] || stop "$mode" "no test ran (pytest's last line: $(tail -n 1 "$out/$mode.log"))"
    reached=''
    if [ "$mode" != plain ]; then
        [ -f "$counts" ] || stop "$mode" "the plugin wrote no counts ($counts)"
        read -r onednn kernels < <("$py" -c 'import json, sys; c = json.load(open(sys.argv[1]))
print(c["onednn"], c["kernels"])' "$counts")
        # Either is the replacements at work (docs/compute.md): oneDNN for the layers, the
        # kernels for what is too small for it.
        [ $((onednn + kernels)) -gt 0 ] || stop "$mode" "no call reached a oneDNN primitive or a numba kernel"
        reached="; calls that reached oneDNN: $onednn, numba's kernels: $kernels"
    fi
    # Node ids as from the checkout (pytest writes them relative to the directory it ran in).
    grep -E '^(FAILED|ERROR) ' "$out/$mode.log" | sed 's/ - .*//; s#^\([A-Z]*\) [^ ]*\(tests/chainer_tests/\)#\1 \2#' \
        | sort > "$out/$mode.failed" || true
    echo "[chainer tests] $mode: $ran tests run ($(sed 's/=//g; s/^ *//; s/ *$//' <<< "$summary"))$reached"
done
comm -13 "$out/plain.failed" "$out/onednn.failed" > "$out/onednn-only.failed"
# What --gpu-to-cpu changes by design: every GPU request in the process is the CPU (the node
# has none), so Chainer's check that a CPU node's cuda.to_gpu raises now sees the array
# returned. Named here, not counted; any other difference fails the run, and one of these
# that stops differing is said.
by_design=("FAILED tests/chainer_tests/backends_tests/test_cuda.py::TestCuda::test_to_gpu_unavailable")
printf '%s\n' "${by_design[@]}" | sort > "$out/gpu-to-cpu-by-design"
comm -13 "$out/onednn.failed" "$out/gpu_to_cpu.failed" > "$out/gpu-to-cpu-all.failed"
comm -23 "$out/gpu-to-cpu-all.failed" "$out/gpu-to-cpu-by-design" > "$out/gpu-to-cpu-only.failed"
comm -12 "$out/gpu-to-cpu-all.failed" "$out/gpu-to-cpu-by-design" > "$out/gpu-to-cpu-changed.failed"
n=$(wc -l < "$out/onednn-only.failed")
g=$(wc -l < "$out/gpu-to-cpu-only.failed")
echo "[chainer tests] failing with oneDNN and not in plain Chainer: $n (logs in $out)"
cat "$out/onednn-only.failed"
echo "[chainer tests] failing with --gpu-to-cpu's patches and not without them: $g"
cat "$out/gpu-to-cpu-only.failed"
echo "[chainer tests] changed by --gpu-to-cpu by design (a GPU request anywhere is the CPU): $(wc -l < "$out/gpu-to-cpu-changed.failed") of ${#by_design[@]}"
comm -23 "$out/gpu-to-cpu-by-design" "$out/gpu-to-cpu-changed.failed" | sed 's/^FAILED /  no longer differs: /'
[ "$n" = 0 ] && [ "$g" = 0 ]

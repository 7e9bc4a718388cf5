#!/bin/sh
# tests/gpu/run.sh: runs every GPU test program in build/gpu/ (make test-gpu
# builds them) and fails when any does.  Without a GPU (nvidia-smi missing,
# failing, or listing none) it prints "skipped: no GPU" and exits 0, so a
# CPU-only machine can run the whole suite.
cd "$(dirname "$0")/../.." || exit 1

if ! gpus=$(nvidia-smi -L 2>/dev/null) || ! printf '%s\n' "$gpus" | grep -q '^GPU '; then
	echo "skipped: no GPU"
	exit 0
fi

found=0
failed=0
for t in build/gpu/*; do
	if [ ! -f "$t" ] || [ ! -x "$t" ]; then
		continue
	fi
	case "$t" in
	build/gpu/bench_*) continue ;; # timing programs, not tests
	esac
	found=$((found + 1))
	echo "== $t" >&2
	if ! "$t"; then
		echo "FAIL: $t" >&2
		failed=$((failed + 1))
	fi
done

if [ "$found" -eq 0 ]; then
	echo "run.sh: no GPU tests in build/gpu (build them with: make test-gpu)" >&2
	exit 1
fi
# Whole-model checks: CPU vs CUDA training, blockwise vs resident bit parity
# on the GPU, HF transformers agreement (when torch is there), memcheck.
found=$((found + 1))
echo "== tests/gpu/device_check.sh" >&2
if ! sh tests/gpu/device_check.sh "${TMPDIR:-/tmp}/poros-test-gpu"; then
	echo "FAIL: tests/gpu/device_check.sh" >&2
	failed=$((failed + 1))
fi
echo "gpu tests: $((found - failed)) of $found passed" >&2
[ "$failed" -eq 0 ]

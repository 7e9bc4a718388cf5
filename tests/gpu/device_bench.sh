#!/bin/sh
# tests/gpu/device_bench.sh: the H200 speed/memory bench in one call, from a
# `make bundle` tree: expands configs/bench/h200_perf.yaml and runs its cells
# through poros-arm, most informative first, each bounded by a timeout, then
# merges and renders.  usage: sh tests/gpu/device_bench.sh OUTDIR [TIMEOUT_S] [CELL...]
set -u
out=${1:?usage: device_bench.sh OUTDIR [TIMEOUT_S] [CELL...]}
timeout_s=${2:-150}
shift 2 2>/dev/null || shift $#
P=dist/poros/bin
export LD_LIBRARY_PATH="$PWD/dist/poros/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ $# -gt 0 ] || set -- poros_qwen2_5_7b_nf4 resident_qwen2_5_7b_nf4 peft_qwen2_5_7b_bf16 \
	resident_qwen2_5_7b_bf16 poros_qwen2_5_32b_nf4 resident_qwen2_5_32b_nf4 poros_qwen2_5_7b_bf16
$P/poros-expand -o "$out" configs/bench/h200_perf.yaml >/dev/null || exit 1
for c in "$@"; do
	$P/poros-arm --timeout "$timeout_s" "$out/cells/$c.json" >>"$out/results.jsonl" || true
done
$P/poros-render --md "$out/results.jsonl" >"$out/report.md" 2>/dev/null
$P/poros-render --html "$out/results.jsonl" >"$out/report.html" 2>/dev/null
cat "$out/report.md"

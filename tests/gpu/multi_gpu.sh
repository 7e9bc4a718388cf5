#!/bin/sh
# tests/gpu/multi_gpu.sh: the several-GPUs check (issue 11) in one call.
# Runs configs/bench/h200_multi.yaml (four GPU cells) once on one GPU and
# once with --gpus all, then prints, per cell: the GPU it ran on, its start
# and end, its wall time and VRAM peak in both runs; and the two wall times
# against the sum of cell times divided by the number of GPUs.
#   sh tests/gpu/multi_gpu.sh OUTDIR        (POROS_BIN: default dist/poros/bin)
set -u
out=${1:?usage: multi_gpu.sh OUTDIR}
P=${POROS_BIN:-dist/poros/bin}
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
spec=configs/bench/h200_multi.yaml
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
echo "== $ngpu GPUs"; nvidia-smi -L

t0=$(date +%s.%N)
CUDA_VISIBLE_DEVICES=0 "$P/poros" bench run "$spec" -o "$out/one" 2>"$out/one.log" || echo "one-GPU run failed"
t1=$(date +%s.%N)
"$P/poros" bench run "$spec" -o "$out/all" --gpus all 2>"$out/all.log" || echo "--gpus all run failed"
t2=$(date +%s.%N)

echo "== cells (one GPU | --gpus all)"
for c in $(jq -r .cell_id "$out/all/results.jsonl"); do
	one=$(jq -c --arg c "$c" 'select(.cell_id == $c) | [.status, .wall_s, .metrics.vram_peak_mb]' "$out/one/results.jsonl")
	all=$(jq -c --arg c "$c" 'select(.cell_id == $c) | [.status, .env.cuda_visible_devices, .started_at, .finished_at, .wall_s, .metrics.vram_peak_mb]' "$out/all/results.jsonl")
	echo "$c one=$one all=$all"
done
sum=$(jq -s 'map(.wall_s) | add' "$out/all/results.jsonl")
awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v sum="$sum" -v n="$ngpu" 'BEGIN {
	printf "== wall: one GPU %.1f s; --gpus all %.1f s; sum of cell walls (all) %.1f s / %d GPUs = %.1f s\n",
		t1 - t0, t2 - t1, sum, n, sum / n }'
# distinct GPUs used and no two overlapping cells on one GPU
jq -s -r 'group_by(.env.cuda_visible_devices) | map("gpu \(.[0].env.cuda_visible_devices): \(map(.cell_id) | join(", "))") | .[]' "$out/all/results.jsonl"
jq -s -e 'group_by(.env.cuda_visible_devices) | map(sort_by(.started_at) | [range(1; length) as $i | .[$i].started_at >= .[$i-1].finished_at] | all) | all' \
	"$out/all/results.jsonl" >/dev/null && echo "no GPU ran two cells at once" || echo "FAIL: two cells overlapped on one GPU"

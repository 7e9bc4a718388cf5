#!/bin/sh
# tests/gpu/long_check.sh: long-context speed and memory in one device call,
# from a `make bundle` tree: poros-train directly (synthetic weights of the
# real shapes, LoRA r16 on all linear layers, dropout 0, block size 4), one
# sequence per step.  usage: sh tests/gpu/long_check.sh OUTDIR [RUN...]
# where RUN is MODEL:PRECISION:MODE:SEQ:ACCUM:STEPS (defaults below); prints
# one line per run and keeps each summary and log under OUTDIR.  Each run is
# bounded by RUN_TIMEOUT seconds (default 240).
set -u
out=${1:?usage: long_check.sh OUTDIR [RUN...]}
shift
P=${POROS_BIN:-dist/poros/bin}
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
[ $# -gt 0 ] || set -- Qwen/Qwen2.5-7B:bf16:blockwise:8192:1:4 Qwen/Qwen2.5-7B:bf16:resident:8192:1:4 \
	Qwen/Qwen2.5-32B:nf4:blockwise:512:8:5 Qwen/Qwen2.5-7B:nf4:blockwise:32768:1:3 \
	Qwen/Qwen2.5-32B:nf4:blockwise:8192:1:3 Qwen/Qwen2.5-72B:nf4:blockwise:8192:1:3
printf 'run status s/step(median) min max peak_MiB plan_MiB loss_first loss_last\n'
for r in "$@"; do
	IFS=: read -r model prec mode seq accum steps <<-EOR
	$r
	EOR
	name=$(printf '%s_%s_%s_%s_%s' "$model" "$prec" "$mode" "$seq" "$accum" | tr '/.' '__')
	ckpt=off
	[ "$mode" = resident ] && ckpt=on # one layer's activations, as PEFT with checkpointing
	timeout "${RUN_TIMEOUT:-240}" $P/poros-train --model "$model" --backend cuda --mode "$mode" --precision "$prec" --block-size 4 \
		--seq-len "$seq" --accum "$accum" --steps "$steps" --timing-warmup 1 --dataset synthetic --rank 16 --alpha 32 --dropout 0 \
		--gradient-checkpointing "$ckpt" --out "$out/$name" --quiet >"$out/$name.summary" 2>"$out/$name.log"
	jq -r --arg n "$name" '[$n, .status, .s_per_step, .s_per_step_min, .s_per_step_max, .vram_peak_mb, .vram_plan_mb,
		.loss_first, .loss_last] | map(tostring) | join(" ")' "$out/$name.summary" 2>/dev/null ||
		{ printf '%s failed: ' "$name"; tail -1 "$out/$name.log"; }
done

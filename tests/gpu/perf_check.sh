#!/bin/sh
# tests/gpu/perf_check.sh: issue 7's GPU run in one call (about 2.5 minutes
# on an H200), from a `make bundle` tree with build/gpu/test_ops_cuda:
#   sh tests/gpu/perf_check.sh OUTDIR
# 1. the LoRA ops (both ways: one slice per block, and split sums in a scratch) and
#    attention against the CPU, with timings at model shapes; 2. tiny models: CPU vs
#    CUDA losses and blockwise vs resident bit parity on the GPU (the
#    checkpoint traffic on the third stream included), then the same at
#    Qwen2.5-0.5B scale where copies really overlap; 3. Qwen2.5-32B and 7B
#    NF4, blockwise and resident, 4 steps with POROS_PROFILE=1: s/step, peak
#    VRAM, the device memory by purpose and the per-category profile.
# Everything lands under OUTDIR; a digest goes to stdout.
set -u
out=${1:?usage: perf_check.sh OUTDIR}
mkdir -p "$out/runs"
P=${POROS_BIN:-dist/poros/bin}
BACKEND=${POROS_BACKEND:-cuda} # cpu: a smoke test of this script on tiny models
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
note() { printf '== %s (%ss)\n' "$*" "$(($(date +%s) - t0))"; }
t0=$(date +%s)

note "LoRA and attention ops: CUDA vs CPU (LoRA: one slice vs split sums)"
timeout 120 build/gpu/test_ops_cuda lora attention >"$out/ops.log" 2>&1 || fail=1
grep -E 'PASS|FAIL|passed' "$out/ops.log" | sed 's/  */ /g' | cut -c1-160

train() { # name mode precision block accum model steps seq [backend]
	timeout 100 $P/poros-train --model "$6" --backend "${9:-$BACKEND}" --mode "$2" --precision "$3" --block-size "$4" \
		--accum "$5" --steps "$7" --seq-len "$8" --dataset synthetic --rank 16 --alpha 32 --dropout 0.05 --timing-warmup 1 \
		--out "$out/runs/$1" >"$out/runs/$1.summary" 2>"$out/runs/$1.log"
}
parity() { # a b
	$P/poros-parity "$out/runs/$1" "$out/runs/$2" >"$out/runs/par_$2.json" 2>&1
	printf '%s vs %s: %s\n' "$1" "$2" "$(jq -c '{bitwise_exact,loss_max_abs_delta,adapter_max_abs_delta}' \
		"$out/runs/par_$2.json" 2>/dev/null || head -c 300 "$out/runs/par_$2.json")"
	jq -e '.bitwise_exact == true' "$out/runs/par_$2.json" >/dev/null 2>&1 || fail=1
}

note "tiny: blockwise == resident on the GPU, CPU vs CUDA"
for m in poros/tiny-qwen3 poros/tiny-qwen2; do
	a=$(echo "$m" | tr / _)
	train "${a}_cpu" resident nf4 2 4 "$m" 3 64 cpu || fail=1
	train "${a}_res" resident nf4 2 4 "$m" 3 64 || { fail=1; tail -3 "$out/runs/${a}_res.log"; }
	train "${a}_blk" blockwise nf4 3 4 "$m" 3 64 || { fail=1; tail -3 "$out/runs/${a}_blk.log"; }
	parity "${a}_res" "${a}_blk"
	cpu_l=$(jq -r .loss "$out/runs/${a}_cpu/events.jsonl" 2>/dev/null | tr '\n' ' ')
	gpu_l=$(jq -r .loss "$out/runs/${a}_res/events.jsonl" 2>/dev/null | tr '\n' ' ')
	printf '%s cpu vs cuda loss: %s| %s\n' "$a" "$cpu_l" "$gpu_l"
	# summation order only (bf16 GEMM inputs, fp32 accumulation): 5e-3 relative
	echo "$cpu_l | $gpu_l" | awk '{ n = (NF - 1) / 2; if (n < 1) exit 1
		for (i = 1; i <= n; i++) { d = $i - $(i + n + 1); if (d < 0) d = -d
			if (d > 5e-3 * ($i < 0 ? -$i : $i)) exit 1 } }' || { echo "FAIL: cpu vs cuda losses differ"; fail=1; }
done

# One run: s/step, peak, the memory breakdown and step 4's profile, sorted.
perf() { # name mode block model
	POROS_PROFILE=1 timeout 100 $P/poros-train --model "$4" --backend "$BACKEND" --mode "$2" --precision nf4 \
		--block-size "$3" --accum 8 --steps 4 --timing-warmup 1 --seq-len 512 --dataset synthetic --rank 16 --alpha 32 --dropout 0 \
		--out "$out/runs/$1" >"$out/runs/$1.summary" 2>"$out/runs/$1.log" || { fail=1; tail -3 "$out/runs/$1.log"; }
	printf '%s: %s\n' "$1" "$(jq -c '{status,s_per_step,vram_peak_mb,loss_last}' "$out/runs/$1.summary" 2>/dev/null)"
	sed -n 's/^.*vram breakdown (MiB): /  vram MiB: /p' "$out/runs/$1.log"
	sed -n 's/^.*profile step 4: //p' "$out/runs/$1.log" | jq -c '[to_entries[] | select(.value | type == "object")
		| select(.value.ms > 0.5)] | sort_by(-.value.ms) | map("\(.key) \(.value.ms | floor)ms/\(.value.n)") | join(", ")' \
		2>/dev/null | sed 's/^/  profile: /'
	sed -n 's/^.*profile step 4: //p' "$out/runs/$1.log" | jq -c '{total_ms, events, ckpt_d2h_bytes, ckpt_h2d_bytes}' \
		2>/dev/null | sed 's/^/  /'
	jq -c 'select(.step == 4) | {step_s, h2d_bytes, h2d_s, compute_s, copy_hidden_frac}' "$out/runs/$1/events.jsonl" \
		2>/dev/null | sed 's/^/  /'
}

note "Qwen2.5-32B nf4 blockwise"
perf q32_blk blockwise 4 Qwen/Qwen2.5-32B
note "Qwen2.5-7B nf4 blockwise and resident"
perf q7_blk blockwise 4 Qwen/Qwen2.5-7B
perf q7_res resident 4 Qwen/Qwen2.5-7B
note "Qwen2.5-32B nf4 resident"
perf q32_res resident 4 Qwen/Qwen2.5-32B

note "Qwen2.5-0.5B: blockwise == resident at seq 512"
train q05_res resident nf4 3 4 Qwen/Qwen2.5-0.5B 2 512 || fail=1
train q05_blk blockwise nf4 3 4 Qwen/Qwen2.5-0.5B 2 512 || fail=1
parity q05_res q05_blk

note "compute-sanitizer memcheck: tiny blockwise, three streams, LoRA scratch"
if command -v compute-sanitizer >/dev/null && [ "$BACKEND" = cuda ]; then
	timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $P/poros-train --model poros/tiny-qwen2 \
		--backend cuda --mode blockwise --precision nf4 --block-size 2 --accum 2 --steps 2 --seq-len 32 \
		--out "$out/runs/sanitizer" --quiet >"$out/sanitizer.log" 2>&1 || fail=1
	grep -E 'ERROR SUMMARY' "$out/sanitizer.log" | head -3
else
	echo "skipped: no compute-sanitizer (or not on CUDA)"
fi

note "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail

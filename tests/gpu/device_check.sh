#!/bin/sh
# tests/gpu/device_check.sh: the correctness pass on a GPU machine, in one call.
# Run from the repository root after `make all build/gpu/test_ops_cuda` (make
# test-gpu does, through tests/gpu/run.sh), or on a machine without the build
# libraries from a `make bundle` tree with POROS_BIN=dist/poros/bin:
#   sh tests/gpu/device_check.sh OUTDIR
# 1. every CUDA op against the CPU op; 2. tiny models: CPU vs CUDA losses,
# blockwise vs resident bit-identical on the GPU; 3. HF transformers agreement;
# 4. compute-sanitizer memcheck on a tiny run.  Logs under OUTDIR.
set -u
out=${1:-/tmp/poros-device-check}
mkdir -p "$out"
P=${POROS_BIN:-bin}
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
note() { printf '== %s\n' "$*"; }

note "GPU"; nvidia-smi -L
note "ops: CUDA vs CPU"
build/gpu/test_ops_cuda >"$out/ops.log" 2>&1 || fail=1
grep -E 'FAIL|PASS' "$out/ops.log" | sed 's/  */ /g' | cut -c1-150 | tail -70

train() { # name backend mode precision block accum model
	$P/poros-train --model "$7" --backend "$2" --mode "$3" --precision "$4" --block-size "$5" \
		--accum "$6" --steps 4 --seq-len 64 --rank 8 --alpha 16 --dropout 0.05 --warmup 1 \
		--out "$out/runs/$1" --quiet >"$out/runs/$1.summary" 2>"$out/runs/$1.log"
}
mkdir -p "$out/runs"
note "tiny: CPU vs CUDA, blockwise vs resident on CUDA"
for m in poros/tiny-qwen2 poros/tiny-llama poros/tiny-qwen3; do
	a=$(echo "$m" | tr / _)
	for prec in nf4 bf16; do
		train "${a}_${prec}_cpu" cpu resident "$prec" 2 4 "$m" || { fail=1; tail -3 "$out/runs/${a}_${prec}_cpu.log"; }
		train "${a}_${prec}_res" cuda resident "$prec" 2 4 "$m" || { fail=1; tail -3 "$out/runs/${a}_${prec}_res.log"; }
		# block sizes 1, 2 and 3 (3 does not divide 4 layers) at accumulation 4,
		# and accumulation 1 and 8 at block size 2
		for bs in 1 2 3 2a1 2a8; do
			case $bs in 2a1) b=2 k=1 ;; 2a8) b=2 k=8 ;; *) b=$bs k=4 ;; esac
			[ -d "$out/runs/${a}_${prec}_res_k$k" ] ||
				train "${a}_${prec}_res_k$k" cuda resident "$prec" 2 "$k" "$m" || fail=1
			train "${a}_${prec}_blk$bs" cuda blockwise "$prec" "$b" "$k" "$m" || { fail=1; tail -3 "$out/runs/${a}_${prec}_blk$bs.log"; }
			$P/poros-parity "$out/runs/${a}_${prec}_res_k$k" "$out/runs/${a}_${prec}_blk$bs" >"$out/runs/par_${a}_${prec}_$bs.json" 2>&1
			printf '%s %s bs=%s gpu blockwise-vs-resident: %s\n' "$a" "$prec" "$bs" "$(jq -c '{bitwise_exact,loss_max_abs_delta,adapter_max_abs_delta}' "$out/runs/par_${a}_${prec}_$bs.json" 2>/dev/null || cat "$out/runs/par_${a}_${prec}_$bs.json")"
			jq -e '.bitwise_exact == true' "$out/runs/par_${a}_${prec}_$bs.json" >/dev/null 2>&1 || fail=1
		done
		# CPU and CUDA differ only in summation order (bf16 GEMM inputs, fp32
		# accumulation): the losses of 4 steps agree to 5e-3 relative.
		cpu_l=$(jq -r '.loss' "$out/runs/${a}_${prec}_cpu/events.jsonl" 2>/dev/null | tr '\n' ' ')
		gpu_l=$(jq -r '.loss' "$out/runs/${a}_${prec}_res/events.jsonl" 2>/dev/null | tr '\n' ' ')
		printf '%s %s cpu vs cuda loss: %s | %s\n' "$a" "$prec" "$cpu_l" "$gpu_l"
		echo "$cpu_l | $gpu_l" | awk '{ n = (NF - 1) / 2; if (n < 1) exit 1
			for (i = 1; i <= n; i++) { d = $i - $(i + n + 1); if (d < 0) d = -d
				if (d > 5e-3 * ($i < 0 ? -$i : $i)) exit 1 } }' || { echo "FAIL: cpu vs cuda losses differ"; fail=1; }
	done
done
note "HF transformers agreement"
if python3 -c 'import torch, transformers' 2>/dev/null; then
	python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cuda --workdir "$out/hf" || fail=1
else
	echo "skipped: python3 with torch and transformers not found"
fi
note "compute-sanitizer memcheck (tiny blockwise run)"
if command -v compute-sanitizer >/dev/null; then
	compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $P/poros-train --model poros/tiny-qwen2 \
		--backend cuda --mode blockwise --precision nf4 --block-size 2 --accum 2 --steps 2 --seq-len 32 \
		--out "$out/runs/sanitizer" --quiet >"$out/sanitizer.log" 2>&1 || fail=1
else
	echo "skipped: compute-sanitizer not found" >"$out/sanitizer.log"
fi
grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$out/sanitizer.log" | head -5
note "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail

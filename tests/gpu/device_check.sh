#!/bin/sh
# tests/gpu/device_check.sh: the correctness pass on a GPU machine, in one call.
# Run from the repository root after `make all build/gpu/test_ops_cuda` (make
# test-gpu does, through tests/gpu/run.sh), or on a machine without the build
# libraries from a `make bundle` tree with POROS_BIN=dist/poros/bin:
#   sh tests/gpu/device_check.sh OUTDIR
# 1. every CUDA op against the CPU op; 2. tiny models: CPU vs CUDA losses,
# blockwise vs resident bit-identical on the GPU (also with the MLP in token
# chunks), one compute lane vs two, micro-batch groups, checkpoint records on
# disk, one checkpoint set, the attention sublayer's checkpoints; 3. attention against a double-precision reference at S = 32768
# (bench_attention, BENCH_REFERENCE=1); 4. HF transformers agreement (also
# at 2048 tokens with head dims 128 and 64: the cuDNN route and the
# kernels; and a batch-4 run of Qwen2.5-7B at 2048 tokens on the cuDNN route
# against the kernels; the cuDNN backward in tiles, blockwise vs resident
# and against the kernels); 5. compute-sanitizer memcheck on a tiny run.  Logs
# under OUTDIR.
set -u
out=${1:-/tmp/poros-device-check}
mkdir -p "$out"
P=${POROS_BIN:-bin}
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
started=$(date +%s)
# each section's line says the seconds since the start, for budgeting a device call
note() { printf '== [%ss] %s\n' "$(($(date +%s) - started))" "$*"; }

note "GPU"; nvidia-smi -L
note "ops: CUDA vs CPU"
build/gpu/test_ops_cuda >"$out/ops.log" 2>&1 || fail=1
grep -E 'FAIL|PASS' "$out/ops.log" | sed 's/  */ /g' | cut -c1-150 | tail -70

train() { # name backend mode precision block accum model [more flags]
	_name=$1 _backend=$2 _mode=$3 _prec=$4 _block=$5 _accum=$6 _model=$7
	shift 7
	$P/poros-train --model "$_model" --backend "$_backend" --mode "$_mode" --precision "$_prec" --block-size "$_block" \
		--accum "$_accum" --steps 4 --seq-len 64 --dataset synthetic --rank 8 --alpha 16 --dropout 0.05 --timing-warmup 1 \
		--out "$out/runs/$_name" --quiet "$@" >"$out/runs/$_name.summary" 2>"$out/runs/$_name.log"
}
# values_agree KEY LABEL RTOL EVENTS_A EVENTS_B: prints both runs' KEY
# (loss, grad_norm) a step, and fails unless A has a step and each step's
# two values differ by at most RTOL relative to A's.
values_agree() {
	la=$(jq -r ".$1" "$4" 2>/dev/null | tr '\n' ' ')
	lb=$(jq -r ".$1" "$5" 2>/dev/null | tr '\n' ' ')
	printf '%s %s: %s | %s\n' "$2" "$1" "$la" "$lb"
	echo "$la | $lb" | awk -v rtol="$3" '{ n = (NF - 1) / 2; if (n < 1) exit 1
		for (i = 1; i <= n; i++) { d = $i - $(i + n + 1); if (d < 0) d = -d
			if (d > rtol * ($i < 0 ? -$i : $i)) exit 1 } }'
}
# losses_agree LABEL RTOL EVENTS_A EVENTS_B: values_agree of the losses
losses_agree() {
	values_agree loss "$@"
}
# bit_identical LABEL RUN_A RUN_B: poros-parity of two runs; fails unless
# their losses and adapters are the same bits
bit_identical() {
	$P/poros-parity "$2" "$3" >"$out/runs/parity_last.json" 2>&1
	if jq -e '.bitwise_exact == true' "$out/runs/parity_last.json" >/dev/null 2>&1; then
		echo "$1: bit-identical"
	else
		echo "FAIL: $1"; cat "$out/runs/parity_last.json"; fail=1
	fi
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
		losses_agree "$a $prec cpu vs cuda" 5e-3 "$out/runs/${a}_${prec}_cpu/events.jsonl" \
			"$out/runs/${a}_${prec}_res/events.jsonl" || { echo "FAIL: cpu vs cuda losses differ"; fail=1; }
	done
done
note "the AdamW state on the host (--optimizer-state host, in chunks): the same bits as on the device"
train opt_host_blk cuda blockwise nf4 2 4 poros/tiny-qwen2 --optimizer-state host || fail=1
POROS_OPT_CHUNK=1000 train opt_host_res cuda resident nf4 2 4 poros/tiny-qwen2 --optimizer-state host || fail=1
bit_identical "optimizer state on the host, blockwise" "$out/runs/poros_tiny-qwen2_nf4_blk2" "$out/runs/opt_host_blk"
bit_identical "optimizer state on the host in chunks, resident" "$out/runs/poros_tiny-qwen2_nf4_res_k4" \
	"$out/runs/opt_host_res"
note "compute lanes: one lane (POROS_LANES=1) gives two lanes' bits, layer and block checkpoints, odd accumulation"
for ck in layer block; do
	train "lanes2_$ck" cuda blockwise nf4 2 3 poros/tiny-qwen3 --checkpoints "$ck" --dropout 0.1 || fail=1
	POROS_LANES=1 train "lanes1_$ck" cuda blockwise nf4 2 3 poros/tiny-qwen3 --checkpoints "$ck" --dropout 0.1 || fail=1
	bit_identical "one lane vs two, --checkpoints $ck" "$out/runs/lanes1_$ck" "$out/runs/lanes2_$ck"
done
note "micro-batch groups (POROS_GROUP): resident's bits, with and without dropout, layer and block checkpoints"
for d in 0 0.1; do
	# resident under POROS_GROUP=4 too: the GEMMs' algorithms are chosen at
	# the group's rows in every schedule (unset, 5 micro-batches of 128 rows
	# would be one group of 5)
	POROS_GROUP=4 train "group_res_$d" cuda resident nf4 2 5 poros/tiny-qwen3 --seq-len 128 --dropout "$d" || fail=1
	for ck in layer block; do
		POROS_GROUP=4 train "group4_${ck}_$d" cuda blockwise nf4 2 5 poros/tiny-qwen3 --seq-len 128 --dropout "$d" \
			--checkpoints "$ck" || fail=1
		bit_identical "groups of 4 vs resident, --checkpoints $ck, dropout $d" "$out/runs/group_res_$d" \
			"$out/runs/group4_${ck}_$d"
	done
	# groups of 2 on two lanes: lane 1 zeroes its leaves only after lane 0
	# pushed them (resident under POROS_GROUP=2 too: the GEMMs' choice)
	POROS_GROUP=2 train "group2_res_$d" cuda resident nf4 2 5 poros/tiny-qwen3 --seq-len 128 --dropout "$d" || fail=1
	POROS_LANES=2 POROS_GROUP=2 train "group2_lanes_$d" cuda blockwise nf4 2 5 poros/tiny-qwen3 --seq-len 128 \
		--dropout "$d" || fail=1
	bit_identical "groups of 2 on two lanes vs resident, dropout $d" "$out/runs/group2_res_$d" \
		"$out/runs/group2_lanes_$d"
done
# resident under the same POROS_GROUP: the row GEMMs run the algorithms
# chosen at the group's rows in every schedule (engine_gemm_choice_rows)
for m in Qwen/Qwen2.5-0.5B; do
	POROS_GROUP=8 train group_q05_res cuda resident bf16 4 8 "$m" --seq-len 512 --rank 16 --alpha 32 --dropout 0 \
		--steps 2 || fail=1
	POROS_GROUP=8 train group_q05_g8 cuda blockwise bf16 4 8 "$m" --seq-len 512 --rank 16 --alpha 32 --dropout 0 \
		--steps 2 || fail=1
	bit_identical "Qwen2.5-0.5B seq 512 x 8: a group of 8 vs resident" "$out/runs/group_q05_res" "$out/runs/group_q05_g8"
	# the kernels' attention keeps a sequence's bits at any batch: a group's is one call
	POROS_ATTENTION=mma POROS_GROUP=8 train group_q05_mma_res cuda resident bf16 4 8 "$m" --seq-len 512 --rank 16 \
		--alpha 32 --dropout 0 --steps 2 || fail=1
	POROS_ATTENTION=mma POROS_GROUP=8 train group_q05_mma_g8 cuda blockwise bf16 4 8 "$m" --seq-len 512 --rank 16 \
		--alpha 32 --dropout 0 --steps 2 || fail=1
	bit_identical "Qwen2.5-0.5B seq 512 x 8, the kernels' attention: a group of 8 (one attention call) vs resident" \
		"$out/runs/group_q05_mma_res" "$out/runs/group_q05_mma_g8"
done
note "checkpoints on disk (--checkpoint-dir): records through the file give the host's bits, O_DIRECT and buffered"
# 8 layers: more records than the two bounce slots, so the backward reads some back from the file
mkdir -p "$out/ckdir" "$out/cfg/models"
jq '.model_id = "test/eight-layers" | .num_hidden_layers = 8' "$P/../configs/models/tiny_qwen2.json" \
	>"$out/cfg/models/eight_layers.json" || fail=1
for ck in layer block; do
	train "host_$ck" cuda blockwise nf4 2 3 test/eight-layers --configs "$out/cfg" --checkpoints "$ck" --dropout 0.1 ||
		fail=1
	POROS_DISK_CHECKPOINTS=4 train "disk_$ck" cuda blockwise nf4 2 3 test/eight-layers --configs "$out/cfg" \
		--checkpoints "$ck" --dropout 0.1 --checkpoint-dir "$out/ckdir" || fail=1
	bit_identical "4 records on disk, --checkpoints $ck" "$out/runs/host_$ck" "$out/runs/disk_$ck"
done
POROS_DISK_DIRECT=0 POROS_DISK_CHECKPOINTS=8 train disk_buffered cuda blockwise nf4 2 3 test/eight-layers \
	--configs "$out/cfg" --dropout 0.1 --checkpoint-dir "$out/ckdir" || fail=1
bit_identical "8 records on disk, buffered" "$out/runs/host_layer" "$out/runs/disk_buffered"
[ -z "$(ls -A "$out/ckdir")" ] || { echo "FAIL: files left in the checkpoint directory"; fail=1; }
note "one checkpoint set (POROS_CKPT_SETS=1): two sets' bits, with two lanes, one, a group and records on disk"
# the forward writes each layer's output over its input once the checkpoint
# stream's copy of it is done (an event the compute streams wait for before
# the MLP): a missing wait shows as other bits here, not on the CPU
POROS_ATTN_CKPT=0 POROS_CKPT_SETS=2 train sets2 cuda blockwise nf4 2 3 poros/tiny-qwen3 --dropout 0.1 || fail=1
for lanes in 2 1; do
	POROS_LANES=$lanes POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 train "sets1_lanes$lanes" cuda blockwise nf4 2 3 \
		poros/tiny-qwen3 --dropout 0.1 || fail=1
	bit_identical "one set vs two, $lanes lane(s)" "$out/runs/sets2" "$out/runs/sets1_lanes$lanes"
done
POROS_GROUP=4 POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 train sets1_group4 cuda blockwise nf4 2 5 poros/tiny-qwen3 \
	--seq-len 128 --dropout 0.1 || fail=1
bit_identical "one set, groups of 4 vs resident" "$out/runs/group_res_0.1" "$out/runs/sets1_group4"
POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 POROS_DISK_CHECKPOINTS=4 train sets1_disk cuda blockwise nf4 2 3 test/eight-layers \
	--configs "$out/cfg" --dropout 0.1 --checkpoint-dir "$out/ckdir" || fail=1
bit_identical "one set, 4 records on disk" "$out/runs/host_layer" "$out/runs/sets1_disk"
[ -z "$(ls -A "$out/ckdir")" ] || { echo "FAIL: files left in the checkpoint directory"; fail=1; }
note "attention-sublayer checkpoints (POROS_ATTN_CKPT=2): resident's bits, two lanes, one, a group, block checkpoints"
# the forward writes q, k, v, x2 and the u of q, k, v, o into the record's
# device set, which leaves with the next layer's inputs on the checkpoint
# stream: a missing wait there shows as other bits on the GPU, not on the CPU
for lanes in 2 1; do
	POROS_LANES=$lanes POROS_ATTN_CKPT=2 train "sub_lanes$lanes" cuda blockwise nf4 2 3 test/eight-layers \
		--configs "$out/cfg" --dropout 0.1 || fail=1
	bit_identical "attention sublayer kept, $lanes lane(s)" "$out/runs/host_layer" "$out/runs/sub_lanes$lanes"
done
POROS_ATTN_CKPT=2 train sub_block cuda blockwise nf4 2 3 test/eight-layers --configs "$out/cfg" --checkpoints block \
	--dropout 0.1 || fail=1
bit_identical "attention sublayer kept, block checkpoints" "$out/runs/host_block" "$out/runs/sub_block"
POROS_GROUP=4 POROS_ATTN_CKPT=2 train sub_group4 cuda blockwise nf4 2 5 poros/tiny-qwen3 --seq-len 128 --dropout 0.1 ||
	fail=1
bit_identical "attention sublayer kept, groups of 4 vs resident" "$out/runs/group_res_0.1" "$out/runs/sub_group4"
note "resume on the GPU: 6 steps straight = 3 + 3 resumed, bit for bit"
for mode in blockwise resident; do
	R="--model poros/tiny-qwen2 --backend cuda --mode $mode --precision nf4 --block-size 2 --accum 2 --seq-len 64
		--rank 8 --alpha 16 --dropout 0.05 --lr-schedule cosine --lr-warmup 2 --quiet"
	# shellcheck disable=SC2086
	{ $P/poros-train $R --steps 6 --out "$out/runs/full_$mode" &&
		$P/poros-train $R --steps 6 --save-every 3 --out "$out/runs/half_$mode" &&
		$P/poros-train $R --steps 6 --resume "$out/runs/half_$mode/checkpoint-step3" --out "$out/runs/res_$mode"
	} >/dev/null 2>"$out/runs/resume_$mode.log" || { fail=1; tail -2 "$out/runs/resume_$mode.log"; }
	if cmp -s "$out/runs/full_$mode/adapter/adapter_model.safetensors" "$out/runs/res_$mode/adapter/adapter_model.safetensors" &&
		[ "$(jq -c '[.loss,.grad_norm]' "$out/runs/full_$mode/events.jsonl")" = "$(jq -c '[.loss,.grad_norm]' "$out/runs/res_$mode/events.jsonl")" ]; then
		echo "resume $mode: bit-identical"
	else
		echo "FAIL: resume $mode differs"; fail=1
	fi
done
note "packed documents (positions restart, no attention across them): CPU vs CUDA, blockwise vs resident"
python3 tests/fixtures/checkpoint/make_checkpoint.py "$out/packed_model" --family qwen2 --vocab 320 &&
	cp tests/fixtures/tokenizer/tiny/* "$out/packed_model/" || fail=1
for i in 1 2 3 4 5 6 7 8; do
	printf '{"text":"hello world %s"}\n' "$(printf 'lo wor%.0s' $(seq $i))"
done >"$out/packed.jsonl"
for run in cpu:resident cuda:resident cuda:blockwise; do
	$P/poros-train --model "$out/packed_model" --backend "${run%%:*}" --mode "${run#*:}" --precision bf16 --block-size 1 \
		--seq-len 48 --batch-size 2 --accum 2 --steps 3 --rank 8 --alpha 16 --dropout 0 --dataset "$out/packed.jsonl" \
		--out "$out/runs/packed_${run%%:*}_${run#*:}" --quiet >/dev/null 2>"$out/runs/packed.log" || { fail=1; tail -2 "$out/runs/packed.log"; }
done
bit_identical "packed blockwise vs resident" "$out/runs/packed_cuda_resident" "$out/runs/packed_cuda_blockwise"
losses_agree "packed cpu vs cuda" 5e-3 "$out/runs/packed_cpu_resident/events.jsonl" \
	"$out/runs/packed_cuda_resident/events.jsonl" || { echo "FAIL: packed cpu vs cuda losses differ"; fail=1; }
note "packed documents on cuDNN's per-document route (head dim 64, any length): blockwise vs resident, against the kernels"
if python3 -c 'import torch, transformers' 2>/dev/null; then
	python3 - "$out/docs_model" <<'PY' || fail=1
import sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(3)
c = Qwen2Config(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, rope_theta=10000.0,
                initializer_range=0.15, tie_word_embeddings=False, rms_norm_eps=1e-6)
Qwen2ForCausalLM(c).to(torch.bfloat16).save_pretrained(sys.argv[1], safe_serialization=True)
PY
	cp tests/fixtures/tokenizer/tiny/* "$out/docs_model/"
	for i in $(seq 1 40); do printf '{"text":"hello world %s"}\n' "$(printf 'lo wor%.0s' $(seq $((i * 7))))"; done >"$out/docs.jsonl"
	for run in cpu:resident:- cuda:resident:mma cuda:resident:docs cuda:blockwise:docs; do
		IFS=: read -r be mode route <<-EOR
		$run
		EOR
		envs=POROS_ATTENTION=mma
		[ "$route" = docs ] && envs="POROS_CUDNN_DOC_MIN=1 POROS_CUDNN_VERBOSE=1"
		# shellcheck disable=SC2086
		env $envs $P/poros-train --model "$out/docs_model" --backend "$be" --mode "$mode" --precision bf16 --block-size 1 \
			--seq-len 1024 --batch-size 2 --accum 2 --steps 3 --rank 8 --alpha 16 --dropout 0 --dataset "$out/docs.jsonl" \
			--out "$out/runs/docs_${be}_${mode}_$route" --quiet >/dev/null 2>"$out/runs/docs_${be}_${mode}_$route.log" ||
			{ fail=1; tail -2 "$out/runs/docs_${be}_${mode}_$route.log"; }
	done
	n=$(grep -c 'cudnn forward: engine' "$out/runs/docs_cuda_resident_docs.log")
	if [ "$n" -gt 1 ]; then echo "per-document route ran: $n forward plans"; else echo "FAIL: the per-document route did not run"; fail=1; fi
	bit_identical "packed documents on cuDNN, blockwise vs resident" "$out/runs/docs_cuda_resident_docs" \
		"$out/runs/docs_cuda_blockwise_docs"
	for other in cpu_resident_- cuda_resident_mma; do
		losses_agree "per-document route vs $other" 2e-3 "$out/runs/docs_cuda_resident_docs/events.jsonl" \
			"$out/runs/docs_$other/events.jsonl" || { echo "FAIL: per-document route vs $other losses differ"; fail=1; }
	done
else
	echo "skipped: no torch/transformers to write the head-dim-64 checkpoint"
fi
note "a cuDNN backward call widening over 2^24 elements (Qwen2.5-7B, 4 rows of 2048 tokens: 28 heads a call): against the kernels"
for route in cudnn mma; do
	POROS_ATTENTION=$route $P/poros-train --model Qwen/Qwen2.5-7B --backend cuda --mode blockwise --precision nf4 \
		--block-size 4 --seq-len 2048 --batch-size 4 --accum 1 --steps 2 --dataset synthetic --rank 8 --alpha 16 \
		--dropout 0 --out "$out/runs/wide_$route" --quiet >/dev/null 2>"$out/runs/wide_$route.log" ||
		{ fail=1; tail -2 "$out/runs/wide_$route.log"; }
done
# the gradient norm carries the backward (the first loss does not)
for key in loss grad_norm; do
	values_agree "$key" "batch 4 x 2048, cuDNN vs the kernels" 5e-3 "$out/runs/wide_cudnn/events.jsonl" \
		"$out/runs/wide_mma/events.jsonl" || { echo "FAIL: batch 4 x 2048 $key differs from the kernels'"; fail=1; }
done
note "the cuDNN backward in tiles (POROS_CUDNN_TILE=1024, Qwen2.5-0.5B shapes at 4096 tokens): blockwise vs resident, against the kernels"
for run in blockwise:1024 resident:1024 blockwise:mma; do
	mode=${run%:*} how=${run#*:}
	if [ "$how" = mma ]; then set -- POROS_ATTENTION=mma; else set -- POROS_CUDNN_TILE="$how"; fi
	env "$@" $P/poros-train --model Qwen/Qwen2.5-0.5B --backend cuda --mode "$mode" --precision bf16 --block-size 4 \
		--seq-len 4096 --accum 2 --steps 2 --dataset synthetic --rank 8 --alpha 16 --dropout 0 \
		--out "$out/runs/tiles_${mode}_$how" --quiet >/dev/null 2>"$out/runs/tiles_$mode.log" ||
		{ fail=1; tail -2 "$out/runs/tiles_$mode.log"; }
done
bit_identical "cuDNN tiles, blockwise vs resident" "$out/runs/tiles_resident_1024" "$out/runs/tiles_blockwise_1024"
for key in loss grad_norm; do
	values_agree "$key" "cuDNN tiles vs the kernels" 5e-3 "$out/runs/tiles_blockwise_1024/events.jsonl" \
		"$out/runs/tiles_blockwise_mma/events.jsonl" || { echo "FAIL: the tiles' $key differs from the kernels'"; fail=1; }
done
note "seq 8192: blockwise (with and without the attention checkpoints) vs resident bit parity (Qwen2.5-0.5B shapes, fused attention)"
for run in blockwise:1 blockwise:0 resident:1; do
	mode=${run%:*} attn=${run#*:}
	POROS_ATTN_CKPT=$attn $P/poros-train --model Qwen/Qwen2.5-0.5B --backend cuda --mode "$mode" --precision bf16 \
		--block-size 4 --seq-len 8192 --accum 2 --steps 2 --dataset synthetic --rank 8 --alpha 16 --dropout 0 \
		--out "$out/runs/long_${mode}_$attn" --quiet >/dev/null 2>"$out/runs/long_$mode.log" ||
		{ fail=1; tail -2 "$out/runs/long_$mode.log"; }
done
for b in blockwise_1 blockwise_0; do
	bit_identical "seq 8192 $b (POROS_ATTN_CKPT=${b#blockwise_}) vs resident" "$out/runs/long_resident_1" "$out/runs/long_$b"
done
note "seq 8192: one checkpoint set vs resident (a record of 56 MiB: its copy would race the MLP without the wait)"
POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 $P/poros-train --model Qwen/Qwen2.5-0.5B --backend cuda --mode blockwise \
	--precision bf16 --block-size 4 --seq-len 8192 --accum 2 --steps 2 --dataset synthetic --rank 8 --alpha 16 \
	--dropout 0 --out "$out/runs/long_sets1" --quiet >/dev/null 2>"$out/runs/long_sets1.log" ||
	{ fail=1; tail -2 "$out/runs/long_sets1.log"; }
bit_identical "seq 8192 one checkpoint set vs resident" "$out/runs/long_resident_1" "$out/runs/long_sets1"
note "the MLP in token chunks (POROS_MLP_CHUNK=40 at T = 64: 40 + 24 rows): blockwise vs resident, and against one chunk"
for m in poros/tiny-qwen2 poros/tiny-qwen3; do
	a=$(echo "$m" | tr / _)
	for prec in nf4 bf16; do
		for run in res:resident:off:40:0.05 rgc:resident:on:40:0.05 blk:blockwise:off:40:0.05 one:blockwise:off:64:0 \
			chk:blockwise:off:40:0; do
			IFS=: read -r tag mode gc chunk p <<-EOR
			$run
			EOR
			POROS_MLP_CHUNK=$chunk $P/poros-train --model "$m" --backend cuda --mode "$mode" --precision "$prec" \
				--block-size 3 --accum 2 --steps 4 --seq-len 32 --batch-size 2 --dataset synthetic --rank 8 --alpha 16 --dropout "$p" \
				--gradient-checkpointing "$gc" --out "$out/runs/mlp_${a}_${prec}_$tag" --quiet >/dev/null \
				2>"$out/runs/mlp.log" || { fail=1; tail -2 "$out/runs/mlp.log"; }
		done
		for other in rgc blk; do
			bit_identical "$a $prec chunked resident vs $other" "$out/runs/mlp_${a}_${prec}_res" \
				"$out/runs/mlp_${a}_${prec}_$other"
		done
		# chunked and one chunk differ only in the order of the MLP's LoRA gradient sums
		losses_agree "$a $prec one chunk vs chunks of 40" 1e-4 "$out/runs/mlp_${a}_${prec}_one/events.jsonl" \
			"$out/runs/mlp_${a}_${prec}_chk/events.jsonl" || { echo "FAIL: chunked vs one chunk losses differ"; fail=1; }
	done
done
note "attention against a double reference at length (cuDNN up to 2^27 elements a pack, the kernels beyond)"
for shape in 32/8:32768 40/8:32768; do
	BENCH_REFERENCE=1 BENCH_HEADS=${shape%:*} build/gpu/bench_attention "${shape#*:}" >"$out/reference.log" 2>&1 ||
		{ echo "FAIL: attention $shape against the reference"; fail=1; }
	grep -E '^path|reference' "$out/reference.log"
done
note "HF transformers agreement"
if python3 -c 'import torch, transformers' 2>/dev/null; then
	python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cuda --workdir "$out/hf" || fail=1
	# head dims 128 and 64 at 2048 tokens: the cuDNN route (which must be the
	# one taken), then Poros' kernels on the same models
	python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cuda --workdir "$out/hf_long" \
		--seq 2048 --only qwen2_d128,llama_d64 | tee "$out/hf_long.jsonl" || fail=1
	[ "$(grep -c '"attention": "cudnn"' "$out/hf_long.jsonl")" = 2 ] ||
		{ echo "FAIL: the cuDNN attention route was not taken"; fail=1; }
	POROS_ATTENTION=mma python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cuda \
		--workdir "$out/hf_long_mma" --seq 2048 --only qwen2_d128,llama_d64 || fail=1
else
	echo "skipped: python3 with torch and transformers not found"
fi
note "poros-export against transformers and PEFT"
if python3 -c 'import torch, transformers, peft' 2>/dev/null; then
	python3 tests/gpu/export_check.py --bindir $P --workdir "$out/export" || fail=1
else
	echo "skipped: python3 with torch, transformers and peft not found"
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

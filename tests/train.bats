#!/usr/bin/env bats
# poros-train: a cell or flags in; events.jsonl, adapter/ and one summary line out.
# Everything runs on the CPU backend with the tiny models of configs/models.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	# a small, fast run; every test adds what it is about
	TINY=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8)
	ADAPTER=adapter/adapter_model.safetensors
}

# train NAME ARGS...: a run into directory NAME, summary in NAME.json
train() {
	local dir=$1
	shift
	poros-train "${TINY[@]}" --quiet --out "$dir" "$@" >"$dir.json"
}

@test "poros-train --version prints its name and version" {
	assert_version poros-train
}

@test "poros-train --help prints the synopsis on stdout and exits 0" {
	run -0 --separate-stderr poros-train --help
	assert_line --index 0 --partial "usage: poros-train [--cell FILE | --model ID]"
	[ -z "$stderr" ]
}

@test "an unknown option is a usage error with the synopsis on stderr" {
	run -2 --separate-stderr poros-train --bogus
	[ -z "$output" ]
	[[ "$stderr" == *"usage: poros-train"* ]]
}

@test "a bad value names the option and what is wrong with it" {
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --steps 0
	[ -z "$output" ]
	[ "$stderr" = "poros-train: --steps: must be at least 1, got 0" ]
	# a flag's range is its cell field's: a seed a cell refuses, the flag refuses too
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --seed 5000000000
	[ -z "$output" ]
	[ "$stderr" = "poros-train: --seed: must be at most 4294967295, got 5000000000" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --lr 0
	[ "$stderr" = "poros-train: --lr: must be greater than 0, got 0" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --dropout 1
	[ "$stderr" = "poros-train: --dropout: must be less than 1, got 1" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --rank 2.5
	[ "$stderr" = "poros-train: --rank: not a number: 2.5" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --train-on answers
	[ "$stderr" = 'poros-train: --train-on: unknown value "answers" (expected one of: assistant, all)' ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --mode sideways
	[[ "$stderr" == *'--mode: unknown value "sideways" (expected one of: blockwise, resident)'* ]]
}

@test "a tiny model trains and stdout is exactly one summary line" {
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 4 --out run
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.schema == "poros.summary/1" and .status == "ok" and .error == null
		and .method == "poros" and .mode == "blockwise" and .backend == "cpu" and .steps == 4
		and .warmup_steps == 0 and .steps_measured == 4 and .weights == "synthetic"
		and .run_dir == "run" and .events == "run/events.jsonl" and .adapter == "run/adapter"
		and .s_per_step > 0 and .s_per_step_min <= .s_per_step and .s_per_step <= .s_per_step_max
		and .tokens_per_s > 0 and .vram_peak_mb > 0 and .vram_avg_mb == .vram_peak_mb
		and .loss_first > 5 and .loss_first < 7 and .env.gpu_name == null and .env.python == null'
	# progress goes to stderr, one line a step
	[ "$(grep -c '^poros-train: step [1-4]/4 loss ' <<<"$stderr")" -eq 4 ]
	[ -f run/adapter/adapter_config.json ] && [ -f run/$ADAPTER ]
	jq -e '.r == 4 and .lora_alpha == 8 and .peft_type == "LORA" and .base_model_name_or_path == "poros/tiny-qwen2"
		and (.target_modules | length) == 7' run/adapter/adapter_config.json
}

@test "events.jsonl has one whole line per step with every field" {
	train run --model poros/tiny-llama --steps 3 --timing-warmup 1 --lr 1e-3 --block-size 2
	[ "$(wc -l <run/events.jsonl)" -eq 3 ]
	jq -e -s 'length == 3 and ([.[].step] == [1, 2, 3])
		and all(.[]; (keys_unsorted == ["step","loss","lr","grad_norm","step_s","tokens","tokens_supervised",
			"epoch","vram_alloc_mb","vram_peak_mb","h2d_bytes","h2d_s","compute_s","copy_hidden_frac"])
			and .epoch == null
			and .tokens == 64 and .tokens_supervised == 64 and .loss > 0 and .grad_norm > 0 and .step_s > 0)
		and .[0].lr == 0.001 and .[1].lr == 0.001
		and .[0].h2d_bytes > 0 and .[0].copy_hidden_frac == 0' run/events.jsonl
	# warmup steps are left out of the timing, and nothing else: the LR has no warmup
	jq -e '.warmup_steps == 1 and .steps_measured == 2' run.json
	# the timed steps are listed with the events' digits, and s_per_step is their median
	jq -e --slurpfile ev run/events.jsonl '.step_s == [$ev[1].step_s, $ev[2].step_s]
		and .s_per_step == ((.step_s[0] + .step_s[1]) / 2)' run.json
	# the summary's losses are the events' first and last, digit for digit
	[ "$(jq -r .loss_first run.json)" = "$(head -1 run/events.jsonl | jq -r .loss)" ]
	[ "$(jq -r .loss_last run.json)" = "$(tail -1 run/events.jsonl | jq -r .loss)" ]
}

# parity MODEL ARGS...: resident (activations kept, or each layer recomputed)
# and blockwise (block sizes 1, 2, 3) runs give the same bits
parity() {
	local model=$1
	shift
	train resident --model "$model" --mode resident --steps 3 "$@"
	for run in recompute block1 block2 block3; do
		case $run in
		recompute) train "$run" --model "$model" --mode resident --gradient-checkpointing on --steps 3 "$@" ;;
		*) train "$run" --model "$model" --mode blockwise --block-size "${run#block}" --steps 3 "$@" ;;
		esac
		cmp resident/$ADAPTER "$run/$ADAPTER"
		diff <(jq -r .loss resident/events.jsonl) <(jq -r ".loss" "$run/events.jsonl")
	done
	# the runs learned something: the comparison is not of three zeros
	[ "$(jq -r .loss resident/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "blockwise and resident are bit-identical: qwen2, nf4, accumulation 4, dropout" {
	parity poros/tiny-qwen2 --precision nf4 --accum 4 --dropout 0.1 --lr 5e-3
}

@test "blockwise and resident are bit-identical: llama (tied), bf16, accumulation 1" {
	parity poros/tiny-llama --precision bf16 --accum 1 --dropout 0 --lr 5e-3
}

@test "blockwise and resident are bit-identical: qwen3 (qk-norm), nf4, accumulation 4" {
	parity poros/tiny-qwen3 --precision nf4 --accum 4 --dropout 0.05 --lr 5e-3 --lr-schedule cosine --timing-warmup 1
}

@test "resident keeps every layer's activations unless --gradient-checkpointing on; blockwise always recomputes" {
	train keep --model poros/tiny-qwen2 --mode resident --steps 1
	train ckpt --model poros/tiny-qwen2 --mode resident --steps 1 --gradient-checkpointing on
	train blk_off --model poros/tiny-qwen2 --steps 1 --gradient-checkpointing off
	train blk_on --model poros/tiny-qwen2 --steps 1 --gradient-checkpointing on
	local keep ckpt layers mlp
	keep=$(jq .vram_breakdown_mb.activations keep.json)
	ckpt=$(jq .vram_breakdown_mb.activations ckpt.json)
	layers=$(jq .num_hidden_layers "$BATS_TEST_DIRNAME/../configs/models/tiny_qwen2.json")
	# kept: one set per layer with its gate, up and h (T = 64 rows of F
	# bf16, F bf16, F + 64 bf16: NF4 at rank 4 gives 64 extension columns);
	# recomputed: one set, whose MLP is chunk by chunk in the workspace
	# (MiB rounded to 3 places)
	mlp=$(jq '64 * (4 * .intermediate_size + 2 * (.intermediate_size + 64)) / 1048576' \
		"$BATS_TEST_DIRNAME/../configs/models/tiny_qwen2.json")
	jq -n -e --argjson k "$keep" --argjson c "$ckpt" --argjson l "$layers" --argjson m "$mlp" '$l >= 2 and $c > 0
		and ($k - $l * ($c + $m) | fabs) <= 0.001 * $l'
	[ "$(jq .vram_breakdown_mb.activations blk_off.json)" = "$(jq .vram_breakdown_mb.activations blk_on.json)" ]
	cmp keep/$ADAPTER ckpt/$ADAPTER
}

@test "resident out of memory for its kept activations says how to trade them" {
	train on --model poros/tiny-qwen2 --mode resident --steps 1 --gradient-checkpointing on
	local budget
	budget=$(jq '(.vram_peak_mb + 0.25) * 1048576 | floor' on.json)
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --steps 1 --out off \
		--vram-budget "$budget"
	echo "$output" | jq -e '.status == "oom"
		and (.error | endswith("(resident keeps all 4 layers'"'"' activations: --gradient-checkpointing on keeps one layer'"'"'s)"))'
	# the same budget holds the recomputing run
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --steps 1 --out on2 --quiet \
		--gradient-checkpointing on --vram-budget "$budget" | jq -e '.status == "ok"'
}

@test "--gradient-checkpointing takes on or off, and a cell's setting" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --gradient-checkpointing yes
	[ "$stderr" = 'poros-train: --gradient-checkpointing: unknown value "yes" (expected one of: off, on, false, true)' ]
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench --jsonl | grep '"cell_id":"resident_tiny_qwen2_bf16"' >cell.json
	jq -c '.training.gradient_checkpointing = true' cell.json >on.json
	poros-train --cell on.json --backend cpu --steps 1 --quiet --out on >on.out
	poros-train --cell cell.json --backend cpu --steps 1 --quiet --out off >off.out
	jq -n -e --slurpfile a on.out --slurpfile b off.out '$a[0].vram_breakdown_mb.activations < $b[0].vram_breakdown_mb.activations'
}

@test "POROS_LORA_EXT takes 0 or 1: another value is a usage error before anything runs" {
	POROS_LORA_EXT=off run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_LORA_EXT: unknown value "off" (expected 0 or 1)' ]
	[ -z "$output" ] && [ ! -e run ]
	POROS_LORA_EXT=0 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1 --quiet --out zero | jq -e '.status == "ok"'
}

@test "POROS_ATTENTION takes mma or cudnn: another value is a usage error before anything runs" {
	POROS_ATTENTION=flash run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_ATTENTION: unknown value "flash" (expected mma or cudnn)' ]
	[ -z "$output" ] && [ ! -e run ]
	for v in mma cudnn; do
		POROS_ATTENTION=$v poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1 --quiet --out "r$v" |
			jq -e '.status == "ok"'
	done
}

# refuses VAR WHAT VALUE...: poros-train with VAR set to each value is a
# usage error before anything runs: exit 2, "VAR: "VALUE" is not WHAT" on
# stderr, nothing on stdout, no run directory
refuses() {
	local var=$1 what=$2 v
	shift 2
	for v in "$@"; do
		run -2 --separate-stderr env "$var=$v" poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
		[ "$stderr" = "poros-train: $var: \"$v\" is not $what" ]
		[ -z "$output" ] && [ ! -e run ]
	done
}

@test "POROS_CUDNN_WORKSPACE takes MiB from 64 to 65536: another value is a usage error; the CUDA plan counts it" {
	refuses POROS_CUDNN_WORKSPACE "a number of MiB from 64 to 65536" 0 63 65537 4G x
	# 7B at 8192 tokens: 7 of the 28 heads a call in 1 GiB (896 MiB of dS),
	# 14 in 4 GiB (1792 MiB; 28 would be over ops.h's 2^31-byte dS bound): the
	# workspace grows by the difference, and one call's gradients and
	# accumulator for 7 more heads (966 MiB in all)
	local q=(--plan --backend cuda --model Qwen/Qwen2.5-7B --precision bf16 --seq-len 8192 --rank 16)
	one=$(poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	four=$(POROS_CUDNN_WORKSPACE=4096 poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	jq -en --argjson a "$one" --argjson b "$four" '$b - $a > 900 and $b - $a < 1000'
}

@test "POROS_CUDNN_TILE takes auto or a multiple of 64 tokens: another value is a usage error; the CUDA plan counts it" {
	refuses POROS_CUDNN_TILE "auto or a token count, a multiple of 64" 0 63 100 -64 1k x
	# 7B at 32768 tokens: one call a head holds 2 GiB of dS (ops.h), tiles
	# of 4096 tokens 7 heads' 224 MiB, and one group's per-head dk, dv
	local q=(--plan --backend cuda --model Qwen/Qwen2.5-7B --precision bf16 --seq-len 32768 --rank 16)
	whole=$(poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	tiles=$(POROS_CUDNN_TILE=4096 poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	jq -en --argjson a "$whole" --argjson b "$tiles" '$a - $b > 2000'
	# auto: tiles only where one call does not run (at 131072, about 1 GiB
	# of one tile's dS and its parts more than the kernels' backward)
	q=(--plan --backend cuda --model Qwen/Qwen2.5-7B --precision nf4 --seq-len 131072 --block-size 1 --rank 16)
	unset_mb=$(poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	auto_mb=$(POROS_CUDNN_TILE=auto poros-train "${q[@]}" | jq .vram_breakdown_mb.workspace)
	jq -en --argjson a "$unset_mb" --argjson b "$auto_mb" '$b - $a > 900 and $b - $a < 1100'
}

@test "POROS_CUDNN_DOC_MIN takes a token count >= 1: another value is a usage error before anything runs" {
	refuses POROS_CUDNN_DOC_MIN "a token count >= 1" 0 -3 12x big
	POROS_CUDNN_DOC_MIN=64 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1 --quiet --out r64 |
		jq -e '.status == "ok"'
}

@test "POROS_ATTN_CKPT takes 0, 1 or 2: another value is a usage error; each level is the same bits" {
	POROS_ATTN_CKPT=yes run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_ATTN_CKPT: unknown value "yes" (expected 0, 1 or 2)' ]
	[ -z "$output" ] && [ ! -e run ]
	# the recomputation takes the forward's attention, or runs it again: the same
	# losses and adapter, with packed documents (a document mask) and accumulation
	jq -cn '{input_ids: [range(0; 20) | (. * 7) % 250]}, {input_ids: [range(0; 50) | (. * 3) % 250]}' >docs.jsonl
	for v in 2 1 0; do
		POROS_ATTN_CKPT=$v train "a$v" --model poros/tiny-qwen3 --mode blockwise --steps 3 --accum 2 \
			--dataset docs.jsonl --block-size 3
		jq -e '.status == "ok"' "a$v.json"
	done
	for v in 1 2; do
		cmp a$v/$ADAPTER a0/$ADAPTER
		[ "$(jq -c '[.loss]' a$v/events.jsonl)" = "$(jq -c '[.loss]' a0/events.jsonl)" ]
	done
	jq -e '.schedule.attention_checkpoints == true and .schedule.attention_sublayer == true' a2.json
	jq -e '.schedule.attention_checkpoints == true and .schedule.attention_sublayer == false' a1.json
	jq -e '.schedule.attention_checkpoints == false and .schedule.attention_sublayer == false' a0.json
	# and the default (on, where the host has room) is the same run
	train auto --model poros/tiny-qwen3 --mode blockwise --steps 3 --accum 2 --dataset docs.jsonl --block-size 3
	cmp a1/$ADAPTER auto/$ADAPTER
}

@test "POROS_LANES takes 1 or 2: another value is a usage error; one lane or two are the same bits" {
	POROS_LANES=3 run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_LANES: unknown value "3" (expected 1 or 2)' ]
	[ -z "$output" ] && [ ! -e run ]
	# micro-batches two at a time, each lane on its own buffers (on the CPU in
	# turn): the same losses and adapter, with packed documents and dropout, an
	# odd accumulation (the last micro-batch alone), layer and block checkpoints
	jq -cn '{input_ids: [range(0; 20) | (. * 7) % 250]}, {input_ids: [range(0; 50) | (. * 3) % 250]}' >docs.jsonl
	# an evaluation set of several micro-batches: its forward runs on the lanes too
	for d in 1 2 3 4 5 6 7 8; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 30 + $d * 5) | (. * 11 + $d) % 250]}'
	done >eval.jsonl
	for ck in layer block; do
		for v in 1 2; do
			POROS_LANES=$v train "$ck$v" --model poros/tiny-qwen3 --mode blockwise --steps 3 --accum 3 \
				--dataset docs.jsonl --block-size 2 --checkpoints "$ck" --dropout 0.1 \
				--eval-dataset eval.jsonl --eval-every 1
			jq -e '.status == "ok" and .eval_loss > 0' "$ck$v.json"
		done
		cmp "${ck}1/$ADAPTER" "${ck}2/$ADAPTER"
		[ "$(jq -c '[.loss, .grad_norm, .eval_loss]' "${ck}1/events.jsonl")" = \
			"$(jq -c '[.loss, .grad_norm, .eval_loss]' "${ck}2/events.jsonl")" ]
	done
	# and both are resident's bits
	train res --model poros/tiny-qwen3 --mode resident --steps 3 --accum 3 --dataset docs.jsonl --dropout 0.1
	cmp res/$ADAPTER layer2/$ADAPTER
	# a run saved with two lanes resumes with one, bit for bit
	POROS_LANES=2 train part --model poros/tiny-qwen3 --mode blockwise --steps 3 --accum 3 --dataset docs.jsonl \
		--block-size 2 --dropout 0.1 --save-every 2
	POROS_LANES=1 poros-train --resume part/checkpoint-step2 "${TINY[@]}" --quiet --out resumed >resumed.json
	jq -e '.status == "ok"' resumed.json
	cmp resumed/$ADAPTER res/$ADAPTER
}

@test "a group's attention is one call where the backend keeps each sequence's bits at any batch (the CPU)" {
	# 4 layers, 5 micro-batches in groups of 4: a group of 4 and one of 1 a
	# layer, the attention forward once a layer and call (its output kept)
	POROS_PROFILE=1 POROS_GROUP=4 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode blockwise --steps 1 \
		--accum 5 --seq-len 64 --out g 2>g.err >g.json
	jq -e '.schedule.group == 4' g.json
	sed -n 's/^poros-train: profile step 1: //p' g.err | jq -e '.attn_fwd.n == 4 * 2 and .attn_bwd.n == 4 * 2'
}

@test "POROS_GEMM_CHOICE takes micro-batch or group: another value is a usage error; the CPU's bits are the same" {
	POROS_GEMM_CHOICE=groups run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_GEMM_CHOICE: unknown value "groups" (expected micro-batch or group)' ]
	[ -z "$output" ] && [ ! -e run ]
	local g=(--model poros/tiny-qwen2 --mode blockwise --steps 2 --accum 4 --seq-len 64)
	for v in micro-batch group; do
		POROS_GROUP=4 POROS_GEMM_CHOICE=$v train "c$v" "${g[@]}"
		jq -e '.status == "ok" and .schedule.group == 4' "c$v.json"
	done
	cmp cmicro-batch/$ADAPTER cgroup/$ADAPTER
}

@test "POROS_GROUP takes 1 to 8: another value is a usage error; micro-batches a call are the same bits" {
	for v in 0 9 2x; do
		POROS_GROUP=$v run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
		[ "$stderr" = "poros-train: POROS_GROUP: \"$v\" is not a number of micro-batches from 1 to 8" ]
		[ -z "$output" ] && [ ! -e run ]
	done
	# rows a multiple of 128 (seq 64 x batch 2): groups of 2 and 4 in a step of
	# 5 (the last group short), packed documents, layer and block checkpoints,
	# with dropout (the LoRA ops a micro-batch at a time, each its own mask) and
	# without (one call a group, dA and dB a micro-batch at a time), an
	# evaluation of 8 micro-batches: the losses and adapter of one a call
	local g=(--model poros/tiny-qwen3 --mode blockwise --steps 3 --accum 5 --seq-len 64 --dataset docs.jsonl
		--block-size 2 --eval-dataset eval.jsonl --eval-every 2)
	jq -cn '{input_ids: [range(0; 70) | (. * 7) % 250]}, {input_ids: [range(0; 150) | (. * 3) % 250]}' >docs.jsonl
	for d in 1 2 3 4 5 6 7 8; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 100 + $d * 9) | (. * 11 + $d) % 250]}'
	done >eval.jsonl
	for p in 0 0.1; do
		for ck in layer block; do
			for v in 1 2 4; do
				POROS_GROUP=$v train "$ck$v-$p" "${g[@]}" --checkpoints "$ck" --dropout "$p"
				jq -e '.status == "ok" and .eval_loss > 0' "$ck$v-$p.json"
				# the summary says how the run was laid out
				jq -e --argjson v "$v" '.schedule.group == $v and .schedule.lanes == 1' "$ck$v-$p.json"
			done
			for v in 2 4; do
				cmp "${ck}1-$p/$ADAPTER" "$ck$v-$p/$ADAPTER"
				[ "$(jq -c '[.loss, .grad_norm, .eval_loss]' "${ck}1-$p/events.jsonl")" = \
					"$(jq -c '[.loss, .grad_norm, .eval_loss]' "$ck$v-$p/events.jsonl")" ]
			done
		done
	done
	# and resident's bits
	train res "${g[@]}" --mode resident --dropout 0
	cmp res/$ADAPTER layer4-0/$ADAPTER
	jq -e '.schedule == {lanes: 1, group: 1, checkpoint_sets: null, attention_checkpoints: null, attention_sublayer: null}' res.json
	# a run saved with groups resumes without, bit for bit
	POROS_GROUP=4 train part "${g[@]}" --dropout 0 --save-every 2
	poros-train --resume part/checkpoint-step2 "${TINY[@]}" --seq-len 64 --quiet --out resumed >resumed.json
	jq -e '.status == "ok"' resumed.json
	cmp resumed/$ADAPTER layer1-0/$ADAPTER
}

@test "POROS_MLP_CHUNK takes a positive row count: another value is a usage error; the same count is the same bits" {
	POROS_MLP_CHUNK=0 run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_MLP_CHUNK: too small: 0' ]
	[ -z "$output" ] && [ ! -e run ]
	POROS_MLP_CHUNK=4k run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_MLP_CHUNK: not a number: 4k' ]
	# 64 rows in chunks of 24: blockwise and resident the same bits
	POROS_MLP_CHUNK=24 train blk --model poros/tiny-qwen2 --steps 2 --accum 2
	POROS_MLP_CHUNK=24 train res --model poros/tiny-qwen2 --steps 2 --accum 2 --mode resident
	cmp blk/$ADAPTER res/$ADAPTER
	# a chunk of all 64 rows is no chunking: the default's bits
	POROS_MLP_CHUNK=64 train whole --model poros/tiny-qwen2 --steps 2 --accum 2
	train default --model poros/tiny-qwen2 --steps 2 --accum 2
	cmp whole/$ADAPTER default/$ADAPTER
	! cmp -s blk/$ADAPTER default/$ADAPTER
}

@test "--no-prefetch changes the copies, not the bits" {
	train a --model poros/tiny-qwen2 --block-size 1 --steps 2 --accum 2
	train b --model poros/tiny-qwen2 --block-size 1 --steps 2 --accum 2 --no-prefetch
	cmp a/$ADAPTER b/$ADAPTER
	diff <(jq -r .loss a/events.jsonl) <(jq -r .loss b/events.jsonl)
	# four blocks of one layer: step 1 copies all four forward and two more
	# backward (the last two are still in the slabs at the turn)
	layer_bytes=$(( $(jq -s '.[0].h2d_bytes' a/events.jsonl) / 6 ))
	jq -e -s --argjson l "$layer_bytes" '.[0].h2d_bytes == 6 * $l and .[1].h2d_bytes == 4 * $l' a/events.jsonl
}

@test "synthetic weights and data follow the seed" {
	train s1 --model poros/tiny-qwen2 --steps 1 --seed 7
	train s2 --model poros/tiny-qwen2 --steps 1 --seed 7
	train s3 --model poros/tiny-qwen2 --steps 1 --seed 8
	cmp s1/$ADAPTER s2/$ADAPTER
	! cmp -s s1/$ADAPTER s3/$ADAPTER
	[ "$(jq -r .loss_first s1.json)" = "$(jq -r .loss_first s2.json)" ]
	[ "$(jq -r .loss_first s1.json)" != "$(jq -r .loss_first s3.json)" ]
}

@test "the loss falls below half on a repeating sequence" {
	train run --model poros/tiny-qwen2 --precision bf16 --dataset synthetic:repeat --steps 20 \
		--lr 1e-2 --dropout 0 --rank 8 --alpha 16
	jq -e '.loss_last < 0.5 * .loss_first' run.json
}

@test "a VRAM budget too small is an oom with exit 1 and nothing written" {
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --out run --vram-budget 64K
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.status == "oom" and (.error | test("^the run needs .* of device memory, over --vram-budget 64.0 KiB; the largest: "))
		and .steps == 0 and .events == null and .adapter == null and .loss_first == null'
	[[ "$stderr" == "poros-train: the run needs "*"over --vram-budget 64.0 KiB"* ]]
	[ ! -e run/events.jsonl ]
	[ ! -e run/adapter ]
}

@test "a base larger than the host's available memory is an oom before anything is allocated" {
	avail_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	[ -n "$avail_kib" ] || skip "no MemAvailable in /proc/meminfo"
	# Qwen2.5-72B in bf16: 145 GB of host weights
	[ "$avail_kib" -lt 140000000 ] || skip "this host has more memory than a 72B bf16 base needs"
	run -1 --separate-stderr poros-train "${TINY[@]}" --model Qwen/Qwen2.5-72B --precision bf16 --steps 1 --out run
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.status == "oom" and .steps == 0 and .adapter == null
		and (.error | test("^the base needs 1[0-9][0-9][.][0-9] GiB of host memory, .* available [(]MemAvailable[)]$"))'
	[[ "$stderr" == *"poros-train: the base needs "*" of host memory"* ]]
	[ ! -e run/adapter ]
}

@test "an oom leaves an earlier run's events out of the run directory, not half-mixed" {
	train run --model poros/tiny-qwen2 --steps 2
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run --vram-budget 1K
	[ ! -e run/events.jsonl ]
}

@test "a missing dataset is an error naming it, with nothing on stdout" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --dataset nowhere/data.jsonl --out run
	[ -z "$output" ]
	[[ "$stderr" == "poros-train: "*"nowhere/data.jsonl"* ]]
	[ ! -e run ]
}

@test "a token outside the vocabulary is an error with its position" {
	printf '\001\000\002\000\000\001\003\000' >tokens.u16   # 1, 2, 256, 3
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --dataset tokens.u16 --out run
	[ -z "$output" ]
	[ "$stderr" = "poros-train: tokens.u16: token 256 at index 2 (byte 4) >= vocabulary size 256" ]
}

@test "a raw token file trains" {
	for i in $(seq 0 199); do printf "\\$(printf %o $((i % 250)))\\000"; done >tokens.u16
	train run --model poros/tiny-qwen2 --dataset tokens.u16 --steps 2
	jq -e '.status == "ok" and .steps == 2' run.json
}

@test "an unknown model is an error listing where it looked" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model nobody/no-such-model --out run
	[ -z "$output" ]
	[[ "$stderr" == 'poros-train: model "nobody/no-such-model": no config.json found (looked in: '* ]]
}

@test "a cell on stdin runs in its method's mode; a peft cell is refused" {
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench --jsonl >cells.jsonl
	grep '"cell_id":"resident_tiny_qwen2_bf16"' cells.jsonl >resident.json
	run -0 --separate-stderr poros-train --cell - --backend cpu --steps 2 --quiet --out run <resident.json
	echo "$output" | jq -e '.status == "ok" and .method == "resident" and .mode == "resident" and .steps == 2'
	grep '"method":"peft"' cells.jsonl | head -1 >peft.json
	run -2 --separate-stderr poros-train --cell peft.json --backend cpu
	[ -z "$output" ]
	[[ "$stderr" == "poros-train: peft.json: poros-train runs methods poros and resident; use poros-arm for peft" ]]
}

@test "a cell's run directory is <output_dir>/runs/<cell_id>" {
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench --jsonl |
		grep '"cell_id":"poros_tiny_llama_nf4"' >cell.json
	run -0 --separate-stderr poros-train --cell cell.json --backend cpu --steps 1 --quiet
	echo "$output" | jq -e '.run_dir == "bench/runs/poros_tiny_llama_nf4" and .mode == "blockwise"'
	[ -f bench/runs/poros_tiny_llama_nf4/$ADAPTER ]
}

@test "a real checkpoint trains with weights real" {
	gen="$POROS_ROOT/build/tests/test_train_weights"
	[ -x "$gen" ] || skip "build/tests/test_train_weights (the fixture generator) is not built: make test builds it"
	(cd "$POROS_ROOT" && "$gen" --write-checkpoint "$BATS_TEST_TMPDIR/ckpt")
	[ -f ckpt/config.json ] && [ -f ckpt/model.safetensors ]
	train run --model "$PWD/ckpt" --dataset synthetic --steps 2
	jq -e '.status == "ok" and .weights == "real"' run.json
	jq -e '.base_model_name_or_path | endswith("/ckpt")' run/adapter/adapter_config.json
}

@test "--init-adapter continues from a saved adapter and checks its shape" {
	train first --model poros/tiny-qwen2 --steps 2 --save-every 1
	[ -f first/adapter-step1/adapter_model.safetensors ]
	[ ! -e first/adapter-step2 ]
	train again --model poros/tiny-qwen2 --steps 1 --init-adapter first/adapter
	# starting from a trained adapter, not from B = 0: the first loss differs
	[ "$(jq -r .loss_first again.json)" != "$(jq -r .loss_first first.json)" ]
	run -2 --separate-stderr poros-train "${TINY[@]}" --rank 8 --model poros/tiny-qwen2 --out bad \
		--init-adapter first/adapter
	[[ "$stderr" == *"rank 4, but this run trains rank 8"* ]]
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --targets q_proj,v_proj --out bad \
		--init-adapter first/adapter
	[[ "$stderr" == *"targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj, but this run targets q_proj,v_proj"* ]]
}

@test "--backend cuda without a usable device is a runtime error with a summary" {
	have_gpu && skip "a GPU is present"
	run -1 --separate-stderr poros-train "${TINY[@]/cpu/cuda}" --model poros/tiny-qwen2 --out run
	echo "$output" | jq -e '.status == "error" and (.error | startswith("--backend cuda: "))'
}

@test "staging the next batch on a second thread changes no bits: a JSONL dataset and synthetic data" {
	# six distinct documents of input_ids, so every step sees other tokens
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done > data.jsonl
	for data in data.jsonl synthetic; do
		train "pre_$data" --model poros/tiny-qwen2 --steps 4 --accum 2 --dataset "$data"
		POROS_NO_DATA_PREFETCH=1 train "inline_$data" --model poros/tiny-qwen2 --steps 4 --accum 2 --dataset "$data"
		cmp "pre_$data/$ADAPTER" "inline_$data/$ADAPTER"
		diff <(jq -r .loss "pre_$data/events.jsonl") <(jq -r .loss "inline_$data/events.jsonl")
		[ "$(jq -r .loss "pre_$data/events.jsonl" | sort -u | wc -l)" -eq 4 ]
	done
}

# four documents of 5 ids: 24 tokens with their EOS, 20 targets
four_docs() {
	for d in 1 2 3 4; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 5) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
}

@test "--epochs sets the steps from the rows of an epoch, and each event carries its epoch" {
	four_docs
	# rows of 4: ceil(23 / 4) = 6 per epoch; 2 rows a step: 3 steps an epoch
	local run=(poros-train --backend cpu --model poros/tiny-qwen2 --rank 4 --seq-len 4 --batch-size 1 --accum 2
		--dataset docs.jsonl)
	run -0 --separate-stderr "${run[@]}" --epochs 2 --out ep
	jq -e '.status == "ok" and .steps == 6' <<<"$output"
	[ "$(jq -c -s 'map(.epoch)' ep/events.jsonl)" = '[0.3333,0.6667,1,1.3333,1.6667,2]' ]
	# the line before step 1: documents, tokens, supervised tokens, rows, steps, epochs
	[ "$(grep -c 'dataset docs.jsonl' <<<"$stderr")" -eq 1 ]
	grep -qx 'poros-train: dataset docs.jsonl: 4 documents, 24 tokens, 20 supervised; 6 rows of 4 per epoch; 6 steps of 2 rows: 2 epochs' <<<"$stderr"
	[ "$(grep -n 'dataset docs.jsonl' <<<"$stderr" | cut -d: -f1)" -lt "$(grep -n 'step 1/6' <<<"$stderr" | cut -d: -f1)" ]
	# the same run as --steps 6, bit for bit
	"${run[@]}" --steps 6 --quiet --out st >/dev/null
	cmp "ep/$ADAPTER" "st/$ADAPTER"
	diff <(jq -c '[.loss, .grad_norm, .epoch]' ep/events.jsonl) <(jq -c '[.loss, .grad_norm, .epoch]' st/events.jsonl)
	# a fraction of an epoch rounds the steps up: ceil(1.5 x 6 / 2) = 5
	"${run[@]}" --epochs 1.5 --quiet --out half | jq -e '.steps == 5'
	# --steps is max_steps: it wins, and the line says so
	run -0 --separate-stderr "${run[@]}" --epochs 2 --steps 2 --out both
	jq -e '.steps == 2' <<<"$output"
	grep -q '; 2 steps of 2 rows (--steps wins over --epochs 2): 0.6667 epochs$' <<<"$stderr"
	# a stream without an end has no epochs
	run -2 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --epochs 1 --out r
	[ "$stderr" = 'poros-train: --epochs: dataset synthetic is an endless stream; give --steps' ]
	run -2 --separate-stderr "${run[@]}" --epochs 0 --out r
	[[ "$stderr" == "poros-train: --epochs: "* ]]
	[ ! -e r ]
}

@test "HF's option names are aliases: the same run bit for bit" {
	four_docs
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --lr 1e-3 --steps 3 --batch-size 1 \
		--accum 2 --rank 4 --alpha 8 --dropout 0 --seq-len 4 --out ours >/dev/null
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --learning-rate 1e-3 --max-steps 3 \
		--per-device-train-batch-size 1 --gradient-accumulation-steps 2 --lora-r 4 --lora-alpha 8 --lora-dropout 0 \
		--max-seq-length 4 --output-dir hf >hf.json
	cmp "ours/$ADAPTER" "hf/$ADAPTER"
	diff <(jq -c '[.loss, .lr, .grad_norm]' ours/events.jsonl) <(jq -c '[.loss, .lr, .grad_norm]' hf/events.jsonl)
	jq -e '.r == 4 and .lora_alpha == 8' hf/adapter/adapter_config.json
	# --num-train-epochs is --epochs, --resume-from-checkpoint is --resume
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --seq-len 4 --batch-size 1 \
		--num-train-epochs 1 --save-every 2 --out ep | jq -e '.steps == 6'
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --seq-len 4 --batch-size 1 \
		--steps 6 --resume-from-checkpoint ep/checkpoint-step2 --out again >/dev/null
	cmp "ep/$ADAPTER" "again/$ADAPTER"
	# --warmup-steps is HF's LR warmup (--lr-warmup), --target-modules takes PEFT's all-linear
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --seq-len 4 --steps 3 \
		--lr-warmup 2 --targets all --out lw >/dev/null
	poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --quiet --seq-len 4 --steps 3 \
		--warmup-steps 2 --target-modules all-linear --out hw >/dev/null
	cmp "lw/$ADAPTER" "hw/$ADAPTER"
	[ "$(jq -s -c 'map(.lr)' hw/events.jsonl)" = "$(jq -s -c 'map(.lr)' lw/events.jsonl)" ]
	jq -e -s '.[0].lr < .[2].lr' hw/events.jsonl
	# booleans take true and false as on and off: the memory plan says which
	local b
	for b in true on false off; do
		poros-train --backend cpu --model poros/tiny-qwen2 --dataset docs.jsonl --mode resident --seq-len 4 \
			--gradient-checkpointing "$b" --plan | jq .vram_plan_mb >"plan-$b"
	done
	cmp plan-true plan-on && cmp plan-false plan-off
	! cmp -s plan-on plan-off
}

@test "an unknown option names the closest one, and an option without its value says so" {
	run -2 --separate-stderr poros-train --lerning-rate 1e-3
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--lerning-rate" (did you mean --learning-rate?)' ]
	[[ "$stderr" == *"usage: poros-train"* ]] && [ -z "$output" ]
	run -2 --separate-stderr poros-train --learning_rate=1e-3
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--learning_rate=1e-3" (did you mean --learning-rate?)' ]
	run -2 --separate-stderr poros-train --seq_len 8
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--seq_len" (did you mean --seq-len?)' ]
	# names are taken whole, never as a prefix (getopt_long's default): the names it starts are named
	run -2 --separate-stderr poros-train --eval x
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--eval" (options are whole names: did you mean --eval-dataset, --eval-every, --eval-split, --eval-fraction, --eval-only?)' ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --ste 3 --plan
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--ste" (options are whole names: did you mean --steps?)' ]
	[ -z "$output" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --steps=3 --lr-sched=cosine --plan
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--lr-sched=cosine" (options are whole names: did you mean --lr-schedule?)' ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --learning-r 1e-3 --plan
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--learning-r" (options are whole names: did you mean --learning-rate?)' ]
	# the whole name, with its value apart or after "=", is taken
	poros-train --backend cpu --model poros/tiny-qwen2 --steps=3 --seq-len 8 --plan | jq -e '.schema == "poros.plan/1"'
	run -2 --separate-stderr poros-train --zzzzzzzz
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "--zzzzzzzz"' ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --steps
	[ "${stderr%%$'\n'*}" = 'poros-train: option --steps needs a value' ]
	run -2 --separate-stderr poros-train -x
	[ "${stderr%%$'\n'*}" = 'poros-train: unknown option "-x"' ]
}

@test "--help gives every option of the table a line of its own" {
	local names n
	names=$(sed -n '/^#define TRAIN_OPTIONS/,/^$/p' "$POROS_ROOT/tools/poros-train/train.h" |
		grep -o 'X([A-Z_]*, "[a-z-]*"' | sed 's/.*"\(.*\)"/\1/')
	[ "$(wc -l <<<"$names")" -ge 40 ]
	run -0 --separate-stderr poros-train --help
	for n in $names; do
		# "  --name ARG  what it does": a name without its line fails here
		grep -qE -- "^  --$n( [^ ]+)?  +[^ ]" <<<"$output" || fail "--help has no line for --$n"
	done
	grep -qE -- '^  --timing-warmup N  +leading steps left out of the timing' <<<"$output"
	grep -qE -- '^  --warmup-steps = --lr-warmup$' <<<"$output"
	# the synopsis names every option too
	for n in $names; do
		[[ "$output" == *"[--$n"* || "$output" == *"| --$n"* ]] || fail "the synopsis lacks --$n"
	done
}

@test "--warmup is refused, naming --timing-warmup and --lr-warmup" {
	local want='poros-train: --warmup is no longer an option: --timing-warmup N leaves the first N steps out of the timing; --lr-warmup N (HF'"'"'s --warmup-steps) ramps the learning rate up over N steps'
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --warmup 1 --plan
	[ "$stderr" = "$want" ] && [ -z "$output" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --warmup=1 --plan
	[ "$stderr" = "$want" ]
	# the new name is the timing warm-up: left out of the timing, and the LR as without it
	train tw --model poros/tiny-qwen2 --steps 3 --timing-warmup 2
	jq -e '.warmup_steps == 2 and .steps_measured == 1' tw.json
	train none --model poros/tiny-qwen2 --steps 3
	[ "$(jq -s -c 'map(.lr)' tw/events.jsonl)" = "$(jq -s -c 'map(.lr)' none/events.jsonl)" ]
	cmp "tw/$ADAPTER" "none/$ADAPTER"
}

@test "-h is --help on every tool" {
	local tool
	for tool in poros-arm poros-expand poros-export poros-merge poros-parity poros-render poros-tokenize poros-train poros-checkpoint poros-cell; do
		run -0 --separate-stderr "$tool" -h
		[ -n "$output" ] && [ -z "$stderr" ]
		[ "$output" = "$("$tool" --help)" ] || fail "$tool -h differs from --help"
	done
	[ "$(poros -h)" = "$(poros --help)" ]
}

@test "--optimizer-state host keeps the AdamW moments on the host: the same bits, less device memory" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --optimizer-state disk --out run
	[ "$stderr" = 'poros-train: --optimizer-state: unknown value "disk" (expected one of: device, host)' ]
	[ -z "$output" ] && [ ! -e run ]
	POROS_OPT_CHUNK=0 run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_OPT_CHUNK: too small: 0' ]
	# both schedules, accumulation, weight decay; the moments in chunks of
	# 1000 parameters (several chunks and a short last one) or in one
	for mode in blockwise resident; do
		train "dev_$mode" --model poros/tiny-qwen3 --mode "$mode" --steps 3 --accum 2 --weight-decay 0.1
		POROS_OPT_CHUNK=1000 train "host_$mode" --model poros/tiny-qwen3 --mode "$mode" --steps 3 --accum 2 \
			--weight-decay 0.1 --optimizer-state host
		cmp "dev_$mode/$ADAPTER" "host_$mode/$ADAPTER"
		diff <(jq -c '[.loss, .grad_norm]' "dev_$mode/events.jsonl") <(jq -c '[.loss, .grad_norm]' "host_$mode/events.jsonl")
	done
	train host_one --model poros/tiny-qwen3 --steps 3 --accum 2 --weight-decay 0.1 --optimizer-state host
	cmp dev_blockwise/$ADAPTER host_one/$ADAPTER
	# a checkpoint of the host moments resumes to the same bits
	POROS_OPT_CHUNK=1000 train half --model poros/tiny-qwen3 --steps 3 --accum 2 --weight-decay 0.1 \
		--optimizer-state host --save-every 2
	POROS_OPT_CHUNK=1000 train resumed --model poros/tiny-qwen3 --steps 3 --accum 2 --weight-decay 0.1 \
		--optimizer-state host --resume half/checkpoint-step2
	cmp dev_blockwise/$ADAPTER resumed/$ADAPTER
	# the plan: the moments (2 x 4 bytes a parameter) leave the device for the
	# host, but for the chunk they pass through (2 x 4M parameters, 32 MiB)
	for s in device host; do
		poros-train --model Qwen/Qwen2.5-7B --backend cuda --precision nf4 --seq-len 1024 --rank 16 --alpha 32 \
			--targets all --dataset synthetic --plan --optimizer-state "$s" >"plan_$s.json"
	done
	jq -e '.optimizer_state == "device" and (.host_breakdown_mb | has("optimizer_state") | not)' plan_device.json
	jq -e '.optimizer_state == "host"' plan_host.json
	jq -e -s '(.[0].vram_breakdown_mb.lora_state - .[1].vram_breakdown_mb.lora_state) as $saved
		| .[1].host_breakdown_mb.optimizer_state as $moved
		| ($moved > 0) and ((($saved - $moved + 32) | fabs) < 0.01)' plan_device.json plan_host.json
}

@test "reading and tokenizing a dataset says how far it got on stderr, once it takes a while, never with --quiet" {
	for i in $(seq 1 2500); do echo "{\"input_ids\":[$((i % 200)),$(((i * 7) % 200)),5]}"; done >big.jsonl
	# POROS_PROGRESS_AFTER=0: the lines a long read gives, at once
	run -0 --separate-stderr env POROS_PROGRESS_AFTER=0 poros-train "${TINY[@]}" --model poros/tiny-qwen2 \
		--dataset big.jsonl --steps 1 --out run
	[ "${#lines[@]}" -eq 1 ] && jq -e '.status == "ok"' <<<"$output"
	grep -qE '^poros-train: dataset: 1024 records read \(big\.jsonl: [0-9.]+ of 0\.1 MiB\)$' <<<"$stderr"
	grep -qx 'poros-train: dataset: 2500 records, 2500 documents, 7500 tokens in [0-9.]* s' <<<"$stderr"
	# a read that takes less than a second says nothing, and --quiet nothing ever
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --dataset big.jsonl --steps 1 --out run
	! grep -q '^poros-train: dataset: ' <<<"$stderr"
	run -0 --separate-stderr env POROS_PROGRESS_AFTER=0 poros-train "${TINY[@]}" --quiet --model poros/tiny-qwen2 \
		--dataset big.jsonl --steps 1 --out run
	! grep -q '^poros-train: dataset: ' <<<"$stderr"
	run -2 --separate-stderr env POROS_PROGRESS_AFTER=soon poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1
	[ "$stderr" = "poros-train: POROS_PROGRESS_AFTER: not a number of seconds in [0, 86400]: soon" ]
}

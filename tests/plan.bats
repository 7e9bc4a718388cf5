#!/usr/bin/env bats
# The device memory plan: poros-train --plan, the summary's vram_plan_mb
# (the allocator's peak equals it), --vram-budget refused from the plan
# before any weight is loaded, and poros plan SPEC.  CPU backend; the
# CUDA plan needs no device.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	TINY=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8)
}

# plan_and_train NAME ARGS...: NAME.plan (the --plan line) and NAME.json
# (the summary of a 2-step run into NAME/)
plan_and_train() {
	local name=$1
	shift
	poros-train "${TINY[@]}" --quiet --steps 2 --plan "$@" >"$name.plan"
	poros-train "${TINY[@]}" --quiet --steps 2 --out "$name" "$@" >"$name.json"
}

@test "the peak equals the plan, to the byte, across schedules, precisions, accumulation and models" {
	local n=0
	while read -r name args; do
		# shellcheck disable=SC2086 # args is a word list
		plan_and_train "$name" $args
		jq -e '.status == "ok" and .vram_plan_mb > 0' "$name.json"
		# printed the same: the same number of bytes
		[ "$(jq -r .vram_peak_mb "$name.json")" = "$(jq -r .vram_plan_mb "$name.json")" ]
		# --plan says what the run then reports, breakdown included
		[ "$(jq -r .vram_plan_mb "$name.plan")" = "$(jq -r .vram_plan_mb "$name.json")" ]
		[ "$(jq -c .vram_breakdown_mb "$name.plan")" = "$(jq -c .vram_breakdown_mb "$name.json")" ]
		n=$((n + 1))
	done <<-'EOF'
		blk_nf4 --model poros/tiny-qwen2 --mode blockwise --precision nf4
		blk_bf16 --model poros/tiny-qwen2 --mode blockwise --precision bf16
		res_nf4 --model poros/tiny-qwen2 --mode resident --precision nf4
		res_bf16 --model poros/tiny-qwen2 --mode resident --precision bf16
		blk_acc4 --model poros/tiny-qwen2 --mode blockwise --accum 4 --block-size 3
		res_acc4 --model poros/tiny-qwen2 --mode resident --accum 4
		res_gc --model poros/tiny-qwen2 --mode resident --gradient-checkpointing on
		res_gc_acc4 --model poros/tiny-qwen2 --mode resident --gradient-checkpointing on --accum 4 --precision bf16
		blk_gc --model poros/tiny-qwen2 --mode blockwise --gradient-checkpointing on
		qwen3_blk --model poros/tiny-qwen3 --mode blockwise --accum 4
		qwen3_res --model poros/tiny-qwen3 --mode resident --precision bf16
		llama_blk --model poros/tiny-llama --mode blockwise --dropout 0
		llama_res --model poros/tiny-llama --mode resident --targets q_proj,v_proj
	EOF
	[ "$n" -eq 13 ]
	# the configurations differ where they should: the plan is not one number
	[ "$(jq -r .vram_plan_mb blk_nf4.json)" != "$(jq -r .vram_plan_mb res_nf4.json)" ]
	jq -n -e --slurpfile a res_nf4.json --slurpfile b res_gc.json \
		'$a[0].vram_breakdown_mb.activations > $b[0].vram_breakdown_mb.activations'
	jq -n -e --slurpfile a blk_nf4.json --slurpfile b blk_acc4.json \
		'$a[0].vram_breakdown_mb.checkpoints < $b[0].vram_breakdown_mb.checkpoints'
	jq -e '.vram_breakdown_mb | has("dequant")' blk_nf4.json
	jq -e '.vram_breakdown_mb | has("dequant") | not' blk_bf16.json
}

@test "the plan holds with the LoRA extension off, an eval set and a resumed run" {
	POROS_LORA_EXT=0 plan_and_train noext --model poros/tiny-qwen2
	[ "$(jq -r .vram_peak_mb noext.json)" = "$(jq -r .vram_plan_mb noext.json)" ]
	[ "$(jq -r .vram_plan_mb noext.plan)" = "$(jq -r .vram_plan_mb noext.json)" ]
	jq -cn '{input_ids: [range(0; 40) | (. * 7) % 250]}' >eval.jsonl
	plan_and_train eval --model poros/tiny-qwen2 --mode resident --eval-dataset eval.jsonl
	jq -e '.status == "ok" and .eval_tokens > 0 and .vram_peak_mb == .vram_plan_mb' eval.json
	[ "$(jq -r .vram_plan_mb eval.plan)" = "$(jq -r .vram_plan_mb eval.json)" ]
	poros-train "${TINY[@]}" --quiet --model poros/tiny-qwen2 --steps 3 --save-every 1 --out full >full.json
	poros-train "${TINY[@]}" --quiet --model poros/tiny-qwen2 --steps 3 --resume full/checkpoint-step1 \
		--out resumed >resumed.json
	jq -e '.status == "ok" and .vram_peak_mb == .vram_plan_mb' full.json resumed.json
	[ "$(jq -r .vram_plan_mb full.json)" = "$(jq -r .vram_plan_mb resumed.json)" ]
}

@test "the peak equals the plan with the MLP in token chunks, whose buffers are a chunk's" {
	local n=0
	while read -r name args; do
		# shellcheck disable=SC2086 # args is a word list
		POROS_MLP_CHUNK=24 plan_and_train "c_$name" $args # 64 rows: chunks of 24, 24, 16
		# shellcheck disable=SC2086
		plan_and_train "w_$name" $args
		jq -e '.status == "ok" and .vram_peak_mb == .vram_plan_mb' "c_$name.json" "w_$name.json"
		[ "$(jq -r .vram_plan_mb "c_$name.plan")" = "$(jq -r .vram_plan_mb "c_$name.json")" ]
		[ "$(jq -c .vram_breakdown_mb "c_$name.plan")" = "$(jq -c .vram_breakdown_mb "c_$name.json")" ]
		# a recomputed layer's gate, up and h are workspace, a kept layer's
		# activations (every row): the activations do not change
		jq -n -e --slurpfile c "c_$name.json" --slurpfile w "w_$name.json" \
			'$c[0].vram_breakdown_mb.activations == $w[0].vram_breakdown_mb.activations
			and $c[0].vram_breakdown_mb.workspace <= $w[0].vram_breakdown_mb.workspace'
		n=$((n + 1))
	done <<-'EOF'
		blk_nf4 --model poros/tiny-qwen2 --mode blockwise --precision nf4
		res_nf4 --model poros/tiny-qwen2 --mode resident --precision nf4
		res_gc --model poros/tiny-qwen2 --mode resident --gradient-checkpointing on --accum 4
		qwen3_blk --model poros/tiny-qwen3 --mode blockwise --accum 4 --precision bf16
		llama_blk --model poros/tiny-llama --mode blockwise --dropout 0
	EOF
	[ "$n" -eq 5 ]
	# a recomputing run's MLP set is a chunk's: (24,F), not (64,F)
	for name in blk_nf4 res_gc qwen3_blk llama_blk; do
		jq -n -e --slurpfile c "c_$name.json" --slurpfile w "w_$name.json" \
			'$c[0].vram_breakdown_mb.workspace < $w[0].vram_breakdown_mb.workspace'
	done
}

@test "the MLP runs in chunks of 4096 rows above 4096 tokens, in one piece up to them" {
	local t
	for t in 2048 4096; do # T = 4096, 8192
		poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len "$t" --plan >"d$t.plan"
		POROS_MLP_CHUNK=4096 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len "$t" --plan >"c$t.plan"
		POROS_MLP_CHUNK=8192 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len "$t" --plan >"w$t.plan"
		cmp "d$t.plan" "c$t.plan"
	done
	cmp d2048.plan w2048.plan
	jq -n -e --slurpfile d d4096.plan --slurpfile w w4096.plan \
		'$d[0].vram_breakdown_mb.workspace < $w[0].vram_breakdown_mb.workspace
		and $d[0].vram_plan_mb < $w[0].vram_plan_mb'
}

@test "--plan of Qwen2.5-7B nf4 at seq 32768 (tests/gpu/long_check.sh's run) is under 12 GiB" {
	local args=(--model Qwen/Qwen2.5-7B --backend cuda --mode blockwise --precision nf4 --block-size 4
		--seq-len 32768 --accum 1 --rank 16 --alpha 32 --dropout 0 --plan)
	# the attention kernels: no (T,F) buffer, 4096-row chunks of F = 18944
	POROS_ATTENTION=mma poros-train "${args[@]}" > mma.plan
	jq -e '.vram_plan_mb <= 12288 and .vram_breakdown_mb.activations < 1800
		and .vram_breakdown_mb.workspace < 3000' mma.plan
	# the cuDNN route (ops.h) adds its scratch to the shared workspace: one
	# head's bf16 dS (2 GiB at 32768), k and v for every query head, a
	# call's gradients; still under 12 GiB
	run -0 --separate-stderr poros-train "${args[@]}"
	jq -e --slurpfile m mma.plan '.vram_plan_mb <= 12288
		and .vram_breakdown_mb.workspace - $m[0].vram_breakdown_mb.workspace > 2048
		and .vram_breakdown_mb.activations == $m[0].vram_breakdown_mb.activations' <<<"$output"
}

@test "--plan prints one line and touches nothing: no run directory, no dataset read" {
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan --out run \
		--dataset nowhere/data.jsonl
	[ "${#lines[@]}" -eq 1 ]
	[ -z "$stderr" ]
	[ ! -e run ]
	jq -e '.schema == "poros.plan/1" and .cell_id == "poros_tiny_qwen2_nf4" and .method == "poros"
		and .mode == "blockwise" and .precision == "nf4" and .backend == "cpu"
		and .vram_plan_mb > 0 and .vram_budget_mb == null and .fits == null
		and (.vram_breakdown_mb | keys_unsorted | .[0:3] == ["lm_head", "slabs", "dequant"])
		and (.vram_breakdown_mb | has("blas_workspace") | not)' <<<"$output"
	# the breakdown adds up to the total (MiB rounded to 3 places each)
	jq -e '(.vram_breakdown_mb | length) as $n | (.vram_plan_mb - ([.vram_breakdown_mb[]] | add) | fabs) < 0.001 * $n' <<<"$output"
}

@test "--plan of a 72B model takes no weights: it is the same line at once" {
	run -0 --separate-stderr poros-train --model Qwen/Qwen2.5-72B --backend cpu --seq-len 1024 --plan
	# 80 layers of NF4 in 2 slabs of 4, the 152064 x 8192 bf16 lm_head
	# (11859 MiB in all, with the MLP's gate and up in bf16, dq in x2's buffer)
	jq -e '.vram_plan_mb > 11850 and .vram_breakdown_mb.lm_head > 2376 and .vram_breakdown_mb.lm_head < 2377
		and .vram_breakdown_mb.slabs > 1000' <<<"$output"
	run -0 --separate-stderr poros-train --model Qwen/Qwen2.5-72B --backend cpu --mode resident --precision bf16 --plan
	# every layer resident in bf16: more than 130 GB
	jq -e '.mode == "resident" and .vram_breakdown_mb.layers > 130000' <<<"$output"
	# the host holds the same layers plus the embedding, final norm and lm_head:
	# 80 x 1.69 GB + 2 x 152064 x 8192 x 2 bytes
	jq -e '.host_weights_mb - .vram_breakdown_mb.layers > 4750 and .host_weights_mb - .vram_breakdown_mb.layers < 4760' <<<"$output"
}

@test "--plan says the host memory of the base: what a run allocates, and what the host check compares" {
	run -0 --separate-stderr poros-train "${TINY[@]}" --model Qwen/Qwen2.5-72B --precision bf16 --steps 1 --plan
	need=$(printf '%.1f' "$(jq -r '.host_weights_mb / 1024' <<<"$output")") # as the message rounds it
	avail_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	[ -n "$avail_kib" ] && [ "$avail_kib" -lt 140000000 ] || skip "this host has the memory for a 72B bf16 base"
	run -1 --separate-stderr poros-train "${TINY[@]}" --model Qwen/Qwen2.5-72B --precision bf16 --steps 1 --out run
	[[ "$stderr" == *"the base needs $need GiB of host memory"* ]]
	# NF4 packs the layers four to one (absmax aside); the tables stay bf16
	run -0 --separate-stderr poros-train "${TINY[@]}" --model Qwen/Qwen2.5-72B --precision nf4 --plan
	jq -e '.host_weights_mb > 40000 and .host_weights_mb < 45000' <<<"$output"
}

@test "--plan says the host memory of the layer checkpoints, with and without the attention's" {
	# blockwise: 4 layers x 64 tokens x 64 fp32 inputs, and with the attention
	# checkpoints each layer's output and lse too; resident keeps none on the host
	POROS_ATTN_CKPT=0 run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	jq -e '.attention_checkpoints == false and .host_checkpoints_mb == 4 * 64 * 64 * 4 / 1048576' <<<"$output"
	off=$(jq .vram_breakdown_mb.checkpoints <<<"$output")
	POROS_ATTN_CKPT=1 run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	# (the attention output's rows are 64 + E wide, E the LoRA extension's columns)
	jq -e '.attention_checkpoints == true and .host_checkpoints_mb > 4 * 64 * (64 * 4 + 64 * 2 + 4 * 4) / 1048576' <<<"$output"
	jq -e --argjson off "$off" '.vram_breakdown_mb.checkpoints > $off' <<<"$output"
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	jq -e '.attention_checkpoints == true' <<<"$output"
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --plan
	jq -e '.attention_checkpoints == null and .host_checkpoints_mb == 0' <<<"$output"
	# the plan of a run with the attention checkpoints is what the run takes
	POROS_ATTN_CKPT=1 plan_and_train attn --model poros/tiny-qwen3 --mode blockwise --accum 2
	[ "$(jq -r .vram_plan_mb attn.plan)" = "$(jq -r .vram_peak_mb attn.json)" ]
}

@test "--plan counts the attention sublayer's checkpoints (POROS_ATTN_CKPT=2) exactly, on the host and the device" {
	# a 64-token micro-batch of tiny-qwen2 (C 64, 4 x 16 query and 2 x 16 kv
	# features, rank 4 on all projections) keeps beside the attention output:
	# x2 and q (64 x 64 fp32 each), k and v (64 x 32), and the u (64 x 4) of
	# q, k, v and o: 53248 bytes a layer, 4 layers on the host
	POROS_ATTN_CKPT=1 run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	one=$output
	POROS_ATTN_CKPT=2 run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	jq -e --argjson one "$one" '.attention_checkpoints == true and .attention_sublayer == true and
		$one.attention_sublayer == false and
		((.host_checkpoints_mb - $one.host_checkpoints_mb) * 1048576 | round) == 4 * 53248' <<<"$output"
	# the device sets hold them instead of the activations: more checkpoints, fewer activations
	jq -e --argjson one "$one" '.vram_breakdown_mb.checkpoints > $one.vram_breakdown_mb.checkpoints and
		.vram_breakdown_mb.activations < $one.vram_breakdown_mb.activations' <<<"$output"
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --plan
	jq -e '.attention_sublayer == null' <<<"$output"
	# what the run takes is the plan, to the byte: with two lanes, a group of
	# micro-batches, Qwen3's norms of q and k, block checkpoints
	POROS_ATTN_CKPT=2 POROS_LANES=2 plan_and_train lanes --model poros/tiny-qwen3 --mode blockwise --accum 3
	POROS_ATTN_CKPT=2 POROS_GROUP=2 plan_and_train group --model poros/tiny-qwen3 --mode blockwise --accum 3 \
		--seq-len 64
	POROS_ATTN_CKPT=2 plan_and_train block --model poros/tiny-qwen2 --mode blockwise --accum 2 --checkpoints block \
		--block-size 2
	for name in lanes group block; do
		jq -e '.status == "ok" and .schedule.attention_sublayer == true' "$name.json"
		[ "$(jq -r .vram_plan_mb $name.plan)" = "$(jq -r .vram_peak_mb $name.json)" ]
		[ "$(jq -c .vram_breakdown_mb $name.plan)" = "$(jq -c .vram_breakdown_mb $name.json)" ]
	done
	jq -e '.lanes == 2' lanes.plan
	jq -e '.group == 2' group.plan
}

@test "unset, groups of 4 and the sublayer's checkpoints where groups apply; each gives way to the budget, said, same bits" {
	# 64 tokens x batch 2 (128 rows) at accumulation 4: groups apply
	local q=(--backend cpu --seq-len 64 --batch-size 2 --rank 4 --alpha 8 --quiet --model poros/tiny-qwen3
		--mode blockwise --accum 4 --steps 2)
	run -0 --separate-stderr poros-train "${q[@]}" --plan
	jq -e '.group == 4 and .attention_checkpoints == true and .attention_sublayer == true' <<<"$output"
	[ -z "$stderr" ]
	# where they do not apply (rows not a multiple of 128): one a call, the attention output alone
	poros-train "${q[@]}" --seq-len 32 --plan |
		jq -e '.group == 1 and .attention_checkpoints == true and .attention_sublayer == false'
	g4=$(peak "${q[@]}")
	out=$(POROS_ATTN_CKPT=1 peak "${q[@]}")
	g1=$(POROS_GROUP=1 POROS_ATTN_CKPT=1 peak "${q[@]}")
	[ "$g1" -lt "$out" ] && [ "$out" -lt "$g4" ]
	poros-train "${q[@]}" --mode resident --out ref >/dev/null
	# over the sublayer's plan, not the output's: groups of 4, the output alone, said
	budget=$(((out + g4) / 2))
	run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.group == 4 and .attention_sublayer == false and .attention_checkpoints == true and .fits == true' \
		<<<"$output"
	assert_equal "$stderr" "poros-train: the run with the attention sublayer's checkpoints needs $(mib "$g4") of device memory, over --vram-budget $(mib "$budget"), and $(mib "$out") with the attention output alone: that is kept (POROS_ATTN_CKPT=2 insists)"
	run -0 --separate-stderr poros-train "${q[@]}" --out sub --vram-budget "$budget"
	jq -e '.status == "ok" and .vram_peak_mb == .vram_plan_mb and .schedule.attention_sublayer == false' <<<"$output"
	cmp sub/adapter/adapter_model.safetensors ref/adapter/adapter_model.safetensors
	# over groups of 4's plan too: one micro-batch a call (the GEMMs keep the group's choice), said
	budget=$(((g1 + out) / 2))
	run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.group == 1 and .attention_sublayer == false and .attention_checkpoints == true and .fits == true' \
		<<<"$output"
	assert_equal "$stderr" "poros-train: micro-batch groups of 4 need $(mib "$out") of device memory, over --vram-budget $(mib "$budget"), and $(mib "$g1") without: one micro-batch a layer call (POROS_GROUP=4 insists)"
	run -0 --separate-stderr poros-train "${q[@]}" --out cut --vram-budget "$budget"
	jq -e '.status == "ok" and .vram_peak_mb == .vram_plan_mb and .schedule.group == 1' <<<"$output"
	jq -e '.gemm_choice_rows == 512' cut/train_config.json
	cmp cut/adapter/adapter_model.safetensors ref/adapter/adapter_model.safetensors
	# insisted on: no cut, refused as over the budget
	POROS_GROUP=4 POROS_ATTN_CKPT=2 run -1 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.group == 4 and .attention_sublayer == true and .fits == false' <<<"$output"
}

@test "--plan counts the second compute lane: its activations, scratch and cuBLAS workspace, and the run takes what it says" {
	# CUDA blockwise with two or more micro-batches a call each (POROS_GROUP=1;
	# unset, groups of 4 take one lane): two lanes, a second 32 MiB cuBLAS
	# workspace; one micro-batch, resident or POROS_LANES=1: one
	export POROS_GROUP=1
	local q=(--backend cuda --model Qwen/Qwen2.5-7B --precision nf4 --seq-len 512 --rank 16 --plan)
	run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.lanes == 2 and .vram_breakdown_mb.blas_workspace == 64' <<<"$output"
	two=$output
	POROS_LANES=1 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.lanes == 1 and .vram_breakdown_mb.blas_workspace == 32' <<<"$output"
	one=$output
	# the second lane: one more layer's activations, the workspace without the head's part
	jq -e --argjson one "$one" '.vram_breakdown_mb.activations == 2 * $one.vram_breakdown_mb.activations and
		.vram_breakdown_mb.workspace > $one.vram_breakdown_mb.workspace and
		.vram_breakdown_mb.workspace <= 2 * $one.vram_breakdown_mb.workspace and
		.vram_breakdown_mb.lm_head == $one.vram_breakdown_mb.lm_head' <<<"$two"
	for args in "--accum 1" "--accum 8 --mode resident"; do
		# shellcheck disable=SC2086 # args is a word list
		run -0 --separate-stderr poros-train "${q[@]}" $args
		jq -e '.lanes == 1' <<<"$output"
	done
	# under a budget that holds one lane and not two: one, said on stderr
	budget=$(jq -n --argjson one "$one" --argjson two "$two" \
		'(($one.vram_plan_mb + $two.vram_plan_mb) / 2 * 1048576) | floor')
	run -0 --separate-stderr poros-train "${q[@]}" --accum 8 --vram-budget "$budget"
	jq -e '.lanes == 1 and .fits == true' <<<"$output"
	[[ "$stderr" == *"two compute lanes need"*"over --vram-budget"*"one lane (POROS_LANES=2 insists)" ]]
	POROS_LANES=2 run -1 --separate-stderr poros-train "${q[@]}" --accum 8 --vram-budget "$budget"
	jq -e '.lanes == 2 and .fits == false' <<<"$output"
	# on the CPU they are asked for: the peak is the plan, to the byte
	POROS_LANES=2 plan_and_train lanes --model poros/tiny-qwen2 --mode blockwise --accum 4 --block-size 3
	jq -e '.lanes == 2' lanes.plan
	[ "$(jq -r .vram_plan_mb lanes.plan)" = "$(jq -r .vram_peak_mb lanes.json)" ]
	[ "$(jq -c .vram_breakdown_mb lanes.plan)" = "$(jq -c .vram_breakdown_mb lanes.json)" ]
}

@test "--plan counts one checkpoint set: a record less than two, the run takes it, and a budget that holds one picks it" {
	# one set: the peak is the plan, to the byte, one record (k micro-batches' inputs) under two sets
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 plan_and_train one --model poros/tiny-qwen2 --mode blockwise --accum 3 \
		--block-size 2
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=2 plan_and_train two --model poros/tiny-qwen2 --mode blockwise --accum 3 \
		--block-size 2
	for name in one two; do
		jq -e '.status == "ok"' "$name.json"
		[ "$(jq -r .vram_peak_mb "$name.json")" = "$(jq -r .vram_plan_mb "$name.plan")" ]
		[ "$(jq -c .vram_breakdown_mb "$name.plan")" = "$(jq -c .vram_breakdown_mb "$name.json")" ]
	done
	# a record is k (T,C) fp32 inputs: 3 x 64 x 64 x 4 bytes; the host plan differs by the CPU device's
	jq -e --slurpfile two two.plan '.checkpoint_sets == 1 and $two[0].checkpoint_sets == 2
		and .vram_breakdown_mb.checkpoints * 2 == $two[0].vram_breakdown_mb.checkpoints
		and (($two[0].vram_plan_mb - .vram_plan_mb) * 1048576 | round) == 3 * 64 * 64 * 4
		and ($two[0].host_plan_mb - .host_plan_mb) == ($two[0].vram_plan_mb - .vram_plan_mb)
		and (.host_breakdown_mb | del(.device)) == ($two[0].host_breakdown_mb | del(.device))' one.plan
	# CUDA, unset: two sets, unless a budget holds one and not two (without attention checkpoints)
	local q=(--backend cuda --model Qwen/Qwen2.5-7B --precision nf4 --seq-len 16384 --rank 16 --plan)
	POROS_ATTN_CKPT=0 run -0 --separate-stderr poros-train "${q[@]}"
	jq -e '.checkpoint_sets == 2' <<<"$output"
	two=$output
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 run -0 --separate-stderr poros-train "${q[@]}"
	one=$output
	budget=$(jq -n --argjson one "$one" --argjson two "$two" \
		'(($one.vram_plan_mb + $two.vram_plan_mb) / 2 * 1048576) | floor')
	POROS_ATTN_CKPT=0 run -0 --separate-stderr poros-train "${q[@]}" --vram-budget "$budget"
	jq -e --argjson one "$one" '.checkpoint_sets == 1 and .fits == true and .vram_plan_mb == $one.vram_plan_mb' \
		<<<"$output"
	[[ "$stderr" == *"two checkpoint sets need"*"over --vram-budget"*"one set, each layer's record fetched after the layer above (POROS_CKPT_SETS=2 insists)" ]]
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=2 run -1 --separate-stderr poros-train "${q[@]}" --vram-budget "$budget"
	jq -e '.checkpoint_sets == 2 and .fits == false' <<<"$output"
	# a budget that holds neither: two sets, and the refusal of the plan that is the default
	POROS_ATTN_CKPT=0 run -1 --separate-stderr poros-train "${q[@]}" --vram-budget 1G
	jq -e '.checkpoint_sets == 2 and .fits == false' <<<"$output"
	# the attention checkpoints keep two sets: one set is not taken for them
	POROS_ATTN_CKPT=1 run -1 --separate-stderr poros-train "${q[@]}" --vram-budget "$budget"
	jq -e '.checkpoint_sets == 2 and .attention_checkpoints == true' <<<"$output"
	# the CPU run under such a budget takes one set, and its peak is the plan
	budget=$(jq -n --slurpfile one one.plan --slurpfile two two.plan \
		'(($one[0].vram_plan_mb + $two[0].vram_plan_mb) / 2 * 1048576) | floor')
	POROS_ATTN_CKPT=0 plan_and_train auto --model poros/tiny-qwen2 --mode blockwise --accum 3 --block-size 2 \
		--vram-budget "$budget"
	jq -e '.checkpoint_sets == 1' auto.plan
	[ "$(jq -r .vram_peak_mb auto.json)" = "$(jq -r .vram_plan_mb one.plan)" ]
	cmp auto/adapter/adapter_model.safetensors two/adapter/adapter_model.safetensors
}

# peak Q...: the --plan peak of poros-train Q, in bytes
peak() {
	poros-train "$@" --plan | jq '.vram_plan_mb * 1048576 | round'
}

# mib BYTES: as poros-train writes a figure of MiB
mib() {
	awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}

@test "unset, block checkpoints' attention (on the device only) gives way to the budget too; the run takes the plan" {
	local q=("${TINY[@]}" --quiet --model poros/tiny-qwen2 --mode blockwise --accum 3 --block-size 2 --steps 2
		--checkpoints block)
	with=$(POROS_ATTN_CKPT=1 peak "${q[@]}")
	without=$(POROS_ATTN_CKPT=0 peak "${q[@]}")
	[ "$without" -lt "$with" ]
	budget=$(((with + without) / 2))
	run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.attention_checkpoints == false and .checkpoints == "block" and .fits == true' <<<"$output"
	[ "$(jq '.vram_plan_mb * 1048576 | round' <<<"$output")" -eq "$without" ]
	[[ "$stderr" == "poros-train: the run with attention checkpoints needs $(mib "$with") of device memory"* ]]
	POROS_ATTN_CKPT=1 poros-train "${q[@]}" --out ref >/dev/null
	poros-train "${q[@]}" --out auto --vram-budget "$budget" 2>/dev/null |
		jq -e '.status == "ok" and .schedule.attention_checkpoints == false and .vram_peak_mb == .vram_plan_mb'
	cmp auto/adapter/adapter_model.safetensors ref/adapter/adapter_model.safetensors
	# no budget: the host's rule does not apply to them, they stay
	poros-train "${q[@]}" --plan | jq -e '.attention_checkpoints == true'
}

@test "unset, the attention checkpoints give way where only the plan without them fits the budget, and say so" {
	local q=("${TINY[@]}" --quiet --model poros/tiny-qwen2 --mode blockwise --accum 3 --block-size 2 --steps 2)
	with=$(POROS_ATTN_CKPT=1 peak "${q[@]}")
	two=$(POROS_ATTN_CKPT=0 POROS_CKPT_SETS=2 peak "${q[@]}")
	one=$(POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 peak "${q[@]}")
	[ "$one" -lt "$two" ] && [ "$two" -lt "$with" ]
	said() {
		echo "poros-train: the run with attention checkpoints needs $(mib "$with") of device memory, over" \
			"--vram-budget $(mib "$1"), and $(mib "$2") without: the backward recomputes attention" \
			"(POROS_ATTN_CKPT=1 insists)"
	}
	# two sets without them fit: those, one line
	budget=$(((two + with) / 2))
	run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.attention_checkpoints == false and .checkpoint_sets == 2 and .fits == true' <<<"$output"
	[ "$(jq '.vram_plan_mb * 1048576 | round' <<<"$output")" -eq "$two" ]
	assert_equal "$stderr" "$(said "$budget" "$two")"
	# only one set without them fits: that, said after them
	budget=$(((one + two) / 2))
	run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.attention_checkpoints == false and .checkpoint_sets == 1 and .fits == true' <<<"$output"
	[ "$(jq '.vram_plan_mb * 1048576 | round' <<<"$output")" -le "$budget" ]
	assert_equal "${stderr_lines[0]}" "$(said "$budget" "$one")"
	[[ "${stderr_lines[1]}" == "poros-train: two checkpoint sets need"*"(POROS_CKPT_SETS=2 insists)" ]]
	# the run takes the plan's choice: its peak is the plan, its bits those with them
	POROS_ATTN_CKPT=1 poros-train "${q[@]}" --out ref | jq -e '.schedule.attention_checkpoints == true'
	run -0 --separate-stderr poros-train "${q[@]}" --out auto --vram-budget "$budget"
	jq -e --argjson one "$one" '.status == "ok" and .schedule.attention_checkpoints == false
		and .schedule.checkpoint_sets == 1 and .vram_peak_mb == .vram_plan_mb
		and (.vram_plan_mb * 1048576 | round) == $one' <<<"$output"
	assert_equal "${stderr_lines[0]}" "$(said "$budget" "$one")"
	cmp auto/adapter/adapter_model.safetensors ref/adapter/adapter_model.safetensors
	# insisted on: refused as over the budget, as before
	POROS_ATTN_CKPT=1 run -1 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.attention_checkpoints == true and .fits == false' <<<"$output"
	POROS_ATTN_CKPT=1 run -1 --separate-stderr poros-train "${q[@]}" --out insist --vram-budget "$budget"
	jq -e '.status == "oom" and .steps == 0' <<<"$output"
	[[ "$stderr" != *"recomputes attention"* ]]
	# left out by the setting: nothing to say
	POROS_ATTN_CKPT=0 run -0 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	[[ "$stderr" != *"recomputes attention"* ]]
	# neither fits: they stay, and the refusal is the plan with them
	budget=$((one - 1))
	run -1 --separate-stderr poros-train "${q[@]}" --plan --vram-budget "$budget"
	jq -e '.attention_checkpoints == true and .checkpoint_sets == 2 and .fits == false' <<<"$output"
	[ "$(jq '.vram_plan_mb * 1048576 | round' <<<"$output")" -eq "$with" ]
	[[ "$stderr" == "poros-train: the run needs $(mib "$with") of device memory, over --vram-budget "* ]]
}

@test "--plan says the micro-batches a call (POROS_GROUP): a group's rows in its buffers, one lane unless asked, and the run takes what it says" {
	# the attention output alone in each (unset, groups also keep the sublayer's)
	export POROS_ATTN_CKPT=1
	local q=(--backend cuda --model Qwen/Qwen2.5-7B --precision nf4 --seq-len 512 --rank 16 --plan)
	POROS_GROUP=1 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.group == 1 and .lanes == 2' <<<"$output"
	one=$output
	POROS_GROUP=4 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.group == 4 and .lanes == 1 and .vram_breakdown_mb.blas_workspace == 32' <<<"$output"
	# unset: groups of up to 2048 rows (GROUP_AUTO_ROWS), 4 of 512, 2 of
	# 1024, none of 2048 (two lanes then), 8 at most
	run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.group == 4 and .lanes == 1' <<<"$output"
	# four micro-batches' activations; the group's leaves beside the partial sums
	jq -e --argjson one "$one" '.vram_breakdown_mb.activations > 3.9 * $one.vram_breakdown_mb.activations / 2 and
		.vram_breakdown_mb.grad_partials > $one.vram_breakdown_mb.grad_partials' <<<"$output"
	for sg in 1024:2:1 2048:1:2 128:8:1; do
		IFS=: read -r len g l <<<"$sg"
		run -0 --separate-stderr poros-train "${q[@]}" --accum 8 --seq-len "$len"
		jq -e --argjson g "$g" --argjson l "$l" '.group == $g and .lanes == $l' <<<"$output"
	done
	# at most the step's micro-batches; none for one micro-batch, resident,
	# or rows not a multiple of 128, or a micro-batch of MLP chunks
	POROS_GROUP=8 run -0 --separate-stderr poros-train "${q[@]}" --accum 3
	jq -e '.group == 3' <<<"$output"
	for args in "--accum 1" "--accum 8 --mode resident" "--accum 8 --seq-len 500"; do
		# shellcheck disable=SC2086 # args is a word list
		POROS_GROUP=4 run -0 --separate-stderr poros-train "${q[@]}" $args
		jq -e '.group == 1' <<<"$output"
	done
	POROS_GROUP=4 POROS_MLP_CHUNK=256 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.group == 1' <<<"$output"
	# on the CPU: the peak is the plan, to the byte
	POROS_GROUP=3 plan_and_train group --model poros/tiny-qwen2 --mode blockwise --accum 4 --block-size 3 \
		--seq-len 64
	jq -e '.group == 3' group.plan
	[ "$(jq -r .vram_plan_mb group.plan)" = "$(jq -r .vram_peak_mb group.json)" ]
	[ "$(jq -c .vram_breakdown_mb group.plan)" = "$(jq -c .vram_breakdown_mb group.json)" ]
}

@test "--plan counts groups on two lanes (POROS_GROUP with POROS_LANES=2): lane 1's group buffers and leaves" {
	local q=(--backend cuda --model Qwen/Qwen2.5-7B --precision nf4 --seq-len 512 --rank 16 --plan)
	POROS_GROUP=4 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	one=$output
	POROS_GROUP=4 POROS_LANES=2 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	# a second group's activations, scratch, leaves and cuBLAS workspace
	jq -e --argjson one "$one" '.group == 4 and .lanes == 2 and .vram_breakdown_mb.blas_workspace == 64 and
		(.vram_breakdown_mb.activations - 2 * $one.vram_breakdown_mb.activations | fabs) < 0.01 and
		.vram_breakdown_mb.workspace > $one.vram_breakdown_mb.workspace and
		.vram_breakdown_mb.grad_partials > $one.vram_breakdown_mb.grad_partials' <<<"$output"
	# one group a step leaves lane 1 nothing: one lane
	POROS_GROUP=8 POROS_LANES=2 run -0 --separate-stderr poros-train "${q[@]}" --accum 8
	jq -e '.group == 8 and .lanes == 1' <<<"$output"
	# on the CPU: the peak is the plan, to the byte, and resident's bits
	POROS_GROUP=2 POROS_LANES=2 plan_and_train lg --model poros/tiny-qwen3 --mode blockwise --accum 5 --seq-len 64 \
		--dropout 0.1
	jq -e '.group == 2 and .lanes == 2' lg.plan
	[ "$(jq -r .vram_plan_mb lg.plan)" = "$(jq -r .vram_peak_mb lg.json)" ]
	[ "$(jq -c .vram_breakdown_mb lg.plan)" = "$(jq -c .vram_breakdown_mb lg.json)" ]
	poros-train "${TINY[@]}" --quiet --steps 2 --out res --model poros/tiny-qwen3 --mode resident --accum 5 \
		--seq-len 64 --dropout 0.1 >res.json
	cmp res/adapter/adapter_model.safetensors lg/adapter/adapter_model.safetensors
}

@test "checkpoints the host cannot hold: the attention's left out and said so, or the run refused before it starts" {
	# 1024 small layers, bf16: per token and layer 256 bytes of inputs, 400
	# with the attention's; rows sized from the host's available memory
	mkdir -p cfg/models
	jq '.model_id = "test/many-layers" | .num_hidden_layers = 1024 | .intermediate_size = 64' \
		"$POROS_ROOT/configs/models/tiny_qwen2.json" >cfg/models/many_layers.json
	avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
	[ "$avail" -lt $((1 << 40)) ] || skip "this host has more than 1 TiB available"
	rows() { echo $(($1 * avail / $2 / (1024 * 256 * 512) + 1)); } # batch of 512-token rows: inputs = $1/$2 of it
	BIG=(--configs cfg --model test/many-layers --backend cpu --precision bf16 --seq-len 512 --rank 4 --alpha 8 --steps 1)
	# the inputs fit (0.8 of it), not with the attention's (1.25): unset, the
	# plan leaves the attention's out and says why; 1 keeps them
	run -0 --separate-stderr poros-train "${BIG[@]}" --batch-size "$(rows 4 5)" --plan
	jq -e '.attention_checkpoints == false' <<<"$output"
	[[ "$stderr" == *"the layer checkpoints with attention"*"need more host memory than is available"*"the backward recomputes attention (POROS_ATTN_CKPT=1 insists)" ]]
	POROS_ATTN_CKPT=1 run -0 --separate-stderr poros-train "${BIG[@]}" --batch-size "$(rows 4 5)" --plan
	jq -e '.attention_checkpoints == true' <<<"$output"
	[ -z "$stderr" ]
	# groups (2 rows of 512 a micro-batch, so 2 a call, accumulation k):
	# unset, the sublayer's 832 bytes more a token and layer are left out
	# where the host holds the output's and not those, and said
	k=$((avail / (512 * 2 * 1024 * (400 + 832)) + 1))
	[ "$k" -ge 2 ] || k=2
	run --separate-stderr poros-train "${BIG[@]}" --batch-size 2 --accum "$k" --plan
	jq -e '.group == 2' <<<"$output"
	jq -e '.attention_checkpoints == true and .attention_sublayer == false' <<<"$output"
	[[ "$stderr" == *"the layer checkpoints with the attention sublayer"*"need more host memory than is available"*"the attention output alone is kept (POROS_ATTN_CKPT=2 insists)"* ]]
	# the inputs alone need twice what there is: no note, status oom before
	# a step, naming them and the mode that keeps fewer
	run -1 --separate-stderr poros-train "${BIG[@]}" --batch-size "$(rows 2 1)" --quiet --out run
	[[ "$stderr" != *"recomputes attention"* ]]
	jq -e '.status == "oom" and .steps == 0 and (.error | test("^1024 layers. checkpoints need [0-9.]+ GiB of host memory, [0-9.]+ GiB available \\(MemAvailable\\); --checkpoints block keeps one input a block$"))' <<<"$output"
	# insisted on: the same, with what would help
	POROS_ATTN_CKPT=1 run -1 --separate-stderr poros-train "${BIG[@]}" --batch-size "$(rows 2 1)" --quiet --out run1
	jq -e '.status == "oom" and (.error | endswith("; POROS_ATTN_CKPT=0 keeps only the layer inputs"))' <<<"$output"
}

@test "a run whose host plan is more than the host has is refused before a weight, naming its three largest items" {
	plan_and_train fits --model poros/tiny-qwen2
	jq -e '.status == "ok"' fits.json
	# on the CPU backend the device plan is host memory too; the base and the
	# checkpoints each fit in 1 MiB, the whole plan does not
	jq -e '(.host_breakdown_mb.device - .vram_plan_mb | fabs) < 0.001 and .host_weights_mb < 1 and .host_checkpoints_mb < 1
		and .host_plan_mb > 1 and .host_fits == true' fits.plan
	need=$(jq '.host_plan_mb' fits.plan)
	largest=$(jq -r '.host_breakdown_mb | to_entries | sort_by(-.value) | .[:3] | map(.key) | join(" ")' fits.plan)
	POROS_MEM_AVAILABLE=1M run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	jq -e '.host_fits == false and .fits == null and has("host_available_mb") == false' <<<"$output"
	POROS_MEM_AVAILABLE=1M run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --quiet --out run
	# one summary line, status oom, no step run; the message on stderr is its error
	assert_equal "${#lines[@]}" 1
	jq -e '.status == "oom" and .steps == 0 and .loss_first == null and .events == null and .adapter == null
		and .weights == null' <<<"$output"
	jq -e --argjson p "$(cat fits.plan)" '.host_plan_mb == $p.host_plan_mb and .host_breakdown_mb == $p.host_breakdown_mb' <<<"$output"
	[ "$stderr" = "poros-train: $(jq -r .error <<<"$output")" ]
	[[ "$stderr" =~ ^"poros-train: the run needs "([0-9.]+)" MiB of host memory, 1.0 MiB available (POROS_MEM_AVAILABLE); the largest: "([a-z_]+)" "[0-9.]+" "[KM]"iB, "([a-z_]+)" "[0-9.]+" "[KM]"iB, "([a-z_]+)" "[0-9.]+" "[KM]"iB"$ ]]
	[ "${BASH_REMATCH[1]}" = "$(printf '%.1f' "$need")" ]
	assert_equal "${BASH_REMATCH[2]} ${BASH_REMATCH[3]} ${BASH_REMATCH[4]}" "$largest"
	# nothing of a run in its directory: no events, no adapter, no temporaries
	run -0 find run -mindepth 1 ! -name .lock
	assert_output ''
	# with room for the plan to the byte it runs; a byte less is refused
	bytes=$(jq '.host_plan_mb * 1048576 | round' fits.plan)
	POROS_MEM_AVAILABLE=$((bytes - 1)) run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --quiet --out run
	jq -e '.status == "oom"' <<<"$output"
	POROS_MEM_AVAILABLE=$bytes run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --quiet --out run
	jq -e '.status == "ok" and .steps == 2' <<<"$output"
	# the figure is a byte count above 0, or a usage error
	POROS_MEM_AVAILABLE=0 run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	assert_equal "$stderr" 'poros-train: POROS_MEM_AVAILABLE: must be more than 0, got 0'
	POROS_MEM_AVAILABLE=lots run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	assert_equal "$stderr" 'poros-train: POROS_MEM_AVAILABLE: not a byte count: lots'
}

# host_rss_ok NAME: NAME.json's measured growth of the resident set, from
# the host check to the peak, is at most its plan and at least the plan
# less 15% and 10 MiB: the fixed 8 MiB "process" item is slack at tiny
# shapes (0.3-0.6 MiB used), and RSS counts touched pages while the
# device workspace is sized for the largest of its users, which a step
# does not all touch
host_rss_ok() {
	jq -e '.status == "ok" and (.host_peak_rss_mb - .host_rss_at_plan_mb) as $g
		| .host_plan_mb >= $g and .host_plan_mb <= $g * 1.15 + 10' "$1.json"
}

@test "the host plan is not below the run's measured peak resident set, and within 15% and 10 MiB above it" {
	plan_and_train bw --model poros/tiny-qwen2 --seq-len 64
	plan_and_train res --model poros/tiny-qwen3 --mode resident
	plan_and_train acc --model poros/tiny-llama --accum 2 --save-every 1 --precision bf16
	# records on disk: the host holds the rest and the bounce slots
	mkdir ck
	POROS_DISK_CHECKPOINTS=3 plan_and_train disk --model poros/tiny-qwen2 --seq-len 64 --accum 2 --checkpoint-dir ck
	jq -e '.disk_checkpoints_mb > 0 and .host_breakdown_mb.checkpoint_bounce > 0' disk.json
	for name in bw res acc disk; do
		host_rss_ok "$name"
		jq -e --slurpfile p "$name.plan" '.host_plan_mb == $p[0].host_plan_mb
			and .host_breakdown_mb == $p[0].host_breakdown_mb
			and (([.host_breakdown_mb[]] | add) - .host_plan_mb | fabs) < 0.01 * (.host_breakdown_mb | length)' "$name.json"
	done
	# Qwen2.5-0.5B's shapes (its 151936 x 896 tied embedding) with 2 layers:
	# there the base, the device plan and the embedding are tens to hundreds of MiB
	mkdir -p cfg/models
	jq '.model_id = "test/qwen2.5-0.5b-2l" | .num_hidden_layers = 2' \
		"$POROS_ROOT/configs/models/qwen2_5_0_5b.json" >cfg/models/qwen2_5_0_5b_2l.json
	poros-train --configs cfg --model test/qwen2.5-0.5b-2l --backend cpu --seq-len 16 --rank 4 --alpha 8 \
		--steps 1 --quiet --out small >small.json
	host_rss_ok small
	jq -e '.host_plan_mb > 500 and .host_breakdown_mb.base_globals > 259' small.json
}

@test "--plan --backend cuda needs no device: the CPU plan and the 32 MiB cuBLAS workspace" {
	poros-train "${TINY[@]}" --model poros/tiny-qwen3 --plan >cpu.plan
	run -0 --separate-stderr poros-train "${TINY[@]}" --backend cuda --model poros/tiny-qwen3 --plan
	jq -e '.backend == "cuda" and .vram_breakdown_mb.blas_workspace == 32
		and (.vram_breakdown_mb | keys_unsorted | .[0] == "blas_workspace")' <<<"$output"
	jq -n -e --argjson c "$(cat cpu.plan)" --argjson g "$output" \
		'$g.vram_plan_mb == $c.vram_plan_mb + 32 and ($g.vram_breakdown_mb | del(.blas_workspace)) == $c.vram_breakdown_mb'
	# the host: the CUDA libraries' 320 MiB instead of the CPU backend's device memory
	jq -n -e --argjson c "$(cat cpu.plan)" --argjson g "$output" \
		'$g.host_breakdown_mb.cuda_runtime == 320 and ($c.host_breakdown_mb | has("cuda_runtime") | not)
		and ($g.host_breakdown_mb | del(.cuda_runtime)) == ($c.host_breakdown_mb | del(.device))
		and ($g.host_plan_mb - $c.host_plan_mb - 320 + $c.host_breakdown_mb.device | fabs) < 0.001'
}

@test "a run over --vram-budget is refused from the plan before any weight, naming the three largest" {
	local plan budget top3
	plan=$(poros-train --model Qwen/Qwen2.5-72B --backend cpu --seq-len 1024 --plan)
	top3=$(jq -r '.vram_breakdown_mb | to_entries | sort_by(-.value) | .[0:3] | map(.key) | join(",")' <<<"$plan")
	[ "$top3" = "slabs,lora_state,lm_head" ]
	# 72B synthetic weights would take 40 GB of host memory and minutes: an
	# oom here, not a host allocation failure, is the plan's refusal
	run -1 --separate-stderr poros-train --model Qwen/Qwen2.5-72B --backend cpu --seq-len 1024 --steps 1 \
		--vram-budget 1G --out big
	[ "${#lines[@]}" -eq 1 ]
	jq -e --argjson p "$plan" '.schema == "poros.summary/1" and .status == "oom" and .steps == 0
		and .vram_plan_mb == $p.vram_plan_mb and .vram_peak_mb == null and .weights == null
		and .events == null and .adapter == null
		and (.error | test("^the run needs 11\\.6 GiB of device memory, over --vram-budget 1\\.0 GiB; the largest: slabs 3\\.7 GiB, lora_state 3\\.1 GiB, lm_head 2\\.3 GiB$"))' <<<"$output"
	[[ "$stderr" == "poros-train: the run needs 11.6 GiB of device memory"*"; the largest: slabs "* ]]
	[ ! -e big/events.jsonl ] && [ ! -e big/adapter ]
	# the budget of exactly the plan is enough; a byte less is not (unset,
	# the attention checkpoints would give way: tested below)
	budget=$(poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan | jq '.vram_plan_mb * 1048576 | round')
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1 --quiet --out fits --vram-budget "$budget" |
		jq -e '.status == "ok"'
	POROS_ATTN_CKPT=1 run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 1 --out short \
		--vram-budget $((budget - 1))
	jq -e '.status == "oom" and (.error | contains("; the largest: "))' <<<"$output"
}

@test "--plan with --vram-budget says whether it fits, exit 1 when not" {
	run -0 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan --vram-budget 1G
	jq -e '.vram_budget_mb == 1024 and .fits == true' <<<"$output"
	[ -z "$stderr" ]
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan --vram-budget 64K
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.vram_budget_mb == 0.0625 and .fits == false' <<<"$output"
	[[ "$stderr" == "poros-train: the run needs "*" over --vram-budget 64.0 KiB; the largest: "* ]]
	# resident with every layer's activations kept says what to trade
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --plan --vram-budget 64K
	[[ "$stderr" == *"(resident keeps all 4 layers' activations: --gradient-checkpointing on keeps one layer's)" ]]
}

@test "--plan refuses bad input like a run: an unknown model is exit 2" {
	run -2 --separate-stderr poros-train --backend cpu --model nobody/nothing --plan
	[ -z "$output" ]
	[[ "$stderr" == "poros-train: "*"nobody/nothing"* ]]
}

@test "a cell's plan carries its cell_id" {
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench --jsonl | grep '"cell_id":"resident_tiny_llama_bf16"' >cell.json
	run -0 --separate-stderr poros-train --cell - --backend cpu --plan <cell.json
	jq -e '.cell_id == "resident_tiny_llama_bf16" and .mode == "resident" and .precision == "bf16"' <<<"$output"
	[ ! -e bench ]
}

@test "poros plan SPEC prints each poros and resident cell's plan, what its run then takes, and writes nothing" {
	local spec="$POROS_ROOT/configs/bench/tiny.yaml"
	run -0 --separate-stderr poros plan "$spec" -o out
	[ ! -e out ]
	# every poros and resident cell, in spec order, and no other
	diff <(jq -r .cell_id <<<"$output") \
		<(poros-expand --jsonl -o out "$spec" | jq -r 'select(.method == "poros" or .method == "resident") | .cell_id')
	[ "${#lines[@]}" -eq 12 ]
	jq -e -s 'all(.schema == "poros.plan/1" and .vram_plan_mb > 0)' <<<"$output"
	# one cell's line is its own --plan and its run's peak
	poros-expand --jsonl -o out "$spec" | grep '"cell_id":"resident_tiny_qwen3_nf4"' >cell.json
	grep '"cell_id":"resident_tiny_qwen3_nf4"' <<<"$output" >planned.json
	diff planned.json <(poros-train --cell - --quiet --plan <cell.json)
	poros-train --cell - --quiet --steps 2 --out run <cell.json >run.json
	[ "$(jq -r .vram_peak_mb run.json)" = "$(jq -r .vram_plan_mb planned.json)" ]
	jq -e --slurpfile p planned.json '.vram_breakdown_mb == $p[0].vram_breakdown_mb' run.json
}

@test "poros plan: a spec without a poros or resident cell is exit 2, a bad spec too" {
	sed 's/^methods: .*/methods: [peft]/' "$POROS_ROOT/configs/bench/tiny.yaml" >peft.yaml
	run -2 --separate-stderr poros plan peft.yaml -o out
	[[ "$stderr" == *"no poros or resident cells to plan"* ]]
	[ -z "$output" ]
	run -2 --separate-stderr poros plan nowhere.yaml
	[ -z "$output" ]
	run -0 poros plan --help
	assert_line --index 0 "usage: poros plan SPEC [-o DIR]"
}

# hw.yaml: one tiny model, poros and resident, with the hardware section given
hw_spec() {
	printf '%s\n' 'spec_id: hw' "hardware: {$1}" 'models: [poros/tiny-qwen2]' 'methods: [poros, resident]' \
		'precisions: [nf4]' 'training: {steps: 2, seq_len: 32}' >hw.yaml
}

@test "poros plan checks the CUDA plan against hardware.vram_gb without a device, and the host against host_ram_gb" {
	hw_spec 'vram_gb: 24, host_ram_gb: 64'
	run -0 --separate-stderr poros plan hw.yaml -o out
	[ ! -e out ]
	[ "${#lines[@]}" -eq 2 ]
	# the CUDA plan, budgeted at 24 GB (24e9 bytes), even on a machine without a GPU
	jq -e -s 'all(.backend == "cuda" and .fits == true and .host_fits == true and .vram_budget_mb == 24e9 / 1048576)' <<<"$output"
	# the same line as poros-train's own --plan with that budget and host
	poros-expand --jsonl -o out hw.yaml | head -1 >cell.json
	diff <(head -1 <<<"$output") \
		<(POROS_MEM_AVAILABLE=64000000000 poros-train --cell - --quiet --plan --backend cuda --vram-budget 24000000000 <cell.json)
	[[ "$stderr" == *"poros: poros_tiny_qwen2_nf4: device "*" MiB of 24 GB (hardware.vram_gb): fits, host "*" MiB of 64 GB (hardware.host_ram_gb): fits; fits"* ]]
	# a card and a host too small: a verdict per cell, exit 1
	hw_spec 'vram_gb: 0.01, host_ram_gb: 0.001'
	run -1 --separate-stderr poros plan hw.yaml -o out
	[ "${#lines[@]}" -eq 2 ]
	jq -e -s 'all(.fits == false and .host_fits == false)' <<<"$output"
	[[ "$stderr" == *"poros: resident_tiny_qwen2_nf4: device "*" MiB of 0.01 GB (hardware.vram_gb): does not fit, host "*" MiB of 0.001 GB (hardware.host_ram_gb): does not fit; DOES NOT FIT"* ]]
	[ "${stderr##*$'\n'}" = "poros: 2 of 2 cells do not fit" ]
	# only the host too small
	hw_spec 'vram_gb: 24, host_ram_gb: 0.001'
	run -1 --separate-stderr poros plan hw.yaml -o out
	jq -e -s 'all(.fits == true and .host_fits == false)' <<<"$output"
	# no hardware: the backend a run here gets, against this machine's memory
	hw_spec 'pcie_gen: 4'
	run -0 --separate-stderr poros plan hw.yaml -o out
	jq -e -s 'all(.fits == null and .vram_budget_mb == null)' <<<"$output"
	[[ "$stderr" == *"(cpu; no hardware.vram_gb), host "*" of this machine: "* ]]
}

@test "hardware.host_ram_gb is a positive number and changes no config_hash" {
	hw_spec 'vram_gb: 24'
	poros-expand -o a hw.yaml >/dev/null
	hw_spec 'vram_gb: 24, host_ram_gb: 64'
	poros-expand -o b hw.yaml >/dev/null
	[ "$(jq -c .config_hashes a/spec.json)" = "$(jq -c .config_hashes b/spec.json)" ]
	jq -e '.hardware.host_ram_gb == 64' b/cells/poros_tiny_qwen2_nf4.json
	jq -e '.hardware | has("host_ram_gb") | not' a/cells/poros_tiny_qwen2_nf4.json
	hw_spec 'host_ram_gb: 0'
	run -2 --separate-stderr poros-expand --jsonl hw.yaml
	[ "$stderr" = "poros-expand: hw.yaml:2:25: hardware.host_ram_gb: must be greater than 0, got 0" ]
}

@test "poros plan plans a cell with hardware.gpus as the host of that many cuda ranks, no device needed" {
	hw_spec 'gpus: 2, host_ram_gb: 64'
	run -0 --separate-stderr env CUDA_VISIBLE_DEVICES= poros plan hw.yaml -o out
	[ "${#lines[@]}" -eq 2 ]
	jq -e -s 'all(.backend == "cuda" and .host_ranks == 2 and .host_base_shared)' <<<"$output"
	[[ "$stderr" == *"poros: poros_tiny_qwen2_nf4: device "*" MiB (cuda; no hardware.vram_gb), host "*" MiB for 2 ranks of 64 GB (hardware.host_ram_gb): fits; fits"* ]]
}

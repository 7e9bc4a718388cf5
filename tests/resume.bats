#!/usr/bin/env bats
# poros-train --save-every / --resume: a run of 2N steps and a run of N
# steps resumed for N more give the same bits (adapter, losses, grad norms,
# learning rates), whatever the data source and the schedule.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	# dropout, a decaying schedule with warmup and clipping: every piece of
	# state a resume must carry is in play
	RUN=(--backend cpu --model poros/tiny-qwen2 --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --accum 2
	     --dropout 0.1 --lr 5e-3 --lr-schedule cosine --timing-warmup 2 --max-grad-norm 0.5 --quiet)
	ADAPTER=adapter/adapter_model.safetensors
}

# the rows that must agree bit for bit (timings and copy counts may not)
rows() {
	jq -c '[.step, .loss, .lr, .grad_norm, .tokens]' "$1/events.jsonl"
}

# same_as_resumed MODE DATA [ARGS...]: 6 steps straight vs 3 + resume 3
same_as_resumed() {
	local mode=$1 data=$2
	shift 2
	poros-train "${RUN[@]}" --mode "$mode" --dataset "$data" --steps 6 --out full "$@" >full.json
	poros-train "${RUN[@]}" --mode "$mode" --dataset "$data" --steps 6 --save-every 3 --out half "$@" >half.json
	[ -d half/checkpoint-step3 ] && [ -d half/adapter-step3 ]
	# half ran all 6 steps; resume its step-3 state in another directory
	poros-train "${RUN[@]}" --mode "$mode" --dataset "$data" --steps 6 --resume half/checkpoint-step3 \
		--out resumed "$@" >resumed.json
	cmp "full/$ADAPTER" "resumed/$ADAPTER"
	diff <(rows full) <(rows resumed)
	[ "$(rows resumed | wc -l)" -eq 6 ]
	jq -e '.status == "ok" and .steps == 6 and .steps_measured == 3' resumed.json
	[ "$(jq .loss_first full.json)" = "$(jq .loss_first resumed.json)" ]
	[ "$(jq .loss_last full.json)" = "$(jq .loss_last resumed.json)" ]
	# the losses move, so equal rows are not equal by accident
	[ "$(jq -r .loss full/events.jsonl | sort -u | wc -l)" -eq 6 ]
}

jsonl_docs() {
	# six distinct documents of input_ids: several epochs go by in 6 steps,
	# so the resumed cursor sits inside a shuffled epoch
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done >data.jsonl
}

@test "blockwise, synthetic data: 6 steps equal 3 steps resumed for 3" {
	same_as_resumed blockwise synthetic --precision nf4 --block-size 2
}

@test "resident, synthetic data: 6 steps equal 3 steps resumed for 3" {
	same_as_resumed resident synthetic --precision bf16
}

@test "a JSONL dataset over several shuffled epochs resumes at the same row, blockwise and resident" {
	jsonl_docs
	same_as_resumed blockwise data.jsonl --precision nf4 --block-size 1
	rm -rf full half resumed
	same_as_resumed resident data.jsonl --precision nf4
}

@test "a raw token file resumes at the same sequence" {
	for i in $(seq 0 299); do printf "\\x$(printf %02x $(((i * 37) % 200)))\\x00"; done >data.u16
	same_as_resumed blockwise data.u16 --precision bf16 --block-size 2
}

@test "a blockwise checkpoint resumed resident gives the same bits (the schedules are bit-identical)" {
	poros-train "${RUN[@]}" --mode blockwise --steps 4 --out full >/dev/null
	poros-train "${RUN[@]}" --mode blockwise --steps 4 --save-every 2 --out half >/dev/null
	poros-train "${RUN[@]}" --mode resident --steps 4 --resume half/checkpoint-step2 --out resumed >/dev/null
	cmp "full/$ADAPTER" "resumed/$ADAPTER"
	diff <(rows full) <(rows resumed)
}

@test "resuming into the run's own directory continues its events and replaces what came after" {
	poros-train "${RUN[@]}" --steps 4 --out full >/dev/null
	poros-train "${RUN[@]}" --steps 4 --save-every 2 --out run >/dev/null
	poros-train "${RUN[@]}" --steps 4 --save-every 2 --resume run/checkpoint-step2 --out run >/dev/null
	cmp "full/$ADAPTER" "run/$ADAPTER"
	diff <(rows full) <(rows run)
	# the checkpoint was rewritten at the same step, whole, and no temporary is left
	ls -A run | sort >entries
	diff entries <(printf '%s\n' .lock adapter adapter-step2 checkpoint-step2 checkpoint-step4 events.jsonl)
	jq -e '.schema == "poros.train_state/1" and .step == 2 and .config.lr == 0.005' run/checkpoint-step2/state.json
	[ "$(stat -c %s run/checkpoint-step2/lora_state.f32)" -eq $((3 * 4 * $(jq .lora_floats run/checkpoint-step2/state.json))) ]
}

@test "a resume with another configuration is refused, naming what differs" {
	poros-train "${RUN[@]}" --steps 4 --save-every 2 --out half >/dev/null
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --lr 1e-3 --resume half/checkpoint-step2 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step2: lr differs: 0.0050000000000000001 in the checkpoint, 0.001 in this run (a resumed run keeps the configuration)' ]
	[ -z "$output" ]
	for change in "--rank 8:rank" "--accum 4:accum" "--seq-len 16:seq_len" "--dataset synthetic:repeat:dataset" \
		"--model poros/tiny-qwen3:model" "--precision bf16:precision" "--steps 5:steps" "--seed 7:seed"; do
		run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 ${change%:*} --resume half/checkpoint-step2 --out r
		[[ "$stderr" == "poros-train: --resume half/checkpoint-step2: ${change##*:} differs: "* ]]
	done
	# POROS_MLP_CHUNK orders the MLP's gradient sums
	POROS_MLP_CHUNK=8 run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --resume half/checkpoint-step2 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step2: mlp_chunk differs: nothing in the checkpoint, 8 in this run (a resumed run keeps the configuration)' ]
	# what does not change the bits may change
	poros-train "${RUN[@]}" --steps 4 --mode resident --no-prefetch --resume half/checkpoint-step2 --out r >/dev/null
}

@test "--resume refuses a step count already reached, a missing checkpoint, and --init-adapter with it" {
	poros-train "${RUN[@]}" --lr-schedule constant --steps 4 --save-every 2 --out half >/dev/null
	run -2 --separate-stderr poros-train "${RUN[@]}" --lr-schedule constant --steps 2 --resume half/checkpoint-step2 --out r
	[[ "$stderr" == *"the checkpoint is at step 2; --steps 2 (the run's total) leaves nothing to do" ]]
	# with a constant schedule --steps may grow
	poros-train "${RUN[@]}" --lr-schedule constant --steps 5 --resume half/checkpoint-step2 --out r | jq -e '.steps == 5'
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --resume nowhere --out r
	[[ "$stderr" == "poros-train: --resume nowhere: "* ]]
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --resume half/checkpoint-step2 --init-adapter half/adapter-step2 --out r
	[[ "$stderr" == *"--resume and --init-adapter"* ]]
}

@test "--init-adapter is a warm start, not a resume: fresh optimizer state and data from the start" {
	poros-train "${RUN[@]}" --lr-schedule constant --timing-warmup 0 --steps 4 --save-every 2 --out half >/dev/null
	poros-train "${RUN[@]}" --lr-schedule constant --timing-warmup 0 --steps 2 --init-adapter half/adapter-step2 --out warm >/dev/null
	# the warm start's first step trains the step-2 adapter on step 1's batch, with zero moments
	[ "$(rows warm | wc -l)" -eq 2 ]
	[ "$(jq -s '.[0].loss' warm/events.jsonl)" != "$(jq -s '.[2].loss' half/events.jsonl)" ]
	! cmp -s "warm/$ADAPTER" "half/$ADAPTER"
}

# four documents of 5 ids: 24 tokens with their EOS, whatever the shuffle
equal_docs() {
	for d in 1 2 3 4; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 5) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
}

# where a checkpoint's cursor stands in documents of 5 ids (24 tokens)
position() {
	jq -r '.data_cursor | (.stream_pos | tonumber) as $p | (.off | tonumber) as $o |
		if $p > 24 then "past-end" elif $p == 24 then "epoch-end" elif $o == 5 then "at-eos"
		elif $o == 0 then "doc-start" else "mid-doc" end' "$1/state.json"
}

@test "a checkpoint resumes bit-identical at every data position: mid-document, row end, epoch end, last step" {
	equal_docs
	local s k
	# rows of 4 end an epoch exactly (24 = 6 x 4), rows of 5 run past it
	for s in 4 5; do
		poros-train "${RUN[@]}" --seq-len "$s" --batch-size 1 --accum 1 --dataset docs.jsonl --steps 8 --out "full$s" >/dev/null
		poros-train "${RUN[@]}" --seq-len "$s" --batch-size 1 --accum 1 --dataset docs.jsonl --steps 8 --save-every 1 \
			--out "half$s" >/dev/null
		for k in 1 2 3 4 5 6 7; do
			position "half$s/checkpoint-step$k" >>positions
			poros-train "${RUN[@]}" --seq-len "$s" --batch-size 1 --accum 1 --dataset docs.jsonl --steps 8 \
				--resume "half$s/checkpoint-step$k" --out "r$s-$k" >"r$s-$k.json"
			cmp "full$s/$ADAPTER" "r$s-$k/$ADAPTER"
			diff <(rows "full$s") <(rows "r$s-$k")
			jq -e '.status == "ok" and .steps == 8' "r$s-$k.json"
		done
		[ "$(jq -r .loss "full$s/events.jsonl" | sort -u | wc -l)" -eq 8 ]
	done
	# every kind of position was among them
	diff <(sort -u positions) <(printf '%s\n' at-eos doc-start epoch-end mid-doc past-end)
}

@test "a checkpoint is written at the last step, and a finished run extends bit-identical" {
	equal_docs
	local run=("${RUN[@]}" --lr-schedule constant --seq-len 5 --batch-size 1 --accum 1 --dataset docs.jsonl)
	poros-train "${run[@]}" --steps 9 --out full >/dev/null
	poros-train "${run[@]}" --steps 5 --save-every 4 --out half >/dev/null
	# every 4th step and the last, whose adapter is adapter/
	ls -A half | sort >entries
	diff entries <(printf '%s\n' .lock adapter adapter-step4 checkpoint-step4 checkpoint-step5 events.jsonl)
	[ "$(position half/checkpoint-step5)" = past-end ]
	jq -e '.step == 5' half/checkpoint-step5/state.json
	poros-train "${run[@]}" --steps 9 --resume half/checkpoint-step5 --out more >more.json
	cmp "full/$ADAPTER" "more/$ADAPTER"
	diff <(rows full) <(rows more)
	jq -e '.status == "ok" and .steps == 9' more.json
	run -2 --separate-stderr poros-train "${run[@]}" --steps 5 --resume half/checkpoint-step5 --out again
	[[ "$stderr" == *"the checkpoint is at step 5; --steps 5 (the run's total) leaves nothing to do" ]]
}

@test "a checkpoint whose cursor is not where the data is, is refused naming it" {
	equal_docs
	poros-train "${RUN[@]}" --seq-len 5 --batch-size 1 --accum 1 --dataset docs.jsonl --steps 2 --save-every 1 --out half >/dev/null
	jq -c '.data_cursor.off = "1"' half/checkpoint-step1/state.json >state.json
	cp state.json half/checkpoint-step1/state.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --seq-len 5 --batch-size 1 --accum 1 --dataset docs.jsonl --steps 2 \
		--resume half/checkpoint-step1 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step1: dataset docs.jsonl: cursor (epoch 0, position 5) is not at document 0 offset 1' ]
	jq -c '.data_cursor.stream_pos = "29"' state.json >half/checkpoint-step1/state.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --seq-len 5 --batch-size 1 --accum 1 --dataset docs.jsonl --steps 2 \
		--resume half/checkpoint-step1 --out r
	[ "$stderr" = "poros-train: --resume half/checkpoint-step1: dataset docs.jsonl: cursor (epoch 0, position 29, document 0) is outside this dataset's 24 tokens" ]
}

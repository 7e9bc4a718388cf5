#!/usr/bin/env bats
# poros-train --eval-dataset / --eval-every (and a cell's training.eval_*):
# the mean loss over the eval set's supervised tokens, forward only, with
# the adapter as the step left it.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	RUN=(--backend cpu --model poros/tiny-qwen2 --rank 4 --alpha 8 --lr 5e-3 --quiet)
	ADAPTER=adapter/adapter_model.safetensors
	# 16 tokens: with --seq-len 15 every training sequence of this file is
	# the whole file, and as an eval set it is that one row
	for i in $(seq 0 15); do printf "\\x$(printf %02x $(((i * 37 + 5) % 200)))\\x00"; done >one.u16
}

@test "the eval loss after step N is the training loss of step N+1 on the same row, blockwise and resident" {
	for mode in "blockwise --precision nf4 --block-size 1" "resident --precision bf16" \
		"resident --precision nf4 --gradient-checkpointing on"; do
		# batch 2 and accum 2: the eval's one row is padded with masked rows
		poros-train "${RUN[@]}" --mode $mode --seq-len 15 --batch-size 2 --accum 2 --dropout 0 --dataset one.u16 \
			--eval-dataset one.u16 --eval-every 1 --steps 4 --out run >run.json
		# step N+1's loss is the mean over this row's 15 targets with step N's adapter
		diff <(jq -s -r '.[1:][] | .loss' run/events.jsonl) <(jq -s -r '.[:-1][] | .eval_loss' run/events.jsonl)
		jq -e -s 'all(.eval_tokens == 15) and length == 4' run/events.jsonl
		[ "$(jq -r .eval_loss run.json)" = "$(jq -s -r '.[-1].eval_loss' run/events.jsonl)" ]
		jq -e '.eval_tokens == 15' run.json
		# and the losses move, so the equality is not a constant's
		[ "$(jq -r .loss run/events.jsonl | sort -u | wc -l)" -eq 4 ]
	done
}

@test "evaluating changes no bit of the training, and sees no dropout" {
	poros-train "${RUN[@]}" --seq-len 15 --dropout 0.1 --dataset one.u16 --steps 3 --out plain >/dev/null
	poros-train "${RUN[@]}" --seq-len 15 --dropout 0.1 --dataset one.u16 --eval-dataset one.u16 --eval-every 1 \
		--steps 3 --save-every 2 --out eval >/dev/null
	cmp "plain/$ADAPTER" "eval/$ADAPTER"
	diff <(jq -c '[.loss, .grad_norm]' plain/events.jsonl) <(jq -c '[.loss, .grad_norm]' eval/events.jsonl)
	# the eval after step 2 is the step-2 adapter's loss on the row without
	# dropout: what a dropout-free run started from that adapter reports for
	# its first step (the loss comes before the update)
	poros-train "${RUN[@]}" --seq-len 15 --dropout 0 --dataset one.u16 --init-adapter eval/adapter-step2 \
		--steps 1 --out check >/dev/null
	[ "$(jq -s -r '.[1].eval_loss' eval/events.jsonl)" = "$(jq -r .loss check/events.jsonl)" ]
	# with dropout the training loss of step 3 is another number
	[ "$(jq -s -r '.[1].eval_loss' eval/events.jsonl)" != "$(jq -s -r '.[2].loss' eval/events.jsonl)" ]
}

@test "eval_tokens counts the supervised targets of one pass: every token of a JSONL set but the first of each document" {
	# 6 documents of 40 ids, each followed by EOS: 246 tokens, 245 - 5 = 240
	# targets (no document's EOS predicts the next one's first token); rows
	# of 32 overlap by one, the last is padded with masked targets
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done >eval.jsonl
	poros-train "${RUN[@]}" --seq-len 32 --batch-size 2 --accum 3 --eval-dataset eval.jsonl --steps 2 --out run >run.json
	# without --eval-every: after the last step only
	[ "$(jq -s 'map(select(has("eval_loss"))) | length' run/events.jsonl)" -eq 1 ]
	jq -e -s '.[1].eval_tokens == 240 and (.[1].eval_loss | . > 0 and . < 20)' run/events.jsonl
	jq -e '.eval_tokens == 240' run.json
	# a run without an eval set has no eval keys
	poros-train "${RUN[@]}" --seq-len 32 --steps 1 --out none >none.json
	jq -e 'has("eval_loss") | not' none.json
	! grep -q eval_loss none/events.jsonl
}

@test "a cell's training.eval_dataset and eval_every drive the same evaluation" {
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench --jsonl | grep '"cell_id":"resident_tiny_qwen2_bf16"' >cell.json
	jq -c --arg d "$PWD/one.u16" '.training.eval_dataset = $d | .training.eval_every = 2' cell.json >eval.json
	poros-train --cell eval.json --backend cpu --steps 4 --quiet --out run >run.json
	[ "$(jq -s -c 'map(has("eval_loss"))' run/events.jsonl)" = '[false,true,false,true]' ]
	jq -e '.eval_tokens > 0 and .eval_loss > 0' run.json
	# eval_every without eval_dataset is a cell error naming the field
	jq -c '.training.eval_every = 2' cell.json >bad.json
	run -2 --separate-stderr poros-train --cell bad.json --backend cpu --out r
	[[ "$stderr" == *"training.eval_every: needs training.eval_dataset" ]]
	# a cell without the keys reads as before and is written without them
	jq -e '.training | has("eval_dataset") | not' cell.json
}

@test "an eval set without an end, or --eval-every without a set, is refused" {
	run -2 --separate-stderr poros-train "${RUN[@]}" --eval-dataset synthetic --out r
	[ "$stderr" = 'poros-train: --eval-dataset synthetic: a synthetic stream has no end to average over; give a dataset or a token file' ]
	run -2 --separate-stderr poros-train "${RUN[@]}" --eval-every 2 --out r
	[ "$stderr" = 'poros-train: --eval-every: needs an evaluation dataset (--eval-dataset)' ]
	run -2 --separate-stderr poros-train "${RUN[@]}" --eval-dataset nowhere.jsonl --out r
	[[ "$stderr" == 'poros-train: --eval-dataset: dataset "nowhere.jsonl": '* ]]
}

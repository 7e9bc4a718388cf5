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
	# the same tokens in another file: the training file itself is refused as an eval set
	cp one.u16 same.u16
}

@test "the eval loss after step N is the training loss of step N+1 on the same row, blockwise and resident" {
	for mode in "blockwise --precision nf4 --block-size 1" "resident --precision bf16" \
		"resident --precision nf4 --gradient-checkpointing on"; do
		# batch 2 and accum 2: the eval's one row is padded with masked rows
		poros-train "${RUN[@]}" --mode $mode --seq-len 15 --batch-size 2 --accum 2 --dropout 0 --dataset one.u16 \
			--eval-dataset same.u16 --eval-every 1 --steps 4 --out run >run.json
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
	poros-train "${RUN[@]}" --seq-len 15 --dropout 0.1 --dataset one.u16 --eval-dataset same.u16 --eval-every 1 \
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
	[ "$stderr" = 'poros-train: --eval-every: needs an evaluation dataset (--eval-dataset or --eval-fraction)' ]
	run -2 --separate-stderr poros-train "${RUN[@]}" --eval-dataset nowhere.jsonl --out r
	[[ "$stderr" == 'poros-train: --eval-dataset: dataset "nowhere.jsonl": '* ]]
}

# docs.jsonl-like files of n documents of `len` ids each, offset by `base`
docs() {
	local n=$1 len=$2 base=$3 d
	for d in $(seq 1 "$n"); do
		jq -cn --argjson d "$d" --argjson l "$len" --argjson b "$base" '{input_ids: [range(0; $l) | (. * 7 + $d * 13 + $b) % 250]}'
	done
}

@test "a directory gives the split asked for, as HF datasets names them; the eval set defaults to validation, else test" {
	mkdir -p ds/data
	docs 4 9 0 >ds/data/train-00000-of-00001.jsonl
	docs 2 6 1 >ds/data/validation-00000-of-00001.jsonl
	docs 3 5 2 >ds/data/test-00000-of-00001.jsonl
	local run=(poros-train "${RUN[@]}" --seq-len 8 --steps 2)
	# 2 x (6 - 1 + 1) targets: the validation split; 3 x 5 with --eval-split test
	"${run[@]}" --dataset ds --eval-dataset ds --out a | jq -e '.status == "ok" and .eval_tokens == 12'
	"${run[@]}" --dataset ds --eval-dataset ds --eval-split test --out b | jq -e '.eval_tokens == 15'
	# the train split is the train file, bit for bit
	"${run[@]}" --dataset ds/data/train-00000-of-00001.jsonl --out c >/dev/null
	cmp "a/$ADAPTER" "c/$ADAPTER"
	"${run[@]}" --dataset ds --split test --out d >/dev/null
	"${run[@]}" --dataset ds/data/test-00000-of-00001.jsonl --out e >/dev/null
	cmp "d/$ADAPTER" "e/$ADAPTER"
	# file-name and directory-name rules: valid*, dev*, eval* and train/ folders
	mkdir -p named/train named/dev
	cp ds/data/train-00000-of-00001.jsonl named/train/part-1.jsonl
	cp ds/data/validation-00000-of-00001.jsonl named/dev/x.jsonl
	"${run[@]}" --dataset named --eval-dataset named --out f | jq -e '.eval_tokens == 12'
	cmp "a/$ADAPTER" "f/$ADAPTER"
	mkdir flat && cp ds/data/test-00000-of-00001.jsonl flat/eval_set.jsonl && cp ds/data/train-00000-of-00001.jsonl flat/my_train.jsonl
	"${run[@]}" --dataset flat --eval-dataset flat --out g | jq -e '.eval_tokens == 15'
	cmp "a/$ADAPTER" "g/$ADAPTER"
}

@test "a split that is not there, a split of a file, and eval data that is the training data are refused" {
	mkdir -p ds
	docs 3 9 0 >ds/train.jsonl
	docs 2 6 1 >ds/test.jsonl
	local run=(poros-train "${RUN[@]}" --seq-len 8 --steps 1)
	run -2 --separate-stderr "${run[@]}" --dataset ds --split validation --out r
	[ "$stderr" = 'poros-train: dataset: ds: no files of split "validation" (the splits there: train, test)' ]
	run -2 --separate-stderr "${run[@]}" --dataset ds/train.jsonl --split train --out r
	[ "$stderr" = 'poros-train: --split train: dataset ds/train.jsonl has no splits (only a directory or a HF cache dataset has)' ]
	run -2 --separate-stderr "${run[@]}" --dataset ds --split 'train|test' --out r
	[ "$stderr" = "poros-train: --split: \"train|test\" is no split name (letters, digits, '.', '_', '-')" ]
	run -2 --separate-stderr "${run[@]}" --dataset ds --eval-split test --out r
	[ "$stderr" = 'poros-train: --eval-split: needs an evaluation dataset (--eval-dataset)' ]
	mkdir only && cp ds/train.jsonl only/
	run -2 --separate-stderr "${run[@]}" --dataset ds --eval-dataset only --out r
	[ "$stderr" = 'poros-train: --eval-dataset: dataset: only: no files of split "validation" or "test" (the splits there: train)' ]
	# the same files, however named: the directory's own split, a path, a hard link
	run -2 --separate-stderr "${run[@]}" --dataset ds --eval-dataset ds --eval-split train --out r
	[ "$stderr" = 'poros-train: --eval-dataset ds: the same files as the training data (--dataset ds): an evaluation on them measures nothing held out' ]
	ln ds/train.jsonl linked.jsonl
	run -2 --separate-stderr "${run[@]}" --dataset ./ds/train.jsonl --eval-dataset linked.jsonl --out r
	[[ "$stderr" == *"--eval-dataset linked.jsonl: the same files as the training data"* ]]
	run -2 --separate-stderr "${run[@]}" --dataset one.u16 --eval-dataset ./one.u16 --out r
	[[ "$stderr" == *"--eval-dataset ./one.u16: the same files as the training data"* ]]
	[ ! -e r ]
}

@test "--eval-fraction holds out whole documents chosen by the seed, and trains on the rest" {
	# four documents of 3, 5, 7 and 9 ids: each gives its length in targets
	for l in 3 5 7 9; do
		jq -cn --argjson l "$l" '{input_ids: [range(0; $l) | (. * 11 + $l) % 250]}'
	done >four.jsonl
	local run=(poros-train "${RUN[@]}" --seq-len 8 --steps 2 --dataset four.jsonl) seed held=()
	for seed in 1 2 3 4 5 6; do
		"${run[@]}" --seed "$seed" --eval-fraction 0.25 --out "s$seed" >"s$seed.json"
		held+=("$(jq .eval_tokens "s$seed.json")")
		[[ " 3 5 7 9 " == *" ${held[-1]} "* ]]
	done
	# the seeds hold out different documents; the same seed the same one, bit for bit
	[ "$(printf '%s\n' "${held[@]}" | sort -u | wc -l)" -ge 2 ]
	"${run[@]}" --seed 1 --eval-fraction 0.25 --out again >again.json
	[ "$(jq .eval_loss again.json)" = "$(jq .eval_loss s1.json)" ]
	cmp "s1/$ADAPTER" "again/$ADAPTER"
	# ceil(0.5 x 4) = 2 documents
	"${run[@]}" --eval-fraction 0.5 --out half | jq -e '[.eval_tokens] | inside([8, 10, 12, 14, 16])'
	run -2 --separate-stderr "${run[@]}" --eval-fraction 0.9 --out r
	[ "$stderr" = 'poros-train: dataset four.jsonl: holding out 0.9 of 4 documents leaves none to train on' ]
	run -2 --separate-stderr "${run[@]}" --eval-fraction 0.5 --eval-dataset four.jsonl --out r
	[[ "$stderr" == "poros-train: --eval-fraction and --eval-dataset: "* ]]
	run -2 --separate-stderr poros-train "${RUN[@]}" --dataset one.u16 --eval-fraction 0.5 --out r
	[ "$stderr" = 'poros-train: dataset one.u16: --eval-fraction holds out documents, and a token stream has none (give --eval-dataset)' ]
	# a resume keeps the fraction: another is refused, none given takes the checkpoint's
	"${run[@]}" --eval-fraction 0.25 --save-every 1 --out ck >/dev/null
	run -2 --separate-stderr "${run[@]}" --eval-fraction 0.5 --resume ck/checkpoint-step1 --out r
	[[ "$stderr" == *"--eval-fraction (eval_fraction: checkpoint 0.25, given 0.5)"* ]]
	"${run[@]}" --resume ck/checkpoint-step1 --out r | jq -e '.status == "ok" and .config.eval_fraction == 0.25'
}

# --eval-only: no training, one pass over the evaluation set, one poros.eval/1 line

@test "--eval-only gives the eval_loss a training run reports with the same adapter, bit for bit" {
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done >eval.jsonl
	for mode in "blockwise --precision nf4 --block-size 1" "resident --precision bf16"; do
		poros-train "${RUN[@]}" --mode $mode --seq-len 32 --batch-size 2 --accum 3 --dataset one.u16 \
			--eval-dataset eval.jsonl --steps 3 --out run >run.json
		# rank and alpha come from the adapter: none is given here
		run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --quiet --mode $mode \
			--seq-len 32 --batch-size 2 --accum 3 --eval-dataset eval.jsonl --eval-only --init-adapter run/adapter --out ev
		[ "${#lines[@]}" -eq 1 ]
		[ "$(jq -r .eval_loss <<<"$output")" = "$(jq -r .eval_loss run.json)" ]
		jq -e '.schema == "poros.eval/1" and .status == "ok" and .eval_tokens == 240 and .eval_rows == 8 and
			.adapter == "run/adapter" and .eval_dataset == "eval.jsonl" and .weights == "synthetic" and
			(.perplexity - (.eval_loss | exp) | fabs) < 1e-4 * .perplexity' <<<"$output"
		# nothing written: no run directory, no adapter
		[ ! -e ev ]
	done
	# and the trained adapter's loss is not the base's, so the equality says something
	run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --quiet --mode resident \
		--precision bf16 --seq-len 32 --batch-size 2 --accum 3 --eval-dataset eval.jsonl --eval-only
	[ "$(jq -r .eval_loss <<<"$output")" != "$(jq -r .eval_loss run.json)" ]
	jq -e '.adapter == null' <<<"$output"
}

@test "--eval-only with --eval-fraction evaluates the documents a training run holds out" {
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
	poros-train "${RUN[@]}" --seq-len 32 --dataset docs.jsonl --eval-fraction 0.4 --steps 2 --out run >run.json
	poros-train "${RUN[@]}" --seq-len 32 --dataset docs.jsonl --eval-fraction 0.4 --eval-only --init-adapter run/adapter \
		>ev.json
	[ "$(jq -r .eval_loss ev.json)" = "$(jq -r .eval_loss run.json)" ]
	jq -e '.eval_tokens == 120 and .eval_fraction == 0.4' ev.json
}

@test "--eval-only of the base is the loss before any training: a fresh run's first step without dropout" {
	poros-train "${RUN[@]}" --seq-len 15 --dropout 0 --dataset one.u16 --steps 1 --out first >/dev/null
	poros-train "${RUN[@]}" --seq-len 15 --eval-dataset one.u16 --eval-only >ev.json
	[ "$(jq -r .eval_loss ev.json)" = "$(jq -r .loss first/events.jsonl)" ]
	jq -e '.eval_tokens == 15 and .eval_rows == 1' ev.json
}

@test "--eval-only allocates no optimizer state, in its plan and in its run" {
	local train eval
	train=$(poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 32 --plan)
	eval=$(poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 32 --plan --eval-only --eval-dataset one.u16)
	# LoRA parameters alone: a quarter of parameters, gradients and two AdamW moments
	jq -e -n --argjson t "$train" --argjson e "$eval" \
		'($t.vram_breakdown_mb.lora_state / $e.vram_breakdown_mb.lora_state - 4 | fabs) < 0.01 and
		 $t.vram_plan_mb > $e.vram_plan_mb and
		 ($t.vram_breakdown_mb | del(.lora_state)) == ($e.vram_breakdown_mb | del(.lora_state))'
	# the run allocates what its plan says
	poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 32 --quiet --eval-only --eval-dataset one.u16 >ev.json
	jq -e --argjson e "$eval" '.vram_plan_mb == $e.vram_plan_mb and .vram_peak_mb == $e.vram_plan_mb' ev.json
}

@test "--eval-only refuses what only a training run does, and an adapter of another shape" {
	poros-train "${RUN[@]}" --seq-len 15 --dataset one.u16 --steps 1 --out run >/dev/null
	E=(--backend cpu --model poros/tiny-qwen2 --seq-len 15 --eval-only)
	run -2 --separate-stderr poros-train "${E[@]}"
	[ "$stderr" = "poros-train: --eval-only: needs an evaluation set: --eval-dataset SPEC, or --dataset SPEC with --eval-fraction F (the documents a training run holds out)" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --dataset same.u16
	[[ "$stderr" == "poros-train: --eval-only with --eval-dataset reads no training data: --dataset same.u16 would change nothing"* ]]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --save-every 1
	[ "$stderr" = "poros-train: --eval-only and --save-every: an evaluation saves nothing" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --eval-every 1
	[ "$stderr" = "poros-train: --eval-only and --eval-every: an evaluation runs once" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --resume run
	[[ "$stderr" == "poros-train: --eval-only and --resume: "* ]]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --epochs 1
	[[ "$stderr" == "poros-train: --eval-only and --epochs: "* ]]
	# the adapter's rank, alpha and targets are what is evaluated: a flag that says otherwise is refused
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --init-adapter run/adapter --rank 8
	[ "$stderr" = "poros-train: --init-adapter run/adapter: rank 4, but --rank says 8" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --init-adapter run/adapter --alpha 16
	[ "$stderr" = "poros-train: --init-adapter run/adapter: lora_alpha 8, but --alpha says 16" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --init-adapter run/adapter --targets q_proj,v_proj
	[ "$stderr" = "poros-train: --init-adapter run/adapter: targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj, but --targets says q_proj,v_proj" ]
	run -2 --separate-stderr poros-train "${E[@]}" --eval-dataset one.u16 --init-adapter nowhere
	[[ "$stderr" == "poros-train: --init-adapter: "* ]] && [ -z "$output" ]
	# the same flags as the adapter's are taken
	poros-train "${E[@]}" --quiet --eval-dataset one.u16 --init-adapter run/adapter --rank 4 --alpha 8 | jq -e '.status == "ok"'
}

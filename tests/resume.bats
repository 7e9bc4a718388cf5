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
	diff entries <(printf '%s\n' .lock adapter adapter-step2 checkpoint-step2 checkpoint-step4 events.jsonl train_config.json)
	jq -e '.schema == "poros.train_state/1" and .step == 2 and .config.lr == 0.005' run/checkpoint-step2/state.json
	[ "$(stat -c %s run/checkpoint-step2/lora_state.f32)" -eq $((3 * 4 * $(jq .lora_floats run/checkpoint-step2/state.json))) ]
}

@test "a resume with another configuration is refused, every difference listed in one error" {
	poros-train "${RUN[@]}" --steps 4 --save-every 2 --out half >/dev/null
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --lr 1e-3 --resume half/checkpoint-step2 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in --lr (lr: checkpoint 0.005, given 0.001); a resumed run keeps the configuration' ]
	[ -z "$output" ] && [ ! -e r ]
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 5 --rank 8 --seed 7 --precision bf16 --targets q_proj,v_proj \
		--dataset synthetic:repeat --model poros/tiny-qwen3 --resume half/checkpoint-step2 --out r
	[[ "$stderr" == "poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in "* ]]
	for want in '--model (model_hash: checkpoint "synthetic:' '--precision (precision: checkpoint "nf4", given "bf16")' \
		'--dataset (dataset: checkpoint "synthetic", given "synthetic:repeat")' \
		'--targets (targets: checkpoint ["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"], given ["q_proj","v_proj"])' \
		'--seed (seed: checkpoint 42, given 7)' '--rank (rank: checkpoint 4, given 8)' '--steps (steps: checkpoint 4, given 5)'; do
		[[ "$stderr" == *"$want"* ]]
	done
	[ "$(grep -o ' (' <<<"$stderr" | wc -l)" -eq 7 ]
	# POROS_MLP_CHUNK orders the MLP's gradient sums
	POROS_MLP_CHUNK=8 run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --resume half/checkpoint-step2 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in POROS_MLP_CHUNK (mlp_chunk: checkpoint not set, given 8); a resumed run keeps the configuration' ]
	# what does not change the bits may change
	poros-train "${RUN[@]}" --steps 4 --mode resident --no-prefetch --block-size 1 --resume half/checkpoint-step2 --out r >/dev/null
}

@test "the run directory records the whole configuration in readable values, and the summary carries it" {
	run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 32 --batch-size 2 --rank 4 --steps 2 \
		--targets q_proj,v_proj --train-on all --out run
	jq -e '.model == "poros/tiny-qwen2" and (.model_hash | test("^synthetic:[0-9a-f]{64}$")) and .precision == "nf4"
		and .dataset == "synthetic" and .train_on == "all" and .targets == ["q_proj", "v_proj"] and .seed == 42
		and .lr == 0.0002 and .lr_schedule == "constant" and .steps == 2 and .epochs == null and .seq_len == 32
		and .mode == "blockwise" and .backend == "cpu" and .attention == "default" and .gemm_choice == "group"
		and .gemm_choice_rows == 64 and .cudnn_workspace_mb == null and .cudnn_tile == null' run/train_config.json
	# the summary's config is the same object, and the default precision is said at the start
	[ "$(jq -S -c . run/train_config.json)" = "$(jq -S -c .config <<<"$output")" ]
	[[ "$stderr" == *"poros-train: blockwise, nf4 base poros/tiny-qwen2, 2 steps,"*"configuration in run/train_config.json"* ]]
	# another seed defines other synthetic weights: another identity
	poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 32 --batch-size 2 --rank 4 --steps 1 --seed 7 --quiet --out s7 >/dev/null
	[ "$(jq .model_hash run/train_config.json)" != "$(jq .model_hash s7/train_config.json)" ]
	# PEFT's file stays PEFT's
	jq -e '.peft_type == "LORA" and .r == 4 and (has("model_hash") | not)' run/adapter/adapter_config.json
}

@test "the CUDA routes (POROS_ATTENTION, POROS_GEMM_CHOICE, POROS_CUDNN_WORKSPACE, POROS_CUDNN_TILE) are recorded; a resume may change them" {
	# 64 tokens x batch 2 at accumulation 4: groups of 2 micro-batches (128 rows) under POROS_GROUP=2
	local run=(--backend cpu --model poros/tiny-qwen2 --seq-len 64 --batch-size 2 --rank 4 --alpha 8 --accum 4 --steps 4
		--quiet)
	POROS_ATTENTION=mma POROS_CUDNN_WORKSPACE=4096 POROS_CUDNN_TILE=auto POROS_GROUP=2 poros-train "${run[@]}" \
		--save-every 2 --out half >/dev/null
	jq -e '.attention == "mma" and .gemm_choice == "group" and .gemm_choice_rows == 256 and .cudnn_workspace_mb == 4096
		and .cudnn_tile == "auto"' half/train_config.json
	jq -e '.config.attention == "mma"' half/checkpoint-step2/state.json
	# like --backend, another route may round otherwise on CUDA: allowed, and
	# the resumed run's record says what it took (the CPU has one route)
	POROS_GEMM_CHOICE=micro-batch poros-train "${run[@]}" --resume half/checkpoint-step2 --out r >/dev/null
	jq -e '.attention == "default" and .gemm_choice == "micro-batch" and .gemm_choice_rows == 128
		and .cudnn_workspace_mb == null and .cudnn_tile == null' r/train_config.json
	cmp "half/$ADAPTER" "r/$ADAPTER"
	# unset, a group is up to 2048 rows (GROUP_AUTO_ROWS), here the step's 4 micro-batches
	poros-train "${run[@]}" --steps 1 --out auto >/dev/null
	jq -e '.gemm_choice == "group" and .gemm_choice_rows == 512' auto/train_config.json
}

@test "--resume RUN_DIR takes its newest whole checkpoint, the configuration from it, and writes into that directory" {
	local run=("${RUN[@]}" --lr-schedule constant)
	poros-train "${run[@]}" --steps 8 --out full >/dev/null
	poros-train "${run[@]}" --steps 6 --save-every 2 --out half >/dev/null
	# a directory without its state.json is not a whole checkpoint
	mkdir half/checkpoint-step7 half/.checkpoint-step8.tmp.1
	# only --steps, which a constant schedule lets grow; everything else is the checkpoint's
	run -0 --separate-stderr poros-train --resume half --steps 8
	jq -e '.status == "ok" and .steps == 8 and .run_dir == "half" and .config.steps == 8' <<<"$output"
	cmp "full/$ADAPTER" "half/$ADAPTER"
	diff <(rows full) <(rows half)
	[ -d half/checkpoint-step8 ]
	# --out still says where
	run -0 --separate-stderr poros-train --resume half/checkpoint-step4 --out elsewhere
	jq -e '.run_dir == "elsewhere" and .steps == 6' <<<"$output"
	run -2 --separate-stderr poros-train --resume full
	[ "$stderr" = 'poros-train: --resume full: neither a checkpoint nor a run directory with one (a run saves checkpoint-stepN with --save-every N)' ]
}

@test "the base is identified by its weights' content: another model at the same path is refused, m and ./m are one" {
	local ck=$POROS_ROOT/tests/fixtures/checkpoint/make_checkpoint.py
	python3 "$ck" m --family qwen2 --seed 1
	local run=(--backend cpu --seq-len 16 --batch-size 2 --rank 4 --alpha 8 --steps 4 --quiet --dataset synthetic:repeat)
	poros-train "${run[@]}" --model m --out full >/dev/null
	poros-train "${run[@]}" --model m --save-every 2 --out half >/dev/null
	jq -e '.model_hash | test("^st64x4:[0-9a-f]{64}$")' half/train_config.json
	# the same files by another path resume, to the same bits
	poros-train "${run[@]}" --model ./m --resume half/checkpoint-step2 --out r >/dev/null
	cmp "full/$ADAPTER" "r/$ADAPTER"
	# other weights at the same path are another model
	rm -r m
	python3 "$ck" m --family qwen2 --seed 2
	run -2 --separate-stderr poros-train "${run[@]}" --model m --resume half/checkpoint-step2 --out r2
	[[ "$stderr" == "poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in --model (model_hash: checkpoint \"st64x4:"*"; a resumed run keeps the configuration" ]]
	[ ! -e r2/adapter ]
}

@test "--save-total-limit N keeps the N newest whole checkpoints, and a resume goes on from them" {
	poros-train "${RUN[@]}" --steps 6 --out full >/dev/null
	poros-train "${RUN[@]}" --steps 6 --save-every 1 --save-total-limit 2 --out run >/dev/null
	diff <(ls -d run/checkpoint-step* | sort) <(printf '%s\n' run/checkpoint-step5 run/checkpoint-step6)
	jq -e '.save_total_limit == 2' run/train_config.json
	# the newest ones are whole: the one before the last resumes to the same bits
	poros-train --resume run/checkpoint-step5 --out again >/dev/null
	cmp "full/$ADAPTER" "again/$ADAPTER"
	diff <(rows full) <(rows again)
	diff <(ls -d again/checkpoint-step* | sort) <(printf '%s\n' again/checkpoint-step6)
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 6 --save-total-limit 0 --out r
	[[ "$stderr" == "poros-train: --save-total-limit: "* ]]
}

@test "SIGTERM and SIGINT finish the step, save a checkpoint and print the resume command; the resume is bit-identical" {
	local sig code
	poros-train "${RUN[@]}" --steps 40 --out full >/dev/null
	for sig in TERM:143 INT:130; do
		code=${sig#*:}
		sig=${sig%:*}
		rm -rf run
		poros-train "${RUN[@]}" --steps 40 --out run >out.json 2>err &
		local pid=$!
		while [ "$(cat run/events.jsonl 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.05; done
		kill -s "$sig" "$pid"
		local rc=0
		wait "$pid" || rc=$?
		[ "$rc" -eq "$code" ]
		local k
		k=$(wc -l <run/events.jsonl)
		[ "$k" -lt 40 ] && [ -d "run/checkpoint-step$k" ] && [ ! -e run/adapter ]
		[ ! -s out.json ]
		grep -q "^poros-train: SIG$sig: stopped after step $k of 40; checkpoint run/checkpoint-step$k; continue with: poros-train --resume run\$" err
		poros-train --resume run --quiet | jq -e '.status == "ok" and .steps == 40'
		cmp "full/$ADAPTER" "run/$ADAPTER"
		diff <(rows full) <(rows run)
	done
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
	diff entries <(printf '%s\n' .lock adapter adapter-step4 checkpoint-step4 checkpoint-step5 events.jsonl train_config.json)
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

@test "a checkpoint from before model hashes is refused, naming that" {
	poros-train "${RUN[@]}" --steps 2 --save-every 1 --out half >/dev/null
	jq -c 'del(.config.model_hash)' half/checkpoint-step1/state.json >state.json
	cp state.json half/checkpoint-step1/state.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 2 --resume half/checkpoint-step1 --out r
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step1: a checkpoint of an older poros-train (its base model is not identified by content): resume it with the poros-train that wrote it' ]
	[ ! -e r ]
}

# text documents for a model with a tokenizer (tiny-llama: the fixture's ids fit its vocabulary)
text_run() {
	TOK="$POROS_ROOT/tests/fixtures/tokenizer/tiny"
	for i in 1 2 3 4 5 6; do
		printf '{"text": "document %d: the quick brown fox jumps over the lazy dog, %d times"}\n' "$i" "$i"
	done >text.jsonl
	cp -r "$TOK" tok
	TEXT=(--backend cpu --model poros/tiny-llama --seq-len 16 --batch-size 2 --rank 4 --alpha 8 --dropout 0.1
	      --lr 5e-3 --lr-schedule cosine --steps 4 --quiet)
}

@test "the data is identified by content: an edited dataset is refused, a copy at another path resumes bit for bit" {
	text_run
	poros-train "${TEXT[@]}" --dataset text.jsonl --tokenizer tok --out full >/dev/null
	poros-train "${TEXT[@]}" --dataset text.jsonl --tokenizer tok --save-every 2 --out half >/dev/null
	jq -e '(.dataset_hash | test("^f64x4:[0-9a-f]{64}$")) and (.tokenizer_hash | test("^f64x4:[0-9a-f]{64}$"))
		and .eval_dataset_hash == null' half/train_config.json
	# the same bytes under other names, data and tokenizer: the same run
	mkdir moved
	cp text.jsonl moved/copy.jsonl
	cp -r tok moved/tok
	run -0 --separate-stderr poros-train "${TEXT[@]}" --dataset moved/copy.jsonl --tokenizer moved/tok \
		--resume half/checkpoint-step2 --out r
	cmp "full/$ADAPTER" "r/$ADAPTER"
	diff <(rows full) <(rows r)
	jq -e '.dataset == "moved/copy.jsonl"' r/train_config.json
	[ "$(jq .dataset_hash r/train_config.json)" = "$(jq .dataset_hash half/train_config.json)" ]
	# one document more in the same file: the cursor would point into another stream
	printf '{"text": "one more document"}\n' >>text.jsonl
	run -2 --separate-stderr poros-train "${TEXT[@]}" --dataset text.jsonl --tokenizer tok --resume half/checkpoint-step2 --out r2
	[[ "$stderr" == 'poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in --dataset (dataset_hash: checkpoint "f64x4:'*'", given "f64x4:'*'"); a resumed run keeps the configuration' ]]
	[ "$(wc -l <<<"$stderr")" -eq 1 ] && [ -z "$output" ] && [ ! -e r2 ]
	# taken from the checkpoint, the path is the edited file all the same
	run -2 --separate-stderr poros-train --quiet --resume half/checkpoint-step2 --out r2
	[[ "$stderr" == *"--dataset (dataset_hash: checkpoint "* ]]
	# an edit that keeps the size (which the cursor checks) is caught too
	sed -i '$d' text.jsonl
	sed -i 's/quick/quack/' text.jsonl
	[ "$(stat -c %s text.jsonl)" -eq "$(stat -c %s moved/copy.jsonl)" ]
	run -2 --separate-stderr poros-train --quiet --resume half/checkpoint-step2 --out r2
	[[ "$stderr" == *"--dataset (dataset_hash: checkpoint "* ]]
}

@test "a tokenizer edited in place is refused on resume, naming tokenizer_hash" {
	text_run
	poros-train "${TEXT[@]}" --dataset text.jsonl --tokenizer tok --save-every 2 --out half >/dev/null
	jq '.eos_token = "<unk>"' tok/tokenizer_config.json >cfg.json
	mv cfg.json tok/tokenizer_config.json
	run -2 --separate-stderr poros-train --quiet --resume half/checkpoint-step2 --out r
	[[ "$stderr" == 'poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in --tokenizer (tokenizer_hash: checkpoint "f64x4:'*'", given "f64x4:'*'"); a resumed run keeps the configuration' ]]
	[ ! -e r ]
	# a chat template added beside it is another tokenizer too
	cp "$TOK/tokenizer_config.json" tok/
	printf '{{ messages }}' >tok/chat_template.jinja
	run -2 --separate-stderr poros-train --quiet --resume half/checkpoint-step2 --out r
	[[ "$stderr" == *"--tokenizer (tokenizer_hash: checkpoint "* ]]
	rm tok/chat_template.jinja
	poros-train --quiet --resume half/checkpoint-step2 --out r | jq -e '.status == "ok" and .steps == 4'
}

@test "an eval set may be another on resume, but not other content under the same name" {
	text_run
	head -2 text.jsonl >val.jsonl
	tail -2 text.jsonl >val2.jsonl
	poros-train "${TEXT[@]}" --dataset text.jsonl --tokenizer tok --eval-dataset val.jsonl --eval-every 2 --save-every 2 \
		--out half >/dev/null
	jq -e '.eval_dataset_hash | test("^f64x4:")' half/train_config.json
	poros-train --quiet --resume half/checkpoint-step2 --eval-dataset val2.jsonl --out r | jq -e '.status == "ok"'
	cp val2.jsonl val.jsonl
	run -2 --separate-stderr poros-train --quiet --resume half/checkpoint-step2 --out r2
	[[ "$stderr" == *"this run differs from the checkpoint in --eval-dataset (eval_dataset_hash: checkpoint "* ]]
}

@test "a checkpoint from before data hashes resumes synthetic data as before, and is refused by name on a file" {
	poros-train "${RUN[@]}" --steps 4 --out full >/dev/null
	poros-train "${RUN[@]}" --steps 4 --save-every 2 --out half >/dev/null
	jq -e '.dataset_hash == null and .tokenizer_hash == null' half/train_config.json
	jq -c 'del(.config.dataset_hash, .config.eval_dataset_hash, .config.tokenizer_hash)' half/checkpoint-step2/state.json >state.json
	cp state.json half/checkpoint-step2/state.json
	poros-train "${RUN[@]}" --steps 4 --resume half/checkpoint-step2 --out r >/dev/null
	cmp "full/$ADAPTER" "r/$ADAPTER"
	diff <(rows full) <(rows r)
	# synthetic data is still told apart by name
	run -2 --separate-stderr poros-train "${RUN[@]}" --steps 4 --dataset synthetic:repeat --resume half/checkpoint-step2 --out r2
	[ "$stderr" = 'poros-train: --resume half/checkpoint-step2: this run differs from the checkpoint in --dataset (dataset: checkpoint "synthetic", given "synthetic:repeat"); a resumed run keeps the configuration' ]
	# a file's content cannot be checked against a checkpoint that never recorded it
	jsonl_docs
	poros-train "${RUN[@]}" --steps 4 --dataset data.jsonl --save-every 2 --out file >/dev/null
	jq -c 'del(.config.dataset_hash)' file/checkpoint-step2/state.json >state.json
	cp state.json file/checkpoint-step2/state.json
	run -2 --separate-stderr poros-train --quiet --resume file/checkpoint-step2 --out r3
	[ "$stderr" = 'poros-train: --resume file/checkpoint-step2: a checkpoint of an older poros-train (--dataset: what it read is not identified by content, no dataset_hash): resume it with the poros-train that wrote it' ]
	[ ! -e r3 ]
}

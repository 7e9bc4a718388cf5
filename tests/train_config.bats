#!/usr/bin/env bats
# poros train CONFIG.yaml: a fine-tune config (man/poros-train-config.5),
# read by poros-expand --train-argv into poros-train's arguments.  CPU.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	EXAMPLE="$POROS_ROOT/configs/train/tiny-synthetic.yaml"
}

# c.yaml: a minimal valid config with the given lines added.
cfg() {
	{ printf '%s\n' 'model: poros/tiny-qwen2' 'dataset: synthetic' 'output_dir: out' 'max_steps: 2'; printf '%s\n' "$@"; } >c.yaml
}

@test "the example config runs end to end: the same bits as poros-train with the flags it names" {
	run -0 --separate-stderr poros train "$EXAMPLE" -o via-config
	echo "$output" | jq -e '.status == "ok" and .steps == 4 and .backend == "cpu" and .mode == "blockwise"'
	[ -d via-config/checkpoint-step2 ] && [ -d via-config/adapter ]
	jq -e '.r == 8 and .lora_alpha == 16 and (.target_modules | sort) == ["k_proj","o_proj","q_proj","v_proj"]' \
		via-config/adapter/adapter_config.json
	poros-train --quiet --model poros/tiny-qwen2 --dataset synthetic --steps 4 --seq-len 64 --batch-size 2 \
		--accum 2 --lr 2e-4 --lr-schedule cosine --lr-warmup 1 --seed 42 --rank 8 --alpha 16 --dropout 0 \
		--targets q_proj,k_proj,v_proj,o_proj --precision nf4 --mode blockwise --block-size 1 --backend cpu \
		--out direct >direct.json
	diff <(jq -c '[.step, .loss, .grad_norm, .lr]' via-config/events.jsonl) \
		<(jq -c '[.step, .loss, .grad_norm, .lr]' direct/events.jsonl)
	# -o won over the config's output_dir
	[ ! -e out/train/tiny-synthetic ]
}

@test "a config is poros-train's argument vector, one argument per line, each key as its option" {
	cfg 'learning_rate: 1.0e-4' 'target_modules: all-linear' 'prefetch: false' 'gradient_checkpointing: true' \
		'num_train_epochs: 0.5' 'resume_from_checkpoint: "dir with spaces/checkpoint-step1"'
	run -0 --separate-stderr poros-expand --train-argv c.yaml
	[ "$stderr" = "" ]
	want=(--model poros/tiny-qwen2 --dataset synthetic --out out --steps 2 --lr 1.0e-4
		--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --no-prefetch
		--gradient-checkpointing on --epochs 0.5 --resume "dir with spaces/checkpoint-step1")
	[ "$output" = "$(printf '%s\n' "${want[@]}")" ]
	# prefetch: true is the default: no option at all
	cfg 'prefetch: true'
	run -0 poros-expand --train-argv c.yaml
	refute_output --partial prefetch
	run -0 poros-expand --kind c.yaml
	[ "$output" = train-config ]
	run -0 poros-expand --kind "$POROS_ROOT/tests/fixtures/expand/minimal.yaml"
	[ "$output" = bench-spec ]
}

@test "a bad config is one line FILE:LINE:COL, exit 2, nothing on stdout and nothing run" {
	local n=0
	while IFS='|' read -r line message; do
		cfg "$line"
		run -2 --separate-stderr poros train c.yaml
		[ "$output" = "" ]
		[ "$stderr" = "poros-expand: c.yaml:$message" ] || { echo "got: $stderr (want: $message)"; false; }
		[ ! -e out ]
		n=$((n + 1))
	done <<-'EOF'
		lerning_rate: 1|5:1: unknown key "lerning_rate" (did you mean "learning_rate"?)
		learning_rate: 0|5:16: learning_rate: must be greater than 0, got 0
		learning_rate: fast|5:16: learning_rate: expected a number, got "fast"
		per_device_train_batch_size: 2.5|5:30: per_device_train_batch_size: expected an integer, got "2.5"
		lr_scheduler_type: cosine_with_restarts|5:20: lr_scheduler_type: unknown value "cosine_with_restarts" (expected one of: constant, linear, cosine)
		fp16: true|5:1: fp16: poros-train has no such option: poros-train computes in bf16 (precision: nf4 or bf16 sets the base weights' format)
		optim: adamw_torch|5:1: optim: poros-train has no such option: the optimizer is AdamW with fp32 states, not a choice
		target_modules: [q_proj, lm_head]|5:26: unknown module "lm_head" (expected one of: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; or "all-linear")
		mode: fast|5:7: mode: unknown value "fast" (expected one of: blockwise, resident)
		save_steps: -1|5:13: save_steps: must be in [0, 1e+06], got -1
		max_steps: 3|5:1: duplicate key "max_steps" (first at line 4)
		gradient_checkpointing: yes|5:25: gradient_checkpointing: expected true or false, got "yes"
	EOF
	[ "$n" -eq 12 ]
	# a bench spec's key in a config read as one (poros-expand --kind takes a file with models for a spec)
	cfg 'models: [a]'
	run -2 --separate-stderr poros-expand --train-argv c.yaml
	[ "$stderr" = "poros-expand: c.yaml:5:1: models is a bench spec's key (man 5 poros-spec); a fine-tune config names one model" ]
	# a required key missing is named at the mapping
	printf '%s\n' 'model: poros/tiny-qwen2' 'dataset: synthetic' 'output_dir: out' >c.yaml
	run -2 --separate-stderr poros train c.yaml
	[ "$stderr" = "poros-expand: c.yaml:1:1: missing max_steps or num_train_epochs (how long to train)" ]
	printf '%s\n' 'model: poros/tiny-qwen2' 'max_steps: 1' 'output_dir: out' >c.yaml
	run -2 --separate-stderr poros train c.yaml
	[ "$stderr" = 'poros-expand: c.yaml:1:1: missing required key "dataset"' ]
	printf '%s\n' 'steps: 1' >c.yaml
	run -2 --separate-stderr poros train c.yaml
	[ "$stderr" = "poros-expand: c.yaml:1:1: neither a bench spec (spec_id, models: man 5 poros-spec) nor a fine-tune config (model: man 5 poros-train-config)" ]
}

@test "a chat fine-tune from a config: messages, an eval set, a resume that continues bit for bit" {
	python3 "$POROS_ROOT/tests/fixtures/checkpoint/make_checkpoint.py" m --family qwen2 --vocab 320
	cp "$POROS_ROOT/tests/fixtures/tokenizer/tiny/"* m/
	cp "$POROS_ROOT/tests/fixtures/chat/qwen2_style/chat_template.jinja" m/
	for i in 0 1 2 3 4 5 6 7; do
		jq -nc --argjson i $i '{messages: [{role: "user", content: ("hello world" * ($i % 3 + 1))},
			{role: "assistant", content: ("hello" + (" world" * $i))}]}'
	done >chat.jsonl
	head -2 chat.jsonl >eval.jsonl
	printf '%s\n' 'model: ./m' 'dataset: chat.jsonl' 'eval_dataset: eval.jsonl' 'eval_steps: 2' \
		'output_dir: full' 'max_steps: 4' 'save_steps: 2' 'max_seq_length: 32' 'per_device_train_batch_size: 2' \
		'lora_r: 4' 'lora_alpha: 8' 'lora_dropout: 0.0' 'backend: cpu' >chat.yaml
	run -0 --separate-stderr poros train chat.yaml
	echo "$output" | jq -e '.status == "ok" and .weights == "real" and .eval_tokens > 0'
	{ cat chat.yaml; echo 'resume_from_checkpoint: full/checkpoint-step2'; } >resume.yaml
	run -0 --separate-stderr poros train resume.yaml -o resumed
	diff <(jq -c 'select(.step > 2) | [.step, .loss, .grad_norm]' full/events.jsonl) \
		<(jq -c 'select(.step > 2) | [.step, .loss, .grad_norm]' resumed/events.jsonl)
	cmp full/adapter/adapter_model.safetensors resumed/adapter/adapter_model.safetensors
}

@test "poros train --model passes poros-train's own options through" {
	run -0 --separate-stderr poros train --model poros/tiny-qwen2 --backend cpu --steps 1 --seq-len 16 --quiet \
		--out flags
	echo "$output" | jq -e '.status == "ok" and .steps == 1'
	run -0 poros train --help
	assert_line --index 1 "       poros train CONFIG.yaml [-o DIR]"
}

#!/usr/bin/env bats
# poros-checkpoint: a random HF checkpoint for a tokenizer's vocabulary that
# poros-train loads and trains; bad input refused with exit 2 and nothing
# left behind.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	TINY_TOK="$POROS_ROOT/tests/fixtures/tokenizer/tiny"
	QWEN3_TOK="$POROS_ROOT/.npm-test/tokenizers/qwen3"
}

# no_leftovers DIR: nothing named after DIR is left in its parent
no_leftovers() {
	[ ! -e "$1" ]
	[ -z "$(find "$(dirname "$1")" -maxdepth 1 -name ".$(basename "$1").poros-checkpoint-*")" ]
}

@test "poros-checkpoint --help lists every option; -h too; --version" {
	assert_help poros-checkpoint "usage: poros-checkpoint --family llama|qwen2|qwen3 --tokenizer PATH --out DIR [--seed N]"
	run -0 poros-checkpoint -h
	for o in --family --tokenizer --out --seed --hidden --intermediate --layers --heads --kv-heads --head-dim \
		--max-position; do
		[[ "$output" == *"  $o "* ]]
	done
	assert_version poros-checkpoint
}

@test "the checkpoint takes the tokenizer's vocabulary and EOS, says its weights are random, and ships the tokenizer" {
	run -0 --separate-stderr poros-checkpoint --family llama --tokenizer "$TINY_TOK" --out m --hidden 32 --layers 3
	[ -z "$output" ]
	[[ "$stderr" == *"poros-checkpoint: wrote m: llama, RANDOM weights (seed 1, std 0.15), vocab_size 305 from"* ]]
	# the tokenizer's largest id + 1; <|endoftext|> is its EOS; it names no BOS or pad
	jq -e '.vocab_size == 305 and .eos_token_id == 300 and .bos_token_id == null and .pad_token_id == null
		and .hidden_size == 32 and .num_hidden_layers == 3 and .initializer_range == 0.15
		and .max_position_embeddings == 4096 and .architectures == ["LlamaForCausalLM"]
		and (._poros_note | startswith("RANDOM weights"))' m/config.json
	cmp m/tokenizer.json "$TINY_TOK/tokenizer.json"
	cmp m/tokenizer_config.json "$TINY_TOK/tokenizer_config.json"
	# the header: bf16, the vocabulary's rows, every layer
	head -c 8 m/model.safetensors | od -An -tu8 | tr -d ' ' > len
	tail -c +9 m/model.safetensors | head -c "$(cat len)" > header.json
	jq -e '."model.embed_tokens.weight" == {dtype: "BF16", shape: [305, 32], data_offsets: [0, 19520]}
		and ."lm_head.weight".shape == [305, 32] and has("model.layers.2.mlp.down_proj.weight")' header.json
}

@test "the weights come from the seed: the same seed gives the same bytes, another seed others" {
	poros-checkpoint --family qwen2 --tokenizer "$TINY_TOK" --out a --seed 7 2>/dev/null
	poros-checkpoint --family qwen2 --tokenizer "$TINY_TOK" --out b --seed 7 2>/dev/null
	poros-checkpoint --family qwen2 --tokenizer "$TINY_TOK" --out c --seed 8 2>/dev/null
	cmp a/model.safetensors b/model.safetensors
	cmp a/config.json b/config.json
	! cmp -s a/model.safetensors c/model.safetensors
	jq -e '._poros_note | contains("seed 8")' c/config.json
}

@test "each family's checkpoint loads in poros-train and trains: the loss falls on a repeated text" {
	for i in 1 2 3 4 5 6 7 8; do echo '{"text":"the cat sat on the mat and the dog sat on the log"}'; done > text.jsonl
	for family in llama qwen2 qwen3; do
		poros-checkpoint --family "$family" --tokenizer "$TINY_TOK" --out "m-$family" 2>/dev/null
		run -0 --separate-stderr poros-train --model "m-$family" --dataset text.jsonl --backend cpu --steps 6 \
			--seq-len 32 --lr 5e-3 --rank 4 --quiet --out "run-$family"
		jq -e '.status == "ok" and .weights == "real" and .steps == 6 and .loss_last < .loss_first' <<< "$output"
	done
}

@test "a tokenizer path that does not load is refused: exit 2, one line, no directory left" {
	run -2 --separate-stderr poros-checkpoint --family qwen3 --tokenizer no/such/tokenizer.json --out m
	[ "$(wc -l <<< "$stderr")" -eq 1 ]
	[[ "$stderr" == "poros-checkpoint: --tokenizer: no/such/tokenizer.json"* ]]
	no_leftovers m
: > empty.json
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer empty.json --out m
	assert_equal "$stderr" 'poros-checkpoint: --tokenizer: empty.json:1:1: not valid JSON'
	printf '\177ELF\002\001\000\001\n' > bin.dat
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer bin.dat --out m
	assert_equal "$stderr" 'poros-checkpoint: --tokenizer: bin.dat: contains a NUL byte (not a JSON file)'
	no_leftovers m
	echo '{"model": ' > broken.json
	run -2 --separate-stderr poros-checkpoint --family qwen3 --tokenizer broken.json --out m
	[ "$(wc -l <<< "$stderr")" -eq 1 ]
	[[ "$stderr" == "poros-checkpoint: --tokenizer: broken.json"* ]]
	no_leftovers m
}

@test "a special token the vocabulary lacks, a bad family, a bad shape, an existing --out: exit 2 by name" {
	mkdir tok && cp "$TINY_TOK/tokenizer.json" tok/
	echo '{"eos_token": "<|endoftext|>", "bos_token": {"content": "<s>"}}' > tok/tokenizer_config.json
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer tok --out m
	[[ "$stderr" == *'tokenizer_config.json: "bos_token": "<s>" is not in the vocabulary' ]]
	no_leftovers m
	run -2 --separate-stderr poros-checkpoint --family gpt2 --tokenizer "$TINY_TOK" --out m
	assert_equal "$stderr" 'poros-checkpoint: --family: unknown "gpt2" (expected one of: llama, qwen2, qwen3)'
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer "$TINY_TOK" --out m --heads 3
	assert_equal "$stderr" 'poros-checkpoint: --heads 3 is not a multiple of --kv-heads 2'
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer "$TINY_TOK"
	assert_equal "$stderr" 'poros-checkpoint: --out is required'
	no_leftovers m
	mkdir m
	run -2 --separate-stderr poros-checkpoint --family llama --tokenizer "$TINY_TOK" --out m
	assert_equal "$stderr" 'poros-checkpoint: --out m: already exists (poros-checkpoint writes a new directory)'
}

@test "the real Qwen3 tokenizer (make deps-test): its vocabulary and special tokens, its chat template with it" {
	[ -f "$QWEN3_TOK/tokenizer.json" ] || skip "no $QWEN3_TOK (make deps-test fetches it)"
	run -0 --separate-stderr poros-checkpoint --family qwen3 --tokenizer "$QWEN3_TOK" --out q
	jq -e '.vocab_size == 151669 and .eos_token_id == 151645 and .pad_token_id == 151643 and .bos_token_id == null
		and .model_type == "qwen3"' q/config.json
	jq -e '.chat_template | contains("<|im_start|>")' q/tokenizer_config.json
}

@test "a write that fails half way (a file-size limit) exits 1 naming the file, and leaves no directory" {
	# config.json fits in 64 KiB, model.safetensors (about 230 KB) does not
	run -1 --separate-stderr bash -c 'ulimit -f 64; exec poros-checkpoint --family llama --tokenizer "$1" --out m' _ \
		"$TINY_TOK"
	[ "$(wc -l <<< "$stderr")" -eq 1 ]
	[[ "$stderr" == "poros-checkpoint: "*"/model.safetensors: File too large" ]]
	no_leftovers m
}

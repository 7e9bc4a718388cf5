#!/usr/bin/env bats
# README.md's "Fine-tune on your data" block, run as written (so the README
# cannot rot): make tokenizers, poros-checkpoint, train, eval, resume, export.
# The tokenizers come from what make deps-test fetched (.npm-test/): no network.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	TOKS="$POROS_ROOT/.npm-test/tokenizers"
	[ -f "$TOKS/qwen3/tokenizer.json" ] && [ -f "$TOKS/llama3/tokenizer.json" ] ||
		skip "no $TOKS/{qwen3,llama3} (make deps-test fetches them)"
}

# the first sh block after the section's heading
readme_block() {
	awk '/^## Fine-tune on your data$/ { in_section = 1; next }
	     in_section && /^## / { exit }
	     in_section && /^```sh$/ { in_block = 1; next }
	     in_block && /^```$/ { exit }
	     in_block { print }' "$POROS_ROOT/README.md"
}

@test "the README's fine-tune block runs as written: chats -> train -> eval -> resume -> export" {
	readme_block > block.sh
	[ "$(wc -l < block.sh)" -gt 10 ]
	# its first command is the make target; run it against the tests' copies (up to date: no network)
	[[ "$(head -1 block.sh)" == "make tokenizers "* ]]
	run -0 make -s -C "$POROS_ROOT" tokenizers TOKENIZERS="$TOKS/qwen3/tokenizer.json $TOKS/llama3/tokenizer.json"
	[ "$(grep -c 'make ' block.sh)" -eq 1 ]
	ln -s "$POROS_ROOT/bin" bin
	mkdir -p out/tokenizers
	ln -s "$TOKS/qwen3" out/tokenizers/qwen3
	ln -s "$TOKS/llama3" out/tokenizers/llama3
	tail -n +2 block.sh > rest.sh
	run -0 --separate-stderr bash -e rest.sh
	# stdout: only poros-export's line (each poros-train's summary went to its file)
	jq -e '.out == "out/tiny-qwen3-ft" and .merged > 0 and .merge_into == "dequantized"' <<< "$output"
	[[ "$stderr" == *"RANDOM weights"* ]]

	# trained on the answers only, with an eval set; the loss fell
	jq -e '.status == "ok" and .steps == 6 and .weights == "real" and .loss_last < .loss_first
		and (.eval_loss | type) == "number" and .config.train_on == "assistant"' out/ft.json
	[[ "$stderr" == *"dataset out/chats.jsonl: 6 documents, "*" supervised;"* ]]
	# eval-only of the saved adapter gives the training run's eval_loss, and a perplexity
	jq -e --slurpfile ft out/ft.json '.status == "ok" and .eval_loss == $ft[0].eval_loss
		and .perplexity > 1' out/eval.json
	# resume took checkpoint-step6 and ran steps 7-9 into the same run directory
	jq -e '.status == "ok" and .steps == 9 and .run_dir == "out/ft"' out/ft-more.json
	[ -d out/ft/checkpoint-step9 ]
	[ "$(jq -s '[.[] | select(.step != null)] | length' out/ft/events.jsonl)" -ge 9 ]
	# the export: a checkpoint with the merged weights and the tokenizer, which loads and evaluates
	[ -f out/tiny-qwen3-ft/model.safetensors ] && [ -f out/tiny-qwen3-ft/tokenizer_config.json ]
	run -0 --separate-stderr bin/poros-train --model out/tiny-qwen3-ft --eval-dataset out/eval.jsonl \
		--train-on assistant --seq-len 64 --precision bf16 --eval-only
	jq -e '.status == "ok" and (.eval_loss | type) == "number"' <<< "$output"
}

@test "the README points at the dataset formats' man page, which exists" {
	run -0 grep -F '[man/poros-dataset.5](man/poros-dataset.5)' "$POROS_ROOT/README.md"
	[ -f "$POROS_ROOT/man/poros-dataset.5" ]
}

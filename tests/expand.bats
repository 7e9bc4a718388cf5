#!/usr/bin/env bats
# poros-expand: a bench spec -> cells.  See man/poros-expand.1, man/poros-spec.5.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/expand"
	BENCH="$POROS_ROOT/configs/bench"
	SYNOPSIS='usage: poros-expand SPEC.yaml [-o DIR] [--jsonl]
       poros-expand --train-argv CONFIG.yaml
       poros-expand --kind FILE.yaml'
	# bats keeps its own files in BATS_TEST_TMPDIR; the "nothing written"
	# checks look at a directory of our own.
	mkdir work && cd work || return 1
}

# s.yaml: the minimal fixture with a sed edit applied.
edit() {
	sed -e "$1" "$FIX/minimal.yaml" >s.yaml
}

# s.yaml: the minimal fixture with lines added at the end.
append() {
	{ cat "$FIX/minimal.yaml"; printf '%s\n' "$@"; } >s.yaml
}

# expect_cells SPEC PIPE OUTPUT: SPEC's cells (--jsonl) through the shell
# pipeline PIPE: it exits 0 and prints OUTPUT.
expect_cells() {
	run --separate-stderr bash -c "poros-expand '$1' --jsonl | $2"
	assert_success
	assert_output "$3"
}

# A bad spec: exit 2, nothing on stdout, exactly the one line $2 on stderr,
# and nothing created in the test directory (the -o directory included).
expect_bad() {
	local spec=$1 message=$2 before
	shift 2
	before=$(find . | sort)
	run -2 --separate-stderr poros-expand "$spec" -o out "$@"
	assert_equal "$output" ""
	assert_equal "$stderr" "$message"
	assert_equal "$(find . | sort)" "$before"
}

# The same with a regular expression for the message.
expect_bad_regex() {
	local spec=$1 regex=$2 before
	before=$(find . | sort)
	run -2 --separate-stderr poros-expand "$spec" -o out
	assert_equal "$output" ""
	assert_equal "$(printf '%s\n' "$stderr" | wc -l)" 1
	assert_regex "$stderr" "$regex"
	assert_equal "$(find . | sort)" "$before"
}

# --- usage ------------------------------------------------------------------

@test "--help prints the synopsis and the defaults on stdout and exits 0" {
	run --separate-stderr poros-expand --help
	assert_success
	assert_line --index 0 "usage: poros-expand SPEC.yaml [-o DIR] [--jsonl]"
	assert_output --partial "learning_rate 2e-4"
	assert_output --partial "alpha 2 x rank"
	assert_equal "$stderr" ""
}

@test "--version prints the name and version" {
	run --separate-stderr poros-expand --version
	assert_success
	assert_output "poros-expand 0.1.0"
}

@test "no spec is a usage error with exit 2 and the synopsis on stderr" {
	run -2 --separate-stderr poros-expand
	assert_output ""
	assert_equal "$stderr" "$SYNOPSIS"
}

@test "two specs are a usage error" {
	run -2 --separate-stderr poros-expand "$FIX/minimal.yaml" "$FIX/full.yaml"
	assert_output ""
	assert_equal "$stderr" "$SYNOPSIS"
}

@test "--train-argv and --kind take no -o or --jsonl and not each other" {
	for args in "--train-argv --kind" "--train-argv --jsonl" "--kind -o d" "--train-argv -o d"; do
		# shellcheck disable=SC2086 # args is a word list
		run -2 --separate-stderr poros-expand $args "$FIX/minimal.yaml"
		assert_output ""
		assert_equal "$stderr" "$SYNOPSIS"
	done
}

@test "an unknown option is a usage error" {
	run -2 --separate-stderr poros-expand --bogus "$FIX/minimal.yaml"
	assert_output ""
	assert_regex "$stderr" "unrecognized option '--bogus'"
}

@test "a spec file that does not exist is exit 2 naming it" {
	expect_bad nope.yaml "poros-expand: nope.yaml: No such file or directory"
}

# --- what comes out ---------------------------------------------------------

@test "the launch matrix expands to 30 cells: 3 models x 5 methods x 2 precisions" {
	expect_cells "$BENCH/launch_matrix.yaml" "jq -s length" "30"
}

@test "cells come in spec order: models, then methods, then precisions" {
	expect_cells "$FIX/full.yaml" "jq -r .cell_id" "peft_tiny_llama_bf16
poros_tiny_llama_bf16
peft_tiny_qwen3_bf16
poros_tiny_qwen3_bf16"
}

@test "every cell of a run shares seq_len, rank, alpha, target_modules, steps and tokens_per_step" {
	expect_cells "$BENCH/launch_matrix.yaml" \
		"jq -c -s 'map([.training.seq_len, .lora.rank, .lora.alpha, .lora.target_modules, .training.steps, .tokens_per_step]) | unique'" \
		'[[512,16,32,["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"],20,4096]]'
}

@test "every cell of a run shares the whole training, lora, poros and hardware sections" {
	expect_cells "$FIX/full.yaml" \
		"jq -c -s 'map([.spec_id, .hardware, .training, .lora, .poros, .output_dir]) | unique | length'" \
		"1"
}

@test "cell_id is method_arch_precision, arch the slug of the model id without its org" {
	run --separate-stderr bash -c "poros-expand '$BENCH/qwen2_5_32b_3090.yaml' --jsonl | jq -r '[.cell_id, .model.arch, .method, .precision] | @tsv' | head -3"
	assert_success
	assert_line --index 0 "$(printf 'poros_qwen2_5_32b_nf4\tqwen2_5_32b\tporos\tnf4')"
	assert_line --index 1 "$(printf 'poros_qwen2_5_32b_bf16\tqwen2_5_32b\tporos\tbf16')"
	assert_line --index 2 "$(printf 'resident_qwen2_5_32b_nf4\tqwen2_5_32b\tresident\tnf4')"
}

@test "tokens_per_step is batch_size x seq_len x gradient_accumulation_steps" {
	expect_cells "$FIX/full.yaml" "jq -s 'map(.tokens_per_step) | unique'" "$(printf '[\n  192\n]')"
}

@test "every field given in the spec reaches the cell as written" {
	expect_cells "$FIX/full.yaml" \
		"head -1 | jq -c 'del(.schema, .cell_id, .method, .precision)'" \
		'{"spec_id":"full-1.0","model":{"model_id":"poros/tiny-llama","display_name":"Tiny Llama","param_count_b":0.5,"arch":"tiny_llama"},"hardware":{"gpu_name":"NVIDIA A10G","vram_gb":22.5,"pcie_gen":4},"training":{"steps":10,"seq_len":32,"batch_size":2,"gradient_accumulation_steps":3,"warmup_steps":2,"dataset":"data/train.jsonl","seed":7,"learning_rate":0.00015,"lr_schedule":"cosine","weight_decay":0.01,"max_grad_norm":0.5,"timeout_s":600,"gradient_checkpointing":false,"lr_warmup_steps":0,"passes":1},"lora":{"rank":4,"alpha":12,"dropout":0.1,"target_modules":["q_proj","v_proj","down_proj"]},"poros":{"block_size":1,"enable_prefetch":false},"output_dir":"results/full","tokens_per_step":192}'
}

@test "a spec with only the required fields gets every documented default" {
	expect_cells "$FIX/minimal.yaml" \
		"head -1 | jq -c '[.hardware, .training, .lora, .poros, .output_dir, .model.display_name]'" \
		'[{"gpu_name":null,"vram_gb":null,"pcie_gen":null},{"steps":4,"seq_len":16,"batch_size":1,"gradient_accumulation_steps":1,"warmup_steps":1,"dataset":"synthetic","seed":42,"learning_rate":0.0002,"lr_schedule":"constant","weight_decay":0,"max_grad_norm":1,"timeout_s":3600,"gradient_checkpointing":false,"lr_warmup_steps":0,"passes":1},{"rank":16,"alpha":32,"dropout":0.05,"target_modules":["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]},{"block_size":4,"enable_prefetch":true},"out/mini","tiny-qwen2"]'
}

@test "training.gradient_checkpointing true reaches every cell, after the older keys of training" {
	append "  gradient_checkpointing: true"
	expect_cells s.yaml "jq -c -s '(map(.training.gradient_checkpointing) | unique), (.[0].training | keys_unsorted[-4:])'" '[true]
["timeout_s","gradient_checkpointing","lr_warmup_steps","passes"]'
	assert_equal "$stderr" ""
}

@test "training.passes and training.lr_warmup_steps reach every cell; passes must be at least 1" {
	append "  passes: 3" "  lr_warmup_steps: 2"
	expect_cells s.yaml "jq -c -s 'map([.training.passes, .training.lr_warmup_steps]) | unique'" '[[3,2]]'
	sed -i 's/passes: 3/passes: 0/' s.yaml
	run -2 --separate-stderr poros-expand s.yaml --jsonl
	[[ "$stderr" == *"training.passes: must be at least 1, got 0"* ]]
}

@test "training.gradient_checkpointing true is also in spec.json" {
	append "  gradient_checkpointing: true"
	run -0 --separate-stderr poros-expand s.yaml -o out
	assert_equal "$(jq -c '.training.gradient_checkpointing' out/spec.json)" "true"
	assert_equal "$(jq -c '.training.gradient_checkpointing' out/cells/poros_tiny_qwen2_nf4.json)" "true"
}

@test "alpha defaults to twice the rank" {
	append "lora:" "  rank: 8"
	expect_cells s.yaml "jq -s 'map(.lora.alpha) | unique'" "$(printf '[\n  16\n]')"
}

@test "warmup_steps defaults to 0 when there is a single step" {
	edit 's/steps: 4/steps: 1/'
	expect_cells s.yaml "jq -s 'map(.training.warmup_steps) | unique'" "$(printf '[\n  0\n]')"
}

@test "target_modules \"all-linear\" means all seven projections" {
	append "lora:" "  target_modules: all-linear"
	expect_cells s.yaml \
		"head -1 | jq -c .lora.target_modules" \
		'["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"]'
}

@test "a model given as a mapping and one given as a plain id expand alike" {
	cat >s.yaml <<-'EOF'
	spec_id: two
	models:
	  - model_id: poros/tiny-llama
	  - poros/tiny-qwen3
	methods: [poros]
	precisions: [nf4]
	training: {steps: 2, seq_len: 8}
	EOF
	expect_cells s.yaml "jq -c '[.model.model_id, .model.display_name, .model.arch]'" '["poros/tiny-llama","tiny-llama","tiny_llama"]
["poros/tiny-qwen3","tiny-qwen3","tiny_qwen3"]'
}

@test "param_count_b is counted from configs/models when the spec leaves it out" {
	expect_cells "$BENCH/h200_perf.yaml" \
		"jq -c -s 'map([.model.model_id, .model.param_count_b]) | unique'" \
		'[["Qwen/Qwen2.5-32B",32.76],["Qwen/Qwen2.5-7B",7.616]]'
	assert_equal "$stderr" ""
}

@test "a param_count_b given in the spec is kept as written" {
	expect_cells "$FIX/full.yaml" "head -1 | jq .model.param_count_b" "0.5"
}

@test "a model with no config anywhere is a warning on stderr, not an error; its parameter count is null" {
	edit 's|poros/tiny-qwen2|nobody/none-1b|'
	run --separate-stderr poros-expand s.yaml --jsonl
	assert_success
	assert_regex "$stderr" '^poros-expand: s\.yaml:4:5: warning: model "nobody/none-1b": no config\.json found \(looked in: .*none_1b\.json\)$'
	assert_equal "$(printf '%s\n' "$output" | jq -s 'map(.model.param_count_b) | unique | .[]')" "null"
}

@test "a local checkpoint directory needs no warning and gives the parameter count" {
	mkdir ckpt
	cp "$POROS_ROOT/configs/models/tiny_qwen2.json" ckpt/config.json
	edit 's|poros/tiny-qwen2|./ckpt|'
	run --separate-stderr bash -c "poros-expand s.yaml --jsonl | head -1 | jq -c '[.model.arch, .model.param_count_b]'"
	assert_success
	assert_equal "$stderr" ""
	assert_output '["ckpt",0.0001813]'
}

@test "stdout carries only cells: every line parses as a cell and warnings stay on stderr" {
	edit 's|poros/tiny-qwen2|nobody/none-1b|'
	run --separate-stderr poros-expand s.yaml --jsonl
	assert_success
	assert_equal "$(printf '%s\n' "$output" | jq -r .schema | sort -u)" "poros.cell/1"
	assert_equal "$(printf '%s\n' "$output" | wc -l)" 4
	assert_regex "$stderr" "warning"
}

@test "cells validate against share/poros/schema/cell.schema.json" {
	python3 -c 'import jsonschema' 2>/dev/null || skip "python3 jsonschema not installed"
	poros-expand "$BENCH/launch_matrix.yaml" --jsonl >cells.jsonl
	poros-expand "$FIX/full.yaml" --jsonl >>cells.jsonl
	run python3 -c '
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
n = 0
for line in open("cells.jsonl"):
    jsonschema.validate(json.loads(line), schema)
    n += 1
print(n)' "$POROS_ROOT/share/poros/schema/cell.schema.json"
	assert_success
	assert_output "34"
}

# --- files ------------------------------------------------------------------

@test "by default the cells are written to OUTDIR/cells and their paths printed, one per line" {
	cp "$FIX/minimal.yaml" s.yaml
	run --separate-stderr poros-expand s.yaml
	assert_success
	assert_output "out/mini/cells/poros_tiny_qwen2_nf4.json
out/mini/cells/poros_tiny_qwen2_bf16.json
out/mini/cells/resident_tiny_qwen2_nf4.json
out/mini/cells/resident_tiny_qwen2_bf16.json"
	assert_equal "$(ls out/mini/cells | wc -l)" 4
	assert [ -f out/mini/spec.json ]
}

@test "the cell files hold exactly the cells that --jsonl prints" {
	poros-expand "$FIX/full.yaml" >paths
	poros-expand "$FIX/full.yaml" --jsonl >cells.jsonl
	run bash -c 'xargs cat <paths | cmp - cells.jsonl'
	assert_success
}

@test "the printed paths feed xargs: each names a cell file" {
	run --separate-stderr bash -c "poros-expand '$BENCH/tiny.yaml' | xargs jq -r .cell_id | sort -u | wc -l"
	assert_success
	assert_output "18"
}

@test "spec.json is the normalized spec: defaults filled and every cell id" {
	poros-expand "$FIX/minimal.yaml" >/dev/null
	run jq -c '[.schema, .spec_id, .methods, .precisions, .training.warmup_steps, .lora.alpha, .reporting, .cells, .models[0].arch]' out/mini/spec.json
	assert_success
	assert_output '["poros.spec/1","mini",["poros","resident"],["nf4","bf16"],1,32,{"output_dir":"out/mini","html":true,"markdown":true,"emit_json":true},["poros_tiny_qwen2_nf4","poros_tiny_qwen2_bf16","resident_tiny_qwen2_nf4","resident_tiny_qwen2_bf16"],"tiny_qwen2"]'
}

@test "-o overrides reporting.output_dir, and the cells carry it as output_dir" {
	run --separate-stderr poros-expand "$FIX/full.yaml" -o elsewhere/run1
	assert_success
	assert_line --index 0 "elsewhere/run1/cells/peft_tiny_llama_bf16.json"
	assert [ ! -e results ]
	assert_equal "$(jq -r .output_dir elsewhere/run1/cells/*.json | sort -u)" "elsewhere/run1"
	assert_equal "$(jq -r .reporting.output_dir elsewhere/run1/spec.json)" "elsewhere/run1"
}

@test "a trailing slash on the output directory is dropped" {
	run --separate-stderr poros-expand "$FIX/full.yaml" --jsonl
	assert_equal "$(printf '%s\n' "$output" | jq -r .output_dir | sort -u)" "results/full"
}

@test "--jsonl writes no file at all" {
	run --separate-stderr poros-expand "$FIX/minimal.yaml" --jsonl -o out
	assert_success
	assert_equal "$(find . -mindepth 1 | wc -l)" 0
}

@test "expanding twice into one directory gives the same files" {
	poros-expand "$FIX/full.yaml" -o o >/dev/null
	cat o/cells/*.json o/spec.json >first
	run --separate-stderr poros-expand "$FIX/full.yaml" -o o
	assert_success
	cat o/cells/*.json o/spec.json >second
	cmp first second
}

@test "a write that fails removes every file and directory this run created" {
	mkdir -p o/spec.json # a directory where the spec file must go
	run -1 --separate-stderr poros-expand "$FIX/minimal.yaml" -o o
	assert_output ""
	assert_regex "$stderr" "^poros-expand: cannot write o/spec\.json: Is a directory$"
	assert_equal "$(find o | sort)" "$(printf 'o\no/spec.json')"
}

@test "a write that fails puts back the previous run's files it had replaced" {
	poros-expand "$FIX/minimal.yaml" -o o >/dev/null
	(cd o && sha256sum cells/* spec.json) >before
	# the next run changes every cell, then cannot write spec.json
	sed 's/steps: 4/steps: 8/' "$FIX/minimal.yaml" >edited.yaml
	grep -q 'steps: 8' edited.yaml
	mv o/spec.json spec.keep && mkdir o/spec.json
	run -1 --separate-stderr poros-expand edited.yaml -o o
	assert_regex "$stderr" "^poros-expand: cannot write o/spec\.json: Is a directory$"
	rmdir o/spec.json && mv spec.keep o/spec.json
	(cd o && sha256sum cells/* spec.json) >after
	cmp before after
	assert_equal "$(jq -r .training.steps o/cells/*.json | sort -u)" "4"
}

@test "spec.json maps every cell to its config_hash, which follows what the cell measures" {
	poros-expand "$FIX/minimal.yaml" -o a >/dev/null
	run -0 jq -r '.cells == (.config_hashes | keys_unsorted) and all(.config_hashes[]; test("^sha256:[0-9a-f]{64}$"))' a/spec.json
	assert_output true
	# no two cells share a hash
	assert_equal "$(jq -r '.config_hashes[]' a/spec.json | sort -u | wc -l)" 4
	# names and places measure nothing new: another spec_id, display name and output_dir keep the hashes
	sed -e 's/^spec_id: .*/spec_id: renamed/' \
		-e 's|^  - poros/tiny-qwen2$|  - {model_id: poros/tiny-qwen2, display_name: Other Name}|' "$FIX/minimal.yaml" >renamed.yaml
	grep -q 'Other Name' renamed.yaml
	poros-expand renamed.yaml -o b >/dev/null
	assert_equal "$(jq -c .config_hashes b/spec.json)" "$(jq -c .config_hashes a/spec.json)"
	# a changed training value changes every hash
	sed 's/steps: 4/steps: 8/' "$FIX/minimal.yaml" >steps.yaml
	poros-expand steps.yaml -o c >/dev/null
	run -0 jq -n --slurpfile a a/spec.json --slurpfile c c/spec.json \
		'[$a[0].config_hashes[]] as $x | [$c[0].config_hashes[]] as $y | [range(4)] | all(.[]; $x[.] != $y[.])'
	assert_output true
}

@test "every bench config expands: model x method x precision cells each" {
	for pair in qwen2_5_7b_3090:10 qwen2_5_32b_3090:10 launch_matrix:30 h200_perf:12 tiny:18 h200_long:18 \
		h200_long_32k:6 h200_long_poros:2 h200_long_32k_poros:2 h200_long_32k_vs_peft:4; do
		run --separate-stderr bash -c "poros-expand '$BENCH/${pair%%:*}.yaml' --jsonl | wc -l"
		assert_success
		assert_equal "$stderr" ""
		assert_output "${pair##*:}"
	done
}

@test "tiny.yaml is the small default spec: three tiny models, CPU-sized training" {
	expect_cells "$BENCH/tiny.yaml" \
		"jq -c -s '[(map(.model.model_id) | unique), (map(.method) | unique), (.[0] | [.training.steps, .training.warmup_steps, .training.seq_len, .training.batch_size, .training.gradient_accumulation_steps, .lora.rank, .lora.alpha, .lora.dropout, .poros.block_size, .output_dir])]'" \
		'[["poros/tiny-llama","poros/tiny-qwen2","poros/tiny-qwen3"],["peft","poros","resident"],[6,1,64,1,2,8,16,0,2,"out/tiny"]]'
}

@test "every model config is named by the slug of its model_id" {
	for f in "$POROS_ROOT"/configs/models/*.json; do
		run jq -r '.model_id | split("/") | last | ascii_downcase | gsub("[^a-z0-9]+"; "_") | gsub("^_|_$"; "")' "$f"
		assert_success
		assert_equal "$output.json" "$(basename "$f")"
	done
}

@test "the model configs carry the published shapes" {
	M="$POROS_ROOT/configs/models"
	run jq -c '[.model_type, .hidden_size, .intermediate_size, .num_hidden_layers, .num_attention_heads, .num_key_value_heads, .head_dim, .vocab_size, .attention_bias, .tie_word_embeddings]' \
		"$M/qwen2_5_0_5b.json" "$M/qwen2_5_7b.json" "$M/qwen2_5_32b.json" "$M/qwen2_5_72b.json" \
		"$M/qwen3_32b.json" "$M/llama_3_1_8b.json" "$M/tiny_qwen2.json" "$M/tiny_llama.json" "$M/tiny_qwen3.json"
	assert_success
	assert_output '["qwen2",896,4864,24,14,2,64,151936,true,true]
["qwen2",3584,18944,28,28,4,128,152064,true,false]
["qwen2",5120,27648,64,40,8,128,152064,true,false]
["qwen2",8192,29568,80,64,8,128,152064,true,false]
["qwen3",5120,25600,64,64,8,128,151936,false,false]
["llama",4096,14336,32,32,8,128,128256,false,false]
["qwen2",64,128,4,4,2,16,256,true,false]
["llama",64,160,3,4,4,16,320,false,true]
["qwen3",64,128,3,4,2,16,256,false,false]'
	assert_equal "$(jq -c '[.use_qk_norm, .rope_theta, .max_position_embeddings]' "$M/qwen3_8b.json")" '[true,1000000,40960]'
}

# --- bad input: exit 2, one line, nothing written ---------------------------

@test "a YAML syntax error names file, line and column" {
	edit 's/methods: \[poros, resident\]/methods: [poros, resident/'
	expect_bad s.yaml "poros-expand: s.yaml:6:11: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at 5:10)"
}

@test "an unknown key suggests the nearest known one" {
	edit 's/seq_len: 16/sequence_len: 16/'
	expect_bad s.yaml 'poros-expand: s.yaml:9:3: unknown key "sequence_len" in training (did you mean "seq_len"?)'
}

@test "an unknown key far from any lists the keys of its section" {
	append "poros:" "  colour: blue"
	expect_bad s.yaml 'poros-expand: s.yaml:11:3: unknown key "colour" in poros (expected one of: block_size, enable_prefetch, checkpoints)'
}

@test "a cell field a spec does not set says where it is set; every other key lists all of its section" {
	edit 's/seq_len: 16/seq_len: 16\n  eval_dataset: held.jsonl/'
	expect_bad s.yaml 'poros-expand: s.yaml:10:3: training.eval_dataset is not a spec key: it is set per run, by poros-train --eval-dataset'
	edit 's/seq_len: 16/seq_len: 16\n  zzzzq: 1/'
	expect_bad s.yaml 'poros-expand: s.yaml:10:3: unknown key "zzzzq" in training (expected one of: steps, seq_len, batch_size, gradient_accumulation_steps, warmup_steps, dataset, seed, learning_rate, lr_schedule, weight_decay, max_grad_norm, timeout_s, gradient_checkpointing, lr_warmup_steps, passes, tokenizer, chat_date, train_on)'
}

@test "the spec's sections are the cell table's rows: every training, lora and poros key of a cell is a spec key" {
	# Each key a cell has under these sections, written in a spec with the
	# value the cell holds, expands to a cell with that same value.
	poros-expand --jsonl "$FIX/minimal.yaml" | head -1 > cell.json
	n=0
	for sec in training lora poros; do
		for k in $(jq -r --arg s "$sec" '.[$s] | keys[]' cell.json); do
			v=$(jq -c --arg s "$sec" --arg k "$k" '.[$s][$k]' cell.json)
			if [ "$sec" = training ]; then
				grep -v "^  $k:" "$FIX/minimal.yaml" | sed "s/^training:\$/training:\n  $k: $v/" > s.yaml
			else
				{ cat "$FIX/minimal.yaml"; printf '%s:\n  %s: %s\n' "$sec" "$k" "$v"; } > s.yaml
			fi
			run -0 poros-expand --jsonl s.yaml
			assert_equal "$(head -1 <<< "$output" | jq -c --arg s "$sec" --arg k "$k" '.[$s][$k]')" "$v"
			n=$((n + 1))
		done
	done
	[ "$n" -ge 20 ]
}

@test "a field written at top level points to its section" {
	append "seq_len: 16"
	expect_bad s.yaml 'poros-expand: s.yaml:10:1: unknown key "seq_len" at top level (did you mean "training.seq_len"?)'
}

@test "a word where an integer belongs is a type error" {
	edit 's/steps: 4/steps: ten/'
	expect_bad s.yaml 'poros-expand: s.yaml:8:10: training.steps: expected an integer, got "ten"'
}

@test "a quoted number is a string, not an integer" {
	edit 's/steps: 4/steps: "4"/'
	expect_bad s.yaml 'poros-expand: s.yaml:8:10: training.steps: expected an integer, got the string "4"'
}

@test "a fraction where an integer belongs is refused" {
	edit 's/steps: 4/steps: 4.5/'
	expect_bad s.yaml 'poros-expand: s.yaml:8:10: training.steps: expected an integer, got "4.5"'
}

@test "a mapping where a number belongs is refused" {
	edit 's/seq_len: 16/seq_len: {a: 1}/'
	expect_bad s.yaml 'poros-expand: s.yaml:9:12: training.seq_len: expected an integer, got a mapping'
}

@test "a bare number where text belongs must be quoted" {
	append "hardware:" "  gpu_name: 3090"
	expect_bad s.yaml 'poros-expand: s.yaml:11:13: hardware.gpu_name: expected a string, got the number 3090 (quote it to mean the text)'
}

@test "yes is not a boolean: only true and false are" {
	append "poros:" "  enable_prefetch: yes"
	expect_bad s.yaml 'poros-expand: s.yaml:11:20: poros.enable_prefetch: expected true or false, got "yes"'
}

@test "gradient_checkpointing yes is refused at its line and column: only true and false are booleans" {
	append "  gradient_checkpointing: yes"
	expect_bad s.yaml 'poros-expand: s.yaml:10:27: training.gradient_checkpointing: expected true or false, got "yes"'
}

@test "steps 0 is out of range" {
	edit 's/steps: 4/steps: 0/'
	expect_bad s.yaml 'poros-expand: s.yaml:8:10: training.steps: must be at least 1, got 0'
}

@test "a negative seq_len is out of range" {
	edit 's/seq_len: 16/seq_len: -16/'
	expect_bad s.yaml 'poros-expand: s.yaml:9:12: training.seq_len: must be at least 1, got -16'
}

@test "seq_len 0 is out of range" {
	edit 's/seq_len: 16/seq_len: 0/'
	expect_bad s.yaml 'poros-expand: s.yaml:9:12: training.seq_len: must be at least 1, got 0'
}

@test "an absurd seq_len is refused with the maximum" {
	edit 's/seq_len: 16/seq_len: 16000000/'
	expect_bad s.yaml 'poros-expand: s.yaml:9:12: training.seq_len: must be at most 1048576, got 16000000'
}

@test "an integer too large for any type is refused, not wrapped" {
	edit 's/steps: 4/steps: 99999999999999999999999/'
	expect_bad s.yaml 'poros-expand: s.yaml:8:10: training.steps: must be at most 1000000, got 1e+23'
}

@test "tokens per step beyond the maximum are refused" {
	append "  batch_size: 4096" "  gradient_accumulation_steps: 65536"
	expect_bad s.yaml 'poros-expand: s.yaml:8:3: training: batch_size x seq_len x gradient_accumulation_steps = 4294967296 tokens per step (at most 1073741824)'
}

@test "warmup as long as the run leaves nothing to measure" {
	append "  warmup_steps: 4"
	expect_bad s.yaml 'poros-expand: s.yaml:10:17: training.warmup_steps: must be less than training.steps (4), got 4'
}

@test "rank 0 is out of range" {
	append "lora:" "  rank: 0"
	expect_bad s.yaml 'poros-expand: s.yaml:11:9: lora.rank: must be at least 1, got 0'
}

@test "block_size 0 is out of range" {
	append "poros:" "  block_size: 0"
	expect_bad s.yaml 'poros-expand: s.yaml:11:15: poros.block_size: must be at least 1, got 0'
}

@test "dropout 1 is outside [0, 1)" {
	append "lora:" "  dropout: 1"
	expect_bad s.yaml 'poros-expand: s.yaml:11:12: lora.dropout: must be less than 1, got 1'
}

@test "a negative dropout is outside [0, 1)" {
	append "lora:" "  dropout: -0.1"
	expect_bad s.yaml 'poros-expand: s.yaml:11:12: lora.dropout: must be at least 0, got -0.1'
}

@test "vram_gb 0 is refused when hardware is given" {
	append "hardware:" "  vram_gb: 0"
	expect_bad s.yaml 'poros-expand: s.yaml:11:12: hardware.vram_gb: must be greater than 0, got 0'
}

@test "a negative vram_gb is refused" {
	append "hardware:" "  vram_gb: -24"
	expect_bad s.yaml 'poros-expand: s.yaml:11:12: hardware.vram_gb: must be greater than 0, got -24'
}

@test "NaN is not a number a spec can hold" {
	append "  learning_rate: .nan"
	expect_bad s.yaml 'poros-expand: s.yaml:10:18: training.learning_rate: must be a finite number, got .nan'
}

@test "infinity is not a number a spec can hold" {
	append "lora:" "  alpha: .inf"
	expect_bad s.yaml 'poros-expand: s.yaml:11:10: lora.alpha: must be a finite number, got .inf'
}

@test "1e309 overflows a double and is refused" {
	append "  learning_rate: 1e309"
	expect_bad s.yaml 'poros-expand: s.yaml:10:18: training.learning_rate: number out of range: 1e309'
}

@test "an unknown method lists the known ones" {
	edit 's/methods: \[poros, resident\]/methods: [poros, deepspeed]/'
	expect_bad s.yaml 'poros-expand: s.yaml:5:18: unknown method "deepspeed" (expected one of: poros, resident, unsloth, peft, accelerate_offload)'
}

@test "an unknown precision lists the known ones" {
	edit 's/precisions: \[nf4, bf16\]/precisions: [fp8]/'
	expect_bad s.yaml 'poros-expand: s.yaml:6:14: unknown precision "fp8" (expected one of: nf4, bf16)'
}

@test "an unknown lr_schedule lists the known ones" {
	append "  lr_schedule: step"
	expect_bad s.yaml 'poros-expand: s.yaml:10:16: unknown lr_schedule "step" (expected one of: constant, linear, cosine)'
}

@test "an unknown target module lists the seven and all-linear" {
	append "lora:" "  target_modules: [q_proj, lm_head]"
	expect_bad s.yaml 'poros-expand: s.yaml:11:28: unknown module "lm_head" (expected one of: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; or "all-linear")'
}

@test "a method listed twice is refused" {
	edit 's/methods: \[poros, resident\]/methods: [poros, poros]/'
	expect_bad s.yaml 'poros-expand: s.yaml:5:18: methods: "poros" is listed twice (first at line 5)'
}

@test "the same model twice is refused" {
	edit 's|  - poros/tiny-qwen2|  - poros/tiny-qwen2\n  - model_id: poros/tiny-qwen2|'
	expect_bad s.yaml 'poros-expand: s.yaml:5:5: models[1]: duplicate model "poros/tiny-qwen2" (first at line 4)'
}

@test "two models whose cell ids would collide are refused" {
	edit 's|  - poros/tiny-qwen2|  - poros/tiny-qwen2\n  - other/Tiny.Qwen2|'
	expect_bad s.yaml 'poros-expand: s.yaml:5:5: models[1]: "other/Tiny.Qwen2" and "poros/tiny-qwen2" (line 4) have the same arch "tiny_qwen2", so their cell ids would collide'
}

@test "a duplicate key is refused with where the first one was" {
	append "  steps: 5"
	expect_bad s.yaml 'poros-expand: s.yaml:10:3: duplicate key "steps" in training (first at line 8)'
}

@test "a spec_id that is not a safe file name is refused" {
	edit 's|spec_id: mini|spec_id: a/b|'
	expect_bad s.yaml "poros-expand: s.yaml:2:10: spec_id: \"a/b\" is not a safe name (letters, digits, '.', '_' and '-'; at most 128 bytes)"
}

@test "a spec_id of .. is refused" {
	edit 's|spec_id: mini|spec_id: ".."|'
	expect_bad s.yaml "poros-expand: s.yaml:2:10: spec_id: \"..\" is not a safe name (letters, digits, '.', '_' and '-'; at most 128 bytes)"
}

@test "an output_dir with a .. component is refused" {
	append "reporting:" "  output_dir: out/../../etc"
	expect_bad s.yaml 'poros-expand: s.yaml:11:15: reporting.output_dir: "out/../../etc" has a ".." component'
}

@test "an output_dir with a NUL character is refused" {
	append "reporting:" '  output_dir: "out/a\0b"'
	expect_bad s.yaml 'poros-expand: s.yaml:11:15: a value contains a NUL character'
}

@test "-o with a .. component is refused" {
	cp "$FIX/minimal.yaml" s.yaml
	expect_bad s.yaml 'poros-expand: -o: "../elsewhere" has a ".." component' -o ../elsewhere
	assert [ ! -e ../elsewhere ]
}

@test "an empty methods list is refused" {
	edit 's/methods: \[poros, resident\]/methods: []/'
	expect_bad s.yaml 'poros-expand: s.yaml:5:10: methods: the list is empty (expected one or more of: poros, resident, unsloth, peft, accelerate_offload)'
}

@test "an empty models list is refused" {
	sed -e '/^  - poros/d' -e 's/^models:$/models: []/' "$FIX/minimal.yaml" >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:3:9: models: the list is empty (expected one or more model ids)'
}

@test "an empty precisions list is refused" {
	edit 's/precisions: \[nf4, bf16\]/precisions: []/'
	expect_bad s.yaml 'poros-expand: s.yaml:6:13: precisions: the list is empty (expected one or more of: nf4, bf16)'
}

@test "a methods value that is not a list is refused" {
	edit 's/methods: \[poros, resident\]/methods: poros/'
	expect_bad s.yaml 'poros-expand: s.yaml:5:10: methods: expected a list, got "poros"'
}

@test "a missing spec_id is refused" {
	edit '/^spec_id:/d'
	expect_bad s.yaml 'poros-expand: s.yaml:2:1: missing required key "spec_id"'
}

@test "a missing models list is refused" {
	edit '/models:/,/tiny-qwen2/d'
	expect_bad s.yaml 'poros-expand: s.yaml:2:1: missing required key "models"'
}

@test "a missing methods list is refused" {
	edit '/^methods:/d'
	expect_bad s.yaml 'poros-expand: s.yaml:2:1: missing required key "methods"'
}

@test "a missing precisions list is refused" {
	edit '/^precisions:/d'
	expect_bad s.yaml 'poros-expand: s.yaml:2:1: missing required key "precisions"'
}

@test "a missing training.steps is refused" {
	edit '/^  steps:/d'
	expect_bad s.yaml 'poros-expand: s.yaml:8:3: training: missing required key "steps"'
}

@test "a missing training.seq_len is refused" {
	edit '/^  seq_len:/d'
	expect_bad s.yaml 'poros-expand: s.yaml:8:3: training: missing required key "seq_len"'
}

@test "an empty file is refused" {
	: >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:1:1: the spec is empty (expected a mapping with spec_id, models, methods, precisions and training)'
}

@test "a file of only comments is empty too" {
	printf '# nothing here\n\n' >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:1:1: the spec is empty (expected a mapping with spec_id, models, methods, precisions and training)'
}

@test "a top level that is a list is refused" {
	printf -- '- spec_id: x\n' >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:1:1: the spec must be a mapping at top level, got a list'
}

@test "a top level that is a scalar is refused" {
	printf 'hello\n' >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:1:1: the spec must be a mapping at top level, got "hello"'
}

@test "a second YAML document is refused" {
	append "---" "spec_id: other"
	expect_bad s.yaml 'poros-expand: s.yaml:10:1: a second YAML document: a spec is exactly one document'
}

@test "a YAML anchor is refused" {
	edit 's/^training:$/training: \&t/'
	expect_bad s.yaml 'poros-expand: s.yaml:7:11: YAML anchors (&t) are not supported: a spec is plain data'
}

@test "a YAML alias is refused" {
	append "lora: *t"
	expect_bad s.yaml 'poros-expand: s.yaml:10:7: YAML aliases (*t) are not supported: a spec is plain data'
}

@test "a YAML tag is refused" {
	append "lora:" "  rank: !!int 8"
	expect_bad s.yaml 'poros-expand: s.yaml:11:9: YAML tags (tag:yaml.org,2002:int) are not supported: a spec is plain data'
}

@test "bytes that are not UTF-8 are refused at their position" {
	printf 'spec_id: mini\nhardware:\n  gpu_name: caf\xe9\n' >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:3:16: not valid UTF-8 (byte 0xe9)'
}

@test "a NUL byte in the file is refused at its position" {
	printf 'spec_id: mi\0ni\n' >s.yaml
	expect_bad s.yaml 'poros-expand: s.yaml:1:12: contains a NUL byte (a spec is UTF-8 text)'
}

@test "a spec larger than 1 MiB is refused" {
	{ cat "$FIX/minimal.yaml"; head -c 1100000 /dev/zero | tr '\0' '#'; echo; } >s.yaml
	expect_bad s.yaml "poros-expand: s.yaml: $(wc -c <s.yaml) bytes is too large for a spec (at most 1048576)"
}

@test "nesting deeper than any spec needs is refused" {
	append "poros: $(printf '[%.0s' $(seq 20))$(printf ']%.0s' $(seq 20))"
	expect_bad_regex s.yaml '^poros-expand: s\.yaml:10:[0-9]+: nested more than 16 levels deep$'
}

@test "a model entry that is a list is refused" {
	edit 's|  - poros/tiny-qwen2|  - [poros/tiny-qwen2]|'
	expect_bad s.yaml 'poros-expand: s.yaml:4:5: models[0]: expected a model id or a mapping, got a list'
}

@test "a model entry without model_id is refused" {
	edit 's|  - poros/tiny-qwen2|  - display_name: x|'
	expect_bad s.yaml 'poros-expand: s.yaml:4:5: models[0]: missing required key "model_id"'
}

@test "a model id with nothing to name the arch by is refused" {
	edit 's|  - poros/tiny-qwen2|  - "poros/--"|'
	expect_bad s.yaml 'poros-expand: s.yaml:4:5: models[0].model_id: "poros/--" has no letters or digits after its last "/" to name the arch by'
}

# --- documentation ----------------------------------------------------------

@test "the specs in poros-spec(5)'s EXAMPLES expand as described" {
	awk 'BEGIN { n = 0 } /^\.Sh EXAMPLES/ { ex = 1 } ex && /^\.Ed/ { n++; on = 0 } ex && on { print > ("ex" n ".yaml") } ex && /^\.Bd -literal/ { on = 1 }' \
		"$POROS_ROOT/man/poros-spec.5"
	expect_cells ex0.yaml "wc -l" "10"
	expect_cells ex1.yaml "jq -r .cell_id" "poros_tiny_qwen2_bf16"
}

@test "the man pages format without warnings" {
	command -v groff >/dev/null || skip "groff not installed"
	run groff -mdoc -ww -z -Tutf8 "$POROS_ROOT/man/poros-expand.1" "$POROS_ROOT/man/poros-spec.5"
	assert_success
	assert_output ""
}

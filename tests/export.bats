#!/usr/bin/env bats
# poros-export: a base checkpoint and a PEFT adapter in, a merged bf16 HF
# checkpoint directory out.  Bases are written by a stdlib-only Python
# script, adapters trained by poros-train on them (CPU), and every output
# checked bit for bit by an independent Python reimplementation.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/export"
	MAKE_CKPT="$FIX/make-checkpoint.py"
	CHECK="$FIX/check-export.py"
	EDIT="$FIX/edit-adapter.py"
	TOKFIX="$POROS_ROOT/tests/fixtures/tokenizer"
	NODE_MODULES="$POROS_ROOT/.npm-test/node_modules"   # make deps-test installs it
	TRAIN=(--backend cpu --precision bf16 --seq-len 32 --rank 4 --quiet --dataset synthetic)
}

# base DIR ARGS...: a random checkpoint; adapter BASE RUN: 2 training steps
# on it (a large lr, so the adapter moves the loss a lot)
base() { "$MAKE_CKPT" "$@"; }
adapter() {
	poros-train "${TRAIN[@]}" --model "$PWD/$1" --steps 2 --lr 0.01 --out "$2" >/dev/null
}

@test "poros-export --version prints its name and version" {
	assert_version poros-export
}

@test "poros-export --help prints the synopsis on stdout and exits 0" {
	assert_help poros-export "usage: poros-export --base DIR --adapter DIR --out DIR [--max-shard-size SIZE] [--merge-into original|dequantized]"
	assert_line --index 1 "                    [--force]"
	assert_line --index 2 "       poros-export --format gguf --outtype bf16|f16|q8_0 --base DIR --adapter DIR --out FILE"
	assert_line --index 3 "                    [--merge-into original|dequantized] [--force]"
	assert_line --index 4 "       poros-export --format gguf-lora --outtype f32|bf16|f16 --base DIR --adapter DIR --out FILE [--force]"
	assert_line --index 5 "       poros-export --check vllm ADAPTER_DIR"
}

@test "a missing option or a stray argument is a usage error with the synopsis on stderr" {
	run -2 --separate-stderr poros-export --base b --adapter a
	[ -z "$output" ]
	[[ "$stderr" == *"--base, --adapter and --out are required"*"usage: poros-export"* ]]
	run -2 --separate-stderr poros-export --base b --adapter a --out o extra
	[[ "$stderr" == *'unexpected argument "extra"'* ]]
}

@test "--max-shard-size reads transformers' units and refuses bits and nonsense by name" {
	for bad in 5gb 5Mb abc 0 5XB; do
		run -2 --separate-stderr poros-export --base b --adapter a --out o --max-shard-size "$bad"
		[[ "$stderr" == "poros-export: --max-shard-size: "*"\"$bad\"" ]]
	done
	run -2 --separate-stderr poros-export --base b --adapter a --out o --max-shard-size 5gb
	[[ "$stderr" == *"means bits to transformers"* ]]
}

@test "a trained adapter merged into a bf16 base: bit for bit W + scale*B@A, the rest byte-identical" {
	base b --tokenizer
	adapter b run
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out merged
	# stdout: one JSON summary line; the logs on stderr
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.out == "merged" and .rank == 4 and .scale == 8 and .tensors == 21 and .merged == 14
		and .shards == 1 and .total_size == 213632 and .tokenizer_files == 4'
	[[ "$stderr" == *"wrote merged: 21 tensors (14 merged, scale 8), 1 shard"* ]]
	run -0 "$CHECK" b run/adapter merged
	assert_output '{"merged": 14, "copied": 7, "converted": 0, "shards": 1}'
	# nothing else was written: no index for one shard, no temporary left
	[ "$(LC_ALL=C ls merged | paste -sd ' ')" = \
		"README.md chat_template.jinja config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json" ]
	[ "$(ls -A | grep -c poros-export)" -eq 0 ]
	for f in tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json; do
		cmp "b/$f" "merged/$f"
	done
	# a bf16 base already says bfloat16: config.json is the base's, byte for byte
	cmp b/config.json merged/config.json
	# and merging changed the weights (the check above would also pass for B = 0)
	run -1 cmp -s b/model.safetensors merged/model.safetensors
	# one thread or three: the same bytes
	OMP_NUM_THREADS=1 poros-export --base b --adapter run/adapter --out one >/dev/null 2>&1
	OMP_NUM_THREADS=3 poros-export --base b --adapter run/adapter --out three >/dev/null 2>&1
	cmp one/model.safetensors merged/model.safetensors
	cmp three/model.safetensors merged/model.safetensors
}

@test "an F32 sharded Qwen2 base: shards read through the index, every tensor rounded to BF16, dtype set" {
	base b --arch qwen2 --dtype f32 --shards 3 --config-key dtype --int-tensor
	adapter b run
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out merged
	echo "$output" | jq -e '.tensors == 28 and .merged == 14 and .shards == 1'
	run -0 "$CHECK" b run/adapter merged
	# 14 merged; the I64 buffer copied as it is; 13 other floats rounded from F32
	assert_output '{"merged": 14, "copied": 1, "converted": 13, "shards": 1}'
	# transformers 5 style: "dtype" only, everything else unchanged
	jq -e '.dtype == "bfloat16" and (has("torch_dtype") | not)' merged/config.json
	diff <(jq -S 'del(.dtype)' b/config.json) <(jq -S 'del(.dtype)' merged/config.json)
	[ "$(jq -r .dtype b/config.json)" = float32 ]
}

@test "an F16 base in transformers 4 style gets torch_dtype; a config that says neither gets torch_dtype added" {
	base b --dtype f16 --config-key torch_dtype
	adapter b run
	poros-export --base b --adapter run/adapter --out m16 >/dev/null 2>&1
	run -0 "$CHECK" b run/adapter m16
	assert_output '{"merged": 14, "copied": 0, "converted": 7, "shards": 1}'
	jq -e '.torch_dtype == "bfloat16" and (has("dtype") | not)' m16/config.json
	# only the value changed: the rest of the text is the base's own
	diff <(grep -v torch_dtype b/config.json) <(grep -v torch_dtype m16/config.json)
	base c --config-key none
	poros-export --base c --adapter run/adapter --out mnone >/dev/null 2>&1
	jq -e '.torch_dtype == "bfloat16"' mnone/config.json
	diff <(jq -S 'del(.torch_dtype)' c/config.json) <(jq -S 'del(.torch_dtype)' mnone/config.json)
	# 10000.0 stays a float in the text (a JSON re-print would make it 10000)
	grep -q '"rope_theta": 10000.0' mnone/config.json
}

@test "a small --max-shard-size shards the output, with an index naming every tensor once" {
	base b
	adapter b run
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out merged --max-shard-size 50KB
	echo "$output" | jq -e '.shards == 5'
	run -0 "$CHECK" b run/adapter merged
	assert_output '{"merged": 14, "copied": 7, "converted": 0, "shards": 5}'
	[ ! -e merged/model.safetensors ]
	jq -e '(.weight_map | length) == 21 and .metadata.total_size == 213632
		and ([.weight_map[]] | unique) == ["model-00001-of-00005.safetensors", "model-00002-of-00005.safetensors",
			"model-00003-of-00005.safetensors", "model-00004-of-00005.safetensors", "model-00005-of-00005.safetensors"]' \
		merged/model.safetensors.index.json
	# each shard holds at most 50 KB of tensor data, unless one tensor alone is larger (lm_head: 32 KB x ... )
	for f in merged/model-*.safetensors; do
		n=$(jq -r --arg f "${f##*/}" '[.weight_map | to_entries[] | select(.value == $f)] | length' \
			merged/model.safetensors.index.json)
		size=$(($(stat -c %s "$f")))
		[ "$n" -eq 1 ] || [ "$size" -le $((50000 + 4096)) ]
	done
	# 20KiB is smaller than the 32 KB embedding: that tensor gets a shard of its own
	poros-export --base b --adapter run/adapter --out tiny --max-shard-size 20KiB >/dev/null 2>&1
	jq -e '[.weight_map | to_entries[] | select(.key == "model.embed_tokens.weight") | .value] as $f
		| [.weight_map | to_entries[] | select(.value == $f[0])] | length == 1' tiny/model.safetensors.index.json
	run -0 "$CHECK" b run/adapter tiny
}

@test "round trip: poros-train on the export matches base + --init-adapter at step 1 within bf16 rounding" {
	base b
	adapter b run
	poros-export --base b --adapter run/adapter --out merged >/dev/null 2>&1
	# no dropout, so the adapter's path is deterministic; a fresh adapter has
	# B = 0, so the export's first loss is the merged model's own
	poros-train "${TRAIN[@]}" --model "$PWD/merged" --steps 1 --dropout 0 --out m >m.json
	poros-train "${TRAIN[@]}" --model "$PWD/b" --steps 1 --dropout 0 --init-adapter run/adapter --out a >a.json
	poros-train "${TRAIN[@]}" --model "$PWD/b" --steps 1 --dropout 0 --out z >z.json
	# Storing W' in bf16 moves each weight by at most half an ulp (2^-9
	# relative); the loss, a mean over 64 tokens of log-softmaxes of sums
	# of many such independent roundings, moves far less: 2e-3 bounds it
	# with room (measured: 7e-5), while the adapter itself moves the loss
	# by more than 1: a wrong scale or a transposed B@A fails by far.
	jq -n -e --slurpfile m m.json --slurpfile a a.json --slurpfile z z.json '
		($m[0].loss_first - $a[0].loss_first | fabs) < 2e-3
		and ($z[0].loss_first - $a[0].loss_first | fabs) > 0.5'
}

@test "use_rslora scales by alpha / sqrt(r); layers_to_transform merges only those layers; BF16 adapters read" {
	base b
	adapter b run
	"$EDIT" run/adapter rs --set use_rslora=true
	run -0 --separate-stderr poros-export --base b --adapter rs --out mrs
	echo "$output" | jq -e '.scale == 16'
	"$CHECK" b rs mrs
	"$EDIT" run/adapter l1 --keep-layers 1 --set 'layers_to_transform=[1]' --dtype bf16
	run -0 --separate-stderr poros-export --base b --adapter l1 --out ml1
	echo "$output" | jq -e '.merged == 7'
	run -0 "$CHECK" b l1 ml1
	assert_output '{"merged": 7, "copied": 14, "converted": 0, "shards": 1}'
}

@test "a synthetic base is refused by name: its weights cannot be exported" {
	base b
	adapter b run
	run -2 --separate-stderr poros-export --base poros/tiny-qwen2 --adapter run/adapter --out o
	[[ "$stderr" == "poros-export: --base poros/tiny-qwen2: "*"configs/models/tiny_qwen2.json is a model shape"*"synthetic weights cannot be exported"* ]]
	run -2 --separate-stderr poros-export --base "$POROS_ROOT/configs/models/tiny_llama.json" --adapter run/adapter --out o
	[[ "$stderr" == *"a file, not a checkpoint directory"*"synthetic weights, which cannot be exported" ]]
	mkdir cfgonly
	cp b/config.json cfgonly/
	run -2 --separate-stderr poros-export --base cfgonly --adapter run/adapter --out o
	[[ "$stderr" == "poros-export: cfgonly: no model.safetensors or model.safetensors.index.json (a checkpoint directory must hold its weights)" ]]
	[ ! -e o ]
}

@test "a missing or incomplete adapter is refused with what is missing" {
	base b
	adapter b run
	run -2 --separate-stderr poros-export --base b --adapter nowhere --out o
	[ "$stderr" = "poros-export: --adapter nowhere: No such file or directory" ]
	mkdir empty
	run -2 --separate-stderr poros-export --base b --adapter empty --out o
	[[ "$stderr" == *"no adapter_config.json (not a PEFT adapter directory)" ]]
	mkdir cfg
	cp run/adapter/adapter_config.json cfg/
	run -2 --separate-stderr poros-export --base b --adapter cfg --out o
	[[ "$stderr" == *"--adapter cfg: no adapter_model.safetensors" ]]
	# layer 0 dropped without saying so in layers_to_transform: incomplete
	"$EDIT" run/adapter l1 --keep-layers 1
	run -2 --separate-stderr poros-export --base b --adapter l1 --out o
	[[ "$stderr" == *"layer 0's q_proj has no lora_A"* ]]
	[ ! -e o ]
}

@test "a rank or shape that does not fit the config or the base is refused" {
	base b
	adapter b run
	"$EDIT" run/adapter r8 --set r=8
	run -2 --separate-stderr poros-export --base b --adapter r8 --out o
	[[ "$stderr" == *"has shape [4,"*"]: rank 4, but r8/adapter_config.json has r = 8" ]]
	# an adapter of another model (tiny-llama: 4 kv heads, 3 layers)
	poros-train "${TRAIN[@]}" --model poros/tiny-llama --steps 1 --out other >/dev/null
	run -2 --separate-stderr poros-export --base b --adapter other/adapter --out o
	[[ "$stderr" == *"layer 2, but the base has 2 layers" ]]
	"$EDIT" other/adapter other2 --keep-layers 0,1
	run -2 --separate-stderr poros-export --base b --adapter other2 --out o
	[[ "$stderr" == *"do not fit the base's"*"(an adapter of another model?)" ]]
	[ ! -e o ]
}

@test "adapter features poros-export does not implement are refused by name, never ignored" {
	base b
	adapter b run
	check() { # check EDIT-ARGS... -- EXPECTED-SUBSTRING
		local args=() want
		while [ "$1" != -- ]; do args+=("$1"); shift; done
		want=$2
		rm -rf x
		"$EDIT" run/adapter x "${args[@]}"
		run -2 --separate-stderr poros-export --base b --adapter x --out o
		[[ "$stderr" == *"$want"* ]] || { echo "got: $stderr (wanted: $want)"; return 1; }
	}
	check --set use_dora=true -- '"use_dora" is set: DoRA'
	check --set 'modules_to_save=["lm_head"]' -- '"modules_to_save" is set: modules_to_save'
	check --set 'bias="all"' -- '"bias" is not "none"'
	check --set 'rank_pattern={"q_proj": 8}' -- '"rank_pattern" is set: per-module ranks'
	check --set fan_in_fan_out=true -- 'fan_in_fan_out'
	check --set 'init_lora_weights="pissa"' -- 'init_lora_weights "pissa": this adapter expects a base PEFT modified'
	check --set 'target_modules=["q_proj","lm_head"]' -- 'target module "lm_head" is not supported'
	check --set 'target_modules=".*proj"' -- 'a regular expression is not supported'
	check --set 'peft_type="IA3"' -- '"peft_type" is not "LORA"'
	check --set 'some_future_option={"on": 1}' -- '"some_future_option" is set and is not a LoRA setting poros-export knows'
	check --add-tensor base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector.weight -- 'DoRA is not supported'
	check --add-tensor base_model.model.lm_head.weight -- 'is not a lora_A/lora_B weight'
	# an option that is off is fine, known or not
	rm -rf x
	"$EDIT" run/adapter x --set use_dora=false --set 'some_future_option={"on": false}' --set 'rank_pattern={}'
	poros-export --base b --adapter x --out fine >/dev/null 2>&1
	"$CHECK" b x fine
}

@test "PEFT's own adapter_config.json (0.21, every field) is accepted" {
	base b
	adapter b run
	# PEFT 0.21's config with this run's r, alpha and targets
	jq --slurpfile mine run/adapter/adapter_config.json \
		'.r = $mine[0].r | .lora_alpha = $mine[0].lora_alpha | .target_modules = $mine[0].target_modules' \
		"$POROS_ROOT/tests/fixtures/formats/peft-0.21-adapter/adapter_config.json" >cfg.json
	mkdir peft
	cp cfg.json peft/adapter_config.json
	cp run/adapter/adapter_model.safetensors peft/
	run -0 --separate-stderr poros-export --base b --adapter peft --out merged
	"$CHECK" b peft merged
}

@test "an existing non-empty --out is left alone (exit 2) unless --force replaces it" {
	base b
	adapter b run
	mkdir -p o
	echo keep >o/file
	run -2 --separate-stderr poros-export --base b --adapter run/adapter --out o
	[ "$stderr" = "poros-export: --out o: exists and is not empty (--force replaces it)" ]
	[ "$(cat o/file)" = keep ]
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out o/ --force
	[ ! -e o/file ]
	"$CHECK" b run/adapter o
	[ "$(ls -A | grep -c poros-export)" -eq 0 ]
	# an empty directory is simply filled
	mkdir e
	poros-export --base b --adapter run/adapter --out e >/dev/null 2>&1
	[ -f e/model.safetensors ]
	# never a directory with subdirectories, nor one holding an input
	mkdir -p deep/sub
	run -2 --separate-stderr poros-export --base b --adapter run/adapter --out deep --force
	[[ "$stderr" == *"holds subdirectories"* ]]
	[ -d deep/sub ]
	run -2 --separate-stderr poros-export --base b --adapter run/adapter --out . --force
	[[ "$stderr" == *"give the checkpoint directory's own name"* ]]
	mkdir w
	mv b w/
	run -2 --separate-stderr poros-export --base w/b --adapter run/adapter --out w --force
	[[ "$stderr" == *"--out w holds the base: replacing it would delete its input"* ]]
	[ -f w/b/model.safetensors ]
	echo x >afile
	run -2 --separate-stderr poros-export --base w/b --adapter run/adapter --out afile
	[[ "$stderr" == *"--out afile: exists and is not a directory"* ]]
}

@test "--force never replaces an --out that the base's files link into (an HF snapshot's layout)" {
	base b
	adapter b run
	# the snapshot: links into the blob store, which is --out here
	mkdir -p blobs snap
	for f in b/*; do
		mv "$f" "blobs/$(basename "$f")"
		ln -s "../blobs/$(basename "$f")" "snap/$(basename "$f")"
	done
	cmp_before=$(sha256sum blobs/model.safetensors)
	run -2 --separate-stderr poros-export --base snap --adapter run/adapter --out blobs --force
	[ -z "$output" ]
	[ "$stderr" = "poros-export: --out blobs holds the base's snap/config.json (through a link): replacing it would delete its input" ]
	[ "$(sha256sum blobs/model.safetensors)" = "$cmp_before" ]
	# only the weights linked there: still refused, naming them
	rm snap/config.json
	cp blobs/config.json snap/config.json
	run -2 --separate-stderr poros-export --base snap --adapter run/adapter --out blobs --force
	[[ "$stderr" == *"--out blobs holds the base's snap/model.safetensors (through a link)"* ]]
	# elsewhere it exports
	run -0 --separate-stderr poros-export --base snap --adapter run/adapter --out merged
	"$CHECK" snap run/adapter merged
}

@test "a write that fails midway leaves neither --out nor a temporary directory" {
	base b
	adapter b run
	mkdir parent
	# a 50 KB file size limit: the 213 KB shard cannot be written
	run -1 --separate-stderr bash -c 'ulimit -f 100; exec poros-export --base b --adapter run/adapter --out parent/o'
	[[ "$stderr" == *"model.safetensors: File too large" ]]
	[ -z "$(ls -A parent)" ]
}

@test "poros export passes through to poros-export" {
	run -0 --separate-stderr poros export --help
	assert_line --index 0 --partial "usage: poros-export --base DIR"
	run -2 --separate-stderr poros export --base x
	[[ "$stderr" == *"--base, --adapter and --out are required"* ]]
}

@test "README.md, the model card: base, adapter, merge, and the training as the run's files record it" {
	base b --tokenizer
	python3 -c 'import struct; open("e.u16", "wb").write(struct.pack("<64H", *[(i * 37 + 5) % 200 for i in range(64)]))'
	poros-train "${TRAIN[@]}" --model "$PWD/b" --steps 3 --lr 0.01 --eval-dataset e.u16 --out run >/dev/null 2>&1
	poros-export --base b --adapter run/adapter --out m >/dev/null 2>&1
	card=m/README.md
	grep -qx '# m' "$card"
	grep -qx -- '- checkpoint: `b`' "$card"
	grep -qx -- '- llama: 2 layers, hidden size 64, 4 attention heads (2 key/value), vocabulary 256' "$card"
	grep -qx -- '- path: `run/adapter`' "$card"
	grep -qx -- '- r: 4, lora_alpha: 32, scale: 8 (alpha / r)' "$card"
	grep -qx -- '- target_modules: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj' "$card"
	grep -qx -- '- merged into: the checkpoint'"'"'s weights W (`--merge-into original`)' "$card"
	# poros-train records the run (train_config.json): the card shows it
	grep -qx 'From `run/train_config.json`:' "$card"
	grep -qx '| precision | `"bf16"` |' "$card"
	# a run directory without one (an older poros-train) says so
	mkdir old && cp -r run/adapter run/events.jsonl old/
	poros-export --base b --adapter old/adapter --out m_old >/dev/null 2>&1
	grep -qx 'The run directory `old` has no train_config.json: the training configuration is not recorded here.' \
		m_old/README.md
	# the losses are events.jsonl's own numbers
	loss=$(jq -s -r '.[-1].loss' run/events.jsonl) eval=$(jq -s -r '.[-1].eval_loss' run/events.jsonl)
	grep -qx "From \`run/events.jsonl\`: 3 steps, the last training loss $loss." "$card"
	grep -qx "Eval loss: $eval after step 3 ($(jq -s -r '.[-1].eval_tokens' run/events.jsonl) supervised tokens)." "$card"
	# a run that records its configuration: every key, as JSON
	printf '{"precision": "bf16", "lr": 0.01, "targets": ["q_proj", "v_proj"]}\n' >run/train_config.json
	"$EDIT" run/adapter run/a1 --keep-layers 1 --set 'layers_to_transform=[1]'
	mkdir r2 && mv run/a1 r2/adapter && cp run/train_config.json run/events.jsonl r2/
	poros-export --base b --adapter r2/adapter --out m2 >/dev/null 2>&1
	grep -qx 'From `r2/train_config.json`:' m2/README.md
	grep -qx '| precision | `"bf16"` |' m2/README.md
	grep -qx '| lr | `0.01` |' m2/README.md
	grep -qx '| targets | `\["q_proj","v_proj"\]` |' m2/README.md
	grep -qx -- '- layers: 1' m2/README.md
	# a run without events says so, and a broken events file is refused by position
	rm r2/events.jsonl
	poros-export --base b --adapter r2/adapter --out m3 >/dev/null 2>&1
	grep -qx 'The run directory has no events.jsonl: no loss is recorded here.' m3/README.md
	printf '{"step": 1, "loss": 2}\n{"step"\n' >r2/events.jsonl
	run -2 --separate-stderr poros-export --base b --adapter r2/adapter --out m4
	[ "$stderr" = "poros-export: r2/events.jsonl:2: not valid JSON at column 8" ]
	[ ! -e m4 ]
}

# --- --merge-into ------------------------------------------------------------

@test "--merge-into dequantized: every projection is dequant(NF4(W)), merged ones plus B@A, bit for bit" {
	base b --tokenizer-from "$TOKFIX/llama3_like"
	adapter b run
	# layer 1 only: layer 0's projections are dequantized and not merged
	"$EDIT" run/adapter l1 --keep-layers 1 --set 'layers_to_transform=[1]'
	run -0 --separate-stderr poros-export --base b --adapter l1 --out mq --merge-into dequantized
	echo "$output" | jq -e '.merge_into == "dequantized" and .dequantized == 14 and .merged == 7'
	run -0 "$CHECK" b l1 mq --dequantized
	assert_output '{"merged": 7, "copied": 7, "converted": 0, "shards": 1, "dequantized": 14}'
	# not the original merge: the check of that fails on this output
	run -1 "$CHECK" b l1 mq
	# GGUF takes the same values
	poros-export --format gguf --outtype bf16 --base b --adapter l1 --out mq.gguf --merge-into dequantized >/dev/null 2>&1
	run -0 gguf_check mq.gguf mq b bf16
	run -2 --separate-stderr poros-export --base b --adapter l1 --out x --merge-into nf4
	[ "$stderr" = 'poros-export: --merge-into: unknown base "nf4" (expected original or dequantized)' ]
	run -2 --separate-stderr poros-export --format gguf-lora --outtype f32 --base b --adapter l1 --out x --merge-into original
	[ "$stderr" = "poros-export: --merge-into is for a merged export (--format gguf-lora merges nothing)" ]
}

@test "without --merge-into the run's train_config.json decides: nf4 dequantized, bf16 original, none original" {
	base b
	adapter b run
	poros-export --base b --adapter run/adapter --out mo --merge-into original >/dev/null 2>&1
	poros-export --base b --adapter run/adapter --out mq --merge-into dequantized >/dev/null 2>&1
	# the run's own record says bf16: the original weights
	jq -e '.precision == "bf16"' run/train_config.json
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out mb
	echo "$output" | jq -e '.merge_into == "original"'
	cmp mo/model.safetensors mb/model.safetensors
	# a run directory without a record (an older poros-train): the original weights, said so
	rm run/train_config.json
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out m0
	echo "$output" | jq -e '.merge_into == "original"'
	[[ "$stderr" == *"note: no train_config.json beside run/adapter: merging into the checkpoint's weights"* ]]
	cmp mo/model.safetensors m0/model.safetensors
	echo '{"precision": "nf4"}' >run/train_config.json
	run -0 --separate-stderr poros-export --base b --adapter run/adapter --out m1
	[[ "$stderr" == *"note: merging into dequant(NF4(W)) (--merge-into dequantized), as the run's run/train_config.json says it trained on nf4"* ]]
	cmp mq/model.safetensors m1/model.safetensors
	# an option overrides it
	poros-export --base b --adapter run/adapter --out m2 --merge-into original >/dev/null 2>&1
	cmp mo/model.safetensors m2/model.safetensors
	echo '{"precision": "bf16"}' >run/train_config.json
	poros-export --base b --adapter run/adapter --out m3 >/dev/null 2>&1
	cmp mo/model.safetensors m3/model.safetensors
	echo '{"precision": "fp8"}' >run/train_config.json
	run -2 --separate-stderr poros-export --base b --adapter run/adapter --out m4
	[ "$stderr" = 'poros-export: run/train_config.json: "precision" is not "nf4" or "bf16": give --merge-into original or dequantized' ]
	[ ! -e m4 ]
}

@test "an NF4-trained adapter merged into dequant(NF4(W)) matches its training's eval loss far closer than into W" {
	base b
	python3 -c 'import random, struct
r = random.Random(1)
for name, n in (("train.u16", 2048), ("eval.u16", 1024)):
    open(name, "wb").write(struct.pack("<%dH" % n, *[r.randrange(256) for _ in range(n)]))'
	T=(--backend cpu --seq-len 64 --rank 8 --alpha 16 --quiet --dropout 0 --dataset train.u16 --eval-dataset eval.u16)
	poros-train "${T[@]}" --precision nf4 --model "$PWD/b" --steps 30 --lr 0.01 --out run >q.json 2>/dev/null
	for m in original dequantized; do
		poros-export --base b --adapter run/adapter --out "m-$m" --merge-into "$m" >/dev/null 2>&1
		# lr 1e-30: one step leaves the fresh adapter at zero to bf16, so this is the merged model's loss
		poros-train "${T[@]}" --precision bf16 --model "$PWD/m-$m" --steps 1 --lr 1e-30 --out "e-$m" >"e-$m.json" 2>/dev/null
	done
	q=$(jq .eval_loss q.json) o=$(jq .eval_loss e-original.json) d=$(jq .eval_loss e-dequantized.json)
	echo "quantized $q original $o dequantized $d"
	# measured (docs in man/poros-export.1): |D - Q| 0.0002, |O - Q| 0.018
	python3 -c "import sys; q, o, d = map(float, sys.argv[1:]); sys.exit(not abs(d - q) * 10 < abs(o - q))" "$q" "$o" "$d"
}

# --- --format gguf ------------------------------------------------------------

# gguf_check FILE MERGED BASE OUTTYPE: parsed by @huggingface/gguf, then every
# tensor's bytes and the model and tokenizer keys checked against MERGED and BASE
gguf_check() {
	node "$FIX/read-gguf.mjs" "$NODE_MODULES" "$1" >"$1.json"
	"$FIX/check-gguf.py" "$1.json" "$1" "$2" "$3" "$4"
}
# gguf_key FILE KEY: a metadata value as the npm reader parsed it
gguf_key() { jq -c --arg k "$2" '.metadata[$k]' "$1.json"; }

@test "a Llama as GGUF bf16, f16 and q8_0: the npm reader parses it, bytes = merged ones converted, q/k permuted" {
	base b --tokenizer-from "$TOKFIX/llama3_like"
	printf '%s' "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}" >b/chat_template.jinja
	adapter b run
	poros-export --base b --adapter run/adapter --out merged >/dev/null 2>&1
	for t in bf16 f16 q8_0; do
		run -0 --separate-stderr poros-export --format gguf --outtype "$t" --base b --adapter run/adapter --out "m-$t.gguf"
		echo "$output" | jq -e --arg t "$t" '.format == "gguf" and .outtype == $t and .architecture == "llama"
			and .tensors == 21 and .merged == 14'
		[ "$(echo "$output" | jq .file_size)" -eq "$(stat -c %s "m-$t.gguf")" ]
		run -0 gguf_check "m-$t.gguf" merged b "$t"
		# 21 tensors; q and k of 2 layers permuted
		assert_output '{"tensors": 21, "permuted": 4, "keys": 23}'
	done
	# the file types llama.cpp names them by: MOSTLY_BF16 32, MOSTLY_F16 1, MOSTLY_Q8_0 7
	[ "$(gguf_key m-bf16.gguf general.file_type)" = 32 ]
	[ "$(gguf_key m-f16.gguf general.file_type)" = 1 ]
	[ "$(gguf_key m-q8_0.gguf general.file_type)" = 7 ]
	# Llama-3's pre-tokenizer; its template puts <|begin_of_text|> (id 0) in front
	[ "$(gguf_key m-q8_0.gguf tokenizer.ggml.pre)" = '"llama-bpe"' ]
	[ "$(gguf_key m-q8_0.gguf tokenizer.ggml.add_bos_token)" = true ]
	[ "$(gguf_key m-q8_0.gguf tokenizer.ggml.bos_token_id)" = 0 ]
	[ "$(gguf_key m-q8_0.gguf tokenizer.ggml.eos_token_id)" = 1 ]
	[ "$(jq -j '.metadata["tokenizer.chat_template"]' m-q8_0.gguf.json)" = "$(cat b/chat_template.jinja)" ]
	# no key_length when head_dim is hidden / heads and config.json does not say it
	[ "$(gguf_key m-q8_0.gguf llama.attention.key_length)" = null ]
	[ "$(ls -A | grep -c poros-export)" -eq 0 ]
}

@test "Qwen2 (q/k/v bias) and Qwen3 (q/k norm, explicit head_dim) as GGUF: not permuted, named as llama.cpp names them" {
	for arch in qwen2 qwen3; do
		base "$arch" --arch "$arch" --tokenizer-from "$TOKFIX/qwen_like"
		adapter "$arch" "run-$arch"
		poros-export --base "$arch" --adapter "run-$arch/adapter" --out "merged-$arch" >/dev/null 2>&1
		for t in f16 q8_0; do
			poros-export --format gguf --outtype "$t" --base "$arch" --adapter "run-$arch/adapter" --out "$arch-$t.gguf" \
				>/dev/null 2>&1
			run -0 gguf_check "$arch-$t.gguf" "merged-$arch" "$arch" "$t"
		done
	done
	run -0 gguf_check qwen2-q8_0.gguf merged-qwen2 qwen2 q8_0
	assert_output '{"tensors": 27, "permuted": 0, "keys": 22}'
	jq -e '[.tensors[] | select(.name == "blk.1.attn_k.bias")][0] | .shape == [32] and .dtype == 0' qwen2-q8_0.gguf.json
	run -0 gguf_check qwen3-q8_0.gguf merged-qwen3 qwen3 q8_0
	assert_output '{"tensors": 25, "permuted": 0, "keys": 24}'
	jq -e '[.tensors[] | select(.name == "blk.0.attn_q_norm.weight")][0] | .shape == [16] and .dtype == 0' qwen3-q8_0.gguf.json
	[ "$(gguf_key qwen3-q8_0.gguf qwen3.attention.key_length)" = 16 ]
	[ "$(gguf_key qwen3-q8_0.gguf tokenizer.ggml.pre)" = '"qwen2"' ]
	# qwen_like prepends nothing; its eos from tokenizer_config.json
	[ "$(gguf_key qwen3-q8_0.gguf tokenizer.ggml.add_bos_token)" = false ]
	[ "$(gguf_key qwen3-q8_0.gguf tokenizer.ggml.eos_token_id)" = 0 ]
}

@test "llama3 RoPE scaling goes into GGUF as llama.cpp's rope_freqs tensor; on Qwen2 it is refused by name" {
	base b --tokenizer-from "$TOKFIX/llama3_like"
	adapter b run
	poros-export --base b --adapter run/adapter --out merged >/dev/null 2>&1
	# head size 16, theta 1e4: wavelengths 6.3 ... 19869 around 256/4 and 256/1,
	# so the factors are 1, one smoothed (1 / (0.904 / 8 + 0.096) by hand), and 8
	jq '.rope_scaling = {rope_type: "llama3", factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,
		original_max_position_embeddings: 256}' b/config.json >c && mv c b/config.json
	run -0 --separate-stderr poros-export --format gguf --outtype bf16 --base b --adapter run/adapter --out r.gguf
	echo "$output" | jq -e '.tensors == 22'
	run -0 gguf_check r.gguf merged b bf16
	assert_output '{"tensors": 22, "permuted": 4, "keys": 22}'
	# the values themselves, as the npm reader's offsets find them
	run -0 python3 -c 'import json, struct, sys
p = json.load(open("r.gguf.json")); t = [t for t in p["tensors"] if t["name"] == "rope_freqs.weight"][0]
b = open("r.gguf", "rb").read()[p["data_offset"] + t["offset"]:][:32]
print(" ".join("%.4f" % v for v in struct.unpack("<8f", b)))'
	assert_output "1.0000 1.0000 1.0000 4.7818 8.0000 8.0000 8.0000 8.0000"
	[ "$(gguf_key r.gguf llama.rope.scaling.type)" = null ]
	base q --arch qwen2 --tokenizer-from "$TOKFIX/qwen_like"
	adapter q runq
	jq '.rope_scaling = {rope_type: "llama3", factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,
		original_max_position_embeddings: 256}' q/config.json >c && mv c q/config.json
	run -2 --separate-stderr poros-export --format gguf --outtype bf16 --base q --adapter runq/adapter --out q.gguf
	[ "$stderr" = 'poros-export: q/config.json: rope_scaling type "llama3" on qwen2: llama.cpp'"'"'s qwen2 reads no rope_freqs tensor, so poros-export does not write it' ]
	[ ! -e q.gguf ]
}

@test "tokenizer fidelity: Poros' tokenizer reading the GGUF gives tokenizer.json's ids on the tokenizer corpora" {
	for like in llama3_like qwen_like; do
		base "$like" --tokenizer-from "$TOKFIX/$like"
		adapter "$like" "run-$like"
		run -0 --separate-stderr poros-export --format gguf --outtype f16 --base "$like" --adapter "run-$like/adapter" \
			--out "$like.gguf"
		jq -c '{text}' "$TOKFIX/$like/expected.jsonl" >"$like.txt.jsonl"
		for special in "" --add-special; do
			poros-tokenize --tokenizer "$like/tokenizer.json" $special "$like.txt.jsonl" >"$like.json.ids"
			poros-tokenize --tokenizer "$like.gguf" $special "$like.txt.jsonl" >"$like.gguf.ids"
			[ "$(wc -l <"$like.gguf.ids")" -eq 32 ]
			if [ "$like" = llama3_like ]; then
				cmp "$like.json.ids" "$like.gguf.ids"
			else
				# Qwen2 normalizes NFC, which GGUF cannot say (a note says so): the
				# two lines that are not NFC differ, and match once normalized
				[ "$(diff "$like.json.ids" "$like.gguf.ids" | grep -c '^<')" -eq 2 ]
			fi
		done
	done
	[[ "$stderr" == *"note: qwen_like/tokenizer.json normalizes text (NFC) before BPE and GGUF has no key for that"* ]]
	python3 -c 'import json, sys, unicodedata
for line in open(sys.argv[1]):
    print(json.dumps({"text": unicodedata.normalize("NFC", json.loads(line)["text"])}))' qwen_like.txt.jsonl >nfc.jsonl
	poros-tokenize --tokenizer qwen_like.gguf nfc.jsonl >nfc.gguf.ids
	poros-tokenize --tokenizer qwen_like/tokenizer.json qwen_like.txt.jsonl >qwen.json.ids
	cmp qwen.json.ids nfc.gguf.ids
	# the EOS comes from eos_token_id: packing ends documents with it
	[ "$(printf 'ab\n' | poros-tokenize --tokenizer qwen_like.gguf --text --pack 4 | jq -c .ids)" = \
		"$(printf 'ab\n' | poros-tokenize --tokenizer qwen_like/tokenizer.json --text --pack 4 | jq -c .ids)" ]
	# a truncated GGUF file is refused with where it ends
	head -c 3000 qwen_like.gguf >cut.gguf
	run -2 --separate-stderr poros-tokenize --tokenizer cut.gguf nfc.jsonl
	[[ "$stderr" == "poros-tokenize: cut.gguf: byte "*"past the end"* ]]
	# a merged-model GGUF's tokenizer only: an adapter GGUF has none
	poros-export --format gguf-lora --outtype f32 --base qwen_like --adapter run-qwen_like/adapter --out a.gguf >/dev/null 2>&1
	run -2 --separate-stderr poros-tokenize --tokenizer a.gguf nfc.jsonl
	[ "$stderr" = 'poros-tokenize: a.gguf: tokenizer.ggml.model is missing, not "gpt2" (the byte-level BPE Poros runs)' ]
	# llama.cpp runs qwen2 with ignore_merges false: a tokenizer.json that says true is refused
	jq '.model.ignore_merges = true' qwen_like/tokenizer.json >t.json && mv t.json qwen_like/tokenizer.json
	run -2 --separate-stderr poros-export --format gguf --outtype f16 --base qwen_like --adapter run-qwen_like/adapter \
		--out im.gguf
	[ "$stderr" = 'poros-export: qwen_like/tokenizer.json: model.ignore_merges is true, but llama.cpp'"'"'s "qwen2" pre-tokenizer (its Split regex) runs with ignore_merges false' ]
	[ ! -e im.gguf ]
}

@test "--format gguf: --outtype is required, checked and only for gguf; bad inputs leave no file" {
	run -2 --separate-stderr poros-export --format gguf --base b --adapter a --out o.gguf
	[ "$stderr" = "poros-export: --format gguf needs --outtype bf16, f16 or q8_0" ]
	run -2 --separate-stderr poros-export --format gguf --outtype q4 --base b --adapter a --out o.gguf
	[ "$stderr" = 'poros-export: --outtype: unknown type "q4" (expected bf16, f16, q8_0 or f32)' ]
	run -2 --separate-stderr poros-export --outtype f16 --base b --adapter a --out o
	[ "$stderr" = "poros-export: --outtype is for --format gguf or gguf-lora" ]
	run -2 --separate-stderr poros-export --format ggml --base b --adapter a --out o
	[ "$stderr" = 'poros-export: --format: unknown format "ggml" (expected hf, gguf or gguf-lora)' ]
	run -2 --separate-stderr poros-export --format gguf --outtype f16 --max-shard-size 1GB --base b --adapter a --out o
	[[ "$stderr" == *"--max-shard-size is for --format hf"* ]]
	# a base with only placeholder tokenizer files: refused, nothing written
	base b --tokenizer
	adapter b run
	rm b/tokenizer.json
	run -2 --separate-stderr poros-export --format gguf --outtype f16 --base b --adapter run/adapter --out o.gguf
	[ "$stderr" = "poros-export: --base b: no tokenizer.json (a GGUF file carries the tokenizer)" ]
	[ ! -e o.gguf ]
	# --out: never a directory; an existing file only with --force
	base t --tokenizer-from "$TOKFIX/qwen_like"
	adapter t runt
	mkdir d
	run -2 --separate-stderr poros-export --format gguf --outtype f16 --base t --adapter runt/adapter --out d
	[ "$stderr" = "poros-export: --out d: a directory (a GGUF export is one file)" ]
	echo keep >o.gguf
	run -2 --separate-stderr poros-export --format gguf --outtype f16 --base t --adapter runt/adapter --out o.gguf
	[ "$stderr" = "poros-export: --out o.gguf: exists (--force replaces it)" ]
	[ "$(cat o.gguf)" = keep ]
	run -0 --separate-stderr poros-export --format gguf --outtype f16 --base t --adapter runt/adapter --out o.gguf --force
	[ "$(head -c 4 o.gguf)" = GGUF ]
	# a write that fails midway leaves neither the file nor a temporary
	mkdir p
	run -1 --separate-stderr bash -c 'ulimit -f 100; exec poros-export --format gguf --outtype bf16 --base t --adapter runt/adapter --out p/m.gguf'
	[[ "$stderr" == *"model.gguf: File too large" ]]
	[ -z "$(ls -A p)" ]
}

# --- --format gguf-lora -------------------------------------------------------

# lora_check FILE ADAPTER BASE OUTTYPE: parsed by @huggingface/gguf, then every
# tensor's name, shape, type and bytes checked against the PEFT adapter
lora_check() {
	node "$FIX/read-gguf.mjs" "$NODE_MODULES" "$1" >"$1.json"
	"$FIX/check-gguf-lora.py" "$1.json" "$1" "$2" "$3" "$4"
}

@test "a Llama adapter as llama.cpp's LoRA GGUF f32, bf16 and f16: names, shapes, alpha, bytes = PEFT's, q/k lora_b permuted" {
	base b --tokenizer-from "$TOKFIX/llama3_like"
	adapter b run
	for t in f32 bf16 f16; do
		run -0 --separate-stderr poros-export --format gguf-lora --outtype "$t" --base b --adapter run/adapter --out "a-$t.gguf"
		echo "$output" | jq -e --arg t "$t" '.format == "gguf-lora" and .outtype == $t and .architecture == "llama"
			and .rank == 4 and .alpha == 32 and .tensors == 28'
		[ "$(echo "$output" | jq .file_size)" -eq "$(stat -c %s "a-$t.gguf")" ]
		# 14 pairs; lora_b of q and k in 2 layers permuted; 6 keys
		run -0 lora_check "a-$t.gguf" run/adapter b "$t"
		assert_output '{"tensors": 28, "permuted": 4, "keys": 6}'
	done
	[ "$(gguf_key a-f32.gguf general.file_type)" = 0 ]
	[ "$(gguf_key a-bf16.gguf general.file_type)" = 32 ]
	jq -e '[.tensors[] | select(.name == "blk.1.ffn_down.weight.lora_a")][0] | .shape == [128, 4] and .dtype == 1' a-f16.gguf.json
	# a BF16 adapter's values as bf16: bit for bit
	"$EDIT" run/adapter a16 --dtype bf16
	poros-export --format gguf-lora --outtype bf16 --base b --adapter a16 --out b16.gguf >/dev/null 2>&1
	run -0 lora_check b16.gguf a16 b bf16
	# one layer of the adapter: only its pairs
	"$EDIT" run/adapter l1 --keep-layers 1 --set 'layers_to_transform=[1]'
	poros-export --format gguf-lora --outtype f32 --base b --adapter l1 --out l1.gguf >/dev/null 2>&1
	run -0 lora_check l1.gguf l1 b f32
	assert_output '{"tensors": 14, "permuted": 2, "keys": 6}'
	[ "$(ls -A | grep -c poros-export)" -eq 0 ]
}

@test "a Qwen2 adapter as LoRA GGUF: not permuted, and no tokenizer.json needed" {
	base q --arch qwen2
	adapter q runq
	run -0 --separate-stderr poros-export --format gguf-lora --outtype f16 --base q --adapter runq/adapter --out q.gguf
	run -0 lora_check q.gguf runq/adapter q f16
	assert_output '{"tensors": 28, "permuted": 0, "keys": 6}'
	[ "$(gguf_key q.gguf general.architecture)" = '"qwen2"' ]
}

@test "--format gguf-lora refuses q8_0, an rsLoRA adapter and f32 for gguf by name, writing nothing" {
	run -2 --separate-stderr poros-export --format gguf-lora --base b --adapter a --out o.gguf
	[ "$stderr" = "poros-export: --format gguf-lora needs --outtype f32, bf16 or f16" ]
	run -2 --separate-stderr poros-export --format gguf-lora --outtype q8_0 --base b --adapter a --out o.gguf
	[ "$stderr" = "poros-export: --outtype q8_0 is for --format gguf (a LoRA GGUF is written as f32, bf16 or f16)" ]
	run -2 --separate-stderr poros-export --format gguf --outtype f32 --base b --adapter a --out o.gguf
	[ "$stderr" = "poros-export: --outtype f32 is for --format gguf-lora (a merged model's values are bf16)" ]
	run -2 --separate-stderr poros-export --format gguf-lora --outtype f32 --max-shard-size 1GB --base b --adapter a --out o
	[[ "$stderr" == *"--max-shard-size is for --format hf"* ]]
	base b
	adapter b run
	"$EDIT" run/adapter rs --set use_rslora=true
	run -2 --separate-stderr poros-export --format gguf-lora --outtype f32 --base b --adapter rs --out o.gguf
	[ "$stderr" = "poros-export: rs/adapter_config.json: use_rslora: llama.cpp scales a LoRA GGUF by alpha / r, not alpha / sqrt(r)" ]
	[ ! -e o.gguf ]
	[ "$(ls -A | grep -c poros-export)" -eq 0 ]
}

# --- --check vllm ------------------------------------------------------------

@test "poros-train's adapter_config.json carries what PEFT and vLLM read; a rank vLLM refuses is warned of before step 1" {
	base b
	run -0 --separate-stderr poros-train "${TRAIN[@]}" --model "$PWD/b" --steps 1 --out run
	[[ "$stderr" == *"poros-train: warning: rank 4 is not one vLLM serves (8, 16, 32, 64, 128, 256, 320, 512)"* ]]
	jq -e --arg b "$PWD/b" '.peft_type == "LORA" and .task_type == "CAUSAL_LM" and .r == 4 and .lora_alpha == 32
		and (.target_modules | length) > 0 and .fan_in_fan_out == false and .bias == "none"
		and has("modules_to_save") and .modules_to_save == null and .base_model_name_or_path == $b' \
		run/adapter/adapter_config.json
	run -0 --separate-stderr poros-train --backend cpu --precision bf16 --seq-len 32 --rank 8 --quiet --dataset synthetic \
		--model "$PWD/b" --steps 1 --out run8
	[[ "$stderr" != *"vLLM"* ]]
}

@test "--check vllm: 0 for an adapter vLLM loads, 1 with every reason for one it refuses" {
	base b
	poros-train --backend cpu --precision bf16 --seq-len 32 --rank 8 --quiet --dataset synthetic --model "$PWD/b" --steps 1 --out run8 \
		>/dev/null
	run -0 --separate-stderr poros-export --check vllm run8/adapter
	[ "$output" = '{"adapter":"run8/adapter","check":"vllm","ok":true,"reasons":[]}' ]
	[ -z "$stderr" ]
	# rank 4, a full lm_head, a bias and modules_to_save: four reasons, each on stderr
	poros-train "${TRAIN[@]}" --model "$PWD/b" --steps 1 --out run4 >/dev/null 2>&1
	"$EDIT" run4/adapter bad --set 'bias="all"' --set 'modules_to_save=["lm_head"]' --add-tensor base_model.model.lm_head.weight
	run -1 --separate-stderr poros-export --check vllm bad
	echo "$output" | jq -e '.ok == false and (.reasons | length) == 4'
	[ "$(grep -c '^poros-export: not vLLM-ready: ' <<<"$stderr")" -eq 4 ]
	[[ "$stderr" == *"r = 4: vLLM serves ranks 8, 16, 32, 64, 128, 256, 320, 512"* ]]
	[[ "$stderr" == *'"bias" is not "none"'* ]]
	[[ "$stderr" == *'"modules_to_save" is set'* ]]
	[[ "$stderr" == *'tensor "base_model.model.lm_head.weight" is not a lora_A / lora_B weight'* ]]
	# not an adapter at all: a usage error (2), nothing on stdout
	run -2 --separate-stderr poros-export --check vllm nowhere
	[ "$stderr" = "poros-export: --check vllm nowhere: not a directory" ]
	[ -z "$output" ]
	run -2 --separate-stderr poros-export --check vllm run8/adapter --base b
	[[ "$stderr" == *"--check vllm takes one ADAPTER_DIR and no other option"* ]]
	run -2 --separate-stderr poros-export --check peft run8/adapter
	[ "$stderr" = 'poros-export: --check: unknown check "peft" (expected vllm)' ]
}

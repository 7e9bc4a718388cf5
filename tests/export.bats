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
	assert_help poros-export "usage: poros-export --base DIR --adapter DIR --out DIR [--max-shard-size SIZE] [--force]"
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
	[ "$(ls merged | paste -sd ' ')" = \
		"chat_template.jinja config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json" ]
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

#!/usr/bin/env bats
# Real checkpoints read exactly, or refused: config.json as transformers 4
# and 5 write it, weights that load or stop the run, shapes checked before
# memory is taken, and --tokenizer.  Checkpoints are written here by
# tests/fixtures/checkpoint/make_checkpoint.py (python3's standard library).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	MAKE_CK="$POROS_ROOT/tests/fixtures/checkpoint/make_checkpoint.py"
	TOK="$POROS_ROOT/tests/fixtures/tokenizer/tiny"
	RUN=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --steps 3 --quiet --dataset synthetic:repeat)
	ADAPTER=adapter/adapter_model.safetensors
}

# ck DIR ARGS...: a checkpoint
ck() {
	python3 "$MAKE_CK" "$@"
}

# train DIR MODEL [ARGS...]: a run into DIR, summary in DIR.json
train() {
	local dir=$1 model=$2
	shift 2
	poros-train "${RUN[@]}" --model "$PWD/$model" --out "$dir" "$@" >"$dir.json"
}

# same_run A B: the same losses, bit for bit, and the same adapter bytes
same_run() {
	diff <(jq -r .loss "$1/events.jsonl") <(jq -r .loss "$2/events.jsonl")
	cmp "$1/$ADAPTER" "$2/$ADAPTER"
}

@test "transformers 4 and 5 configs of one checkpoint train to the same bits: llama, llama3 rope, qwen2, qwen3" {
	for m in "llama none 500000" "llama llama3 500000" "qwen2 none 1000000" "qwen3 none 1000000"; do
		set -- $m
		ck "v4_$1_$2" --family "$1" --rope "$2" --theta "$3" --style v4
		ck "v5_$1_$2" --family "$1" --rope "$2" --theta "$3" --style v5
		jq -e 'has("rope_parameters") and (has("rope_theta") | not) and (has("torch_dtype") | not)' "v5_$1_$2/config.json"
		cmp "v4_$1_$2/model.safetensors" "v5_$1_$2/model.safetensors"
		train "r4_$1_$2" "v4_$1_$2"
		train "r5_$1_$2" "v5_$1_$2"
		jq -e '.status == "ok" and .weights == "real"' "r5_$1_$2.json"
		same_run "r4_$1_$2" "r5_$1_$2"
	done
}

@test "the comparison would notice a RoPE that is read wrong: theta 1e4 vs 1e6, llama3 scaling vs none" {
	ck a --theta 10000
	ck b --theta 1000000 --style v5
	ck c --theta 10000 --rope llama3 --style v5
	train ra a
	train rb b
	train rc c
	[ "$(jq -r .loss_first ra.json)" != "$(jq -r .loss_first rb.json)" ]
	[ "$(jq -r .loss_first ra.json)" != "$(jq -r .loss_first rc.json)" ]
}

@test "old and new keys that disagree are a usage error naming both" {
	ck m --style v5 --theta 1000000
	jq '.rope_theta = 10000' m/config.json >c && mv c m/config.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[ -z "$output" ]
	[ "$stderr" = "poros-train: $PWD/m/config.json: \"rope_theta\" 10000 and \"rope_parameters.rope_theta\" 1e+06 disagree" ]
	[ ! -e r ]
	jq '.torch_dtype = "float16"' m/config.json >c && mv c m/config.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[[ "$stderr" == *'"torch_dtype" "float16" and "dtype" "bfloat16" disagree' ]]
}

@test "a rope type or config key poros-train does not implement is refused by name" {
	ck m --style v5
	jq '.rope_parameters = {rope_type: "yarn", rope_theta: 10000, factor: 4}' m/config.json >c && mv c m/config.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[[ "$stderr" == *'"rope_parameters.rope_type" "yarn" is not supported (poros-train implements default, linear, llama3)' ]]
	ck q --family qwen2
	jq '.use_sliding_window = true' q/config.json >c && mv c q/config.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/q" --out r
	[[ "$stderr" == *'"use_sliding_window": true is not supported (full causal attention only)' ]]
}

@test "a dangling model.safetensors link is an error naming it, not synthetic weights" {
	ck m
	rm m/model.safetensors
	ln -s ../blobs/0a1b2c3d.incomplete m/model.safetensors
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[ -z "$output" ]
	[ "$stderr" = "poros-train: $PWD/m/model.safetensors: a dangling symbolic link (an interrupted download?)" ]
	[ ! -e r ]
}

@test "an HF cache snapshot with a dangling weights link is refused too" {
	ck src --family qwen2
	hub="$HF_HOME/hub/models--Org--Tiny"
	mkdir -p "$hub/blobs" "$hub/snapshots/c0ffee" "$hub/refs"
	mv src/config.json "$hub/blobs/cfg"
	ln -s ../../blobs/cfg "$hub/snapshots/c0ffee/config.json"
	ln -s ../../blobs/weights.incomplete "$hub/snapshots/c0ffee/model.safetensors"
	printf c0ffee >"$hub/refs/main"
	run -2 --separate-stderr poros-train "${RUN[@]}" --model Org/Tiny --out r
	[ "$stderr" = "poros-train: $hub/snapshots/c0ffee/model.safetensors: a dangling symbolic link (an interrupted download?)" ]
	# the index wins when it is there, broken or not
	ln -s ../../blobs/index.incomplete "$hub/snapshots/c0ffee/model.safetensors.index.json"
	run -2 --separate-stderr poros-train "${RUN[@]}" --model Org/Tiny --out r
	[[ "$stderr" == *"/model.safetensors.index.json: a dangling symbolic link (an interrupted download?)" ]]
}

@test "a FIFO in place of the weights is refused at once, without blocking" {
	ck m
	rm m/model.safetensors
	mkfifo m/model.safetensors
	run -2 --separate-stderr timeout 60 poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[ "$stderr" = "poros-train: $PWD/m/model.safetensors: not a regular file" ]
	ck s --shards 2
	rm s/model-00002-of-00002.safetensors
	mkfifo s/model-00002-of-00002.safetensors
	run -2 --separate-stderr timeout 60 poros-train "${RUN[@]}" --model "$PWD/s" --out r
	[ "$stderr" = "poros-train: $PWD/s/model-00002-of-00002.safetensors: not a regular file" ]
}

@test "a checkpoint directory without weights is an error; a shipped config still trains on synthetic weights" {
	ck m
	rm m/model.safetensors
	cp "$TOK"/tokenizer.json m/
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[ "$stderr" = "poros-train: $PWD/m: no model.safetensors or model.safetensors.index.json (a checkpoint directory must hold its weights)" ]
	: >m/pytorch_model.bin
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[[ "$stderr" == *"(only pytorch_model.bin weights, which poros-train does not read: convert them to safetensors)" ]]
	ck s --shards 3
	rm s/model-00002-of-00003.safetensors
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/s" --out r
	[ "$stderr" = "poros-train: $PWD/s/model-00002-of-00003.safetensors: No such file or directory" ]
	poros-train "${RUN[@]}" --model poros/tiny-llama --out syn >syn.json
	jq -e '.status == "ok" and .weights == "synthetic"' syn.json
}

@test "a config claiming a larger model than its checkpoint is refused from the headers, in little memory" {
	ck m
	jq '.hidden_size = 4096 | .intermediate_size = 11008 | .vocab_size = 32000 | .head_dim = 1024' m/config.json >c
	mv c m/config.json
	run -2 --separate-stderr /usr/bin/time -f 'maxrss_kb=%M' poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[[ "$stderr" == *"tensor \"model.embed_tokens.weight\" has shape [320,64] (expected [32000,4096] from config.json)"* ]]
	rss=$(printf '%s\n' "$stderr" | sed -n 's/^maxrss_kb=//p')
	# a CUDA build maps cuBLAS at start (~200 MB resident before main): the
	# bound is on what the refused run adds to what --version takes
	base=$(/usr/bin/time -f 'maxrss_kb=%M' poros-train --version 2>&1 >/dev/null | sed -n 's/^maxrss_kb=//p')
	[ -n "$rss" ] && [ -n "$base" ] && [ "$((rss - base))" -lt 102400 ]
	# at the top of the bounds too: still a shape error (exit 2), not an allocation failure
	jq '.hidden_size = 131072 | .intermediate_size = 1048576 | .vocab_size = 16777216 | .num_hidden_layers = 1024' \
		m/config.json >c
	mv c m/config.json
	run -2 --separate-stderr /usr/bin/time -f 'maxrss_kb=%M' poros-train "${RUN[@]}" --precision bf16 --model "$PWD/m" --out r
	[[ "$stderr" == *"has shape [320,64] (expected [16777216,131072] from config.json)"* ]]
	rss=$(printf '%s\n' "$stderr" | sed -n 's/^maxrss_kb=//p')
	[ -n "$rss" ] && [ "$((rss - base))" -lt 102400 ]
}

@test "F16 and F32 checkpoints train to the bits of the BF16 one; F64 is refused by name" {
	for d in BF16 F16 F32; do
		ck "m_$d" --family qwen3 --dtype "$d" --theta 1000000
		train "r_$d" "m_$d"
	done
	[ "$(stat -c %s m_F32/model.safetensors)" -gt "$(stat -c %s m_BF16/model.safetensors)" ]
	same_run r_BF16 r_F16
	same_run r_BF16 r_F32
	ck m_F64 --dtype F64
	jq '.torch_dtype = "float32"' m_F64/config.json >c && mv c m_F64/config.json
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m_F64" --out r
	[ "$stderr" = "poros-train: $PWD/m_F64: tensor \"model.embed_tokens.weight\": dtype F64 is not supported (poros-train reads BF16, F16 and F32 weights)" ]
	# a dtype safetensors has but no reader here takes: refused as it is named
	ck m_f8
	python3 - m_f8/model.safetensors <<-'PY'
	import json, struct, sys
	raw = open(sys.argv[1], "rb").read()
	n = struct.unpack("<Q", raw[:8])[0]
	header = json.loads(raw[8:8 + n])
	header["model.embed_tokens.weight"]["dtype"] = "F8_E4M3"
	h = json.dumps(header).encode()
	open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
	PY
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m_f8" --out r
	[[ "$stderr" == *'tensor "model.embed_tokens.weight": unknown dtype "F8_E4M3"'* ]]
}

# poke FILE TENSOR INDEX VALUE: element INDEX of TENSOR set to VALUE (a
# float, "nan", "inf" or "-inf") in the tensor's own dtype
poke() {
	python3 - "$@" <<-'PY'
	import json, struct, sys
	path, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
	raw = bytearray(open(path, "rb").read())
	n = struct.unpack("<Q", raw[:8])[0]
	t = json.loads(raw[8:8 + n])[name]
	size = {"F32": 4, "F16": 2, "BF16": 2}[t["dtype"]]
	at = 8 + n + t["data_offsets"][0] + index * size
	if t["dtype"] == "F32":
	    b = struct.pack("<f", value)
	elif t["dtype"] == "F16":
	    b = struct.pack("<e", value)
	else:
	    b = struct.pack("<f", value)[2:]  # truncated: exact for NaN, Inf and the values used here
	raw[at:at + size] = b
	open(path, "wb").write(raw)
	PY
}

@test "a NaN or Inf weight is refused at load naming its tensor, for BF16, F16 and F32 files and nf4 and bf16 runs" {
	local w=model.layers.1.mlp.down_proj.weight
	for d in BF16 F16 F32; do
		ck "m_$d" --dtype "$d"
		poke "m_$d/model.safetensors" "$w" 5 nan
		for p in nf4 bf16; do
			run -2 --separate-stderr poros-train "${RUN[@]}" --precision "$p" --model "$PWD/m_$d" --out "r_$p"
			[ "$stderr" = "poros-train: $PWD/m_$d: $PWD/m_$d/model.safetensors: tensor \"$w\": element 5 is NaN (a weight must be finite)" ]
			[ -z "$output" ]
			[ ! -e "r_$p/events.jsonl" ]
		done
	done
	ck m_inf --dtype F16
	poke m_inf/model.safetensors model.norm.weight 0 -inf
	run -2 --separate-stderr poros-train "${RUN[@]}" --precision nf4 --model "$PWD/m_inf" --out r
	[[ "$stderr" == *'tensor "model.norm.weight": element 0 is -Inf (a weight must be finite)' ]]
	# finite in F32, but past bf16's range once rounded
	ck m_big --dtype F32
	poke m_big/model.safetensors model.embed_tokens.weight 3 3.4028234e38
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m_big" --out r
	[[ "$stderr" == *'tensor "model.embed_tokens.weight": element 3 is +Inf in bf16, 3.40282e+38 in the file (a weight must be finite)' ]]
	# the same files, finite again, train
	ck m_BF16 --dtype BF16
	poros-train "${RUN[@]}" --precision nf4 --model "$PWD/m_BF16" --out ok >/dev/null
	[ "$(wc -l <ok/events.jsonl)" -eq 3 ]
}

@test "a safetensors header that is not valid UTF-8 is refused, in __metadata__ too" {
	ck m
	python3 - m/model.safetensors <<-'PY'
	import json, struct, sys
	raw = open(sys.argv[1], "rb").read()
	n = struct.unpack("<Q", raw[:8])[0]
	header = json.loads(raw[8:8 + n])
	header["__metadata__"] = {"format": "pt", "note": "XX"}
	h = json.dumps(header).encode().replace(b"XX", b"\xff\xfe")
	h += b" " * (-len(h) % 8)
	open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
	PY
	run -2 --separate-stderr poros-train "${RUN[@]}" --model "$PWD/m" --out r
	[[ "$stderr" == *"$PWD/m/model.safetensors: header is not valid UTF-8 (byte "*" of the file)"* ]]
	[ ! -e r/events.jsonl ]
}

@test "--tokenizer takes a tokenizer.json or its directory for a text dataset" {
	for i in 1 2 3 4 5 6; do
		printf '{"text": "document %d: the quick brown fox jumps over the lazy dog, %d times"}\n' "$i" "$i"
	done >text.jsonl
	T=(--backend cpu --seq-len 16 --batch-size 2 --rank 4 --alpha 8 --steps 2 --quiet --model poros/tiny-llama
		--dataset text.jsonl)
	run -2 --separate-stderr poros-train "${T[@]}" --out none
	[[ "$stderr" == *"text needs a tokenizer"*"--tokenizer gives one)" ]]
	poros-train "${T[@]}" --out dir --tokenizer "$TOK" >dir.json
	poros-train "${T[@]}" --out file --tokenizer "$TOK/tokenizer.json" >file.json
	jq -e '.status == "ok" and .steps == 2' dir.json
	same_run dir file
	# tokenized text, not the synthetic stream
	poros-train "${T[@]/text.jsonl/synthetic}" --out syn >syn.json
	[ "$(jq -r .loss_first syn.json)" != "$(jq -r .loss_first dir.json)" ]
	run -2 --separate-stderr poros-train "${T[@]}" --out bad --tokenizer "$PWD/none.json"
	[[ "$stderr" == "poros-train: --tokenizer: $PWD/none.json: "* ]]
	run -2 --separate-stderr poros-train "${T[@]/text.jsonl/synthetic}" --out bad --tokenizer "$TOK"
	[[ "$stderr" == *"--tokenizer: dataset synthetic is token ids already"* ]]
}

@test "a cell's training.tokenizer reaches the run" {
	for i in 1 2 3 4 5 6; do
		printf '{"text": "cell document %d, with some words to tokenize"}\n' "$i"
	done >text.jsonl
	cat >s.yaml <<-YAML
	spec_id: tok
	methods: [resident]
	models:
	  - model_id: poros/tiny-llama
	precisions: [bf16]
	training:
	  steps: 2
	  seq_len: 16
	  batch_size: 2
	  dataset: $PWD/text.jsonl
	  tokenizer: $TOK
	lora:
	  rank: 4
	  alpha: 8
	reporting:
	  output_dir: $PWD/bench
	YAML
	poros-expand s.yaml --jsonl >cells.jsonl
	jq -e --arg t "$TOK" '.training.tokenizer == $t' cells.jsonl
	poros-train --cell - --backend cpu --quiet <cells.jsonl >cell.json
	jq -e '.status == "ok"' cell.json
	poros-train --backend cpu --seq-len 16 --batch-size 2 --rank 4 --alpha 8 --steps 2 --quiet --mode resident \
		--precision bf16 --model poros/tiny-llama --dataset text.jsonl --tokenizer "$TOK" --out flags >flags.json
	[ "$(jq -r .loss_first cell.json)" = "$(jq -r .loss_first flags.json)" ]
}

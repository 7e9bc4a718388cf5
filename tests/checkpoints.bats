#!/usr/bin/env bats
# poros-train --checkpoints layer|block: blockwise keeps every layer's input
# on the host, or only each block's first (the backward computes the
# block's layers again from it).  The same bits either way, and as
# resident; the host plan shrinks by the block size.  The tiny models have
# 4 layers: block size 3 leaves a tail block of one.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	TINY=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet)
	ADAPTER=adapter/adapter_model.safetensors
}

# train NAME ARGS...: a run into directory NAME, summary in NAME.json
train() {
	local dir=$1
	shift
	poros-train "${TINY[@]}" --out "$dir" "$@" >"$dir.json"
}

# same NAME REF: NAME's adapter and losses are REF's, bit for bit
same() {
	cmp "$2/$ADAPTER" "$1/$ADAPTER"
	diff <(jq -r .loss "$2/events.jsonl") <(jq -r .loss "$1/events.jsonl")
}

# block_parity MODEL ARGS...: resident, --checkpoints layer and block at
# block sizes 2, 3 and 4 give the same bits
block_parity() {
	local model=$1
	shift
	train resident --model "$model" --mode resident --steps 3 "$@"
	train layer2 --model "$model" --checkpoints layer --block-size 2 --steps 3 "$@"
	same layer2 resident
	for bs in 2 3 4; do
		train "block$bs" --model "$model" --checkpoints block --block-size "$bs" --steps 3 "$@"
		jq -e '.status == "ok" and .config.checkpoints == "block"' "block$bs.json"
		same "block$bs" resident
	done
	# the runs learned something: the comparison is not of three equal losses
	[ "$(jq -r .loss resident/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "block checkpoints are bit-identical to resident and layer ones: qwen2, nf4, accumulation 4, dropout" {
	block_parity poros/tiny-qwen2 --precision nf4 --accum 4 --dropout 0.1 --lr 5e-3
}

@test "block checkpoints are bit-identical: llama (tied), bf16, accumulation 1" {
	block_parity poros/tiny-llama --precision bf16 --accum 1 --dropout 0 --lr 5e-3
}

@test "block checkpoints are bit-identical: qwen3 (qk-norm), nf4, accumulation 4, without attention checkpoints" {
	POROS_ATTN_CKPT=0 block_parity poros/tiny-qwen3 --precision nf4 --accum 4 --dropout 0.05 --lr 5e-3
}

@test "block checkpoints are bit-identical with attention checkpoints on, host optimizer state, MLP chunks, no prefetch" {
	POROS_ATTN_CKPT=1 POROS_MLP_CHUNK=16 block_parity poros/tiny-qwen2 --precision bf16 --accum 2 --lr 5e-3 \
		--optimizer-state host
	POROS_MLP_CHUNK=16 train noprefetch --model poros/tiny-qwen2 --checkpoints block --block-size 3 --no-prefetch --steps 3 \
		--precision bf16 --accum 2 --lr 5e-3 --optimizer-state host
	same noprefetch resident
}

@test "block checkpoints are bit-identical over packed documents" {
	# documents of 9 ids and their EOS: three and more a row of 32, with document masks
	for d in 1 2 3 4 5 6 7 8; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 9) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
	block_parity poros/tiny-qwen2 --precision nf4 --accum 2 --lr 5e-3 --dataset docs.jsonl
}

@test "--plan: block checkpoints keep one input a block on the host, and say so" {
	for mode in layer block; do
		POROS_ATTN_CKPT=0 poros-train --plan --backend cpu --model poros/tiny-qwen2 --seq-len 64 --accum 2 \
			--block-size 3 --checkpoints "$mode" >"$mode.json"
	done
	POROS_ATTN_CKPT=1 poros-train --plan --backend cpu --model poros/tiny-qwen2 --seq-len 64 --accum 2 \
		--block-size 3 --checkpoints block >block_attn.json
	# 4 layers, 2 blocks: 2/4 of layer mode's inputs (k T C fp32 each)
	jq -e '.checkpoints == "layer" and .host_checkpoints_mb == 4 * 2 * 64 * 64 * 4 / 1048576
		and (.host_breakdown_mb | has("checkpoints"))' layer.json
	jq -e '.checkpoints == "block" and .host_checkpoints_mb == 2 * 2 * 64 * 64 * 4 / 1048576
		and (.host_breakdown_mb | has("checkpoints") | not) and .host_breakdown_mb.block_checkpoints > 0' block.json
	# the attention checkpoints stay on the device: the host holds the inputs alone
	jq -e '.attention_checkpoints == true and .host_checkpoints_mb == 2 * 2 * 64 * 64 * 4 / 1048576' block_attn.json
	# the device holds block-size sets where layer mode holds two (MiB to 3 decimals)
	jq -e '(.vram_breakdown_mb.checkpoints - 2 * 2 * 64 * 64 * 4 / 1048576 | fabs) < 0.001' layer.json
	jq -e '(.vram_breakdown_mb.checkpoints - 3 * 2 * 64 * 64 * 4 / 1048576 | fabs) < 0.001' block.json
	# block size 1: every layer's input is a block's first, so layer checkpoints run
	poros-train --plan --backend cpu --model poros/tiny-qwen2 --block-size 1 --checkpoints block |
		jq -e '.checkpoints == "layer"'
	poros-train --plan --backend cpu --model poros/tiny-qwen2 --mode resident | jq -e '.checkpoints == null'
	# more than the host has: refused before a step, naming the blocks
	POROS_MEM_AVAILABLE=1M run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len 2048 \
		--accum 4 --block-size 2 --checkpoints block --out oom
	jq -e '.status == "oom" and .steps == 0 and (.error | test("^2 blocks. checkpoints need [0-9.]+ MiB of host memory, 1.0 MiB available \\(POROS_MEM_AVAILABLE\\)$"))' <<<"$output"
}

@test "a block-checkpoint run resumed from its checkpoint is bit-identical to the run straight through" {
	RUN=(--model poros/tiny-qwen2 --precision nf4 --accum 2 --dropout 0.1 --lr 5e-3 --lr-schedule cosine
	     --block-size 3 --checkpoints block --steps 6)
	train full "${RUN[@]}"
	train half "${RUN[@]}" --save-every 3
	jq -e '.config.checkpoints == "block"' half/checkpoint-step3/state.json
	# the checkpoint's setting is taken: no --checkpoints given
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 6 --resume half/checkpoint-step3 --out resumed >resumed.json
	jq -e '.config.checkpoints == "block"' resumed.json
	same resumed full
	[ "$(jq -r .loss full/events.jsonl | sort -u | wc -l)" -eq 6 ]
}

@test "--checkpoints block is refused by name for resident, and an unknown value names the choices" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --checkpoints block --out r
	assert_equal "$stderr" "poros-train: --checkpoints block: the resident schedule keeps every layer's input on the device; block checkpoints are blockwise's (--mode blockwise)"
	[ ! -e r ]
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --checkpoints blocks --out r
	[[ "$stderr" == *"--checkpoints"*"blocks"*"layer, block"* ]]
	run -0 poros-train --help
	[[ "$output" == *"--checkpoints layer|block"* ]]
}

@test "a spec's poros.checkpoints and a fine-tune config's checkpoints reach poros-train" {
	{ sed 's/^methods:.*/methods: [poros]/' "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"
	  printf '%s\n' "poros:" "  checkpoints: block"; } >s.yaml
	run -0 --separate-stderr poros-expand s.yaml --jsonl
	jq -e -s 'all(.[]; .poros.checkpoints == "block")' <<<"$output"
	# the default is left out of a cell, so older cells and newer ones read alike
	run -0 --separate-stderr poros-expand "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml" --jsonl
	jq -e -s 'all(.[]; .poros | has("checkpoints") | not)' <<<"$output"
	{ cat "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"; printf '%s\n' "poros:" "  checkpoints: blocks"; } >bad.yaml
	run -2 --separate-stderr poros-expand bad.yaml --jsonl
	assert_equal "$stderr" 'poros-expand: bad.yaml:11:16: unknown checkpoints "blocks" (expected one of: layer, block)'
	# a resident cell would refuse it when it runs: the spec is refused first
	{ cat "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"; printf '%s\n' "poros:" "  checkpoints: block"; } >mixed.yaml
	run -2 --separate-stderr poros-expand mixed.yaml --jsonl
	assert_equal "$stderr" 'poros-expand: mixed.yaml:11:3: poros.checkpoints: block is the poros method'"'"'s (blockwise), and methods lists resident (poros-train refuses it there)'

	printf '%s\n' 'model: poros/tiny-qwen2' 'dataset: synthetic' 'output_dir: out' 'max_steps: 2' 'checkpoints: block' >c.yaml
	run -0 --separate-stderr poros-expand --train-argv c.yaml
	[[ "$output" == *$'--checkpoints\nblock'* ]]
}

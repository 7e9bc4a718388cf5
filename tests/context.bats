#!/usr/bin/env bats
# poros bench context: the largest seq_len whose plan fits a card and the
# host, found over the planner (CPU machine; the CUDA plan needs no device).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	cat >tiny.yaml <<'YAML'
spec_id: tiny_context
host_mem_available: 64G
ceiling: 16384
precision: nf4
rank: 4
alpha: 8
block_size: 2
optimizer_state: host
checkpoints: block
models: [poros/tiny-qwen2]
cards_gb: [0.06]
YAML
}

# fits SEQ [BLOCK CHECKPOINTS]: the plan at SEQ fits the 0.06 GB card
fits() {
	POROS_MEM_AVAILABLE=64G poros-train --plan --backend cuda --model poros/tiny-qwen2 --precision nf4 --seq-len "$1" \
		--batch-size 1 --rank 4 --alpha 8 --gradient-checkpointing on --block-size "${2:-2}" --optimizer-state host \
		--checkpoints "${3:-block}" --vram-budget 60000000 2>/dev/null |
		jq -e '.fits == true and .host_fits == true' >/dev/null
}

# longest BLOCK CHECKPOINTS: the largest fitting multiple of 1024, by walking up
longest() {
	local n=0
	while fits $((n + 1024)) "$1" "$2"; do n=$((n + 1024)); done
	echo "$n"
}

@test "bench context finds the largest multiple of 1024 whose plan fits the card: the next one does not" {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && skip "a CUDA device is present: the confirming run would train"
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" '| model | precision | card (GB) | max seq_len (plan) | layout (block size, checkpoints) | device MiB at max | host MiB at max | confirmed (3 steps) | published (not measured here) |'
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | 2, block | "[0-9]+" | "[0-9]+" | no CUDA device | - |"$ ]]
	max=${BASH_REMATCH[1]}
	[[ "$stderr" == *"no CUDA device here: the confirming 3-step runs are not made"* ]]
	[ ! -e runs ]
	# (one test a line: bats fails on a command, not inside "a && b")
	[ "$max" -ge 1024 ]
	[ $((max % 1024)) = 0 ]
	[ "$max" -lt 16384 ]
	fits "$max"
	run ! fits $((max + 1024))
}

@test "bench context searches every layout of block_size and checkpoints lists and names the longest's" {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && skip "a CUDA device is present: the confirming run would train"
	sed 's/^block_size:.*/block_size: [1, 2, 4]/; s/^checkpoints:.*/checkpoints: [layer, block]/' tiny.yaml >layouts.yaml
	run -0 --separate-stderr poros bench context layouts.yaml runs
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | "([124])", "(layer|block)" | " ]]
	local max=${BASH_REMATCH[1]} bs=${BASH_REMATCH[2]} ck=${BASH_REMATCH[3]} best=0 first=
	for b in 1 2 4; do
		for c in layer block; do
			n=$(longest "$b" "$c")
			# the first layout listed wins a tie
			[ "$n" -gt "$best" ] && best=$n first="$b $c"
		done
	done
	[ "$max" = "$best" ] && [ "$bs $ck" = "$first" ]
}

@test "bench context prints the row of a card that fits not even 1024, with nothing to confirm" {
	have_gpu && skip "a CUDA device is present: the confirming run would train"
	sed -i 's/^cards_gb:.*/cards_gb: [0.001, 0.06]/' tiny.yaml
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[2]}" '| poros/tiny-qwen2 | nf4 | 0.001 | 0 | 2, block | - | - | no CUDA device | - |'
	[[ "${lines[3]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "[1-9][0-9]*" | " ]]
}

@test "bench context refuses a block_size or checkpoints it cannot plan, by name" {
	sed 's/^block_size:.*/block_size: [1, x]/' tiny.yaml >badbs.yaml
	run -2 --separate-stderr poros bench context badbs.yaml
	assert_equal "$stderr" 'poros: badbs.yaml: block_size: not a whole number of layers: x'
	sed 's/^checkpoints:.*/checkpoints: [layer, blocks]/' tiny.yaml >badck.yaml
	run -2 --separate-stderr poros bench context badck.yaml
	assert_equal "$stderr" 'poros: badck.yaml: checkpoints: "blocks" (expected layer or block)'
}

@test "bench context refuses a spec without a value it needs, with no default" {
	grep -v '^rank:' tiny.yaml >norank.yaml
	run -2 --separate-stderr poros bench context norank.yaml
	assert_equal "$stderr" 'poros: norank.yaml: context spec needs "rank:" (no default)'
	grep -v '^optimizer_state:' tiny.yaml >noopt.yaml
	run -2 --separate-stderr poros bench context noopt.yaml
	assert_equal "$stderr" 'poros: noopt.yaml: context spec needs "optimizer_state:" (no default)'
	grep -v '^checkpoints:' tiny.yaml >nockpt.yaml
	run -2 --separate-stderr poros bench context nockpt.yaml
	assert_equal "$stderr" 'poros: nockpt.yaml: context spec needs "checkpoints:" (no default)'
	run -2 --separate-stderr poros bench context missing.yaml
	assert_equal "$stderr" 'poros: missing.yaml: no such spec file'
}

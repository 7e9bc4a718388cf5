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

fits() {
	POROS_MEM_AVAILABLE=64G poros-train --plan --backend cuda --model poros/tiny-qwen2 --precision nf4 --seq-len "$1" \
		--batch-size 1 --rank 4 --alpha 8 --gradient-checkpointing on --block-size 2 --optimizer-state host \
		--checkpoints block --vram-budget 60000000 2>/dev/null |
		jq -e '.fits == true and .host_fits == true' >/dev/null
}

@test "bench context finds the largest multiple of 1024 whose plan fits the card: the next one does not" {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && skip "a CUDA device is present: the confirming run would train"
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" '| model | precision | card (GB) | max seq_len (plan) | device MiB at max | host MiB at max | confirmed (3 steps) | published (not measured here) |'
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | "[0-9]+" | "[0-9]+" | no CUDA device | - |"$ ]]
	max=${BASH_REMATCH[1]}
	[ "$max" -ge 1024 ] && [ $((max % 1024)) = 0 ] && [ "$max" -lt 16384 ]
	fits "$max"
	! fits $((max + 1024))
	[[ "$stderr" == *"no CUDA device here: the confirming 3-step runs are not made"* ]]
	[ ! -e runs ]
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

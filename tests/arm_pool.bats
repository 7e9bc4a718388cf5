#!/usr/bin/env bats
# poros-arm --gpus: several cells at once, at most one per listed GPU, each
# child with CUDA_VISIBLE_DEVICES set to its GPU.  The trainer is the
# scale-out stand-in (tests/fixtures/scaleout/fake-train), which records
# "CELL_ID GPU START_NS END_NS" per cell; no GPU is needed.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	export POROS_TRAIN="$POROS_ROOT/tests/fixtures/scaleout/fake-train"
	. "$POROS_ROOT/tests/fixtures/scaleout/devices.bash"
	export FAKE_DEVICES="$PWD/devices.log" FAKE_LOG="$PWD/fake.log"
	unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER FAKE_FAIL_CELL FAKE_PIDS FAKE_SLEEP POROS_ARM_WATCH_PID
	# three cells (two methods, two precisions) as files
	for c in poros_bf16 resident_bf16 poros_nf4; do
		jq -c --arg m "${c%_*}" --arg p "${c#*_}" \
			'.method = $m | .precision = $p | .output_dir = "out" | .cell_id = "\($m)_tiny_llama_\($p)"' \
			"$POROS_ROOT/tests/fixtures/arm/cell.json" > "$c.json"
	done
	CELLS="poros_bf16.json resident_bf16.json poros_nf4.json"
}

gone() {
	local state
	state=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
	[[ "$state" == Z* ]]
}

@test "--gpus 0,1 runs three cells, never two on one GPU, each child told its GPU" {
	export FAKE_SLEEP=0.3
	# shellcheck disable=SC2086
	run -0 --separate-stderr poros-arm --gpus 0,1 $CELLS
	# stdout: one whole artifact line per cell, the same as its file
	[ "${#lines[@]}" -eq 3 ]
	for line in "${lines[@]}"; do
		id=$(jq -r .cell_id <<< "$line")
		[ "$(jq -c . "out/$id.json")" = "$(jq -c . <<< "$line")" ]
	done
	[ "$(printf '%s\n' "${lines[@]}" | jq -r .cell_id | sort | paste -sd ' ')" = \
		"poros_tiny_llama_bf16 poros_tiny_llama_nf4 resident_tiny_llama_bf16" ]
	[ "$(wc -l < "$FAKE_DEVICES")" -eq 3 ]
	assert_no_shared_gpu
	# both GPUs were used, each child had exactly one, and its artifact says which
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u | paste -sd ' ')" = "0 1" ]
	while read -r id gpu _; do
		[ "$(jq -r .env.cuda_visible_devices "out/$id.json")" = "$gpu" ]
	done < "$FAKE_DEVICES"
	# two GPUs, three cells: the last to start waited for the first to end
	first_end=$(sort -k4,4n "$FAKE_DEVICES" | head -n 1 | cut -d ' ' -f 4)
	third_start=$(sort -k3,3n "$FAKE_DEVICES" | tail -n 1 | cut -d ' ' -f 3)
	[ "$third_start" -ge "$first_end" ]
	# progress: whole lines naming the GPU, numbered as the arguments are
	[[ "$stderr" == *"[3/3] poros tiny_llama nf4 on GPU "*" ... ok "* ]]
	[ "$(grep -c ' \.\.\. ok ' <<< "$stderr")" -eq 3 ]
}

@test "a failing cell does not stop the others; its artifact says error, the exit status is 0" {
	export FAKE_FAIL_CELL=resident_tiny_llama_bf16
	# shellcheck disable=SC2086
	run -0 --separate-stderr poros-arm --gpus 0,1 $CELLS
	[ "${#lines[@]}" -eq 3 ]
	jq -e -s 'map({(.cell_id): .status}) | add ==
		{"poros_tiny_llama_bf16": "ok", "resident_tiny_llama_bf16": "error", "poros_tiny_llama_nf4": "ok"}' \
		<<< "$output"
	jq -e '.error | startswith("exit status 1")' out/resident_tiny_llama_bf16.json
	[ "$(wc -l < "$FAKE_LOG")" -eq 3 ]
}

@test "a bad cell is reported (exit 2) and the other cells still run" {
	echo '{"cell_id": 3}' > bad.json
	run -2 --separate-stderr poros-arm --gpus 0,1 poros_bf16.json bad.json poros_nf4.json
	[ "${#lines[@]}" -eq 2 ]
	[[ "$stderr" == *"poros-arm: bad.json: "* ]]
	[ -f out/poros_tiny_llama_bf16.json ] && [ -f out/poros_tiny_llama_nf4.json ]
}

@test "cells as JSONL on stdin run in the pool too" {
	export FAKE_SLEEP=0.2
	run -0 --separate-stderr sh -c 'cat poros_bf16.json resident_bf16.json poros_nf4.json | poros-arm --gpus 7'
	[ "${#lines[@]}" -eq 3 ]
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u)" = 7 ]
	[ -f out/cells/poros_tiny_llama_nf4.json ]
	[[ "$stderr" == *"[3] poros tiny_llama nf4 on GPU 7 ... ok"* ]]
}

# start_ns / end_ns ID: when the cell's trainer started / ended
start_ns() { awk -v id="$1" '$1 == id { print $3 }' "$FAKE_DEVICES"; }
end_ns() { awk -v id="$1" '$1 == id { print $4 }' "$FAKE_DEVICES"; }

@test "a cell of hardware.gpus 2 gets two GPUs at once, in the order listed, and the cells after it wait" {
	export FAKE_SLEEP=0.4
	jq -c '.hardware.gpus = 2' resident_bf16.json > two.json
	run -0 --separate-stderr poros-arm --gpus 5,3 poros_bf16.json two.json poros_nf4.json
	[ "${#lines[@]}" -eq 3 ]
	jq -e -s 'all(.[]; .status == "ok")' <<< "$output"
	# the first cell has GPU 5; the 2-GPU cell waits for it, then has both, as listed
	[ "$(awk '{ print $1, $2 }' "$FAKE_DEVICES")" = "poros_tiny_llama_bf16 5
resident_tiny_llama_bf16 5,3
poros_tiny_llama_nf4 5" ]
	[ "$(jq -r .env.cuda_visible_devices out/resident_tiny_llama_bf16.json)" = "5,3" ]
	[ "$(start_ns resident_tiny_llama_bf16)" -ge "$(end_ns poros_tiny_llama_bf16)" ]
	# first in, first out: the third cell did not take the free GPU 3 before the 2-GPU cell
	[ "$(start_ns poros_tiny_llama_nf4)" -ge "$(end_ns resident_tiny_llama_bf16)" ]
	assert_no_shared_gpu
	[[ "$stderr" == *"[2/3] resident tiny_llama bf16 on GPUs 5,3 ... ok "* ]]
}

@test "two 2-GPU cells and 1-GPU cells on four GPUs never share one" {
	export FAKE_SLEEP=0.3
	jq -c '.hardware.gpus = 2' resident_bf16.json > two_a.json
	jq -c '.hardware.gpus = 2 | .cell_id = "resident_tiny_llama_nf4" | .precision = "nf4"' resident_bf16.json > two_b.json
	run -0 --separate-stderr poros-arm --gpus 0,1,2,3 two_a.json poros_bf16.json two_b.json poros_nf4.json
	[ "${#lines[@]}" -eq 4 ]
	jq -e -s 'all(.[]; .status == "ok")' <<< "$output"
	[ "$(wc -l < "$FAKE_DEVICES")" -eq 4 ]
	assert_no_shared_gpu
	# each cell had as many GPUs as it asked for
	[ "$(awk '{ print $1, split($2, g, ",") }' "$FAKE_DEVICES" | sort | paste -sd ' ')" = \
		"poros_tiny_llama_bf16 1 poros_tiny_llama_nf4 1 resident_tiny_llama_bf16 2 resident_tiny_llama_nf4 2" ]
	# 0,1 and 2 at once; the second 2-GPU cell waits for two free, the last cell behind it
	[ "$(awk '$1 == "resident_tiny_llama_bf16" { print $2 }' "$FAKE_DEVICES")" = "0,1" ]
	[ "$(awk '$1 == "poros_tiny_llama_bf16" { print $2 }' "$FAKE_DEVICES")" = "2" ]
	[ "$(overlapping_pairs)" -ge 1 ]
}

@test "a cell asking for more GPUs than listed is skipped, naming both numbers; the others run" {
	jq -c '.hardware.gpus = 4' resident_bf16.json > four.json
	run -0 --separate-stderr sh -c 'cat poros_bf16.json four.json poros_nf4.json | poros-arm --gpus 0,1'
	[ "${#lines[@]}" -eq 3 ]
	jq -e -s 'map({(.cell_id): .status}) | add ==
		{"poros_tiny_llama_bf16": "ok", "resident_tiny_llama_bf16": "skipped", "poros_tiny_llama_nf4": "ok"}' \
		<<< "$output"
	[ "$(jq -r .error out/resident_tiny_llama_bf16.json)" = "hardware.gpus is 4, but --gpus lists 2 GPUs" ]
	# it ran nowhere and was given no GPU
	jq -e '.env.cuda_visible_devices == null and .log == null' out/resident_tiny_llama_bf16.json
	[ "$(cut -d ' ' -f 1 "$FAKE_LOG" | sort | paste -sd ' ')" = "poros_tiny_llama_bf16 poros_tiny_llama_nf4" ]
	[[ "$stderr" == *"[2] resident tiny_llama bf16 ... skipped "*": hardware.gpus is 4, but --gpus lists 2 GPUs"* ]]
}

@test "SIGTERM to the pool ends every running cell's process group and records each" {
	export FAKE_SLEEP=30 FAKE_PIDS="$PWD/pids"
	# shellcheck disable=SC2086
	poros-arm --gpus 0,1 $CELLS > arts.jsonl 2> err.txt &
	pid=$!
	wait_until 100 0.05 lines_at_least pids 2
	[ "$(wc -l < pids)" -eq 2 ]
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ]
	grep -qx 'poros-arm: interrupted by SIGTERM' err.txt
	for p in $(cat pids); do
		gone "$p"
	done
	# the two running cells got an artifact each, whole; the third never started
	[ "$(jq -c . arts.jsonl | wc -l)" -eq 2 ]
	jq -e -s 'length == 2 and all(.[]; .status == "error" and (.error | startswith("interrupted: poros-arm got SIGTERM")))' arts.jsonl
	[ "$(wc -l < "$FAKE_LOG")" -eq 2 ]
	[ ! -e out/poros_tiny_llama_nf4.json ]
}

@test "SIGTERM ends a 2-GPU cell and a 1-GPU cell running side by side" {
	export FAKE_SLEEP=30 FAKE_PIDS="$PWD/pids"
	jq -c '.hardware.gpus = 2' resident_bf16.json > two.json
	poros-arm --gpus 0,1,2 two.json poros_bf16.json poros_nf4.json > arts.jsonl 2> err.txt &
	pid=$!
	wait_until 100 0.05 lines_at_least pids 2
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ]
	for p in $(cat pids); do
		gone "$p"
	done
	jq -e -s 'length == 2 and all(.[]; .status == "error") and
		(map(.env.cuda_visible_devices) | sort) == ["0,1", "2"]' arts.jsonl
	[ ! -e out/poros_tiny_llama_nf4.json ]
}

@test "POROS_ARM_WATCH_PID gone: the pool stops its cells and starts no other" {
	export FAKE_SLEEP=30 FAKE_PIDS="$PWD/pids"
	sleep 60 &
	watched=$!
	# shellcheck disable=SC2086
	POROS_ARM_WATCH_PID=$watched poros-arm --gpus 0,1 $CELLS > arts.jsonl 2> err.txt &
	pid=$!
	wait_until 100 0.05 lines_at_least pids 2 || true
	kill "$watched"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ]
	[ "$(wc -l < "$FAKE_LOG")" -eq 2 ]
	jq -e -s 'length == 2 and all(.[]; .status == "error")' arts.jsonl
	for p in $(cat pids); do
		gone "$p"
	done
}

@test "bad --gpus lists are usage errors (exit 2) and run nothing" {
	run -2 --separate-stderr poros-arm --gpus 0,x poros_bf16.json
	[ "$stderr" = 'poros-arm: --gpus: "x" is not a GPU index (expected a list such as 0,1,2,3)' ]
	run -2 --separate-stderr poros-arm --gpus 0, poros_bf16.json
	[ "$stderr" = 'poros-arm: --gpus: "" is not a GPU index (expected a list such as 0,1,2,3)' ]
	run -2 --separate-stderr poros-arm --gpus 1,1 poros_bf16.json
	[ "$stderr" = "poros-arm: --gpus: GPU 1 is listed twice" ]
	run -2 --separate-stderr poros-arm --gpus= poros_bf16.json
	[ "$stderr" = 'poros-arm: --gpus: "" is not a GPU index (expected a list such as 0,1,2,3)' ]
	[ ! -e out ]
	[ ! -e "$FAKE_LOG" ]
}

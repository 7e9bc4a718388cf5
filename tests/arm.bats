#!/usr/bin/env bats
# poros-arm: one cell in, one RunArtifact out, whatever the child does.
# The children are fakes (tests/fixtures/arm/fake-train) picked with
# POROS_TRAIN / POROS_PYTHON; see man/poros-arm.1 and man/poros-artifact.5.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/arm"
	FAKE="$FIX/fake-train"
	export POROS_TRAIN="$FAKE"
	unset FAKE_MODE FAKE_ARGV FAKE_PIDS FAKE_ENV POROS_PYTHON POROS_ARMS_DIR
	cell poros > poros.json
}

# The fixture cell with another method (and precision, output_dir), on stdout.
cell() {
	local method=$1 precision=${2:-bf16} outdir=${3:-out}
	jq -c --arg m "$method" --arg p "$precision" --arg o "$outdir" \
		'.method = $m | .precision = $p | .output_dir = $o | .cell_id = "\($m)_tiny_llama_\($p)"' "$FIX/cell.json"
}

# The artifact is whole and well-typed, and the file holds the same line.
assert_artifact() {
	local file=$1
	[ -f "$file" ] || { echo "no artifact $file"; return 1; }
	jq -e -f "$FIX/artifact.jq" "$file" > /dev/null || { echo "incomplete artifact:"; cat "$file"; return 1; }
}

# True once a process is gone (a zombie counts: nothing runs).
gone() {
	local state
	state=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
	[[ "$state" == Z* ]]
}

@test "--version and --help print to stdout and exit 0" {
	run -0 --separate-stderr poros-arm --version
	assert_output "poros-arm 0.1.0"
	run -0 --separate-stderr poros-arm --help
	assert_output --partial "usage: poros-arm [-v] [-o DIR] [--timeout SECONDS]"
	[ -z "$stderr" ]
}

@test "a bad option or a bad number is a usage error (exit 2)" {
	run -2 --separate-stderr poros-arm --frobnicate poros.json
	[ -z "$output" ]
	[[ "$stderr" == *"usage: poros-arm"* ]]
	run -2 --separate-stderr poros-arm --timeout soon poros.json
	[ "$stderr" = "poros-arm: --timeout: not a number: soon" ]
	run -2 --separate-stderr poros-arm --log-max 100 poros.json
	[ "$stderr" = "poros-arm: --log-max: too small: 100 (at least 4096 bytes)" ]
	[ ! -e out ]
}

@test "a cell file becomes one artifact, on stdout and in OUTDIR/<method>_<arch>_<precision>.json" {
	export FAKE_ARGV="$PWD/argv"
	run -0 --separate-stderr poros-arm poros.json
	[ "${#lines[@]}" -eq 1 ]
	assert_artifact out/poros_tiny_llama_bf16.json
	[ "$output" = "$(cat out/poros_tiny_llama_bf16.json)" ]
	jq -e '.status == "ok" and .error == null' <<< "$output"
	# the child's summary fills the metrics and the child's half of env
	# timing from the summary's step_s (tokens_per_s: tokens_per_step 64 / the median)
	jq -e '(.metrics | del(.s_per_step_mad, .process_peak_rss_mb)) == {"vram_plan_mb":1234.5,"host_weights_mb":512,"host_checkpoints_mb":64,"vram_peak_mb":1234.5,"vram_avg_mb":1000.25,"s_per_step":0.25,
	       "s_per_step_min":0.2,"s_per_step_max":0.3,"tokens_per_s":256,"steps_measured":3,"warmup_steps":1,
	       "loss_first":6.93,"loss_last":6.5,"s_per_step_spread":0,"passes_agree":true,
	       "passes":[{"step_s":[0.2,0.25,0.3],"median_s":0.25}]}
	       and (.metrics.s_per_step_mad - 0.05 | fabs) < 1e-12' <<< "$output"
	# the child's maximum RSS, as wait4 reports it: a bash script's few MiB
	jq -e '.metrics.process_peak_rss_mb > 0.5 and .metrics.process_peak_rss_mb < 1024' <<< "$output"
	jq -e '.env.backend == "cpu" and .env.device == .env.cpu' <<< "$output"
	jq -e '.env.gpu_name == "Fake GPU" and .env.gpu_mem_mb == 24576 and .env.driver == "999.1"
	       and .env.weights == "synthetic" and .env.torch == null' <<< "$output"
	jq -e '.parity == {"loss_max_abs_delta":null,"adapter_max_abs_delta":null,"bitwise_exact":null}' <<< "$output"
	# exactly this argv, no shell
	jq -e --arg fake "$FAKE" '.argv == [$fake, "--cell", "poros.json", "--mode", "blockwise",
	       "--out", "out/runs/poros_tiny_llama_bf16"]' <<< "$output"
	diff <(jq -r '.argv[]' <<< "$output") argv
	# stderr kept in the log; the child's own stdout chatter is not ours
	grep -qx 'step 1 loss 6.93' out/logs/poros_tiny_llama_bf16.log
	[[ "$output" != *"chatter"* ]]
	[ -d out/runs/poros_tiny_llama_bf16 ]
	[[ "$stderr" == "[1/1] poros tiny_llama bf16 ... ok "*" s" ]]
}

@test "resident runs poros-train in resident mode" {
	cell resident > r.json
	run -0 --separate-stderr poros-arm r.json
	jq -e '.status == "ok" and .argv[4] == "resident" and .cell.method == "resident"' <<< "$output"
	assert_artifact out/resident_tiny_llama_bf16.json
}

@test "cell files from xargs run in order, numbered [i/n] on stderr" {
	cell resident > r.json
	run -0 --separate-stderr sh -c 'printf "%s\n" poros.json r.json | xargs poros-arm'
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .cell_id <<< "${lines[0]}")" = poros_tiny_llama_bf16 ]
	[ "$(jq -r .cell_id <<< "${lines[1]}")" = resident_tiny_llama_bf16 ]
	[[ "$stderr" == *"[1/2] poros tiny_llama bf16 ... ok"* ]]
	[[ "$stderr" == *"[2/2] resident tiny_llama bf16 ... ok"* ]]
	assert_artifact out/poros_tiny_llama_bf16.json
	assert_artifact out/resident_tiny_llama_bf16.json
}

@test "cells as JSONL on stdin are written under OUTDIR/cells/ and handed to the child" {
	export FAKE_ARGV="$PWD/argv"
	{ cell poros; echo; cell resident nf4; } > cells.jsonl
	run -0 --separate-stderr poros-arm < cells.jsonl
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .status <<< "${lines[1]}")" = ok ]
	assert_artifact out/resident_tiny_llama_nf4.json
	jq -e '.argv[2] == "out/cells/resident_tiny_llama_nf4.json"' out/resident_tiny_llama_nf4.json
	[ "$(sed -n 3p argv)" = out/cells/resident_tiny_llama_nf4.json ]
	jq -e '.method == "resident" and .precision == "nf4"' out/cells/resident_tiny_llama_nf4.json
	[[ "$stderr" == *"[2] resident tiny_llama nf4 ... ok"* ]]
	# "-" reads stdin too
	run -0 --separate-stderr poros-arm - < cells.jsonl
	[ "${#lines[@]}" -eq 2 ]
}

@test "a jq filter in the pipeline picks the cells that run" {
	{ cell poros; cell resident; cell poros nf4; } > cells.jsonl
	run -0 --separate-stderr sh -c "jq -c 'select(.method == \"poros\")' cells.jsonl | poros-arm"
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .cell_id <<< "${lines[1]}")" = poros_tiny_llama_nf4 ]
	[ ! -e out/resident_tiny_llama_bf16.json ]
}

@test "cells from poros-expand run through xargs and through --jsonl" {
	[ -x "$POROS_ROOT/bin/poros-expand" ] || skip "poros-expand is not built"
	cat > s.yaml <<-'EOF'
	spec_id: arm_pipe
	models:
	  - model_id: poros/tiny-llama
	methods: [poros, resident]
	precisions: [bf16]
	training:
	  steps: 3
	  seq_len: 16
	reporting:
	  output_dir: out/pipe
	EOF
	run -0 --separate-stderr sh -c 'poros-expand s.yaml | xargs poros-arm'
	[ "${#lines[@]}" -eq 2 ]
	assert_artifact out/pipe/poros_tiny_llama_bf16.json
	assert_artifact out/pipe/resident_tiny_llama_bf16.json
	rm -r out
	run -0 --separate-stderr sh -c 'poros-expand --jsonl s.yaml | poros-arm'
	[ "${#lines[@]}" -eq 2 ]
	assert_artifact out/pipe/resident_tiny_llama_bf16.json
}

@test "a child killed by SIGSEGV is an error naming the signal, with the log's last lines" {
	run -0 --separate-stderr env FAKE_MODE=crash poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	jq -e '.status == "error"' <<< "$output"
	[[ "$(jq -r .error <<< "$output")" == "killed by signal 11 (SIGSEGV); no summary on stdout (it printed nothing); the last lines of logs/poros_tiny_llama_bf16.log:"* ]]
	[[ "$(jq -r .error <<< "$output")" == *"fake-train: about to dereference NULL" ]]
	jq -e '.metrics.vram_peak_mb == null and .env.gpu_name == null and .env.hostname != null' <<< "$output"
}

@test "a child that hangs past --timeout is stopped with its whole process group" {
	export FAKE_PIDS="$PWD/pids"
	SECONDS=0
	run -0 --separate-stderr env FAKE_MODE=hang poros-arm --timeout 1 poros.json
	[ "$SECONDS" -lt 8 ]
	assert_artifact out/poros_tiny_llama_bf16.json
	jq -e '.status == "error" and (.error | startswith("timed out after 1 s: its process group was sent SIGTERM, then SIGKILL"))' <<< "$output"
	jq -e '.wall_s >= 1 and .wall_s < 8' <<< "$output"
	read -r child grandchild < pids
	gone "$child"
	gone "$grandchild"
	grep -q '^\[poros-arm: timed out after ' out/logs/poros_tiny_llama_bf16.log
}

@test "a child that ignores SIGTERM is killed after the grace period" {
	export FAKE_PIDS="$PWD/pids"
	SECONDS=0
	run -0 --separate-stderr env FAKE_MODE=hang_stubborn poros-arm --timeout 1 --kill-grace 1 poros.json
	[ "$SECONDS" -lt 8 ]
	jq -e '.status == "error" and (.error | startswith("timed out"))' <<< "$output"
	jq -e '.wall_s >= 2' <<< "$output"
	read -r child grandchild < pids
	gone "$child"
	gone "$grandchild"
}

@test "the cell's training.timeout_s is the default timeout" {
	jq -c '.training.timeout_s = 1' "$FIX/cell.json" > short.json
	SECONDS=0
	run -0 --separate-stderr env FAKE_MODE=hang poros-arm short.json
	[ "$SECONDS" -lt 8 ]
	jq -e '.error | startswith("timed out after 1 s")' <<< "$output"
}

@test "what a child leaves running when it exits is ended too" {
	export FAKE_PIDS="$PWD/pids"
	SECONDS=0
	run -0 --separate-stderr env FAKE_MODE=straggler poros-arm poros.json
	[ "$SECONDS" -lt 8 ]
	jq -e '.status == "ok"' <<< "$output"
	read -r child straggler < pids
	gone "$straggler"
}

@test "garbage on stdout is a malformed summary" {
	run -0 --separate-stderr env FAKE_MODE=garbage poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	[[ "$(jq -r .error <<< "$output")" == 'exit status 0; malformed summary (not valid JSON): "{"schema": "poros.summary/1", "status": "; the last lines of '* ]]
	run -0 --separate-stderr env FAKE_MODE=wrong_schema poros-arm poros.json
	[[ "$(jq -r .error <<< "$output")" == 'exit status 0; malformed summary: schema: "poros.summary/9" (expected "poros.summary/1");'* ]]
	jq -e '.status == "error"' <<< "$output"
}

@test "a child that exits 0 without a summary is an error" {
	run -0 --separate-stderr env FAKE_MODE=nosummary poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	[[ "$(jq -r .error <<< "$output")" == "exit status 0; no summary on stdout (it printed nothing); the last lines of logs/poros_tiny_llama_bf16.log:"*"forgot the summary" ]]
}

@test "a non-zero exit is an error with the last lines of the log" {
	run -0 --separate-stderr env FAKE_MODE=fail poros-arm poros.json
	jq -e '.status == "error"' <<< "$output"
	[[ "$(jq -r .error <<< "$output")" == "exit status 3; no summary"*$'\n  fake-train: cannot open the checkpoint\n  fake-train: giving up' ]]
	# even after a summary that says ok
	run -0 --separate-stderr env FAKE_MODE=ok_exit1 poros-arm poros.json
	jq -e '.status == "error" and (.error | startswith("exit status 1 after a summary with status ok"))' <<< "$output"
	jq -e '.metrics.vram_peak_mb == 1234.5' <<< "$output"
}

@test "oom comes from the child's summary or from an out-of-memory message in its log" {
	run -0 --separate-stderr env FAKE_MODE=oom poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	jq -e '.status == "oom" and .error == "out of device memory: layer 3 activations (2.0 GiB) over the 24 GiB budget"' <<< "$output"
	jq -e '.metrics.vram_peak_mb == 1234.5' <<< "$output"
	run -0 --separate-stderr env FAKE_MODE=oom_log poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	jq -e '.status == "oom"' <<< "$output"
	[[ "$(jq -r .error <<< "$output")" == "out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."* ]]
	[[ "$stderr" == *"... oom "* ]]
}

@test "a child's skipped summary is a skipped artifact with its reason" {
	run -0 --separate-stderr env FAKE_MODE=skipped poros-arm poros.json
	jq -e '.status == "skipped" and .error == "no CUDA device visible to torch"' <<< "$output"
}

@test "a flood of stderr is capped: the log keeps its head and its tail" {
	run -0 --separate-stderr env FAKE_MODE=flood FAKE_FLOOD_BYTES=300000 poros-arm --log-max 64K poros.json
	jq -e '.status == "ok"' <<< "$output"
	log=out/logs/poros_tiny_llama_bf16.log
	size=$(stat -c %s "$log")
	[ "$size" -le $((65536 + 200)) ]
	[ "$size" -ge 60000 ]
	head -1 "$log" | grep -q '^fake-train: cell poros.json mode blockwise'
	tail -c 100 "$log" | grep -q 'the very last line$'
	grep -Eq '^\[poros-arm: [0-9]+ bytes dropped here: the log is capped at 65536 bytes' "$log"
	[[ "$stderr" == *"(log capped: "*" bytes of stderr dropped)"* ]]
}

@test "the default log cap is 16 MiB" {
	run -0 --separate-stderr env FAKE_MODE=flood FAKE_FLOOD_BYTES=20000000 poros-arm poros.json
	jq -e '.status == "ok"' <<< "$output"
	size=$(stat -c %s out/logs/poros_tiny_llama_bf16.log)
	[ "$size" -le $((16777216 + 200)) ]
	[ "$size" -ge $((16777216 - 200)) ]
}

@test "when the first of two cells fails the second still runs" {
	cell resident > r.json
	export FAKE_MODE_poros_tiny_llama_bf16=crash
	run -0 --separate-stderr poros-arm poros.json r.json
	[ "${#lines[@]}" -eq 2 ]
	jq -e '.status == "error"' <<< "${lines[0]}"
	jq -e '.status == "ok"' <<< "${lines[1]}"
	assert_artifact out/poros_tiny_llama_bf16.json
	assert_artifact out/resident_tiny_llama_bf16.json
}

@test "the child's stdin is not the cell stream" {
	{ cell poros; cell resident; } > cells.jsonl
	export FAKE_MODE_poros_tiny_llama_bf16=readstdin
	run -0 --separate-stderr poros-arm < cells.jsonl
	[ "${#lines[@]}" -eq 2 ]
	grep -q 'read 0 bytes on stdin' out/logs/poros_tiny_llama_bf16.log
}

@test "a cell file that is not valid JSON is a clear error with its path (exit 2)" {
	printf '{"schema": "poros.cell/1",\n  "method": }\n' > broken.json
	run -2 --separate-stderr poros-arm broken.json poros.json
	[ "${lines[0]}" = "$(cat out/poros_tiny_llama_bf16.json)" ]
	[[ "$stderr" == "poros-arm: broken.json:2:13: not valid JSON"* ]]
	run -2 --separate-stderr poros-arm missing.json
	[ -z "$output" ]
	[ "$stderr" = "poros-arm: missing.json: No such file or directory" ]
}

@test "a cell that breaks the cell schema is named by its field (exit 2)" {
	jq '.training.steps = 0' "$FIX/cell.json" > zero.json
	run -2 --separate-stderr poros-arm zero.json
	[ -z "$output" ]
	[[ "$stderr" == "poros-arm: zero.json: training.steps"* ]]
	printf '%s\n' "$(cell poros)" 'poros.json' > mixed.jsonl
	run -2 --separate-stderr poros-arm < mixed.jsonl
	[ "${#lines[@]}" -eq 1 ]
	[[ "$stderr" == *"poros-arm: <stdin>:2: not valid JSON at column 1 (cell file paths go on the command line: poros-expand SPEC | xargs poros-arm)"* ]]
	[ ! -e out/cells/poros_tiny_llama_bf16.json.tmp ]
}

@test "an output directory that cannot be created is exit 1 with a clear message" {
	touch afile
	cell poros bf16 afile/out > blocked.json
	run -1 --separate-stderr poros-arm blocked.json
	[ -z "$output" ]
	[ "$stderr" = "poros-arm: afile/out: cannot create directory: Not a directory" ]
}

@test "an artifact that cannot be written is exit 1, and nothing reaches stdout" {
	mkdir -p out/poros_tiny_llama_bf16.json
	run -1 --separate-stderr poros-arm poros.json
	[ -z "$output" ]
	[[ "$stderr" == *"poros-arm: out/poros_tiny_llama_bf16.json: cannot write the artifact: Is a directory" ]]
	[ -z "$(ls out | grep tmp)" ]
}

@test "-o overrides the cell's output_dir, and the artifact records the cell as run" {
	export FAKE_ARGV="$PWD/argv"
	run -0 --separate-stderr poros-arm -o elsewhere poros.json
	assert_artifact elsewhere/poros_tiny_llama_bf16.json
	jq -e '.cell.output_dir == "elsewhere" and .argv[2] == "elsewhere/cells/poros_tiny_llama_bf16.json"' <<< "$output"
	jq -e '.output_dir == "elsewhere"' elsewhere/cells/poros_tiny_llama_bf16.json
	[ ! -e out ]
	run -2 --separate-stderr poros-arm -o ../up poros.json
	[[ "$stderr" == 'poros-arm: -o: ../up: has a ".." component'* ]]
}

@test "stdout carries only artifact lines, whatever the children print" {
	cell resident > r.json
	export FAKE_MODE_resident_tiny_llama_bf16=garbage
	run -0 --separate-stderr poros-arm poros.json r.json
	[ "${#lines[@]}" -eq 2 ]
	for l in "${lines[@]}"; do
		jq -e -f "$FIX/artifact.jq" <<< "$l"
	done
	[[ "$stderr" == *"[1/2]"*"[2/2]"* ]]
}

@test "no shell sees a cell value: metacharacters stay literal" {
	cell poros bf16 'out/$(touch pwned);x' > meta.json
	run -0 --separate-stderr poros-arm meta.json
	[ ! -e pwned ]
	[ -d 'out/$(touch pwned);x/runs/poros_tiny_llama_bf16' ]
	assert_artifact 'out/$(touch pwned);x/poros_tiny_llama_bf16.json'
}

@test "SIGTERM to poros-arm ends the running arm's process group and records it" {
	export FAKE_PIDS="$PWD/pids" FAKE_MODE=hang
	poros-arm poros.json > art.json 2> err.txt &
	pid=$!
	wait_until 50 0.1 test -s pids || true
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ]
	grep -q '^poros-arm: interrupted by SIGTERM$' err.txt
	jq -e '.status == "error" and (.error | startswith("interrupted: poros-arm got SIGTERM"))' art.json
	read -r child grandchild < pids
	gone "$child"
	gone "$grandchild"
}

@test "poros-train missing is an error artifact saying where it was looked for" {
	unset POROS_TRAIN
	mkdir lonely
	cp "$POROS_ROOT/bin/poros-arm" lonely/
	run -0 --separate-stderr env PATH=/usr/bin:/bin lonely/poros-arm poros.json
	assert_artifact out/poros_tiny_llama_bf16.json
	jq -e '.status == "error" and .error == "poros-train not found beside poros-arm nor on PATH (set POROS_TRAIN)"
	       and .argv == null and .log == null' <<< "$output"
	run -0 --separate-stderr env POROS_TRAIN=/nonexistent/poros-train poros-arm poros.json
	jq -e '.error == "POROS_TRAIN=/nonexistent/poros-train: No such file or directory"' <<< "$output"
}

@test "the python arms get the arm script, the cell, the run dir and the offline switches" {
	export POROS_PYTHON="$FAKE" FAKE_ARGV="$PWD/argv" FAKE_ENV="$PWD/env"
	cell peft > p.json
	run -0 --separate-stderr env HF_HUB_OFFLINE=0 poros-arm p.json
	jq -e '.status == "ok"' <<< "$output"
	arms=$(cd "$POROS_ROOT/share/poros/arms" && pwd -P)
	jq -e --arg py "$FAKE" --arg arm "$arms/peft_arm.py" \
		'.argv == [$py, $arm, "--cell", "p.json", "--out", "out/runs/peft_tiny_llama_bf16"]' <<< "$output"
	[ "$(cat env)" = "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" ]
	POROS_ARMS_DIR=/nowhere run -0 --separate-stderr poros-arm p.json
	jq -e '.status == "error" and (.error | startswith("baseline arm /nowhere/peft_arm.py: No such file or directory"))' <<< "$output"
}

@test "the python arms are found as every tool finds shipped files: POROS_HOME/arms first" {
	export POROS_PYTHON="$FAKE"
	cell peft > p.json
	mkdir -p home/arms
	: > home/arms/peft_arm.py
	run -0 --separate-stderr env POROS_HOME="$PWD/home" poros-arm p.json
	jq -e --arg arm "$(pwd -P)/home/arms/peft_arm.py" '.argv[1] == $arm' <<< "$output"
	# a POROS_HOME without arms/ (a checkout's root, for configs/) falls through to share/poros/arms
	run -0 --separate-stderr env POROS_HOME="$POROS_ROOT" poros-arm p.json
	jq -e --arg arm "$(cd "$POROS_ROOT/share/poros/arms" && pwd -P)/peft_arm.py" '.argv[1] == $arm' <<< "$output"
}

@test "without python3 the python arms are skipped, saying so" {
	cell unsloth > u.json
	run -0 --separate-stderr env POROS_PYTHON=/nonexistent/python3 poros-arm u.json
	assert_artifact out/unsloth_tiny_llama_bf16.json
	jq -e '.status == "skipped" and .error == "POROS_PYTHON=/nonexistent/python3: No such file or directory"' <<< "$output"
	mkdir lonely
	cp "$POROS_ROOT/bin/poros-arm" lonely/
	run -0 --separate-stderr env PATH="$PWD/lonely" "$PWD/lonely/poros-arm" u.json
	jq -e '.status == "skipped" and .error == "python3 not found on PATH (set POROS_PYTHON)" and .argv == null' <<< "$output"
}

@test "the python arms skip here with the right reason (no torch)" {
	python3 -c 'import torch' 2>/dev/null && skip "torch is installed here"
	for m in peft unsloth accelerate_offload; do
		cell "$m" > "$m.json"
	done
	cell peft nf4 > peft_nf4.json
	run -0 --separate-stderr poros-arm peft.json unsloth.json accelerate_offload.json peft_nf4.json
	[ "${#lines[@]}" -eq 4 ]
	for l in "${lines[@]}"; do
		jq -e -f "$FIX/artifact.jq" <<< "$l"
		jq -e '.status == "skipped" and (.error | startswith("torch is not installed (python "))' <<< "$l"
		jq -e '.env.python | test("^3\\.")' <<< "$l"
	done
	[[ "$stderr" == *"[3/4] accelerate_offload tiny_llama bf16 ... skipped"* ]]
	grep -q 'skipped: torch is not installed' out/logs/peft_tiny_llama_bf16.log
}

@test "a python arm given a cell of another method refuses it (exit 2, error summary)" {
	run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/peft_arm.py" --cell poros.json --out run
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.schema == "poros.summary/1" and .status == "error" and .method == "peft"
	       and .error == "poros.json: method is \"poros\", this arm runs \"peft\""' <<< "$output"
	run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/unsloth_arm.py" --cell
	jq -e '.status == "error" and (.error | startswith("usage: unsloth_arm.py"))' <<< "$output"
}

@test "a cell's training.gradient_checkpointing reaches the artifact; a cell without it reads as false" {
	jq -c '.training.gradient_checkpointing = true' "$FIX/cell.json" > gc.json
	run -0 --separate-stderr poros-arm -o out/gc gc.json
	jq -e '.status == "ok" and .cell.training.gradient_checkpointing == true' <<< "$output"
	jq -e '.cell.training | keys_unsorted | index("gradient_checkpointing") == 12' <<< "$output"
	run -0 --separate-stderr poros-arm -o out/old poros.json
	jq -e '.status == "ok" and .cell.training.gradient_checkpointing == false' <<< "$output"
	jq -c '.training.gradient_checkpointing = "yes"' "$FIX/cell.json" > bad.json
	run -2 --separate-stderr poros-arm -o out/bad bad.json
	[ -z "$output" ]
	[[ "$stderr" == *"training.gradient_checkpointing: expected true or false, got a string"* ]]
}

@test "a python arm refuses a gradient_checkpointing that is not a boolean (exit 2, error summary)" {
	cell peft | jq -c '.training.gradient_checkpointing = "yes"' > p.json
	run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/peft_arm.py" --cell p.json --out run
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.status == "error" and .error == "p.json: training.gradient_checkpointing: expected true or false, got '"'yes'"'"' <<< "$output"
}

@test "a python arm's model id resolves as poros-train's: a checkpoint loads its own weights or fails naming the file" {
	mkfifo fifo-weights
	timeout 5 python3 - "$POROS_ROOT/share/poros/arms" <<-'PY'
	import json, os, sys
	sys.path.insert(0, sys.argv[1])
	import armlib

	def ckpt(d, **files):
	    os.makedirs(d)
	    with open(os.path.join(d, "config.json"), "w") as f:
	        f.write('{"model_type": "llama"}')
	    for name, body in files.items():
	        with open(os.path.join(d, name.replace("__", ".")), "w") as f:
	            f.write(body)

	def refused(model_id):
	    try:
	        armlib.resolve_model(model_id)
	    except armlib.BadInput as e:
	        return str(e)
	    raise AssertionError(f"{model_id}: not refused")

	# a local directory: its safetensors, one file or the index's shards
	ckpt("one", model__safetensors="x")
	s = armlib.resolve_model("one")
	assert (s.weights, s.checkpoint_dir, s.config_path, s.weight_files) == \
	    ("real", "one", "one/config.json", ["one/model.safetensors"]), vars(s)
	ckpt("sharded", **{"model__safetensors__index__json": json.dumps({"weight_map": {
	    "a": "model-1.safetensors", "b": "model-2.safetensors", "c": "model-1.safetensors"}}),
	    "model-1__safetensors": "x", "model-2__safetensors": "y"})
	assert armlib.resolve_model("sharded").weight_files == ["sharded/model-1.safetensors", "sharded/model-2.safetensors"]

	# what is there decides: never synthetic weights in place of a broken file
	ckpt("empty")
	assert refused("empty") == "empty: no model.safetensors or model.safetensors.index.json " \
	    "(a checkpoint directory must hold its weights)"
	ckpt("pt", pytorch_model__bin="x")
	assert "only pytorch_model.bin weights" in refused("pt")
	ckpt("dangling")
	os.symlink("blobs/gone", "dangling/model.safetensors")
	assert refused("dangling") == "dangling/model.safetensors: a dangling symbolic link (an interrupted download?)"
	ckpt("fifo")
	os.symlink("../fifo-weights", "fifo/model.safetensors")  # a FIFO: refused, never waited on
	assert refused("fifo") == "fifo/model.safetensors: not a regular file"
	ckpt("adir")
	os.mkdir("adir/model.safetensors")
	assert refused("adir") == "adir/model.safetensors: not a regular file"
	ckpt("shard", model__safetensors__index__json='{"weight_map": {"a": "model-1.safetensors"}}')
	assert refused("shard") == "shard/model-1.safetensors: No such file or directory"
	ckpt("escape", model__safetensors__index__json='{"weight_map": {"a": "../one/model.safetensors"}}')
	assert refused("escape") == 'escape/model.safetensors.index.json: weight_map "a": not a file name ' \
	    'inside the checkpoint directory'
	ckpt("noindex", model__safetensors__index__json='{"weight_map": {}}')
	assert "no \"weight_map\" object" in refused("noindex")
	os.makedirs("badcfg")
	os.symlink("gone.json", "badcfg/config.json")
	assert refused("badcfg") == "badcfg/config.json: a dangling symbolic link (an interrupted download?)"

	# the HF cache: refs/main's snapshot, whose weights load or the run stops,
	# even where Poros ships a shape of that name (tiny_llama.json)
	hub = os.path.join(os.environ["HF_HOME"], "hub", "models--poros--tiny-llama")
	ckpt(os.path.join(hub, "snapshots", "abc"))
	ckpt(os.path.join(hub, "snapshots", "def"), model__safetensors="x")
	os.makedirs(os.path.join(hub, "refs"))
	with open(os.path.join(hub, "refs", "main"), "w") as f:
	    f.write("abc\n")
	assert refused("poros/tiny-llama") == os.path.join(hub, "snapshots", "abc") + ": no model.safetensors or " \
	    "model.safetensors.index.json (a checkpoint directory must hold its weights)"
	with open(os.path.join(hub, "refs", "main"), "w") as f:
	    f.write("def\n")
	s = armlib.resolve_model("poros/tiny-llama")
	assert (s.weights, s.checkpoint_dir) == ("real", os.path.join(hub, "snapshots", "def")), vars(s)

	# no checkpoint anywhere: Poros' shipped shape, synthetic weights
	s = armlib.resolve_model("poros/tiny-qwen2")
	assert s.weights == "synthetic" and s.checkpoint_dir is None and s.weight_files == []
	assert s.config_path.endswith("/configs/models/tiny_qwen2.json"), s.config_path
	assert refused("nobody/no-such-model").startswith("model nobody/no-such-model: no config found (looked in: ")
	print("ok")
	PY
}

@test "a python arm whose checkpoint has no weights stops with exit 2 and an error summary, before torch" {
	mkdir ckpt
	printf '{"model_type": "llama"}' > ckpt/config.json
	cell peft | jq -c --arg m "$PWD/ckpt" '.model.model_id = $m' > p.json
	run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/peft_arm.py" --cell p.json --out run
	[ "${#lines[@]}" -eq 1 ]
	jq -e --arg d "$PWD/ckpt" '.status == "error" and .weights == null and .error == "\($d): no model.safetensors or model.safetensors.index.json (a checkpoint directory must hold its weights)"' <<< "$output"
	[[ "$stderr" == *"peft_arm.py: $PWD/ckpt: no model.safetensors"* ]]
	run -0 --separate-stderr poros-arm p.json
	assert_artifact out/peft_tiny_llama_bf16.json
	jq -e --arg d "$PWD/ckpt" '.status == "error" and (.error | contains("\($d): no model.safetensors"))' <<< "$output"
}

@test "the python arms refuse by name the training fields they do not implement (exit 2, error summary, before torch)" {
	local ev="the baseline arms do not evaluate (eval_loss is poros-train's: methods poros and resident)"
	for m in peft unsloth accelerate_offload; do
		cell "$m" | jq -c '.training.eval_dataset = "eval.jsonl" | .training.eval_every = 2' > eval.json
		cell "$m" | jq -c '.training.eval_every = 2' > every.json
		cell "$m" | jq -c '.training.tokenizer = "tok/tokenizer.json"' > tok.json
		cell "$m" | jq -c '.training.chat_date = "2024-07-26"' > date.json
		cell "$m" | jq -c '.training.train_on = "assistant"' > on.json
		cell "$m" | jq -c '.training.dataset = "data.jsonl"' > data.json
		for c in eval every tok date on data; do
			run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/${m}_arm.py" --cell $c.json --out run
			[ "${#lines[@]}" -eq 1 ]
			jq -e --arg m "$m" '.schema == "poros.summary/1" and .status == "error" and .method == $m
			       and .env.torch == null and .backend == null' <<< "$output"
			case $c in
			eval) want="eval.json: training.eval_dataset: $ev" ;;
			every) want="every.json: training.eval_every: $ev" ;;
			tok) want="tok.json: training.tokenizer: the baseline arms tokenize nothing (they train on the synthetic token streams)" ;;
			date) want="date.json: training.chat_date: the baseline arms render no chat template (they train on the synthetic token streams)" ;;
			on) want='on.json: training.train_on "assistant": the baseline arms train on every token of the synthetic streams (only "all"; "assistant" needs chat records)' ;;
			data) want='data.json: training.dataset "data.jsonl": the baseline arms train on "synthetic" and "synthetic:repeat" only (poros-train'"'"'s synthetic streams)' ;;
			esac
			[ "$(jq -r .error <<< "$output")" = "$want" ]
			[[ "$stderr" == *"${m}_arm.py: $want"* ]]
		done
		# through poros-arm: an error artifact that says why
		run -0 --separate-stderr poros-arm -o "out/$m" eval.json
		assert_artifact "out/$m/${m}_tiny_llama_bf16.json"
		# (-o: poros-arm hands the child the cell as run, under out/$m/cells/)
		jq -e --arg w "${m}_tiny_llama_bf16.json: training.eval_dataset: $ev" '.status == "error"
		       and (.error | endswith($w)) and .cell.training.eval_dataset == "eval.jsonl"' <<< "$output"
	done
	# a key the arms do not know, were a cell to carry one
	cell peft | jq -c '.training.frobnicate = 1' > odd.json
	run -2 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/peft_arm.py" --cell odd.json --out run
	jq -e '.error == "odd.json: training.frobnicate: not implemented by the baseline arms"' <<< "$output"
}

@test "train_on \"all\" is what the python arms do, so they accept it" {
	python3 -c 'import torch' 2>/dev/null && skip "torch is installed here"
	cell peft | jq -c '.training.train_on = "all"' > all.json
	run -0 --separate-stderr python3 "$POROS_ROOT/share/poros/arms/peft_arm.py" --cell all.json --out run
	jq -e '.status == "skipped" and (.error | startswith("torch is not installed"))' <<< "$output"
}

@test "apply_checkpointing turns HF checkpointing on (non-reentrant, input grads) or keeps it off, and says which" {
	run -0 --separate-stderr python3 - "$POROS_ROOT/share/poros/arms" <<-'PY'
	import json, sys
	sys.path.insert(0, sys.argv[1])
	import armlib

	class FakeModel:
	    """Records the transformers calls made on it."""
	    def __init__(self, already_on):
	        self.is_gradient_checkpointing = already_on
	        self.calls = []
	    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
	        self.calls.append(["enable", gradient_checkpointing_kwargs])
	    def enable_input_require_grads(self):
	        self.calls.append(["input_require_grads"])
	    def gradient_checkpointing_disable(self):
	        self.calls.append(["disable"])

	out = []
	for value, already_on in ((True, False), (False, False), (None, False), (False, True)):
	    cell = {"training": {} if value is None else {"gradient_checkpointing": value}}
	    m = FakeModel(already_on)
	    out.append([armlib.apply_checkpointing(m, cell), m.calls])
	print(json.dumps(out, separators=(",", ":")))
	PY
	assert_output '[[true,[["enable",{"use_reentrant":false}],["input_require_grads"]]],[false,[]],[false,[]],[false,[["disable"]]]]'
	[ "$(grep -c 'gradient checkpointing: on (training.gradient_checkpointing true; transformers, use_reentrant=False)' <<< "$stderr")" -eq 1 ]
	[ "$(grep -c 'gradient checkpointing: off (training.gradient_checkpointing false; transformers)' <<< "$stderr")" -eq 3 ]
}

@test "each python arm applies gradient_checkpointing to the base model before LoRA wraps it" {
	run -0 --separate-stderr python3 - "$POROS_ROOT/share/poros/arms" <<-'PY'
	import importlib.util, json, sys, types
	arms = sys.argv[1]
	sys.path.insert(0, arms)
	import armlib

	trace = []

	class FakeModel:
	    is_gradient_checkpointing = False
	    def __init__(self):
	        self.config = types.SimpleNamespace(use_cache=True)
	    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
	        trace.append("enable")
	    def enable_input_require_grads(self):
	        trace.append("input_require_grads")

	def get_peft_model(model, config):
	    trace.append("get_peft_model")
	    return model

	# Stand-ins for the libraries and the GPU work around the order under test.
	sys.modules["peft"] = types.SimpleNamespace(get_peft_model=get_peft_model, LoraConfig=dict)
	class FastLanguageModel:
	    @staticmethod
	    def from_pretrained(**kw):
	        return FakeModel(), None
	    @staticmethod
	    def get_peft_model(model, **kw):
	        trace.append("unsloth get_peft_model use_gradient_checkpointing=%r" % kw["use_gradient_checkpointing"])
	        return model
	sys.modules["unsloth"] = types.SimpleNamespace(FastLanguageModel=FastLanguageModel)
	armlib.train = lambda torch, model, *a, **kw: trace.append("train")
	armlib.save_adapter = lambda *a: None
	torch = types.SimpleNamespace(bfloat16="bf16")
	source = armlib.ModelSource("poros/tiny-llama", "config.json", "ckpt")

	def load(name):
	    spec = importlib.util.spec_from_file_location(name, f"{arms}/{name}.py")
	    arm = importlib.util.module_from_spec(spec)
	    spec.loader.exec_module(arm)
	    arm.load_model = lambda *a: (FakeModel(), None)
	    arm.lora_to_gpu = lambda *a: 0
	    return arm

	result = {}
	for name in ("peft_arm", "accelerate_offload_arm", "unsloth_arm"):
	    arm = load(name)
	    for value in (True, False):
	        del trace[:]
	        cell = {"precision": "bf16", "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj"]},
	                "training": {"seq_len": 32, "seed": 1, "gradient_checkpointing": value}}
	        arm.run(torch, cell, source, "run", {})
	        result[f"{name} {value}"] = list(trace)
	print(json.dumps(result, indent=0))
	PY
	assert_output '{
"peft_arm True": [
"enable",
"input_require_grads",
"get_peft_model",
"train"
],
"peft_arm False": [
"get_peft_model",
"train"
],
"accelerate_offload_arm True": [
"enable",
"input_require_grads",
"get_peft_model",
"train"
],
"accelerate_offload_arm False": [
"get_peft_model",
"train"
],
"unsloth_arm True": [
"unsloth get_peft_model use_gradient_checkpointing=True",
"train"
],
"unsloth_arm False": [
"unsloth get_peft_model use_gradient_checkpointing=False",
"train"
]
}'
	[ "$(grep -c 'gradient checkpointing: on (training.gradient_checkpointing true; Unsloth use_gradient_checkpointing=True)' <<< "$stderr")" -eq 1 ]
	[ "$(grep -c 'gradient checkpointing: off (training.gradient_checkpointing false; Unsloth use_gradient_checkpointing=False)' <<< "$stderr")" -eq 1 ]
}

@test "-v copies the child's stderr to ours as well as to the log" {
	run -0 --separate-stderr poros-arm -v poros.json
	[[ "$stderr" == *"[1/1] poros tiny_llama bf16 ..."$'\n'*"step 1 loss 6.93"*"[1/1] poros tiny_llama bf16 ... ok"* ]]
	grep -qx 'step 1 loss 6.93' out/logs/poros_tiny_llama_bf16.log
	[[ "$output" != *"step 1"* ]]
}

@test "artifacts of every status validate against share/poros/schema/artifact.schema.json" {
	python3 -c 'import jsonschema' 2>/dev/null || skip "python3 has no jsonschema"
	for mode in ok crash oom skipped; do
		FAKE_MODE=$mode poros-arm -o "out/$mode" poros.json > /dev/null 2>&1
	done
	cell peft > p.json
	POROS_PYTHON=/nonexistent poros-arm p.json > /dev/null 2>&1
	python3 - "$POROS_ROOT/share/poros/schema" out/*/poros_tiny_llama_bf16.json out/peft_tiny_llama_bf16.json <<-'PY'
	import json, sys, jsonschema
	V = jsonschema.Draft202012Validator
	art = json.load(open(sys.argv[1] + "/artifact.schema.json"))
	cell = json.load(open(sys.argv[1] + "/cell.schema.json"))
	V.check_schema(art)
	statuses = set()
	for path in sys.argv[2:]:
	    a = json.load(open(path))
	    V(art).validate(a)
	    V(cell).validate(a["cell"])
	    statuses.add(a["status"])
	assert statuses == {"ok", "error", "oom", "skipped"}, statuses
	PY
}

@test "a reader that goes away stops the run after the artifact on disk" {
	cell resident > r.json
	run -2 --separate-stderr bash -c 'set -o pipefail; FAKE_MODE=slow poros-arm poros.json r.json | true'
	[[ "$stderr" == *"poros-arm: writing output failed: Broken pipe" ]]
	assert_artifact out/poros_tiny_llama_bf16.json
	[ ! -e out/resident_tiny_llama_bf16.json ]
}

@test "a symlink planted as logs/ or runs/ in the output directory is refused, nothing written through it" {
	mkdir -p out outside
	ln -s ../outside out/runs
	run -1 --separate-stderr poros-arm poros.json
	assert_equal "$output" ""
	[[ "$stderr" == *"out/runs: is a symbolic link; refusing to write through it"* ]]
	[ -z "$(ls -A outside)" ]
	rm -r out/runs out/logs
	ln -s ../outside out/logs
	run -1 --separate-stderr poros-arm poros.json
	[[ "$stderr" == *"out/logs: is a symbolic link"* ]]
	[ -z "$(ls -A outside)" ]
}

@test "a poros-arm killed with SIGKILL takes its running child down with it" {
	export FAKE_PIDS="$PWD/pids"
	FAKE_MODE=hang poros-arm --timeout 60 poros.json > /dev/null 2>&1 &
	local arm=$! i
	for i in $(seq 50); do [ -s pids ] && break; sleep 0.1; done
	read -r child grandchild < pids
	kill -KILL "$arm"
	wait "$arm" || true
	for i in $(seq 50); do gone "$child" && break; sleep 0.1; done
	gone "$child"
	kill -KILL "$grandchild" 2>/dev/null || true
}

@test "the python arms train on poros-train's synthetic stream, token for token" {
	# the same golden values as tests/unit/test_train_data.c checks in C
	run -0 --separate-stderr python3 - "$POROS_ROOT/share/poros/arms" <<-'PY'
	import json, sys
	sys.path.insert(0, sys.argv[1])
	import armlib
	seq0 = [215, 102, 105, 136, 140, 37, 135, 133]
	seq1 = [65, 116, 9, 248, 250, 197, 102, 92]
	assert armlib.synthetic_rows(42, 256, 8, 0, 2) == [seq0, seq1]
	cell = {"training": {"seed": 42, "seq_len": 8, "batch_size": 2, "gradient_accumulation_steps": 3}}
	steps = [armlib.step_rows(cell, 256, s) for s in (1, 2)]
	# micro-batch-major, rows consecutive: step 1 takes sequences 0-5, step 2 6-11
	assert steps[0][0] == [seq0, seq1]
	assert [r for m in steps[0] for r in m] == armlib.synthetic_rows(42, 256, 8, 0, 6)
	assert [r for m in steps[1] for r in m] == armlib.synthetic_rows(42, 256, 8, 6, 6)
	assert all(0 <= t < 256 for m in steps[1] for r in m for t in r)
	assert armlib.synthetic_rows(43, 256, 8, 0, 1) != [seq0]
	print(json.dumps([len(steps[0]), len(steps[0][0]), len(steps[0][0][0])]))
	PY
	assert_output '[3, 2, 8]'
}

@test "poros-arm killed with its parent: the parent's death ends the child and the artifact is still written" {
	export FAKE_PIDS="$PWD/pids"
	# bash stays poros-arm's parent (the ': ' keeps it from exec'ing poros-arm)
	FAKE_MODE=hang bash -c 'poros-arm poros.json > arm.out 2> arm.err; :' &
	parent=$!
	wait_until 200 0.05 test -s pids
	read -r child grandchild < pids
	kill -KILL "$parent"
	wait "$parent" || true
	wait_until 400 0.05 test -s arm.out
	jq -e '.status == "error" and (.error | startswith("interrupted: poros-arm got SIGTERM"))' arm.out
	assert_artifact out/poros_tiny_llama_bf16.json
	gone "$child"
	gone "$grandchild"
}

@test "POROS_ARM_WATCH_PID: when that process is gone, poros-arm stops its child and ends" {
	export FAKE_PIDS="$PWD/pids"
	sleep 300 &
	watched=$!
	POROS_ARM_WATCH_PID=$watched FAKE_MODE=hang poros-arm poros.json poros.json > arm.out 2> arm.err &
	arm=$!
	wait_until 200 0.05 test -s pids
	read -r child grandchild < pids
	kill "$watched"
	wait "$watched" || true
	rc=0
	wait "$arm" || rc=$?
	[ "$rc" -eq 1 ]
	# the second cell never started
	[ "$(wc -l < arm.out)" -eq 1 ]
	jq -e '.status == "error" and (.error | startswith("interrupted: poros-arm got SIGHUP"))' arm.out
	grep -qx 'poros-arm: interrupted by SIGHUP' arm.err
	gone "$child"
	gone "$grandchild"
	run -2 --separate-stderr env POROS_ARM_WATCH_PID=abc poros-arm poros.json
	[ "$stderr" = 'poros-arm: POROS_ARM_WATCH_PID: not a number: "abc" (expected a process id)' ]
}

@test "hardware.gpus: poros and resident cells run as poros-train --gpus N; other methods are skipped by name" {
	export FAKE_ARGV="$PWD/argv"
	jq -c '.hardware.gpus = 4' poros.json >gpus.json
	run -0 --separate-stderr poros-arm gpus.json
	jq -e '.cell.hardware.gpus == 4 and (.argv | index("--gpus")) as $i | .argv[$i + 1] == "4"' <<< "$output"
	grep -qx -- --gpus argv
	# without the key: no --gpus, one process
	run -0 --separate-stderr poros-arm poros.json
	! grep -qx -- --gpus argv
	# a method that cannot is skipped, never trained on one GPU
	rm -f argv
	cell peft | jq -c '.hardware.gpus = 2' >peft.json
	run -0 --separate-stderr poros-arm peft.json
	jq -e '.status == "skipped" and .error == "hardware.gpus > 1 is not implemented for method peft" and .argv == null' \
		<<< "$output"
	[ ! -e argv ]
	# the spec key: written into the cells, more than 0
	printf '%s\n' 'spec_id: g' 'hardware: {gpus: 2}' 'models: [poros/tiny-qwen2]' 'methods: [poros, peft]' \
		'precisions: [nf4]' 'training: {steps: 2, seq_len: 32}' >g.yaml
	poros-expand --jsonl -o g g.yaml | jq -e -s 'length == 2 and all(.hardware.gpus == 2)'
	sed -i 's/gpus: 2/gpus: 0/' g.yaml
	run -2 --separate-stderr poros-expand --jsonl -o g g.yaml
	[[ "$stderr" == *"gpus"* ]]
}

@test "hardware.gpus on a machine whose CUDA runtime sees fewer GPUs: poros-train refuses the cell by name" {
	export POROS_TRAIN="$POROS_ROOT/bin/poros-train" CUDA_VISIBLE_DEVICES=
	jq -c '.hardware.gpus = 2 | .training.steps = 2' poros.json >gpus.json
	run -0 --separate-stderr poros-arm gpus.json
	# the artifact is written: an error naming the count, never a run on fewer GPUs
	jq -e '.status == "error" and (.error | test("--gpus 2: the CUDA runtime sees 0 devices"))' <<< "$output"
	jq -e '.argv[-2:] == ["--gpus", "2"] and .env.ranks == null' <<< "$output"
	# poros-train given such a cell alone does not train it on one GPU either
	run -2 --separate-stderr poros-train --cell gpus.json --out x
	[ "$stderr" = "poros-train: --cell: hardware.gpus is 2: give --gpus 2 (one rank a GPU)" ]
	run -2 --separate-stderr poros-train --cell gpus.json --gpus 3 --out x
	[ "$stderr" = "poros-train: --gpus 3: the cell's hardware.gpus is 2" ]
	[ ! -e x ]
	# the same cell on one process runs, and its artifact says 1 rank
	jq -c '.training.steps = 2' poros.json >one.json
	run -0 --separate-stderr poros-arm one.json
	jq -e '.status == "ok" and .env.ranks == 1 and .env.backend == "cpu"' <<< "$output"
}

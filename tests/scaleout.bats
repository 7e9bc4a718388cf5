#!/usr/bin/env bats
# bin/poros scaling out.  --gpus: cells side by side on one host, one per
# GPU, tested on the CPU with a stand-in nvidia-smi (FAKE_GPUS) and trainer
# (tests/fixtures/scaleout).  --slurm: against a real single-node Slurm
# cluster that tests/slurm/setup.sh starts for this file (skipped, with the
# reason, when not root or without Debian's slurm-wlm and munge).

bats_require_minimum_version 1.5.0

setup_file() {
	SLURM_SKIP= SLURM_BROKEN=
	if [ "$(id -u)" != 0 ]; then
		SLURM_SKIP="not root (the test cluster's slurmd must run as root)"
	elif ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
		SLURM_SKIP="slurmctld or munged not found (make deps-test installs slurm-wlm and munge)"
	else
		SLURM_DIR="$BATS_FILE_TMPDIR/slurm"
		mkdir -p "$SLURM_DIR"
		root="$(cd "$(dirname "$BATS_TEST_FILENAME")/.." && pwd)"
		if ! SLURM_CONF=$("$root/tests/slurm/setup.sh" "$SLURM_DIR" 2>"$BATS_FILE_TMPDIR/slurm-setup.err"); then
			SLURM_BROKEN="tests/slurm/setup.sh failed: $(tail -n 20 "$BATS_FILE_TMPDIR/slurm-setup.err")"
		fi
		export SLURM_DIR SLURM_CONF
	fi
	export SLURM_SKIP SLURM_BROKEN
}

teardown_file() {
	if [ -n "${SLURM_DIR:-}" ]; then
		"$(cd "$(dirname "$BATS_TEST_FILENAME")/.." && pwd)/tests/slurm/teardown.sh" "$SLURM_DIR"
	fi
}

setup() {
	load test_helper/common-setup
	_common_setup
	SPEC="$POROS_ROOT/tests/fixtures/driver/two_models.yaml"
	FIX="$POROS_ROOT/tests/fixtures/scaleout"
	. "$FIX/devices.bash"
	# the spec's eight cells, in spec order
	CELLS="poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16 resident_tiny_qwen2_nf4 resident_tiny_qwen2_bf16"
	CELLS="$CELLS poros_tiny_llama_nf4 poros_tiny_llama_bf16 resident_tiny_llama_nf4 resident_tiny_llama_bf16"
	# the stand-ins: nvidia-smi first on PATH, the trainer through POROS_TRAIN
	PATH="$FIX:$PATH"
	export POROS_TRAIN="$FIX/fake-train"
	export FAKE_DEVICES="$BATS_TEST_TMPDIR/devices.log" FAKE_LOG="$BATS_TEST_TMPDIR/fake.log"
	export TMPDIR="$BATS_TEST_TMPDIR"
	unset CUDA_VISIBLE_DEVICES
}

teardown() {
	# A failed Slurm test must not leave jobs running into the next one.
	if [ -n "${SLURM_CONF:-}" ] && [ -z "$SLURM_BROKEN" ]; then
		scancel --user=root >/dev/null 2>&1 || true
		wait_until 40 0.25 no_slurm_jobs -u root || true
	fi
}

# no_slurm_jobs SQUEUE_ARGS...: squeue lists no job of those.
no_slurm_jobs() {
	[ -z "$(squeue -h "$@" 2>/dev/null)" ]
}

need_slurm() {
	[ -z "$SLURM_SKIP" ] || skip "$SLURM_SKIP"
	[ -z "$SLURM_BROKEN" ] || fail "$SLURM_BROKEN"
}

# Every line of FILE parses and FILE ends with a newline.
assert_whole_lines() {
	[ "$(jq -c . "$1" | wc -l)" -eq "$(wc -l < "$1")" ]
	[ "$(tail -c 1 "$1" | od -An -tx1 | tr -d ' ')" = "0a" ]
}

# --- several GPUs of one host -------------------------------------------------

@test "--gpus all runs cells side by side, one per GPU, and appends every cell once" {
	export FAKE_GPUS="0 1 2" FAKE_SLEEP=0.3
	run -0 --separate-stderr poros bench run "$SPEC" --gpus all -o out
	[ -z "$output" ]
	[[ "$stderr" == *"poros: running 8 cells on GPUs 0,1,2, one cell per GPU at a time"* ]]
	[[ "$stderr" == *"poros: reports in out"* ]]
	# every cell ran once and has one whole line
	[ "$(wc -l < "$FAKE_DEVICES")" -eq 8 ]
	[ "$(cut -d ' ' -f 1 "$FAKE_DEVICES" | sort | paste -sd ' ')" = "$(tr ' ' '\n' <<< "$CELLS" | sort | paste -sd ' ')" ]
	assert_whole_lines out/results.jsonl
	[ "$(jq -r .cell_id out/results.jsonl | sort | paste -sd ' ')" = "$(tr ' ' '\n' <<< "$CELLS" | sort | paste -sd ' ')" ]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' out/results.jsonl
	# every GPU was used, none by two cells at once, and cells did overlap
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u | paste -sd ' ')" = "0 1 2" ]
	assert_no_shared_gpu
	[ "$(overlapping_pairs)" -ge 2 ]
	# the artifact records the GPU the trainer was given
	while read -r id gpu _; do
		[ "$(jq -r .env.cuda_visible_devices "out/$id.json")" = "$gpu" ]
	done < "$FAKE_DEVICES"
	# the report keeps the spec's order whatever order the cells ended in
	[ "$(jq -r .cell_id out/report.jsonl | paste -sd ' ')" = "$CELLS" ]
	[ "$(grep -c '<tr id="cell-' out/report.html)" -eq 8 ]
}

@test "--gpus LIST uses only the GPUs listed" {
	export FAKE_GPUS="0 1 2 3" FAKE_SLEEP=0.2
	run -0 --separate-stderr poros bench matrix "$SPEC" --gpus=3,1 -o out
	[[ "$stderr" == *"on GPUs 3,1, one cell per GPU"* ]]
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u | paste -sd ' ')" = "1 3" ]
	assert_no_shared_gpu
	[ "$(jq -r .cell_id out/report.jsonl | paste -sd ' ')" = "$CELLS" ]
}

@test "--gpus with one GPU runs the cells one at a time on it" {
	export FAKE_GPUS="0" FAKE_SLEEP=0.1
	run -0 --separate-stderr poros bench run "$SPEC" --gpus 0 -o out
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u)" = "0" ]
	[ "$(overlapping_pairs)" -eq 0 ]
	[ "$(wc -l < out/results.jsonl)" -eq 8 ]
}

@test "--gpus with hardware.gpus 2: each cell has two GPUs at once; on one GPU they are skipped" {
	export FAKE_GPUS="0 1 2 3" FAKE_SLEEP=0.2
	sed 's/^  pcie_gen: 4$/&\n  gpus: 2/' "$SPEC" > gpus2.yaml
	run -0 --separate-stderr poros bench run gpus2.yaml --gpus all -o out
	[ "$(wc -l < "$FAKE_DEVICES")" -eq 8 ]
	[ "$(cut -d ' ' -f 2 "$FAKE_DEVICES" | sort -u | paste -sd ' ')" = "0,1 2,3" ]
	assert_no_shared_gpu
	[[ "$stderr" == *"poros: [1/8] poros_tiny_qwen2_nf4 on GPUs 0,1, "* ]]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' out/results.jsonl
	: > "$FAKE_LOG"
	run -0 --separate-stderr poros bench run gpus2.yaml --gpus 3 -o one --force
	[ ! -s "$FAKE_LOG" ]
	jq -e -s 'length == 8 and all(.[]; .status == "skipped" and .error == "hardware.gpus is 2, but --gpus lists 1 GPU")' one/results.jsonl
	[[ "$stderr" == *"poros: [1/8] poros_tiny_qwen2_nf4, 0s: skipped: hardware.gpus is 2, but --gpus lists 1 GPU"* ]]
}

@test "--gpus on a host without a GPU is a clear error (exit 2) and writes nothing" {
	export FAKE_GPUS=
	run -2 --separate-stderr poros bench run "$SPEC" --gpus all -o out
	[ -z "$output" ]
	[ "$stderr" = "poros: --gpus: no GPU on this host (nvidia-smi lists none); without --gpus the cells run one at a time" ]
	[ ! -e out ]
	if ! PATH="$POROS_ROOT/bin:/usr/bin:/bin" command -v nvidia-smi >/dev/null; then
		run -2 --separate-stderr env PATH="$POROS_ROOT/bin:/usr/bin:/bin" poros bench run "$SPEC" --gpus 0 -o out
		[ "$stderr" = "poros: --gpus: no GPU on this host (nvidia-smi not found); without --gpus the cells run one at a time" ]
	fi
	[ ! -e out ]
	[ ! -e "$FAKE_DEVICES" ]
}

@test "bad --gpus lists and misplaced scheduling options are usage errors (exit 2)" {
	export FAKE_GPUS="0 1"
	run -2 --separate-stderr poros bench run "$SPEC" --gpus 0,2
	[ "$stderr" = "poros: --gpus: no GPU 2 on this host (nvidia-smi lists 0,1)" ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus 0,x
	[ "$stderr" = 'poros: --gpus: "x" is not a GPU index (expected a list such as 0,1,2,3, or all)' ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus 1,1
	[ "$stderr" = "poros: --gpus: GPU 1 is listed twice" ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus 0,
	[ "$stderr" = 'poros: --gpus: "" is not a GPU index (expected a list such as 0,1,2,3, or all)' ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus=
	[ "$stderr" = "poros: --gpus: needs a value" ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus
	[ "$stderr" = "poros: --gpus: needs a value" ]
	run -2 --separate-stderr poros bench run "$SPEC" --gpus 0 --slurm
	[ "$stderr" = "poros: --gpus and --slurm: choose one (on a cluster, ask Slurm for GPUs with --gres)" ]
	run -2 --separate-stderr poros bench run "$SPEC" --partition gpu
	[ "$stderr" = "poros: --partition: only with --slurm" ]
	run -2 --separate-stderr poros bench run "$SPEC" --wait
	[ "$stderr" = "poros: --wait: only with --slurm" ]
	run -2 --separate-stderr poros bench run "$SPEC" --slurm=yes
	[ "$stderr" = "poros: --slurm: takes no value" ]
	run -2 --separate-stderr poros bench run "$SPEC" --slurm --sbatch-arg qos=high
	[ "$stderr" = 'poros: --sbatch-arg: "qos=high" is not an sbatch option (expected --NAME[=VALUE])' ]
	run -2 --separate-stderr poros bench run "$SPEC" --slurm --sbatch-arg "--comment=two words"
	[ "$stderr" = 'poros: --sbatch-arg: "--comment=two words" must be one word without quotes or backslashes' ]
	run -2 --separate-stderr poros train "$SPEC" --gpus 0
	[ "$stderr" = "poros: --gpus: only for bench run and bench matrix" ]
	[ ! -e out ]
}

@test "--gpus resumes: ok cells are skipped, a failed cell runs again" {
	export FAKE_GPUS="0 1"
	run -0 --separate-stderr env FAKE_FAIL_CELL=poros_tiny_llama_bf16 poros bench run "$SPEC" --gpus all -o out
	[[ "$stderr" == *"poros: [6/8] poros_tiny_llama_bf16 on GPU "*": error: "* ]]
	jq -e -s 'map(select(.status == "error")) | length == 1 and .[0].cell_id == "poros_tiny_llama_bf16"' out/results.jsonl
	: > "$FAKE_LOG"
	run -0 --separate-stderr poros bench run "$SPEC" --gpus all -o out
	[[ "$stderr" == *"[1/8] poros_tiny_qwen2_nf4: ok artifact of this configuration exists, skipped (--force runs it again)"* ]]
	[ "$(cat "$FAKE_LOG")" = "poros_tiny_llama_bf16 blockwise" ]
	[ "$(wc -l < out/results.jsonl)" -eq 9 ]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' out/report.jsonl
}

@test "a --gpus run stopped with SIGTERM stops its trainers and leaves only whole lines" {
	export FAKE_GPUS="0 1" FAKE_SLEEP=5 FAKE_PIDS="$BATS_TEST_TMPDIR/fake.pids"
	poros bench run "$SPEC" --gpus all -o out 2> driver.err &
	driver=$!
	wait_until 100 0.05 lines_at_least "$FAKE_PIDS" 2
	[ "$(wc -l < "$FAKE_PIDS")" -eq 2 ]
	kill -TERM "$driver"
	rc=0
	wait "$driver" || rc=$?
	[ "$rc" -eq 143 ]
	# poros-arm ended each trainer's process group before the driver exited
	for pid in $(cat "$FAKE_PIDS"); do
		! kill -0 "$pid" 2>/dev/null
	done
	# both cells that were running got an artifact (interrupted), appended whole
	assert_whole_lines out/results.jsonl
	jq -e -s 'length == 2 and all(.[]; .status == "error" and (.error | startswith("interrupted")))' out/results.jsonl
	[ "$(wc -l < "$FAKE_LOG")" -eq 2 ]
}

@test "a --gpus driver killed with SIGKILL leaves nothing running, and the next run runs each cell once" {
	export FAKE_GPUS="0 1" FAKE_PIDS="$BATS_TEST_TMPDIR/fake.pids"
	FAKE_SLEEP=30 poros bench run "$SPEC" --gpus all -o out 2> driver.err &
	driver=$!
	wait_until 100 0.05 lines_at_least "$FAKE_PIDS" 2
	[ "$(wc -l < "$FAKE_PIDS")" -eq 2 ]
	kill -KILL "$driver"
	wait "$driver" || true
	# the workers' poros-arm see the driver gone and end their trainers; the lock goes with the last of them
	wait_until 400 0.05 flock -n out/.lock true
	for pid in $(cat "$FAKE_PIDS"); do
		! kill -0 "$pid" 2>/dev/null
	done
	# no worker claimed a cell after the driver was gone
	sleep 1
	[ "$(wc -l < "$FAKE_LOG")" -eq 2 ]
	: > "$FAKE_LOG"
	run -0 --separate-stderr env FAKE_SLEEP=0 poros bench run "$SPEC" --gpus all -o out
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	[ "$(cut -d ' ' -f 1 "$FAKE_LOG" | sort | uniq -d)" = "" ]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' out/report.jsonl
}

# --- Slurm --------------------------------------------------------------------

@test "bench run --slurm runs tiny.yaml as a job array and ends with the local run's results and report" {
	need_slurm
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	unset POROS_TRAIN
	poros bench run "$POROS_ROOT/configs/bench/tiny.yaml" -o local 2>/dev/null
	run --separate-stderr timeout 120 poros bench run "$POROS_ROOT/configs/bench/tiny.yaml" -o cluster --slurm --wait
	[ "$status" -eq 0 ] || { echo "$stderr"; tail -n 5 cluster/slurm/logs/*.out; false; }
	# stdout: the job ids, one JSON line
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.output_dir == "cluster" and (.array_job_id | type) == "number" and
		.finish_job_id > .array_job_id and .cells == 18 and .skipped == 0'
	array=$(echo "$output" | jq -r .array_job_id)
	finish=$(echo "$output" | jq -r .finish_job_id)
	[[ "$stderr" == *"poros: submitted: array job $array, finishing job $finish; scripts and logs in cluster/slurm"* ]]
	[[ "$stderr" == *"poros: the finishing job $finish is done: results in cluster"* ]]
	# one array task per cell, and the finishing job after them
	[ "$(ls cluster/slurm/logs/array-"${array}"_*.out | wc -l)" -eq 18 ]
	[ "$(cat cluster/slurm/finish.rc)" = 0 ]
	[ "$(wc -l < cluster/slurm/cells.txt)" -eq 18 ]
	[ -x cluster/slurm/array.sh ] && [ -x cluster/slurm/finish.sh ] && [ -x cluster/slurm/submit.sh ]
	# the same cells, in the same order, with the same statuses and losses (timings aside)
	fields='[.cell_id, .status, .metrics.steps_measured, .metrics.loss_first, .metrics.loss_last, .env.weights] | @tsv'
	diff <(jq -r "$fields" local/results.jsonl) <(jq -r "$fields" cluster/results.jsonl)
	diff <(jq -r "$fields" local/report.jsonl) <(jq -r "$fields" cluster/report.jsonl)
	jq -e -s 'length == 18 and (map(select(.status == "ok")) | length) == 12' cluster/results.jsonl
	# the report: the same rows (method, precision, status, losses) and summary
	diff <(grep '^|' local/report.md | cut -d '|' -f 2,3,4,14) <(grep '^|' cluster/report.md | cut -d '|' -f 2,3,4,14)
	grep -qxF -- '- **Cells:** 18: 12 ok, 0 oom, 0 error, 6 skipped' cluster/report.md
	[ "$(grep -c '<tr id="cell-' cluster/report.html)" -eq 18 ]
}

@test "resubmitting skips the cells with ok artifacts; with none left only the finishing job runs" {
	need_slurm
	run -0 --separate-stderr timeout 60 env FAKE_FAIL_CELL=resident_tiny_llama_nf4 poros bench run "$SPEC" -o out --slurm --wait
	echo "$output" | jq -e '.cells == 8 and .skipped == 0'
	jq -e -s 'length == 8 and (map(select(.status != "ok")) | map(.cell_id)) == ["resident_tiny_llama_nf4"]' out/results.jsonl
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	: > "$FAKE_LOG"
	run -0 --separate-stderr timeout 60 poros bench run "$SPEC" -o out --slurm --wait
	echo "$output" | jq -e '.cells == 1 and .skipped == 7'
	[ "$(cat out/slurm/cells.txt)" = "out/cells/resident_tiny_llama_nf4.json" ]
	[ "$(cat "$FAKE_LOG")" = "resident_tiny_llama_nf4 resident" ]
	[ "$(wc -l < out/results.jsonl)" -eq 9 ]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' out/report.jsonl
	[ "$(jq -r .cell_id out/report.jsonl | paste -sd ' ')" = "$CELLS" ]
	: > "$FAKE_LOG"
	run -0 --separate-stderr timeout 60 poros bench run "$SPEC" -o out --slurm --wait
	echo "$output" | jq -e '.array_job_id == null and .cells == 0 and .skipped == 8'
	[[ "$stderr" == *"poros: all 8 cells have an ok artifact: submitting only the finishing job"* ]]
	[ ! -s "$FAKE_LOG" ]
	[ "$(wc -l < out/results.jsonl)" -eq 9 ]
}

@test "sbatch options pass through, and the kept scripts resubmit the same jobs" {
	need_slurm
	run -0 --separate-stderr poros bench run "$SPEC" -o out --slurm --partition debug --time 5 \
		--sbatch-arg=--comment=poros-test --sbatch-arg --nice=10
	array=$(echo "$output" | jq -r .array_job_id)
	finish=$(echo "$output" | jq -r .finish_job_id)
	# (the array takes seconds: the finishing job is still waiting for it)
	run -0 scontrol -o show job "$finish"
	[[ "$output" == *"Dependency=afterany:${array}_*"* ]]
	run -0 scontrol -o show job "$array"
	[[ "$output" == *"Partition=debug"* && "$output" == *"TimeLimit=00:05:00"* ]]
	[[ "$output" == *"Comment=poros-test"* && "$output" == *"Nice=10"* ]]
	run -0 scontrol -o show job "$finish"
	[[ "$output" == *"Comment=poros-test"* && "$output" != *"TimeLimit=00:05:00"* ]]
	wait_until 240 0.25 test -e out/slurm/finish.rc
	[ "$(cat out/slurm/finish.rc)" = 0 ]
	# the scripts name paths only, quoted; submit.sh submits the same two jobs again
	grep -qxF "exec '$POROS_ROOT/bin/poros-arm' \"\$cell\"" out/slurm/array.sh
	grep -qF "'--comment=poros-test' '--nice=10'" out/slurm/submit.sh
	rm out/slurm/finish.rc
	: > "$FAKE_LOG"
	run -0 --separate-stderr sh out/slurm/submit.sh
	[ "${#lines[@]}" -eq 2 ]
	[ "${lines[1]}" -gt "${lines[0]}" ]
	array=${lines[0]}
	run -0 scontrol -o show job "${lines[1]}"
	[[ "$output" == *"Dependency=afterany:${array}_*"* ]]
	wait_until 240 0.25 test -e out/slurm/finish.rc
	[ "$(cat out/slurm/finish.rc)" = 0 ]
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	[ "$(wc -l < out/results.jsonl)" -eq 16 ]
}

# What a refused run must leave as it was: the cells, the spec, the lock and
# the submission's scripts (the jobs themselves write logs and runs meanwhile).
snapshot() {
	(cd out && sha256sum .lock spec.json cells/* slurm/cells.txt slurm/all-cells.txt slurm/array.sh \
		slurm/finish.sh slurm/submit.sh slurm/jobs && ls -a cells slurm)
}

@test "a resubmission while the last one's jobs are queued or running is refused (exit 2) and changes nothing" {
	need_slurm
	export FAKE_SLEEP=30
	run -0 --separate-stderr poros bench run "$SPEC" -o out --slurm
	array=$(echo "$output" | jq -r .array_job_id)
	finish=$(echo "$output" | jq -r .finish_job_id)
	[ "$(paste -sd ' ' out/slurm/jobs)" = "$array $finish" ]
	snapshot > before
	# an edited spec, so that a rewrite of cells/ or spec.json would show
	sed 's/steps: 4/steps: 6/' "$SPEC" > edited.yaml
	run -2 --separate-stderr poros bench run edited.yaml -o out --slurm
	[ -z "$output" ]
	[ "$stderr" = "poros: out: job(s) $array $finish of the last --slurm submission are still queued or running: wait for them (or scancel them), then run again" ]
	snapshot > after
	cmp before after
	# a local run is refused alike: it would run the jobs' cells beside them
	run -2 --separate-stderr poros bench run edited.yaml -o out
	[[ "$stderr" == *"of the last --slurm submission are still queued or running"* ]]
	snapshot > after
	cmp before after
	# once they have ended, the next submission goes through
	scancel "$array" "$finish"
	wait_until 80 0.25 no_slurm_jobs -j "$array,$finish" -t PENDING,RUNNING,SUSPENDED,CONFIGURING || true
	export FAKE_SLEEP=0
	run -0 --separate-stderr timeout 90 poros bench run "$SPEC" -o out --slurm --wait
	[ "$(paste -sd ' ' out/slurm/jobs)" != "$array $finish" ]
	jq -e -s 'map(.cell_id) | unique | length == 8' out/report.jsonl
}

@test "cells that never ran make the finishing job and --wait fail (exit 1)" {
	need_slurm
	export FAKE_SLEEP=30
	timeout 120 poros bench run "$SPEC" -o out --slurm --wait > ids.json 2> driver.err &
	driver=$!
	wait_until 80 0.25 test -s "$FAKE_LOG"
	array=$(jq -r .array_job_id ids.json)
	scancel "$array"
	rc=0
	wait "$driver" || rc=$?
	[ "$rc" -eq 1 ]
	finish=$(jq -r .finish_job_id ids.json)
	grep -qF "poros: the finishing job $finish failed (exit 1): see out/slurm/logs/finish-$finish.out" driver.err
	[ "$(cat out/slurm/finish.rc)" = 1 ]
	# the cells that were running got an artifact (interrupted), the others none
	grep -qE "^poros: [1-8] of 8 cells have no artifact$" "out/slurm/logs/finish-$finish.out"
	# the reports are still written, from what there is
	[ -s out/report.html ]
}

@test "spec values never reach the batch scripts' shell" {
	need_slurm
	sed -e 's#output_dir: out/driver_test#output_dir: "out/it'"'"'s here; touch pwned1"#' "$SPEC" > evil.yaml
	run -0 --separate-stderr timeout 60 poros bench run evil.yaml --slurm --wait
	[ -z "$(find . -name 'pwned*')" ]
	[ "$(wc -l < "out/it's here; touch pwned1/results.jsonl")" -eq 8 ]
	grep -qxF "list='out/it'\\''s here; touch pwned1/slurm/cells.txt'" "out/it's here; touch pwned1/slurm/array.sh"
}

@test "--slurm without sbatch is a clear error (exit 1) and writes nothing" {
	# a PATH with only what the driver needs before it looks for sbatch
	mkdir nosbatch
	for t in jq dirname mktemp rm cat sed grep tr wc head cut cp mv sort paste basename mkdir date; do
		ln -s "$(command -v "$t")" nosbatch/
	done
	run -1 --separate-stderr env PATH="$POROS_ROOT/bin:$PWD/nosbatch" "$POROS_ROOT/bin/poros" bench run "$SPEC" -o out --slurm
	[ -z "$output" ]
	[ "$stderr" = "poros: --slurm: sbatch not found (Slurm's client commands; Debian: apt-get install slurm-client)" ]
	[ ! -e out ]
}

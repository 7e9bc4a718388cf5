#!/usr/bin/env bats
# bin/poros --slurm and hardware.gpus: the batch jobs it submits, seen
# through a stand-in sbatch (tests/fixtures/slurm/sbatch) that records its
# arguments; no cluster is needed (tests/scaleout.bats runs a real one).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	PATH="$POROS_ROOT/tests/fixtures/slurm:$PATH"
	export POROS_TRAIN="$POROS_ROOT/tests/fixtures/scaleout/fake-train"
	export FAKE_SBATCH_LOG="$BATS_TEST_TMPDIR/sbatch.log" TMPDIR="$BATS_TEST_TMPDIR"
	# squeue must not find a real cluster's jobs 101... for a resubmission
	export SLURM_CONF=/nonexistent
	SPEC="$POROS_ROOT/tests/fixtures/driver/two_models.yaml"
	# two GPUs a run; peft beside poros: its cells are skipped, on one GPU
	sed -e 's/^  pcie_gen: 4$/&\n  gpus: 2/' -e 's/^methods: .*/methods: [poros, peft]/' "$SPEC" > gpus2.yaml
}

# call N FIELD: the sbatch option FIELD (e.g. --array) of call N, "=" and all
call() {
	sed -n "$1p" "$FAKE_SBATCH_LOG" | tr '\t' '\n' | grep -E -- "^$2(=|\$)" || true
}

@test "a spec of hardware.gpus 2: its poros cells go to an array asking for 2 GPUs a task" {
	run -0 --separate-stderr poros bench run gpus2.yaml -o out --slurm
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.array_job_id == 101 and .array_job_ids == [101, 102] and .finish_job_id == 103 and .cells == 8' <<< "$output"
	# cells.txt in spec order: per model poros nf4, poros bf16, peft nf4, peft bf16
	[ "$(sed 's#.*/##' out/slurm/cells.txt | paste -sd ' ')" = "poros_tiny_qwen2_nf4.json poros_tiny_qwen2_bf16.json peft_tiny_qwen2_nf4.json peft_tiny_qwen2_bf16.json poros_tiny_llama_nf4.json poros_tiny_llama_bf16.json peft_tiny_llama_nf4.json peft_tiny_llama_bf16.json" ]
	[ "$(wc -l < "$FAKE_SBATCH_LOG")" -eq 3 ]
	# the one-GPU array as without hardware.gpus (no --gres asked for: none)
	[ "$(call 1 --array)" = "--array=3-4,7-8" ]
	[ "$(call 1 --job-name)" = "--job-name=poros-driver_test" ]
	[ -z "$(call 1 --gres)" ]
	# the poros cells' array: their lines, two GPUs each task
	[ "$(call 2 --array)" = "--array=1-2,5-6" ]
	[ "$(call 2 --gres)" = "--gres=gpu:2" ]
	[ "$(call 2 --job-name)" = "--job-name=poros-driver_test-2gpu" ]
	sed -n 2p "$FAKE_SBATCH_LOG" | grep -q "$PWD/out/slurm/array.sh\$"
	# the finishing job waits for both arrays and asks for no GPU
	[ "$(call 3 --dependency)" = "--dependency=afterany:101:102" ]
	[ -z "$(call 3 --gres)" ]
	[ "$(paste -sd ' ' out/slurm/jobs)" = "101 102 103" ]
	[[ "$stderr" == *"poros: cells of hardware.gpus 2: array tasks 1-2,5-6, each with --gres=gpu:2"* ]]
	[[ "$stderr" == *"poros: submitted: array jobs 101 102, finishing job 103; scripts and logs in out/slurm"* ]]
}

@test "--gres G: the one-GPU array gets G, the 2-GPU array G with its gpu count 2" {
	run -0 --separate-stderr poros bench run gpus2.yaml -o out --slurm --gres gpu:a100:1
	[ "$(call 1 --gres)" = "--gres=gpu:a100:1" ]
	[ "$(call 2 --gres)" = "--gres=gpu:a100:2" ]
	rm -rf out "$FAKE_SBATCH_LOG"
	run -0 --separate-stderr poros bench run gpus2.yaml -o out --slurm --gres gpu
	[ "$(call 1 --gres)" = "--gres=gpu" ]
	[ "$(call 2 --gres)" = "--gres=gpu:2" ]
	rm -rf out "$FAKE_SBATCH_LOG"
	# a gres naming no gpu keeps it and adds the GPUs
	run -0 --separate-stderr poros bench run gpus2.yaml -o out --slurm --gres nvme:1
	[ "$(call 2 --gres)" = "--gres=nvme:1,gpu:2" ]
}

@test "submit.sh submits both arrays again and makes the finishing job wait for both" {
	run -0 --separate-stderr poros bench run gpus2.yaml -o out --slurm --time 5
	grep -qF '"--dependency=afterany:$array:$array2"' out/slurm/submit.sh
	: > "$FAKE_SBATCH_LOG"
	run -0 --separate-stderr sh out/slurm/submit.sh
	[ "$output" = "101
102
103" ]
	[ "$(call 1 --array)" = "--array=3-4,7-8" ] && [ "$(call 1 --time)" = "--time=5" ]
	[ "$(call 2 --array)" = "--array=1-2,5-6" ] && [ "$(call 2 --gres)" = "--gres=gpu:2" ]
	[ "$(call 3 --dependency)" = "--dependency=afterany:101:102" ]
}

@test "without hardware.gpus there is one array of every cell, as before" {
	run -0 --separate-stderr poros bench run "$SPEC" -o out --slurm --gres gpu:1
	jq -e '.array_job_id == 101 and .array_job_ids == [101] and .finish_job_id == 102' <<< "$output"
	[ "$(wc -l < "$FAKE_SBATCH_LOG")" -eq 2 ]
	[ "$(call 1 --array)" = "--array=1-8" ]
	[ "$(call 1 --gres)" = "--gres=gpu:1" ]
	[ "$(call 2 --dependency)" = "--dependency=afterany:101" ]
	grep -qF '"--dependency=afterany:$array"' out/slurm/submit.sh
	! grep -q array2 out/slurm/submit.sh
}

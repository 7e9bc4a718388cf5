#!/usr/bin/env bats
# poros bench context: the largest seq_len whose plan fits a card and the
# host, found over the planner (CPU machine; the CUDA plan needs no device);
# and PEFT's own largest, measured by runs of the peft arm, here through
# stand-ins (tests/fixtures/context): a device (the scale-out tests'
# nvidia-smi), the arm (POROS_PYTHON) and the confirming run (POROS_TRAIN).

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

# set_key KEY VALUE: tiny.yaml's "KEY:" line says VALUE
set_key() {
	sed -i "s/^$1:.*/$1: $2/" tiny.yaml
}

HEADER='| model | precision | card (GB) | max seq_len (plan) | layout (block size, checkpoints, attention checkpoints) | device MiB at max | host MiB at max | confirmed (3 steps) | published (not measured here) | PEFT max seq_len (measured, precision) |'

# fake_device [PEFT_MAX]: a GPU as far as bench context can tell, and the
# stand-ins it runs, "peft: [bf16]" in tiny.yaml.  The peft arm trains up
# to PEFT_MAX (default 0) and records "PRECISION SEQ_LEN VRAM_GB" of each
# probe in ./probes.
fake_device() {
	PATH="$POROS_ROOT/tests/fixtures/scaleout:$PATH"
	export FAKE_GPUS=0 FAKE_PROBES="$PWD/probes" FAKE_PEFT_MAX=${1:-0}
	export POROS_PYTHON="$POROS_ROOT/tests/fixtures/context/fake-peft-arm"
	export POROS_TRAIN="$POROS_ROOT/tests/fixtures/context/plan-only-train"
	unset FAKE_SKIP FAKE_SKIP_ONLY FAKE_ERROR_AT POROS_ARMS_DIR
	echo 'peft: [bf16]' >> tiny.yaml
}

# The PEFT column of table line $1 (the last one).
peft_column() {
	awk -F ' [|] ' '{ sub(/ [|]$/, "", $NF); print $NF }' <<< "$1"
}

# The seq_len of each probe, in the order they ran, on one line.
probe_lengths() {
	awk '{ print $2 }' probes | paste -sd ' ' -
}

@test "bench context finds the largest multiple of 1024 whose plan fits the card: the next one does not" {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && skip "a CUDA device is present: the confirming run would train"
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" "$HEADER"
	# no "peft:": no PEFT search, and the column says so
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | 2, block, attention "(on|off)" | "[0-9]+" | "[0-9]+" | no CUDA device | - | - |"$ ]]
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
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | "([124])", "(layer|block)", attention "(on|off)(", one set")?" | " ]]
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
	set_key cards_gb '[0.001, 0.06]'
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[2]}" '| poros/tiny-qwen2 | nf4 | 0.001 | 0 | 2, block | - | - | no CUDA device | - | - |'
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

@test "bench context measures PEFT's largest seq_len by doubling, then bisecting between ok and oom" {
	fake_device 5120
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" "$HEADER"
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "[0-9]+" | 2, block, attention "(on|off)" | "[0-9]+" | "[0-9]+" | ok peak 50 MiB, 0.1 s/step, 1000 tok/s, host peak 200 MiB | - | " ]]
	assert_equal "$(peft_column "${lines[2]}")" '5120 (bf16, 2 steps ok; 6144 oom)'
	# 1024, 2048, 4096 ok, 8192 not; then 6144 not, 5120 ok: nothing between 5120 and 6144
	assert_equal "$(probe_lengths)" '1024 2048 4096 8192 6144 5120'
	# one folder a probe, holding its spec, cell and artifact
	assert_equal "$(cd runs && echo peft_*)" \
		"$(printf 'peft_poros_tiny-qwen2_0.06_bf16_%s ' 1024 2048 4096 5120 6144 8192 | sed 's/ $//')"
	for n in 1024 2048 4096 5120; do
		jq -e '.status == "ok" and .cell.training.seq_len == '"$n"' and .cell.training.steps == 2
		       and .cell.method == "peft" and .cell.precision == "bf16"' \
			"runs/peft_poros_tiny-qwen2_0.06_bf16_$n/peft_tiny_qwen2_bf16.json"
	done
	for n in 6144 8192; do
		jq -e '.status == "oom"' "runs/peft_poros_tiny-qwen2_0.06_bf16_$n/peft_tiny_qwen2_bf16.json"
	done
	# the cell bench run would run: batch 1, checkpointing, the spec's LoRA on every projection, seed 42
	jq -e '.training.batch_size == 1 and .training.gradient_accumulation_steps == 1 and .training.warmup_steps == 0
	       and .training.gradient_checkpointing == true and .training.dataset == "synthetic" and .training.seed == 42
	       and .lora.rank == 4 and .lora.alpha == 8 and .lora.dropout == 0 and (.lora.target_modules | length) == 7' \
		runs/peft_poros_tiny-qwen2_0.06_bf16_5120/cells/peft_tiny_qwen2_bf16.json
}

@test "bench context caps PEFT at the card's bytes: hardware.vram_gb is GB * 10^9 / 2^30" {
	fake_device 1024
	set_key cards_gb '[24]'
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "$(peft_column "${lines[2]}")" '1024 (bf16, 2 steps ok; 2048 oom)'
	# every probe: 22.352 GiB, which cap_device_memory makes 24e9 bytes
	assert_equal "$(awk '{ printf "%.3f %.0f\n", $3, $3 * 2^30 }' probes | sort -u)" '22.352 24000000000'
}

@test "bench context stops PEFT's search at the ceiling, and says 0 when 1024 does not fit" {
	fake_device 1000000
	set_key ceiling '12288'
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "$(peft_column "${lines[2]}")" '12288 (bf16, 2 steps ok; the ceiling)'
	assert_equal "$(probe_lengths)" '1024 2048 4096 8192 12288'
	rm probes
	# neither Poros nor PEFT fits 1024 here: nothing for Poros to confirm
	set_key cards_gb '[0.001]'
	export FAKE_PEFT_MAX=0
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[2]}" '| poros/tiny-qwen2 | nf4 | 0.001 | 0 | 2, block | - | - | - | - | 0 (bf16; 1024 oom) |'
	assert_equal "$(probe_lengths)" '1024'
}

@test "bench context says why PEFT was skipped at a precision, and measures the others" {
	fake_device 2048
	set_key peft '[bf16, nf4]'
	export FAKE_SKIP_ONLY=nf4 FAKE_SKIP='precision nf4 needs bitsandbytes, which is not installed'
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "$(peft_column "${lines[2]}")" \
		'2048 (bf16, 2 steps ok; 3072 oom); skipped (nf4): precision nf4 needs bitsandbytes, which is not installed'
	# a skip ends that precision's search at once
	assert_equal "$(awk '{ print $1 "@" $2 }' probes | paste -sd ' ' -)" 'bf16@1024 bf16@2048 bf16@4096 bf16@3072 nf4@1024'
}

@test "bench context fails after the table when a PEFT run errs, naming model, card and length" {
	fake_device 16384
	export FAKE_ERROR_AT=4096
	run -1 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" "$HEADER"
	assert_equal "$(peft_column "${lines[2]}")" 'error at 4096 (bf16)'
	assert_equal "$(probe_lengths)" '1024 2048 4096'
	[[ "$stderr" == *"poros: poros/tiny-qwen2, 0.06 GB card: PEFT bf16 at seq_len 4096 failed: RuntimeError: CUDA error: an illegal memory access was encountered (see runs/peft_poros_tiny-qwen2_0.06_bf16_4096)"* ]]
	[[ "$stderr" == *"poros: 1 PEFT search(es) ended in an error (see above): no maximum for them" ]]
}

@test "bench context runs no PEFT probe without a CUDA device, and says so in the column" {
	have_gpu && skip "a CUDA device is present: the confirming run would train"
	echo 'peft: [bf16]' >> tiny.yaml
	export POROS_PYTHON="$POROS_ROOT/tests/fixtures/context/fake-peft-arm" FAKE_PROBES="$PWD/probes"
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "$(peft_column "${lines[2]}")" 'no CUDA device'
	[[ "$stderr" == *"no CUDA device here: the confirming 3-step runs are not made, nor the PEFT runs"* ]]
	[ ! -e probes ] && [ ! -e runs ]
}

@test "bench context refuses a PEFT precision it cannot run, by name; an empty list searches nothing" {
	sed 's/^rank:/peft: [bf16, foo]\nrank:/' tiny.yaml >badpeft.yaml
	run -2 --separate-stderr poros bench context badpeft.yaml
	assert_equal "$stderr" 'poros: badpeft.yaml: peft: "foo" (expected bf16 or nf4)'
	fake_device
	set_key peft '[]'
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "$(peft_column "${lines[2]}")" '-'
	[ ! -e probes ]
}

@test "bench context with checkpoint_dir counts the disk: longer than the host alone allows, the file's MiB in a column" {
	have_gpu && skip "a CUDA device is present: the confirming run would train"
	# a host that holds one 1024-token layer's records and no more
	set_key host_mem_available 332M
	set_key block_size 1
	set_key checkpoints layer
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[2]}" '| poros/tiny-qwen2 | nf4 | 0.06 | 1024 | 1, layer, attention on | 38 | 330 | no CUDA device | - | - |'
	mkdir ck
	printf '%s\n' 'checkpoint_dir: ck' 'disk_available: 1G' >>tiny.yaml
	run -0 --separate-stderr poros bench context tiny.yaml runs
	assert_equal "${lines[0]}" "${HEADER/host MiB at max |/host MiB at max | disk MiB at max |}"
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "([0-9]+)" | 1, layer, attention on | "[0-9]+" | "[0-9]+" | "([0-9]+)" | no CUDA device | - | - |"$ ]]
	[ "${BASH_REMATCH[1]}" -gt 1024 ] && [ "${BASH_REMATCH[2]}" -gt 0 ]
	# planned, not run: nothing was written there
	run -0 ls -A ck
	assert_output ''
	# a disk too small for any record keeps the host's length
	set_key disk_available 1K
	run -0 --separate-stderr poros bench context tiny.yaml runs
	[[ "${lines[2]}" == '| poros/tiny-qwen2 | nf4 | 0.06 | 1024 | 1, layer, attention on | 38 | 330 | 0 | '* ]]
	# attention checkpoints off is searched too, and named
	echo 'attention_checkpoints: [1, 0]' >>tiny.yaml
	set_key disk_available 1G
	run -0 --separate-stderr poros bench context tiny.yaml runs
	[[ "${lines[0]}" == *"| layout (block size, checkpoints, attention checkpoints) |"* ]]
	[[ "${lines[2]}" =~ ^"| poros/tiny-qwen2 | nf4 | 0.06 | "[0-9]+" | 1, layer, attention "(on|off)(", one set")?" | " ]]
	set_key attention_checkpoints '[1, x]'
	run -2 --separate-stderr poros bench context tiny.yaml
	assert_equal "$stderr" 'poros: tiny.yaml: attention_checkpoints: "x" (expected 1 or 0)'
	set_key attention_checkpoints '[0]'
	grep -v '^checkpoint_dir:' tiny.yaml >nodir.yaml
	run -2 --separate-stderr poros bench context nodir.yaml
	assert_equal "$stderr" 'poros: nodir.yaml: disk_available: needs checkpoint_dir (the directory whose free bytes it gives)'
	grep -v '^disk_available:' tiny.yaml | sed 's/^checkpoint_dir:.*/checkpoint_dir: nowhere/' >nowhere.yaml
	run -2 --separate-stderr poros bench context nowhere.yaml
	assert_equal "$stderr" 'poros: nowhere.yaml: checkpoint_dir: nowhere: no such directory here (disk_available: SIZE plans it elsewhere)'
}

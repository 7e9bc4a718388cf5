#!/usr/bin/env bats
# bin/poros, the driver: bench run / matrix / compare / report, train, parity.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	SPEC="$POROS_ROOT/tests/fixtures/driver/two_models.yaml"
	FAKE="$POROS_ROOT/tests/fixtures/driver/fake-train"
	OUT=out/driver_test
	# the spec's eight cells, in spec order
	CELLS="poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16 resident_tiny_qwen2_nf4 resident_tiny_qwen2_bf16"
	CELLS="$CELLS poros_tiny_llama_nf4 poros_tiny_llama_bf16 resident_tiny_llama_nf4 resident_tiny_llama_bf16"
	export FAKE_LOG="$BATS_TEST_TMPDIR/fake.log"
	# the driver's temporaries, left behind only when it is killed
	export TMPDIR="$BATS_TEST_TMPDIR"
}

# The driver with the fake trainer.
fake_poros() {
	POROS_TRAIN="$FAKE" poros "$@"
}

@test "poros --version, help and --help" {
	run -0 poros --version
	assert_output "poros 0.1.0"
	run -0 --separate-stderr poros help
	assert_line --index 0 "usage: poros bench run SPEC [-o DIR] [--force]"
	[ -z "$stderr" ]
	run -0 poros --help
	assert_line --index 0 "usage: poros bench run SPEC [-o DIR] [--force]"
}

@test "no command, or an unknown one, is a usage error (exit 2)" {
	run -2 --separate-stderr poros
	[ -z "$output" ]
	[[ "$stderr" == "usage: poros bench run SPEC"* ]]
	run -2 --separate-stderr poros frobnicate
	[ "$stderr" = 'poros: unknown command "frobnicate" (expected bench, train, plan, parity, export or help)' ]
	run -2 --separate-stderr poros bench frobnicate
	[ "$stderr" = 'poros: unknown bench command "frobnicate" (expected run, matrix, collect, context, compare or report)' ]
	run -2 --separate-stderr poros bench run "$SPEC" --bogus
	[ "$stderr" = 'poros: unknown option --bogus' ]
	run -2 --separate-stderr poros bench run missing.yaml
	[ "$stderr" = 'poros: missing.yaml: no such spec file' ]
}

@test "--slurm and --gpus are only for bench run and bench matrix (exit 2)" {
	# (the scheduling itself is tested in scaleout.bats)
	run -2 --separate-stderr poros train "$SPEC" --slurm
	[ "$stderr" = "poros: --slurm: only for bench run and bench matrix" ]
	run -2 --separate-stderr poros parity "$SPEC" --gpus=0
	[ "$stderr" = "poros: --gpus: only for bench run and bench matrix" ]
	[ ! -e out ]
}

@test "without poros-train, bench run stops before writing anything, with a clear message" {
	mkdir lonely
	for t in poros poros-expand poros-arm poros-merge poros-render poros-cell; do
		cp "$POROS_ROOT/bin/$t" lonely/
	done
	run -1 --separate-stderr env -u POROS_TRAIN PATH="$PWD/lonely:/usr/bin:/bin" lonely/poros bench run "$SPEC"
	[ -z "$output" ]
	# (poros-expand may warn first that it found no model config next to a copied binary)
	[ "${stderr##*$'\n'}" = "poros: poros-train is missing (bin/poros-train is not built yet): nothing was written (8 cells in $SPEC)" ]
	[ ! -e $OUT ]
}

@test "bench run runs each cell once, appends one whole line per cell and writes the reports" {
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ -z "$output" ]
	[[ "$stderr" == *"poros: 8 cells in $OUT"* ]]
	grep -qE '^\[1/8\] poros tiny_qwen2 nf4 \.\.\. ok ' <<< "$stderr"
	grep -qE '^\[8/8, eta [0-9]+s\] resident tiny_llama bf16 \.\.\. ok ' <<< "$stderr"
	[[ "$stderr" == *"poros: reports in $OUT"* ]]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 8 ]
	[ "$(jq -r .cell_id $OUT/results.jsonl | paste -sd ' ')" = "$CELLS" ]
	jq -e -s 'all(.[]; .schema == "poros.artifact/1" and .status == "ok" and .metrics.s_per_step == 0.25)' $OUT/results.jsonl
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	grep -qx 'poros_tiny_qwen2_nf4 blockwise' "$FAKE_LOG"
	grep -qx 'resident_tiny_llama_bf16 resident' "$FAKE_LOG"
	grep -q '<tr id="cell-resident_tiny_llama_bf16"><td>resident</td><td>bf16</td><td><span class="badge ok">ok</span>' $OUT/report.html
	# host memory: the base's copy and blockwise's layer checkpoints (512 + 64 MiB), resident's base alone
	# the fake trainer's process RSS (poros-arm's wait4) first, its summary's allocator peak beside it
	grep -qE '^\| poros \| nf4 \| \*\*ok\*\* \| CPU \| [0-9.]+ [KMG]iB process RSS; allocator 1.21 GiB \| CPU run \| 576 MiB \| 0.25 \| 1 \| 0 \| 0.25 - 0.25 \| 512 \| 6.25 -&gt; 5.50 \|$' $OUT/report.md
	grep -qE '^\| resident \| bf16 \| \*\*ok\*\* \| CPU \| [0-9.]+ [KMG]iB process RSS; allocator 1.21 GiB \| CPU run \| 512 MiB \| 0.25 \|' $OUT/report.md
	[ "$(jq -r .cell_id $OUT/report.jsonl | paste -sd ' ')" = "$CELLS" ]
}

@test "bench run says one line per cell: its number, the time left, the passes and how it ended" {
	sed 's/^  steps: 4$/  steps: 4\n  passes: 2/' "$SPEC" > passes.yaml
	run -0 --separate-stderr fake_poros bench run passes.yaml
	[ "$(grep -c '^\[[1-8]/8' <<< "$stderr")" -eq 8 ]
	grep -qE '^\[1/8\] poros tiny_qwen2 nf4 \.\.\.\[pass 1/2\] \[pass 2/2\] ok [0-9.]+ s$' <<< "$stderr"
	grep -qE '^\[8/8, eta [0-9]+s\] resident tiny_llama bf16 \.\.\.\[pass 1/2\] \[pass 2/2\] ok [0-9.]+ s$' <<< "$stderr"
	# the backend said once, up front
	[ "$(grep -c '^poros: no CUDA device: CPU backend$' <<< "$stderr")" -eq 1 ]
	[ "$(grep -n 'no CUDA device' <<< "$stderr" | cut -d: -f1)" -lt "$(grep -n -m1 '^\[1/8\]' <<< "$stderr" | cut -d: -f1)" ]
	run -0 --separate-stderr env FAKE_BACKEND=cuda POROS_TRAIN="$FAKE" poros bench run passes.yaml --force
	[[ "$stderr" != *"CPU backend"* ]]
	run -0 --separate-stderr fake_poros parity passes.yaml
	[ "$(grep -c '^poros: no CUDA device: CPU backend$' <<< "$stderr")" -eq 1 ]
	# no nested lines: no "[1/1]" of poros-arm's own, no driver line per cell beside it
	run -1 grep -F '[1/1]' <<< "$stderr"
	run -1 grep -E '^poros: \[[0-9]+/8\] [a-z_0-9]+( \(eta .*\))?$' <<< "$stderr"
}

@test "a second run skips cells with an ok artifact; --force runs them again" {
	fake_poros bench run "$SPEC" 2>/dev/null
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[[ "$stderr" == *"[3/8] resident_tiny_qwen2_nf4: ok artifact of this configuration exists, skipped (--force runs it again)"* ]]
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 8 ]
	run -0 --separate-stderr fake_poros bench run "$SPEC" --force
	[ "$(wc -l < "$FAKE_LOG")" -eq 16 ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 16 ]
	# the report keeps one row per cell: the latest
	[ "$(wc -l < $OUT/report.jsonl)" -eq 8 ]
}

@test "a changed poros.block_size measures the poros cells again, not the resident ones" {
	fake_poros bench run "$SPEC" 2>/dev/null
	sed 's/block_size: 2/block_size: 1/' "$SPEC" > blocks.yaml
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run blocks.yaml
	[ "$(cut -d ' ' -f 1 "$FAKE_LOG" | paste -sd ' ')" = "poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16 poros_tiny_llama_nf4 poros_tiny_llama_bf16" ]
	[[ "$stderr" == *"[3/8] resident_tiny_qwen2_nf4: ok artifact of this configuration exists, skipped (--force runs it again)"* ]]
	jq -e -s 'length == 8 and all(.[]; if .method == "poros" then .cell.poros.block_size == 1 else .cell.poros.block_size == 2 end)' \
		$OUT/report.jsonl
	# and bench compare finds no configuration difference in the resident cells
	fake_poros bench run "$SPEC" -o a 2>/dev/null
	run -0 --separate-stderr poros bench compare a $OUT
	[ "$(echo "$stderr" | grep -c 'the configurations differ')" -eq 4 ]
	[[ "$stderr" != *"resident_"* ]]
}

@test "an unchanged rerun appends no skipped cell again; a new reason is appended; the lock file goes at exit" {
	sed 's/methods: \[poros, resident\]/methods: [poros, resident, peft]/' "$SPEC" > peft.yaml
	POROS_PYTHON=/nonexistent/python3 fake_poros bench run peft.yaml 2>/dev/null
	[ "$(wc -l < $OUT/results.jsonl)" -eq 12 ]
	[ "$(jq -s 'map(select(.status == "skipped")) | length' $OUT/results.jsonl)" -eq 4 ]
	[ ! -e $OUT/.lock ]
	run -0 --separate-stderr env POROS_PYTHON=/nonexistent/python3 POROS_TRAIN="$FAKE" poros bench run peft.yaml
	[[ "$stderr" == *"[5/12] peft_tiny_qwen2_nf4: skipped again, for the same reason: results.jsonl has it already"* ]]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 12 ]
	[ ! -e $OUT/.lock ]
	# the report still names the skipped cells, once each
	[ "$(jq -s 'map(select(.status == "skipped")) | length' $OUT/report.jsonl)" -eq 4 ]
	# another reason is another measurement
	POROS_PYTHON=/nonexistent/python4 fake_poros bench run peft.yaml 2>/dev/null
	[ "$(wc -l < $OUT/results.jsonl)" -eq 16 ]
	# a refused run leaves the holder's lock file alone
	exec 8>> $OUT/.lock
	flock -n 8
	echo 12345 > $OUT/.lock
	run -2 --separate-stderr fake_poros bench run "$SPEC"
	exec 8>&-
	[ "$(cat $OUT/.lock)" = 12345 ]
}

@test "the driver's reports name each artifact file they used, and each stale results line they left out" {
	fake_poros bench run "$SPEC" 2>/dev/null
	sed 's/block_size: 2/block_size: 1/' "$SPEC" > blocks.yaml
	fake_poros bench run blocks.yaml 2>/dev/null
	run -0 sed -n '/^## Artifacts$/,/^\\\* Fits on/p' $OUT/report.md
	[[ "$output" == *$'Used: 8, held against out/driver\\_test/spec.json.\n'* ]]
	# each used artifact is its file in the output directory, never a temporary
	[ "$(grep -c '^- \*\*[a-z_0-9\\]*:\*\* out/driver\\_test/[a-z_0-9\\]*\.json, finished ' <<< "$output")" -eq 8 ]
	[[ "$output" != *"/tmp"* && "$output" != *"current.jsonl"* ]]
	# the first run's lines of the four poros cells: stale; the resident cells' lines are the same runs as their files
	[[ "$output" == *$'\nIgnored: 4.\n'* ]]
	[ "$(grep -c '^- \*\*poros\\_tiny\\_[a-z0-9]*\\_[a-z0-9]*:\*\* out/driver\\_test/results.jsonl:[1-8]: stale config\\_hash' <<< "$output")" -eq 4 ]
	grep -F '4 artifacts of the input ignored' $OUT/report.html
}

@test "a cell that failed runs again next time, the others do not" {
	run -0 --separate-stderr env FAKE_FAIL_CELL=poros_tiny_llama_bf16 POROS_TRAIN="$FAKE" poros bench run "$SPEC"
	jq -e -s 'map(select(.cell_id == "poros_tiny_llama_bf16")) | length == 1 and .[0].status == "error"' $OUT/results.jsonl
	grep -qF '<li><code>poros_tiny_llama_bf16</code> <span class="badge error"' $OUT/report.html
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ "$(cat "$FAKE_LOG")" = "poros_tiny_llama_bf16 blockwise" ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 9 ]
	jq -e -s 'all(.[]; .status == "ok")' $OUT/report.jsonl
}

@test "a run killed with SIGKILL leaves only whole lines in results.jsonl and the next run completes the rest" {
	FAKE_PIDS="$BATS_TEST_TMPDIR/fake.pids" FAKE_SLEEP=0.4 POROS_TRAIN="$FAKE" setsid poros bench run "$SPEC" 2>/dev/null &
	pgid=$!
	wait_until 200 0.05 lines_at_least $OUT/results.jsonl 3 || true
	kill -KILL -- "-$pgid"
	wait "$pgid" || true
	# poros-arm ran the trainer in a process group of its own: let the orphan finish
	[ -s fake.pids ]
	for pid in $(cat fake.pids); do
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	done
	done_lines=$(wc -l < $OUT/results.jsonl)
	[ "$done_lines" -ge 3 ] && [ "$done_lines" -lt 8 ]
	# only whole lines: each parses, and the file ends with a newline
	[ "$(jq -c . $OUT/results.jsonl | wc -l)" -eq "$done_lines" ]
	[ "$(tail -c 1 $OUT/results.jsonl | od -An -tx1 | tr -d ' ')" = "0a" ]
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	# only the cells without an ok artifact ran
	[ "$(wc -l < "$FAKE_LOG")" -le $((8 - done_lines)) ]
	[ "$(poros-merge $OUT/results.jsonl | jq -r 'select(.status == "ok") | .cell_id' | sort | paste -sd ' ')" = \
	  "$(echo $CELLS | tr ' ' '\n' | sort | paste -sd ' ')" ]
	[ "$(jq -r .cell_id $OUT/report.jsonl | paste -sd ' ')" = "$CELLS" ]
}

@test "a run killed between the artifact and its line gets the line on the next run" {
	fake_poros bench run "$SPEC" 2>/dev/null
	# as if killed right after poros-arm wrote the artifact of the last cell
	sed -i '$d' $OUT/results.jsonl
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ ! -s "$FAKE_LOG" ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 8 ]
	[ "$(tail -n 1 $OUT/results.jsonl | jq -r .cell_id)" = resident_tiny_llama_bf16 ]
}

@test "bench matrix runs every model of the spec" {
	run -0 --separate-stderr fake_poros bench matrix "$SPEC" -o m
	[ "$(jq -r .cell.model.arch m/results.jsonl | sort -u | paste -sd ' ')" = "tiny_llama tiny_qwen2" ]
	grep -qF '<section class="model" id="model-tiny_qwen2">' m/report.html
	grep -qF '<section class="model" id="model-tiny_llama">' m/report.html
}

@test "bench compare prints a plain table, --md Markdown, --json JSONL, with ratios B/A in spec order" {
	FAKE_S_PER_STEP=0.5 fake_poros bench run "$SPEC" -o a 2>/dev/null
	FAKE_S_PER_STEP=0.25 fake_poros bench run "$SPEC" -o b 2>/dev/null
	run -0 --separate-stderr poros bench compare a b
	[ -z "$stderr" ]
	assert_line --index 0 "A = a, B = b (ratio B/A; noise: inside both runs' s/step spread)"
	assert_line --index 1 --regexp '^cell +A +B +s/step A +s/step B +B/A +tokens/s A'
	# spec order, not alphabetical; the fake's steps (all 0.5, all 0.25) have no
	# spread, so the ratio is not noise; tokens/s is the median's
	[ "$(echo "$output" | sed -n '3,$p' | cut -d ' ' -f 1 | paste -sd ' ')" = "$CELLS" ]
	assert_line --index 2 --regexp '^poros_tiny_qwen2_nf4 +ok +ok +0\.5 +0\.25 +0\.5 +256 +512 +2\.00 +1234 +1234 +1\.00$'
	run -0 --separate-stderr poros bench compare --md a b
	assert_line --index 0 "Comparing A = a with B = b (delta = B - A, ratio = B / A; \"noise\": inside the two runs' s/step spread)."
	assert_line --partial "| poros\\_tiny\\_qwen2\\_nf4 | ok | ok | 0.5 | 0.25 | -0.25 | 0.5 | 256 | 512 | +256 | 2.00 |"
	[ "$(echo "$output" | grep -c '^| [a-z]')" -eq 8 ]
	run -0 --separate-stderr poros bench compare --json a b
	[ "${#lines[@]}" -eq 8 ]
	echo "$output" | jq -e -s 'all(.[]; .in == "both" and .s_per_step.ratio == 0.5 and .s_per_step.delta == -0.25)'
}

@test "bench report re-renders from the artifacts alone" {
	fake_poros bench run "$SPEC" 2>/dev/null
	rm $OUT/report.html $OUT/report.md $OUT/results.jsonl
	run -0 --separate-stderr poros bench report $OUT
	[ -z "$output" ]
	[ "$(grep -c '<tr id="cell-' $OUT/report.html)" -eq 8 ]
	[ -s $OUT/report.md ]
	run -0 --separate-stderr poros bench report --md $OUT
	assert_line --index 0 "# Poros Bench report: driver\\_test"
	run -0 --separate-stderr poros bench report --html $OUT
	assert_line --index 0 "<!DOCTYPE html>"
	run -2 poros bench report --html --md $OUT
	run -2 --separate-stderr poros bench report nowhere
	[ "$stderr" = "poros: nowhere: not a directory" ]
}

@test "the spec's reporting section decides which reports are written" {
	sed 's|^reporting:|reporting:\n  html: false\n  emit_json: false|' "$SPEC" > no_html.yaml
	run -0 --separate-stderr fake_poros bench run no_html.yaml
	[ ! -e $OUT/report.html ]
	[ ! -e $OUT/report.jsonl ]
	[ -s $OUT/report.md ]
}

@test "spec values never reach a shell" {
	sed -e 's#display_name: tiny Qwen2#display_name: "$(touch pwned1)`touch pwned2`; touch pwned3 \x27 | touch pwned4"#' \
	    -e 's#output_dir: out/driver_test#output_dir: "out/with space; touch pwned5"#' "$SPEC" > evil.yaml
	run -0 --separate-stderr fake_poros bench run evil.yaml
	[ -z "$(find . -name 'pwned*')" ]
	[ "$(wc -l < 'out/with space; touch pwned5/results.jsonl')" -eq 8 ]
	grep -qF '## $(touch pwned1)\`touch pwned2\`; touch pwned3 '"'"' \| touch pwned4 (poros/tiny-qwen2' \
		'out/with space; touch pwned5/report.md'
}

@test "poros train runs poros-train on every poros and resident cell, summaries on stdout" {
	run -0 --separate-stderr fake_poros train "$SPEC"
	[ "${#lines[@]}" -eq 8 ]
	echo "$output" | jq -e -s 'all(.[]; .schema == "poros.summary/1" and .status == "ok")'
	[ -s $OUT/runs/poros_tiny_qwen2_nf4/events.jsonl ]
	[ -s $OUT/runs/resident_tiny_llama_bf16/adapter/adapter_model.safetensors ]
}

@test "poros train says the CPU backend once, up front, and gives each run --backend cpu" {
	run -0 --separate-stderr fake_poros train "$SPEC"
	[ "$(grep -c '^poros: no CUDA device: CPU backend$' <<< "$stderr")" -eq 1 ]
	[ "$(grep -n 'no CUDA device' <<< "$stderr" | cut -d: -f1)" -lt "$(grep -n -m1 '^poros: train ' <<< "$stderr" | cut -d: -f1)" ]
	[ "$(grep -c -- '--backend cpu' "$FAKE_LOG")" -eq 8 ]
	# with a device, neither the line nor the flag
	: > "$FAKE_LOG"
	run -0 --separate-stderr env FAKE_BACKEND=cuda POROS_TRAIN="$FAKE" poros train "$SPEC" -o out/dev
	[[ "$stderr" != *"CPU backend"* ]]
	run -1 grep -c -- '--backend' "$FAKE_LOG"
}

@test "real tiny CPU run on a CUDA build without a GPU: poros train says the backend once, no cudart text" {
	nvidia-smi -L >/dev/null 2>&1 && skip "a GPU is here"
	run -0 --separate-stderr poros-train --steps 1 --seq-len 16 --batch-size 1 --accum 1 --model poros/tiny-qwen2 --out one
	[ "$(grep -cE '^poros-train: (no CUDA device|built without CUDA): CPU backend$' <<< "$stderr")" -eq 1 ]
	[[ "$stderr" != *"insufficient"* ]]
	sed 's/^  steps: 4$/  steps: 2/' "$SPEC" > one.yaml
	run -0 --separate-stderr poros train one.yaml
	[ "$(grep -c 'CPU backend' <<< "$stderr")" -eq 1 ]
	[ "$(grep -c '^poros: no CUDA device: CPU backend$' <<< "$stderr")" -eq 1 ]
	[[ "$stderr" != *"insufficient"* ]]
}

@test "poros parity trains both schedules per model and precision and appends parity.jsonl" {
	run -0 --separate-stderr fake_poros parity "$SPEC"
	# one line per pair on the terminal, the records in parity.jsonl alone
	[ -z "$output" ]
	[ "$(grep -c 'blockwise and resident are bitwise exact over 4 steps$' <<< "$stderr")" -eq 4 ]
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: blockwise and resident are bitwise exact over 4 steps"* ]]
	[ "$(jq -r '"\(.arch)_\(.precision)"' $OUT/parity.jsonl | paste -sd ' ')" = "tiny_qwen2_nf4 tiny_qwen2_bf16 tiny_llama_nf4 tiny_llama_bf16" ]
	jq -e -s 'all(.[]; .bitwise_exact == true and .steps_compared == 4)' $OUT/parity.jsonl
	[ "$(wc -l < $OUT/parity.jsonl)" -eq 4 ]
	grep -qx 'poros_tiny_qwen2_nf4 blockwise' "$FAKE_LOG"
	grep -qx 'poros_tiny_qwen2_nf4 resident' "$FAKE_LOG"
	[ -s $OUT/parity/tiny_llama_bf16/resident/events.jsonl ]
	# parity.jsonl is appended, never rewritten
	fake_poros parity "$SPEC" > /dev/null 2>&1
	[ "$(wc -l < $OUT/parity.jsonl)" -eq 8 ]
}

@test "poros parity exits 1 when blockwise and resident are not bitwise exact" {
	run -1 --separate-stderr env FAKE_PERTURB=resident POROS_TRAIN="$FAKE" poros parity "$SPEC"
	[ -z "$output" ]
	[ "$(grep -c ': NOT bitwise exact: loss max |delta| ' <<< "$stderr")" -eq 4 ]
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: NOT bitwise exact: loss max |delta| 0 (step null), adapter max |delta| 0.03125 (base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight[3])"* ]]
	[[ "$stderr" == *"poros: 4 of 4 pairs are not bitwise exact"* ]]
	jq -e -s 'all(.[]; .bitwise_exact == false)' $OUT/parity.jsonl
}

@test "poros parity after bench run compares the bench's runs instead of training again" {
	fake_poros bench run "$SPEC" 2>/dev/null
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros parity "$SPEC"
	[ ! -s "$FAKE_LOG" ]
	[ -z "$output" ]
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: comparing the bench's runs of poros_tiny_qwen2_nf4 and resident_tiny_qwen2_nf4 (no training)"* ]]
	[ "$(grep -c 'bitwise exact over 4 steps$' <<< "$stderr")" -eq 4 ]
	[ "$(wc -l < $OUT/parity.jsonl)" -eq 8 ]
	[ ! -e $OUT/parity ]
	# a pair whose bench run is stale is trained again, the others compared
	jq -c '.config_hash = "sha256:\("0" * 64)"' $OUT/resident_tiny_llama_bf16.json > f.tmp && mv f.tmp $OUT/resident_tiny_llama_bf16.json
	run -0 --separate-stderr fake_poros parity "$SPEC"
	[ "$(sort "$FAKE_LOG" | paste -sd ,)" = "poros_tiny_llama_bf16 blockwise,poros_tiny_llama_bf16 resident" ]
	[ -s $OUT/parity/tiny_llama_bf16/resident/events.jsonl ]
}

@test "after poros parity, the bench report shows the parity results" {
	fake_poros bench run "$SPEC" 2>/dev/null
	fake_poros parity "$SPEC" > /dev/null 2>&1
	grep -qF '<td>nf4</td><td><span class="badge exact">exact</span></td><td class="num">4</td><td class="num">0</td><td class="num">0</td><td>--</td>' $OUT/report.html
}

@test "real tiny CPU runs: poros parity is bitwise exact for every model and precision" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	run -0 --separate-stderr poros parity "$POROS_ROOT/configs/bench/tiny.yaml" -o tiny
	[ -z "$output" ]
	[ "$(grep -c 'blockwise and resident are bitwise exact over 6 steps$' <<< "$stderr")" -eq 6 ]
	jq -e -s 'length == 6 and all(.[]; .bitwise_exact == true and .steps_compared == 6 and (.tensors | length) > 0)' tiny/parity.jsonl
}

@test "real tiny CPU runs: bench run trains every cell and reports it" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	run -0 --separate-stderr env -u POROS_TRAIN poros bench run "$SPEC"
	jq -e -s 'length == 8 and all(.[]; .status == "ok" and .metrics.s_per_step > 0 and .env.weights == "synthetic")' $OUT/results.jsonl
	# the trainer's maximum RSS, far above its allocator's peak (code, libraries, heap)
	jq -e -s 'all(.[]; .metrics.process_peak_rss_mb > .metrics.vram_peak_mb)' $OUT/results.jsonl
	# said once when the trainer runs on the CPU here, never with a GPU
	if jq -e -s 'all(.[]; .env.backend == "cpu")' $OUT/results.jsonl > /dev/null; then
		[ "$(grep -c '^poros: no CUDA device: CPU backend$' <<< "$stderr")" -eq 1 ]
	else
		[[ "$stderr" != *"CPU backend"* ]]
	fi
	[ "$(grep -c '<span class="badge ok">ok</span>' $OUT/report.html)" -eq 8 ]
	# the base's host copy, in the artifacts and the report: the same for both schedules
	jq -e -s 'all(.[]; .metrics.host_weights_mb > 0) and
		(map(select(.model_id == "poros/tiny-qwen2" and .precision == "bf16") | .metrics.host_weights_mb) | unique | length == 1)' \
		$OUT/results.jsonl
	# blockwise's layer checkpoints beside it; resident keeps none
	jq -e -s 'all(.[]; .method as $m | .metrics.host_checkpoints_mb | if $m == "poros" then . > 0 else . == 0 end)' \
		$OUT/results.jsonl
	[ "$(grep -c '^| resident | bf16 | \*\*ok\*\* | CPU | [0-9.]* [KMG]iB process RSS; allocator [0-9.]* [KMG]iB | CPU run | [0-9.]* [KMG]iB | ' $OUT/report.md)" -eq 2 ]
	# the poros and resident runs it made, compared: bit for bit
	jq -e -s 'length == 4 and all(.[]; .bitwise_exact == true and .steps_compared == 4 and (.tensors | length) > 0)' \
		$OUT/parity.jsonl
	[ "$(grep -c '<span class="badge exact">exact</span>' $OUT/report.html)" -eq 4 ]
	# each model's loss curves, read from the runs beside the artifacts, in
	# the driver's report and in bench report's
	! grep -qF 'No events.jsonl found' $OUT/report.html
	curves() { grep -o 'Training loss by optimizer step, [^(]*' | sort -u | wc -l; }
	[ "$(curves < $OUT/report.html)" -eq 2 ]
	rm $OUT/report.html
	run -0 --separate-stderr env -u POROS_TRAIN poros bench report $OUT
	[ "$(curves < $OUT/report.html)" -eq 2 ]
	run -0 --separate-stderr env -u POROS_TRAIN poros bench report --html $OUT
	[ "$(curves <<< "$output")" -eq 2 ]
}

@test "bench run compares each model's poros and resident runs once, into parity.jsonl and the report" {
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: poros_tiny_qwen2_nf4 and resident_tiny_qwen2_nf4 are bitwise exact over 4 steps"* ]]
	jq -e -s 'length == 4 and all(.[]; .bitwise_exact == true) and
		([.[] | "\(.arch)_\(.precision)"] | sort == ["tiny_llama_bf16", "tiny_llama_nf4", "tiny_qwen2_bf16", "tiny_qwen2_nf4"])' \
		$OUT/parity.jsonl
	grep -qF '<td>nf4</td><td><span class="badge exact">exact</span></td><td class="num">4</td><td class="num">0</td><td class="num">0</td><td>--</td>' $OUT/report.html
	# a run that measures nothing new compares nothing again
	fake_poros bench run "$SPEC" 2>/dev/null
	[ "$(wc -l < $OUT/parity.jsonl)" -eq 4 ]
	# --force measures every cell again, so every pair is compared again
	fake_poros bench run "$SPEC" --force 2>/dev/null
	[ "$(wc -l < $OUT/parity.jsonl)" -eq 8 ]
}

@test "bench run exits 1 when a model's poros and resident runs are not bitwise exact, and reports it" {
	run -1 --separate-stderr env FAKE_PERTURB=resident POROS_TRAIN="$FAKE" poros bench run "$SPEC"
	[[ "$stderr" == *"poros_tiny_llama_bf16 and resident_tiny_llama_bf16 are NOT bitwise exact: loss max |delta| 0, adapter max |delta| "* ]]
	[[ "$stderr" == *"poros: 4 cell(s), parity comparisons or reports failed"* ]]
	jq -e -s 'length == 4 and all(.[]; .bitwise_exact == false)' $OUT/parity.jsonl
	# the cells themselves are ok and measured
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' $OUT/results.jsonl
}

@test "a cell whose configuration changed is measured again and the reports hold only the new rows" {
	fake_poros bench run "$SPEC" 2>/dev/null
	sed -e 's/steps: 4/steps: 8/' -e 's/seq_len: 64/seq_len: 32/' "$SPEC" > edited.yaml
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run edited.yaml
	[[ "$stderr" == *"[1/8] poros_tiny_qwen2_nf4: its artifact measured another configuration: measuring it again"* ]]
	[[ "$stderr" != *"skipped"* ]]
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	# results.jsonl keeps the history; report.jsonl, the artifacts and the reports only the new configuration
	[ "$(wc -l < $OUT/results.jsonl)" -eq 16 ]
	[ "$(jq -r .cell_id $OUT/report.jsonl | paste -sd ' ')" = "$CELLS" ]
	jq -e -s 'all(.[]; .cell.training.steps == 8 and .cell.training.seq_len == 32)' $OUT/report.jsonl
	jq -e -s 'all(.[]; .cell.training.steps == 8)' $OUT/*_tiny_*.json
	jq -e -s --slurpfile spec $OUT/spec.json 'all(.[]; .config_hash == $spec[0].config_hashes[.cell_id])' $OUT/report.jsonl
	grep -qF '8 steps' $OUT/report.md
	! grep -qF '4 steps' $OUT/report.md
	# a third run has nothing left to do
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run edited.yaml
	[ ! -s "$FAKE_LOG" ]
	# and going back to the first spec measures its cells again: their artifacts were replaced
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	jq -e -s 'length == 8 and all(.[]; .cell.training.steps == 4)' $OUT/report.jsonl
}

@test "real tiny CPU runs: a model renamed in the spec is reported by its new name, its cells not measured again" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	sed 's/methods: \[poros, resident\]/methods: [poros]/; s/precisions: \[nf4, bf16\]/precisions: [bf16]/' "$SPEC" > small.yaml
	run -0 --separate-stderr env -u POROS_TRAIN poros bench run small.yaml
	jq -e -s 'length == 2 and all(.[]; .status == "ok")' $OUT/results.jsonl
	grep -qF 'tiny Qwen2' $OUT/report.md
	mkdir before && cp $OUT/*_tiny_*.json $OUT/results.jsonl before/
	# display_name is not in config_hash: the cells stay current
	sed 's/display_name: tiny Qwen2/display_name: Qwen2 renamed/' small.yaml > renamed.yaml
	run -0 --separate-stderr env -u POROS_TRAIN poros bench run renamed.yaml
	[[ "$stderr" == *"poros_tiny_qwen2_bf16: "*"skipped"* ]]
	[[ "$stderr" != *"measuring it again"* ]]
	for f in before/*; do cmp "$f" "$OUT/${f#before/}"; done
	# every report names the model as the spec does now; the other model is as it was
	for r in report.md report.html; do
		grep -qF 'Qwen2 renamed' $OUT/$r
		! grep -qF 'tiny Qwen2' $OUT/$r
		grep -qF 'tiny Llama' $OUT/$r
	done
	jq -e -s 'map(.cell.model.display_name) == ["Qwen2 renamed", "tiny Llama"]' $OUT/report.jsonl
	# the frozen artifacts keep the name they ran under
	jq -e '.cell.model.display_name == "tiny Qwen2"' $OUT/poros_tiny_qwen2_bf16.json
}

@test "bench report leaves out artifacts of cells no longer in the spec" {
	fake_poros bench run "$SPEC" 2>/dev/null
	sed 's/methods: \[poros, resident\]/methods: [poros]/' "$SPEC" > poros_only.yaml
	run -0 --separate-stderr fake_poros bench run poros_only.yaml
	[[ "$stderr" == *"poros-merge: note: artifacts of 4 cells left out: they measured another configuration than the spec's now, or the cell is no longer in it (resident_tiny_qwen2_nf4, resident_tiny_qwen2_bf16, resident_tiny_llama_nf4, resident_tiny_llama_bf16)"* ]]
	[ "$(jq -r .cell_id $OUT/report.jsonl | paste -sd ' ')" = "poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16 poros_tiny_llama_nf4 poros_tiny_llama_bf16" ]
	! grep -q '| resident |' $OUT/report.md
	grep -q '| poros |' $OUT/report.md
}

@test "artifacts carry method, model_id, precision, cell_id and config_hash at the top level" {
	fake_poros bench run "$SPEC" 2>/dev/null
	[ "$(jq -r 'select(.method == "poros") | .cell_id' $OUT/results.jsonl | paste -sd ' ')" = \
	  "poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16 poros_tiny_llama_nf4 poros_tiny_llama_bf16" ]
	[ "$(jq -r 'select(.precision == "bf16" and .model_id == "poros/tiny-llama") | .cell_id' $OUT/report.jsonl | paste -sd ' ')" = \
	  "poros_tiny_llama_bf16 resident_tiny_llama_bf16" ]
	jq -e -s 'all(.[]; .method == .cell.method and .model_id == .cell.model.model_id and .precision == .cell.precision
		and (.config_hash | test("^sha256:[0-9a-f]{64}$")))' $OUT/results.jsonl
}

@test "a second run on a busy directory exits 2 naming the PID that holds it, and changes nothing" {
	FAKE_SLEEP=20 POROS_TRAIN="$FAKE" poros bench run "$SPEC" 2>/dev/null &
	first=$!
	wait_until 200 0.05 test -s "$FAKE_LOG"
	(cd $OUT && sha256sum .lock spec.json cells/*) > before
	sed 's/steps: 4/steps: 8/' "$SPEC" > edited.yaml
	run -2 --separate-stderr fake_poros bench run edited.yaml
	[ -z "$output" ]
	[ "$stderr" = "poros: $OUT: another run is using this directory (PID $first holds $OUT/.lock): wait for it to end, or stop it" ]
	(cd $OUT && sha256sum .lock spec.json cells/*) > after
	cmp before after
	[ "$(wc -l < "$FAKE_LOG")" -eq 1 ]
	kill -TERM "$first"
	wait "$first" || true
}

@test "a driver killed with SIGKILL takes poros-arm and its trainer with it; the next run runs each cell once" {
	FAKE_PIDS="$BATS_TEST_TMPDIR/fake.pids" FAKE_SLEEP=30 POROS_TRAIN="$FAKE" poros bench run "$SPEC" 2>/dev/null &
	driver=$!
	wait_until 200 0.05 test -s fake.pids
	trainer=$(head -n 1 fake.pids)
	arm=$(pgrep -P "$driver" -x poros-arm)
	[ -n "$arm" ]
	kill -KILL "$driver"
	wait "$driver" || true
	# poros-arm ends its trainer (SIGTERM) and writes its artifact; the lock goes with the last of them
	wait_until 200 0.05 flock -n $OUT/.lock true
	! kill -0 "$trainer" 2>/dev/null
	[ "$(ps -o stat= -p "$arm" | tr -d ' ')" = "" ] || [ "$(ps -o stat= -p "$arm" | cut -c1)" = Z ]
	jq -e '.status == "error" and (.error | startswith("interrupted: poros-arm got SIGTERM"))' $OUT/poros_tiny_qwen2_nf4.json
	: > "$FAKE_LOG"
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	[ "$(sort "$FAKE_LOG" | uniq -d)" = "" ]
	jq -e -s 'length == 8 and all(.[]; .status == "ok")' $OUT/report.jsonl
}

@test "every subcommand has --help on stdout, exit 0" {
	for cmd in "bench run" "bench matrix" "bench collect" "bench compare" "bench report" train parity; do
		# shellcheck disable=SC2086
		run -0 --separate-stderr poros $cmd --help
		[ -z "$stderr" ]
		[[ "${lines[0]}" == "usage: poros $cmd"* ]]
	done
	run -0 poros bench --help
	assert_line --index 0 "usage: poros bench run SPEC [-o DIR] [--force]"
}

@test "bench run DIR says DIR is a directory; bench report on a directory without artifacts is an error" {
	mkdir somedir
	run -2 --separate-stderr poros bench run somedir
	[ "$stderr" = "poros: somedir: is a directory (expected a spec file, SPEC.yaml; a run's directory goes to poros bench report or compare)" ]
	run -2 --separate-stderr poros bench report somedir
	[ "$stderr" = "poros: somedir: no artifacts: no report written" ]
	[ ! -e somedir/report.html ]
	run -2 --separate-stderr poros bench report --md somedir
	[ -z "$output" ]
	[ "$stderr" = "poros: somedir: no artifacts: nothing to report" ]
	# a run directory whose artifacts all measured another configuration has nothing to report either
	fake_poros bench run "$SPEC" 2>/dev/null
	sed 's/steps: 4/steps: 8/' "$SPEC" > edited.yaml
	poros-expand edited.yaml > /dev/null
	run -2 --separate-stderr poros bench report $OUT
	[[ "$stderr" == *"poros: $OUT: no artifact of its spec's cells as they are now: no report written" ]]
}

@test "bench compare warns on each cell whose configuration differs, naming the fields, and on the environment" {
	fake_poros bench run "$SPEC" -o a 2>/dev/null
	sed -e 's/seq_len: 64/seq_len: 16/' -e 's#output_dir: out/driver_test#output_dir: b#' "$SPEC" > short.yaml
	fake_poros bench run short.yaml 2>/dev/null
	# B ran on another commit
	for f in b/*_tiny_*.json; do jq -c '.env.git_sha = "0123abcd"' "$f" > f.tmp && mv f.tmp "$f"; done
	run -0 --separate-stderr poros bench compare a b
	[ "$(echo "$stderr" | grep -c 'the configurations differ (tokens_per_step, training.seq_len)')" -eq 8 ]
	[[ "$stderr" == *"poros-merge: warning: poros_tiny_qwen2_nf4: the configurations differ (tokens_per_step, training.seq_len): its ratios compare different measurements"* ]]
	[[ "$stderr" == *'environments differ: git_sha: A "'*'", B "0123abcd"'* ]]
	run -0 --separate-stderr poros bench compare --json a b
	echo "$output" | jq -e -s 'length == 8 and all(.[]; .config_differs == ["tokens_per_step", "training.seq_len"])'
	run -0 --separate-stderr poros bench compare --md a b
	assert_line '> **Warning:** poros\_tiny\_qwen2\_nf4: the configurations differ: tokens\_per\_step, training.seq\_len'
	# the same configuration and environment: no warning
	run -0 --separate-stderr poros bench compare a a
	[ -z "$stderr" ]
}

@test "the driver finds its Slurm part in share/poros/lib: in its tree, installed, through a link; without it a clear error for --slurm" {
	mkdir run1
	# bench collect is the Slurm part's: it answers only when the file was sourced
	run -2 --separate-stderr poros bench collect run1
	[ "$stderr" = "poros: run1/slurm/all-cells.txt: no such file (bench collect finishes a bench run --slurm)" ]
	run -0 make -s -C "$POROS_ROOT" install DESTDIR="$BATS_TEST_TMPDIR/inst" PREFIX=/opt/poros
	local root="$BATS_TEST_TMPDIR/inst/opt/poros"
	[ -f "$root/share/poros/lib/slurm.sh" ]
	run -2 --separate-stderr "$root/bin/poros" bench collect run1
	[ "$stderr" = "poros: run1/slurm/all-cells.txt: no such file (bench collect finishes a bench run --slurm)" ]
	mkdir links
	ln -s "$root/bin/poros" links/poros
	run -2 --separate-stderr links/poros bench collect run1
	[ "$stderr" = "poros: run1/slurm/all-cells.txt: no such file (bench collect finishes a bench run --slurm)" ]
	# without it only the Slurm commands fail
	rm "$root/share/poros/lib/slurm.sh"
	run -1 --separate-stderr "$root/bin/poros" bench collect run1
	[ "$stderr" = "poros: $root/bin/../share/poros/lib/slurm.sh not found (the driver's Slurm part): run make install again, or run bin/poros from its tree" ]
	run -1 --separate-stderr "$root/bin/poros" bench run "$SPEC" --slurm
	[ "$stderr" = "poros: $root/bin/../share/poros/lib/slurm.sh not found (the driver's Slurm part): run make install again, or run bin/poros from its tree" ]
	[ ! -e $OUT ]
	run -0 "$root/bin/poros" --version
}

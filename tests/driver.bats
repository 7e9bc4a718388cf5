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
	[ "$stderr" = 'poros: unknown command "frobnicate" (expected bench, train, parity or help)' ]
	run -2 --separate-stderr poros bench frobnicate
	[ "$stderr" = 'poros: unknown bench command "frobnicate" (expected run, matrix, collect, compare or report)' ]
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

@test "without poros-train, bench run stops after expansion with a clear message" {
	mkdir lonely
	for t in poros poros-expand poros-arm poros-merge poros-render; do
		cp "$POROS_ROOT/bin/$t" lonely/
	done
	run -1 --separate-stderr env -u POROS_TRAIN PATH="$PWD/lonely:/usr/bin:/bin" lonely/poros bench run "$SPEC"
	[ -z "$output" ]
	# (poros-expand may warn first that it found no model config next to a copied binary)
	[ "${stderr##*$'\n'}" = "poros: poros-train is missing (bin/poros-train is not built yet): stopping after expansion; 8 cells are in $OUT/cells" ]
	[ "$(ls $OUT/cells | wc -l)" -eq 8 ]
	[ ! -e $OUT/results.jsonl ]
}

@test "bench run runs each cell once, appends one whole line per cell and writes the reports" {
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[ -z "$output" ]
	[[ "$stderr" == *"poros: 8 cells in $OUT"* ]]
	[[ "$stderr" == *"poros: [1/8] poros_tiny_qwen2_nf4"* ]]
	[[ "$stderr" == *"poros: [8/8] resident_tiny_llama_bf16 (eta "* ]]
	[[ "$stderr" == *"poros: reports in $OUT"* ]]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 8 ]
	[ "$(jq -r .cell_id $OUT/results.jsonl | paste -sd ' ')" = "$CELLS" ]
	jq -e -s 'all(.[]; .schema == "poros.artifact/1" and .status == "ok" and .metrics.s_per_step == 0.25)' $OUT/results.jsonl
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	grep -qx 'poros_tiny_qwen2_nf4 blockwise' "$FAKE_LOG"
	grep -qx 'resident_tiny_llama_bf16 resident' "$FAKE_LOG"
	grep -q '<tr id="cell-resident_tiny_llama_bf16"><td>resident</td><td>bf16</td><td><span class="badge ok">ok</span>' $OUT/report.html
	grep -qF '| poros | nf4 | **ok** | CPU | 1.21 GiB host | CPU run | 0.25 | 1 | 0 | 0.25 - 0.25 | 512 | 6.25 -&gt; 5.50 |' $OUT/report.md
	[ "$(jq -r .cell_id $OUT/report.jsonl | paste -sd ' ')" = "$CELLS" ]
}

@test "a second run skips cells with an ok artifact; --force runs them again" {
	fake_poros bench run "$SPEC" 2>/dev/null
	run -0 --separate-stderr fake_poros bench run "$SPEC"
	[[ "$stderr" == *"[3/8] resident_tiny_qwen2_nf4: ok artifact exists, skipped (--force runs it again)"* ]]
	[ "$(wc -l < "$FAKE_LOG")" -eq 8 ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 8 ]
	run -0 --separate-stderr fake_poros bench run "$SPEC" --force
	[ "$(wc -l < "$FAKE_LOG")" -eq 16 ]
	[ "$(wc -l < $OUT/results.jsonl)" -eq 16 ]
	# the report keeps one row per cell: the latest
	[ "$(wc -l < $OUT/report.jsonl)" -eq 8 ]
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
	for _ in $(seq 1 200); do
		[ -f $OUT/results.jsonl ] && [ "$(wc -l < $OUT/results.jsonl)" -ge 3 ] && break
		sleep 0.05
	done
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

@test "bench compare prints a Markdown table, --json JSONL, with ratios B/A" {
	FAKE_S_PER_STEP=0.5 fake_poros bench run "$SPEC" -o a 2>/dev/null
	FAKE_S_PER_STEP=0.25 fake_poros bench run "$SPEC" -o b 2>/dev/null
	run -0 --separate-stderr poros bench compare a b
	[ -z "$stderr" ]
	assert_line --index 0 "Comparing A = a with B = b (delta = B - A, ratio = B / A)."
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

@test "poros parity trains both schedules per model and precision and appends parity.jsonl" {
	run -0 --separate-stderr fake_poros parity "$SPEC"
	[ "${#lines[@]}" -eq 4 ]
	[ "$(echo "$output" | jq -r '"\(.arch)_\(.precision)"' | paste -sd ' ')" = "tiny_qwen2_nf4 tiny_qwen2_bf16 tiny_llama_nf4 tiny_llama_bf16" ]
	echo "$output" | jq -e -s 'all(.[]; .bitwise_exact == true and .steps_compared == 4)'
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: blockwise and resident are bitwise exact over 4 steps"* ]]
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
	[ "${#lines[@]}" -eq 4 ]
	[[ "$stderr" == *"poros: tiny_qwen2_nf4: NOT bitwise exact: loss max |delta| 0 (step null), adapter max |delta| 0.03125 (base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight[3])"* ]]
	[[ "$stderr" == *"poros: 4 of 4 pairs are not bitwise exact"* ]]
	jq -e -s 'all(.[]; .bitwise_exact == false)' $OUT/parity.jsonl
}

@test "after poros parity, the bench report shows the parity results" {
	fake_poros bench run "$SPEC" 2>/dev/null
	fake_poros parity "$SPEC" > /dev/null 2>&1
	grep -qF '<td>nf4</td><td class="num">4</td><td class="num">0</td><td class="num">0</td><td>--</td><td><span class="badge exact">exact</span></td>' $OUT/report.html
}

@test "real tiny CPU runs: poros parity is bitwise exact for every model and precision" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	run -0 --separate-stderr poros parity "$POROS_ROOT/configs/bench/tiny.yaml" -o tiny
	[ "${#lines[@]}" -eq 6 ]
	echo "$output" | jq -e -s 'all(.[]; .bitwise_exact == true and .steps_compared == 6 and (.tensors | length) > 0)'
}

@test "real tiny CPU runs: bench run trains every cell and reports it" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	run -0 --separate-stderr env -u POROS_TRAIN poros bench run "$SPEC"
	jq -e -s 'length == 8 and all(.[]; .status == "ok" and .metrics.s_per_step > 0 and .env.weights == "synthetic")' $OUT/results.jsonl
	[ "$(grep -c '<span class="badge ok">ok</span>' $OUT/report.html)" -eq 8 ]
}

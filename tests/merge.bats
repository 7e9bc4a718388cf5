#!/usr/bin/env bats
# poros-merge: results files and artifact directories -> one row per cell;
# --compare A B; --append-to FILE [--if-missing].

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	. "$POROS_ROOT/tests/fixtures/merge/artifact.bash"
}

@test "poros-merge --version and --help" {
	assert_version poros-merge
	assert_help poros-merge "usage: poros-merge [--spec SPEC.json] [FILE|DIR|- ...]"
}

@test "the latest finished artifact of a cell wins, whatever the input order" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.metrics.s_per_step = 1' > old.jsonl
	art poros tiny_qwen2 nf4 ok 2026-11-29T11:00:00Z '.metrics.s_per_step = 2' > new.jsonl
	run -0 --separate-stderr poros-merge old.jsonl new.jsonl
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.metrics.s_per_step == 2 and .finished_at == "2026-11-29T11:00:00Z"'
	run -0 poros-merge new.jsonl old.jsonl
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.metrics.s_per_step == 2'
}

@test "a later error artifact replaces an earlier ok one (latest wins, not best)" {
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z
		art poros tiny_qwen2 nf4 error 2026-11-29T12:00:00Z
	} > r.jsonl
	run -0 poros-merge r.jsonl
	echo "$output" | jq -e '.status == "error" and .error == "error: fixture reason"'
}

@test "fractional seconds order artifacts finished within one second" {
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00.75Z '.metrics.s_per_step = 3'
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00.5Z '.metrics.s_per_step = 4'
	} > r.jsonl
	run -0 poros-merge r.jsonl
	echo "$output" | jq -e '.metrics.s_per_step == 3'
}

@test "one row per cell, in order of first appearance, and the artifact is unchanged" {
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.wall_s = 1.5'
		art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:01Z
		art poros tiny_qwen2 bf16 oom 2026-11-29T10:00:02Z
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:03Z '.wall_s = 2.5'
	} > r.jsonl
	run -0 --separate-stderr poros-merge r.jsonl
	[ -z "$stderr" ]
	[ "$(echo "$output" | jq -r .cell_id | paste -sd ' ')" = "poros_tiny_qwen2_nf4 resident_tiny_qwen2_nf4 poros_tiny_qwen2_bf16" ]
	echo "${lines[0]}" | jq -e '.wall_s == 2.5'
	# every other field comes through exactly as written
	diff <(echo "${lines[1]}" | jq -S .) <(sed -n 2p r.jsonl | jq -S .)
}

@test "malformed lines are reported with file:line, skipped, and the exit status is 2" {
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z
		echo 'this is not json'
		echo '[1,2,3]'
		art poros tiny_qwen2 bf16 ok 2026-11-29T10:00:00Z '.status = "finished"'
		art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z
		art resident tiny_qwen2 bf16 ok 2026-11-29T10:00:00Z | head -c 200
	} > r.jsonl
	run -2 --separate-stderr poros-merge r.jsonl
	[ "${#lines[@]}" -eq 2 ]
	[ "$(echo "$output" | jq -r .cell_id | paste -sd ' ')" = "poros_tiny_qwen2_nf4 resident_tiny_qwen2_nf4" ]
	[[ "$stderr" == *"poros-merge: r.jsonl:2: skipped: not valid JSON at column 1"* ]]
	[[ "$stderr" == *"poros-merge: r.jsonl:3: skipped: not a JSON object"* ]]
	[[ "$stderr" == *'poros-merge: r.jsonl:4: skipped: status: unknown "finished" (expected one of: ok, oom, error, skipped)'* ]]
	[[ "$stderr" == *"poros-merge: r.jsonl:6: skipped: line does not end in a newline (truncated?)"* ]]
	[[ "$stderr" == *"poros-merge: 4 malformed lines or files skipped"* ]]
}

@test "an artifact without finished_at is not complete and is reported" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.finished_at = null' > r.jsonl
	art poros tiny_qwen2 bf16 ok 'yesterday' >> r.jsonl
	run -2 --separate-stderr poros-merge r.jsonl
	[ -z "$output" ]
	[[ "$stderr" == *"r.jsonl:1: skipped: finished_at: null (not a complete artifact)"* ]]
	[[ "$stderr" == *'r.jsonl:2: skipped: finished_at: not an ISO-8601 UTC time: "yesterday"'* ]]
}

@test "a record that is not an artifact is reported, not merged" {
	echo '{"schema":"poros.parity/1","run_a":"a","run_b":"b"}' > r.jsonl
	run -2 --separate-stderr poros-merge r.jsonl
	[ -z "$output" ]
	[[ "$stderr" == *'r.jsonl:1: skipped: not a run artifact (schema "poros.parity/1")'* ]]
}

@test "a directory contributes every *.json artifact and passes over spec.json" {
	mkdir out
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z | jq . > out/poros_tiny_qwen2_nf4.json
	art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > out/resident_tiny_qwen2_nf4.json
	echo '{"schema":"poros.spec/1","spec_id":"tiny"}' > out/spec.json
	echo 'temporary' > out/.poros_tiny_qwen2_bf16.json.tmp123
	echo 'ignored' > out/notes.txt
	run -0 --separate-stderr poros-merge out
	[ -z "$stderr" ]
	[ "$(echo "$output" | jq -r .cell_id | paste -sd ' ')" = "poros_tiny_qwen2_nf4 resident_tiny_qwen2_nf4" ]
}

@test "a broken artifact file in a directory is reported with its path" {
	mkdir out
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > out/poros_tiny_qwen2_nf4.json
	printf '{"schema":"poros.artifact/1",\n"cell_id": ' > out/resident_tiny_qwen2_nf4.json
	run -2 --separate-stderr poros-merge out
	[ "${#lines[@]}" -eq 1 ]
	[[ "$stderr" =~ "poros-merge: out/resident_tiny_qwen2_nf4.json:2:"[0-9]+": not valid JSON (skipped)" ]]
}

@test "results files, directories and stdin merge together" {
	mkdir out
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.wall_s = 1' > out/poros_tiny_qwen2_nf4.json
	art poros tiny_qwen2 nf4 ok 2026-11-29T09:00:00Z '.wall_s = 2' > old.jsonl
	art resident tiny_llama bf16 ok 2026-11-29T10:00:00Z > piped.jsonl
	run -0 bash -c 'poros-merge old.jsonl out - < piped.jsonl'
	[ "${#lines[@]}" -eq 2 ]
	echo "${lines[0]}" | jq -e '.cell_id == "poros_tiny_qwen2_nf4" and .wall_s == 1'
	echo "${lines[1]}" | jq -e '.cell_id == "resident_tiny_llama_bf16"'
}

@test "with no arguments poros-merge reads stdin" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > r.jsonl
	run -0 bash -c 'poros-merge < r.jsonl'
	echo "$output" | jq -e '.cell_id == "poros_tiny_qwen2_nf4"'
}

@test "an input that cannot be read is exit 1" {
	run -1 --separate-stderr poros-merge missing.jsonl
	[ "$stderr" = "poros-merge: missing.jsonl: No such file or directory" ]
}

# --- --compare -----------------------------------------------------------------

make_compare_runs() {
	mkdir -p a b
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z \
		'.metrics.s_per_step = 2 | .metrics.tokens_per_s = 100 | .metrics.vram_peak_mb = 1000' > a/results.jsonl
	art poros tiny_qwen2 nf4 ok 2026-11-29T11:00:00Z \
		'.metrics.s_per_step = 1.5 | .metrics.tokens_per_s = 150 | .metrics.vram_peak_mb = 500' > b/results.jsonl
	art peft tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z >> a/results.jsonl
	art resident tiny_qwen2 nf4 ok 2026-11-29T11:00:00Z '.metrics.s_per_step = 0.5' >> b/results.jsonl
}

@test "--compare gives each side, the delta B-A and the ratio B/A" {
	make_compare_runs
	run -0 --separate-stderr poros-merge --compare a/results.jsonl b/results.jsonl
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 3 ]
	echo "${lines[0]}" | jq -e '.schema == "poros.compare/1" and .cell_id == "poros_tiny_qwen2_nf4" and .in == "both"
		and .status_a == "ok" and .status_b == "ok"
		and .config_differs == []
		and .s_per_step == {"a": 2, "b": 1.5, "delta": -0.5, "ratio": 0.75, "noise": true}
		and .tokens_per_s == {"a": 100, "b": 150, "delta": 50, "ratio": 1.5, "noise": true}
		and .vram_peak_mb == {"a": 1000, "b": 500, "delta": -500, "ratio": 0.5, "noise": null}'
}

@test "--compare lists cells present in one run only as such" {
	make_compare_runs
	run -0 poros-merge --compare a/results.jsonl b/results.jsonl
	echo "${lines[1]}" | jq -e '.cell_id == "peft_tiny_qwen2_nf4" and .in == "a" and .status_a == "ok" and .status_b == null
		and .s_per_step.b == null and .s_per_step.delta == null and .s_per_step.ratio == null'
	echo "${lines[2]}" | jq -e '.cell_id == "resident_tiny_qwen2_nf4" and .in == "b" and .status_a == null
		and .s_per_step == {"a": null, "b": 0.5, "delta": null, "ratio": null, "noise": null}'
}

@test "--compare gives no ratio to a zero" {
	mkdir a b
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 0' > a/r.jsonl
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 10' > b/r.jsonl
	run -0 poros-merge --compare a/r.jsonl b/r.jsonl
	echo "$output" | jq -e '.vram_peak_mb == {"a": 0, "b": 10, "delta": 10, "ratio": null, "noise": null}'
}

@test "--compare reads artifact directories" {
	make_compare_runs
	jq -c 'select(.cell_id == "poros_tiny_qwen2_nf4")' a/results.jsonl > a/poros_tiny_qwen2_nf4.json
	jq -c 'select(.cell_id == "poros_tiny_qwen2_nf4")' b/results.jsonl > b/poros_tiny_qwen2_nf4.json
	run -0 poros-merge --compare a b
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.s_per_step.ratio == 0.75'
}

@test "--compare warns on stderr when the two runs' environments differ" {
	make_compare_runs
	jq -c '.env.gpu_name = "NVIDIA H200" | .env.driver = "580.1"' a/results.jsonl > a/h200.jsonl
	jq -c '.env.gpu_name = "RTX 3090" | .env.driver = "550.2"' b/results.jsonl > b/3090.jsonl
	run -0 --separate-stderr poros-merge --compare a/h200.jsonl b/3090.jsonl
	[ "${#lines[@]}" -eq 3 ]
	[ "$stderr" = 'poros-merge: warning: the two runs'"'"' environments differ: gpu_name: A "NVIDIA H200", B "RTX 3090"; driver: A "580.1", B "550.2"' ]
}

@test "--compare --md prints a Markdown table with deltas, ratios and one-sided cells" {
	make_compare_runs
	run -0 --separate-stderr poros-merge --compare --md a/results.jsonl b/results.jsonl
	[ -z "$stderr" ]
	assert_line --index 0 "Comparing A = a/results.jsonl with B = b/results.jsonl (delta = B - A, ratio = B / A; \"noise\": inside the two runs' s/step spread)."
	assert_line "| poros\\_tiny\\_qwen2\\_nf4 | ok | ok | 2.00 | 1.50 | -0.5 | 0.75 (noise) | 100 | 150 | +50.0 | 1.50 (noise) | 1000 | 500 | -500 | 0.5 |"
	assert_line --partial "| peft\\_tiny\\_qwen2\\_nf4 | ok | only in A | "
	assert_line --partial "| resident\\_tiny\\_qwen2\\_nf4 | only in B | ok | -- | 0.5 | -- | -- |"
	# every row has as many cells as the header
	header_cells=$(echo "${lines[1]}" | tr -cd '|' | wc -c)
	for l in "${lines[@]:1}"; do
		[ "$(echo "$l" | sed 's/\\|//g' | tr -cd '|' | wc -c)" -eq "$header_cells" ]
	done
}

@test "--compare --md puts the environment warning above the table" {
	make_compare_runs
	jq -c '.env.torch = "2.4.0"' a/results.jsonl > a/t.jsonl
	jq -c '.env.torch = "2.5.1"' b/results.jsonl > b/t.jsonl
	run -0 --separate-stderr poros-merge --compare --md a/t.jsonl b/t.jsonl
	assert_line '> **Warning:** the environments differ: torch: A "2.4.0", B "2.5.1"'
}

@test "--compare compares only the environment fields both runs probed" {
	make_compare_runs
	# A's arm never probed python or torch (null); B's did; their CPUs differ
	jq -c '.env.cpu = "AMD EPYC"' a/results.jsonl > a/t.jsonl
	jq -c '.env.python = "3.11.7" | .env.torch = "2.5.1" | .env.cpu = "Intel Xeon"' b/results.jsonl > b/t.jsonl
	run -0 --separate-stderr poros-merge --compare a/t.jsonl b/t.jsonl
	[ "$stderr" = 'poros-merge: warning: the two runs'"'"' environments differ: cpu: A "AMD EPYC", B "Intel Xeon"' ]
	run -0 --separate-stderr poros-merge --compare --md a/t.jsonl b/t.jsonl
	assert_line '> **Warning:** the environments differ: cpu: A "AMD EPYC", B "Intel Xeon"'
	jq -c '.env.cpu = "AMD EPYC"' b/t.jsonl > b/same.jsonl
	run -0 --separate-stderr poros-merge --compare a/t.jsonl b/same.jsonl
	[ -z "$stderr" ]
}

@test "--compare names the memory column for what it is when both runs ran on the CPU backend" {
	make_compare_runs
	run -0 --separate-stderr poros-merge --compare --table a/results.jsonl b/results.jsonl
	assert_line --index 1 --regexp ' VRAM peak MiB A +VRAM peak MiB B +B/A$'
	for d in a b; do jq -c '.env.backend = "cpu"' $d/results.jsonl > $d/cpu.jsonl; done
	run -0 --separate-stderr poros-merge --compare --table a/cpu.jsonl b/cpu.jsonl
	assert_line --index 1 --regexp ' host alloc peak MiB A +host alloc peak MiB B +B/A$'
	run -0 --separate-stderr poros-merge --compare --md a/cpu.jsonl b/cpu.jsonl
	assert_line --partial '| host alloc peak MiB A | host alloc peak MiB B | delta | B/A |'
	# one GPU run among them: the column is the device's again
	jq -c '.env.backend = "cuda"' b/results.jsonl > b/gpu.jsonl
	run -0 --separate-stderr poros-merge --compare --md a/cpu.jsonl b/gpu.jsonl
	assert_line --partial '| VRAM peak MiB A | VRAM peak MiB B | delta | B/A |'
}

@test "--md without --compare, or --compare with one run, is a usage error" {
	run -2 poros-merge --md x
	run -2 --separate-stderr poros-merge --compare x
	[[ "$stderr" == "usage: poros-merge"* ]]
}

# --- --append-to ----------------------------------------------------------------

@test "--append-to appends each stdin line whole and compact" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z | jq -c . > one.jsonl
	printf '{ "a" : 1 }\n' >> one.jsonl
	run -0 --separate-stderr bash -c 'poros-merge --append-to results.jsonl < one.jsonl'
	[ -z "$output" ] && [ -z "$stderr" ]
	[ "$(wc -l < results.jsonl)" -eq 2 ]
	[ "$(sed -n 2p results.jsonl)" = '{"a":1}' ]
	jq -e -s 'length == 2' results.jsonl
}

@test "--append-to starts a fresh line after a torn last line" {
	printf '{"cell_id":"killed' > results.jsonl
	run -0 --separate-stderr bash -c 'echo "{\"ok\":true}" | poros-merge --append-to results.jsonl'
	[[ "$stderr" == *"results.jsonl: last line is incomplete (a killed writer?); starting a new line"* ]]
	[ "$(sed -n 2p results.jsonl)" = '{"ok":true}' ]
	[ "$(wc -l < results.jsonl)" -eq 2 ]
}

@test "--append-to refuses a malformed line (exit 2) and appends the good ones" {
	printf '{"a":1}\nnot json\n{"b":2}\n' > in.jsonl
	run -2 --separate-stderr bash -c 'poros-merge --append-to results.jsonl < in.jsonl'
	[[ "$stderr" == *"<stdin>:2: not appended: not valid JSON at column 1"* ]]
	[ "$(cat results.jsonl)" = $'{"a":1}\n{"b":2}' ]
}

@test "--append-to into a directory that does not exist is exit 1" {
	run -1 --separate-stderr bash -c 'echo "{}" | poros-merge --append-to nowhere/results.jsonl'
	[[ "$stderr" == "poros-merge: nowhere/results.jsonl: appending a line failed: No such file or directory" ]]
}

@test "concurrent --append-to writers never interleave long lines" {
	# 16 writers, each one line of about 200 KB (far above PIPE_BUF)
	for i in $(seq 1 16); do
		jq -nc --arg i "$i" '{writer: $i, pad: ("x" * 200000)}' > "line$i"
	done
	for i in $(seq 1 16); do
		poros-merge --append-to results.jsonl < "line$i" &
	done
	wait
	[ "$(wc -l < results.jsonl)" -eq 16 ]
	run -0 jq -r .writer results.jsonl
	[ "$(echo "$output" | sort -n | paste -sd ' ')" = "$(seq 1 16 | paste -sd ' ')" ]
}

# --- --append-to --if-missing (the driver's heal) -------------------------------

@test "--if-missing appends an artifact file only when no line has its cell_id and finished_at" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > a.json
	art poros tiny_qwen2 bf16 ok 2026-11-29T10:00:00Z > b.json
	jq -c . a.json > results.jsonl
	run -0 --separate-stderr poros-merge --append-to results.jsonl --if-missing a.json b.json
	[ -z "$output" ] && [ -z "$stderr" ]
	[ "$(jq -r .cell_id results.jsonl | paste -sd ' ')" = "poros_tiny_qwen2_nf4 poros_tiny_qwen2_bf16" ]
	[ "$(sed -n 2p results.jsonl)" = "$(jq -c . b.json)" ]
	# again: both are there, nothing changes
	cp results.jsonl before
	run -0 poros-merge --append-to results.jsonl --if-missing a.json b.json
	cmp before results.jsonl
}

@test "--if-missing: a later artifact of the same cell is another record, appended" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z | jq -c . > results.jsonl
	art poros tiny_qwen2 nf4 error 2026-11-29T12:00:00Z > a.json
	run -0 poros-merge --append-to results.jsonl --if-missing a.json
	[ "$(jq -r '.finished_at + " " + .status' results.jsonl | paste -sd ,)" = "2026-11-29T10:00:00Z ok,2026-11-29T12:00:00Z error" ]
	# the same finished_at under another cell_id is no match either
	art poros tiny_llama nf4 ok 2026-11-29T10:00:00Z > c.json
	run -0 poros-merge --append-to results.jsonl --if-missing c.json
	[ "$(wc -l < results.jsonl)" -eq 3 ]
}

@test "--if-missing creates the results file, reads stdin lines with -, and appends a repeated input once" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > a.json
	run -0 --separate-stderr bash -c 'cat a.json a.json | poros-merge --append-to results.jsonl --if-missing -'
	[ "$(wc -l < results.jsonl)" -eq 1 ]
	run -0 --separate-stderr bash -c 'poros-merge --append-to results.jsonl --if-missing < a.json'
	[ "$(wc -l < results.jsonl)" -eq 1 ]
}

@test "--if-missing passes over malformed lines of the results file and a torn last line" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > a.json
	{ echo 'not json'; jq -c . a.json; printf '{"cell_id":"poros_tiny_qwen2_bf16","fin'; } > results.jsonl
	run -0 poros-merge --append-to results.jsonl --if-missing a.json
	[ "$(wc -l < results.jsonl)" -eq 2 ]
	art poros tiny_qwen2 bf16 ok 2026-11-29T10:00:00Z > b.json
	run -0 --separate-stderr poros-merge --append-to results.jsonl --if-missing b.json
	[[ "$stderr" == *"results.jsonl: last line is incomplete (a killed writer?); starting a new line"* ]]
	[ "$(tail -n 1 results.jsonl)" = "$(jq -c . b.json)" ]
}

@test "--if-missing refuses a malformed or keyless artifact (exit 2), a missing one (exit 1), and still appends the rest" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > a.json
	echo '{"cell_id": "x"' > bad.json
	echo '{"cell_id": "x"}' > keyless.json
	run -2 --separate-stderr poros-merge --append-to results.jsonl --if-missing bad.json keyless.json a.json
	[[ "$stderr" == *"poros-merge: not appended: bad.json"* ]]
	[[ "$stderr" == *'poros-merge: keyless.json: not appended: no "cell_id" and "finished_at" strings (expected an artifact)'* ]]
	[ "$(cat results.jsonl)" = "$(jq -c . a.json)" ]
	run -1 --separate-stderr poros-merge --append-to results.jsonl --if-missing nowhere.json
	[[ "$stderr" == *"nowhere.json"* ]]
	# --if-missing belongs to --append-to
	run -2 --separate-stderr poros-merge --if-missing a.json
	[[ "$stderr" == "usage: poros-merge"* ]]
}

@test "concurrent --if-missing healers append a record once" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > a.json
	for _ in $(seq 1 8); do
		poros-merge --append-to results.jsonl --if-missing a.json &
	done
	wait
	[ "$(wc -l < results.jsonl)" -eq 1 ]
}

@test "--spec keeps only the artifacts of the spec's cells as they are now, in spec order" {
	spec="$POROS_ROOT/tests/fixtures/driver/two_models.yaml"
	export POROS_TRAIN="$POROS_ROOT/tests/fixtures/driver/fake-train"
	poros-expand -o o "$spec" | xargs poros-arm > old.jsonl 2>/dev/null
	[ "$(wc -l < old.jsonl)" -eq 8 ]
	sed 's/steps: 4/steps: 8/' "$spec" > edited.yaml
	# two cells of the edited spec, run in the reverse of spec order
	poros-expand -o o edited.yaml > paths
	poros-arm o/cells/resident_tiny_llama_bf16.json o/cells/poros_tiny_qwen2_bf16.json > new.jsonl 2>/dev/null
	run -0 --separate-stderr poros-merge --spec o/spec.json old.jsonl new.jsonl o
	[ "$(echo "$output" | jq -r .cell_id | paste -sd ' ')" = "poros_tiny_qwen2_bf16 resident_tiny_llama_bf16" ]
	echo "$output" | jq -e -s 'all(.[]; .cell.training.steps == 8)'
	[[ "$stderr" == "poros-merge: note: artifacts of 8 cells left out: they measured another configuration than the spec's now, or the cell is no longer in it (poros_tiny_qwen2_nf4, poros_tiny_qwen2_bf16, resident_tiny_qwen2_nf4, resident_tiny_qwen2_bf16 and 4 more)" ]]
	# an artifact whose cell was edited by hand, its config_hash kept, does not pass for the cell
	jq -c '.cell.lora.rank = 64' new.jsonl > forged.jsonl
	run -2 --separate-stderr poros-merge --spec o/spec.json forged.jsonl
	[ -z "$output" ]
	[[ "$stderr" == *"poros-merge: o/spec.json: no artifact of its cells as they are now" ]]
	# nor does one from before config hashes
	jq -c 'del(.config_hash)' new.jsonl > legacy.jsonl
	run -2 --separate-stderr poros-merge --spec o/spec.json legacy.jsonl
	[ -z "$output" ]
	# a spec.json without config_hashes cannot say what is current
	jq -c 'del(.config_hashes)' o/spec.json > old-spec.json
	run -2 --separate-stderr poros-merge --spec old-spec.json new.jsonl
	[ "$stderr" = "poros-merge: --spec: old-spec.json: no cells or config_hashes (written by an older poros-expand: expand the spec again)" ]
}

@test "--compare keeps A's spec order and gives no noise verdict without a spread" {
	spec="$POROS_ROOT/tests/fixtures/driver/two_models.yaml"
	export POROS_TRAIN="$POROS_ROOT/tests/fixtures/driver/fake-train"
	poros-expand -o a "$spec" | xargs poros-arm > /dev/null 2>&1
	poros-expand -o b "$spec" | xargs poros-arm > /dev/null 2>&1
	for f in b/*_tiny_*.json; do jq -c '.metrics.s_per_step_min = null | .metrics.s_per_step_max = null' "$f" > f.tmp && mv f.tmp "$f"; done
	run -0 --separate-stderr poros-merge --compare a b
	[ "$(echo "$output" | jq -r .cell_id | paste -sd ' ')" = "$(jq -r '.cells | join(" ")' a/spec.json)" ]
	echo "$output" | jq -e -s 'all(.[]; .s_per_step.noise == null and .tokens_per_s.noise == null and .config_differs == [])'
	run -0 --separate-stderr poros-merge --compare --table a b
	assert_line --index 2 --regexp '^poros_tiny_qwen2_nf4 +ok +ok +0\.25 +0\.25 +1\.00 \(no spread\) '
}

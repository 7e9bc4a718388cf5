#!/usr/bin/env bats
# poros-cell: get (fields of records), state (where each cell of a run
# stands) and pairs (poros and resident cells for parity).

bats_require_minimum_version 1.5.0

FIX_REL=tests/fixtures/cell

# One bench run of the driver fixture with the fake trainer, shared by the
# state and pairs tests (each works on a copy).
setup_file() {
	local root
	root="$(cd "$(dirname "$BATS_TEST_FILENAME")/.." && pwd)"
	cd "$BATS_FILE_TMPDIR" || return 1
	POROS_TRAIN="$root/tests/fixtures/driver/fake-train" FAKE_LOG="$BATS_FILE_TMPDIR/fake.log" \
		"$root/bin/poros" bench run -o run "$root/tests/fixtures/driver/two_models.yaml" 2> run.log
}

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/$FIX_REL"
	cp -R "$BATS_FILE_TMPDIR/run" run
}

# artifact_with JQ_PROGRAM ID: rewrites run/ID.json through jq.
artifact_with() {
	jq -c "$1" "run/$2.json" > edited.json && mv edited.json "run/$2.json"
}

@test "poros-cell --version, --help and usage" {
	assert_version poros-cell
	assert_help poros-cell "usage: poros-cell get [--json | --raw] [--null TEXT] FIELD[,FIELD...] [FILE|- ...]"
	run -0 --separate-stderr poros-cell get --help
	assert_line --index 0 "usage: poros-cell get [--json | --raw] [--null TEXT] FIELD[,FIELD...] [FILE|- ...]"
	run -2 --separate-stderr poros-cell
	[ -z "$output" ]
	[[ "$stderr" == "usage: poros-cell get "* ]]
}

@test "get writes each record's fields on one line, tab-separated, strings escaped" {
	run -0 --separate-stderr poros-cell get s,e,big,neg,int,tiny,obj,obj.k,nothing "$FIX/values.jsonl"
	[ "$output" = "ok	line one\\nline two	9007199254740992	-0.5	24	1.1920928955078125e-07	{\"k\":[true,null]}	[true,null]	" ]
	[ -z "$stderr" ]
	# one field of each input in turn: FILE.json one object, others and - JSON Lines
	run -0 poros-cell get cell_id "$FIX/cell.json" - "$FIX/values.jsonl" <<< '{"cell_id":"from_stdin"}'
	assert_output $'poros_tiny_qwen2_nf4\nfrom_stdin'
}

@test "get: null and missing print as --null TEXT; --json keeps them null; --raw unescapes one string" {
	run -0 poros-cell get --null - cell_id,training.eval_dataset,hardware.vram_gb "$FIX/cell.json"
	assert_output "poros_tiny_qwen2_nf4	-	24"
	run -0 poros-cell get --null null s,nothing,nothing.below "$FIX/values.jsonl"
	assert_output "ok	null	null"
	run -0 poros-cell get --json s,int,nothing,obj "$FIX/values.jsonl"
	assert_output '["ok",24,null,{"k":[true,null]}]'
	run -0 poros-cell get --raw e "$FIX/values.jsonl"
	assert_output $'line one\nline two'
	run -0 poros-cell get a - <<< '{"a":"back\\slash"}'
	assert_output 'back\\slash'
	run -0 poros-cell get --raw a - <<< '{"a":"back\\slash"}'
	assert_output 'back\slash'
}

@test "get reports a bad record with file:line, skips it and still writes the good ones (exit 2)" {
	cd "$FIX"
	run -2 --separate-stderr poros-cell get a mixed.jsonl
	[ "$output" = $'1\nx\\ty\\\\z\\nw' ]
	[ "$stderr" = "poros-cell: mixed.jsonl:2: not valid JSON at column 6" ]
}

@test "every refusal of get_bad.tsv: its exit status and its message" {
	cd "$FIX"
	local args want_rc want_err n=0
	while IFS=$'\t' read -r args want_rc want_err; do
		case $args in '#'*|'') continue ;; esac
		n=$((n + 1))
		# shellcheck disable=SC2086 # the arguments are split at blanks
		run --separate-stderr poros-cell $args
		[ "$status" = "$want_rc" ] || { echo "poros-cell $args: exit $status, want $want_rc ($stderr)"; return 1; }
		[ "${stderr%%$'\n'*}" = "$want_err" ] || { echo "poros-cell $args: stderr \"$stderr\", want \"$want_err\""; return 1; }
		[ "$want_rc" != 1 ] && [ "$want_rc" != 2 ] || [[ "$stderr" != *$'\n'* ]] || [[ "$want_err" == usage:* ]] ||
			{ echo "poros-cell $args: more than one line on stderr: $stderr"; return 1; }
	done < get_bad.tsv
	[ "$n" -ge 15 ]
}

@test "get refuses a misspelt field of a cell, but not of other records" {
	run -2 --separate-stderr poros-cell get hardware.vram_gbb "$FIX/cell.json"
	[ -z "$output" ]
	[ "$stderr" = "poros-cell: $FIX/cell.json: hardware.vram_gbb: not a field of poros.cell/1" ]
	run -0 poros-cell get hardware.vram_gbb - <<< '{"schema":"poros.plan/1"}'
	assert_output ""
}

@test "state: every cell ok after a run, in spec order" {
	run -0 --separate-stderr poros-cell state run
	[ "$output" = "$(jq -r '.cells[] + "	ok"' run/spec.json)" ]
	[ "${#lines[@]}" -eq 8 ]
	[ -z "$stderr" ]
}

@test "state: none, failed and stale, as the artifact says" {
	rm run/poros_tiny_qwen2_bf16.json
	artifact_with '.status = "error" | .error = "boom"' resident_tiny_qwen2_nf4
	artifact_with '.config_hash = "sha256:0000000000000000000000000000000000000000000000000000000000000000"' poros_tiny_llama_nf4
	# the cell it carries changed under the same hash: it measured something else
	artifact_with '.cell.training.seq_len = 32 | .cell.tokens_per_step = 64' poros_tiny_llama_bf16
	echo 'not json' > run/resident_tiny_llama_nf4.json
	artifact_with 'del(.config_hash)' resident_tiny_llama_bf16
	run -0 --separate-stderr poros-cell state run
	[ "$output" = "poros_tiny_qwen2_nf4	ok
poros_tiny_qwen2_bf16	none
resident_tiny_qwen2_nf4	failed
resident_tiny_qwen2_bf16	ok
poros_tiny_llama_nf4	stale
poros_tiny_llama_bf16	stale
resident_tiny_llama_nf4	stale
resident_tiny_llama_bf16	stale" ]
}

@test "state and pairs refuse a spec.json that is not one, naming it (exit 2)" {
	jq -c 'del(.config_hashes.poros_tiny_llama_nf4)' run/spec.json > s && mv s run/spec.json
	run -2 --separate-stderr poros-cell state run
	[ "$stderr" = "poros-cell: run/spec.json: no config_hash for poros_tiny_llama_nf4" ]
	echo '{"schema":"poros.cell/1"}' > run/spec.json
	run -2 --separate-stderr poros-cell pairs run
	[ "$stderr" = 'poros-cell: run/spec.json: not a spec.json (schema "poros.spec/1")' ]
	[ -z "$output" ]
}

@test "pairs: each model and precision's poros and resident cells, ready, in spec order" {
	run -0 --separate-stderr poros-cell pairs run
	[ "$output" = "tiny_qwen2	nf4	poros_tiny_qwen2_nf4	resident_tiny_qwen2_nf4	ready	runs/poros_tiny_qwen2_nf4	runs/resident_tiny_qwen2_nf4
tiny_qwen2	bf16	poros_tiny_qwen2_bf16	resident_tiny_qwen2_bf16	ready	runs/poros_tiny_qwen2_bf16	runs/resident_tiny_qwen2_bf16
tiny_llama	nf4	poros_tiny_llama_nf4	resident_tiny_llama_nf4	ready	runs/poros_tiny_llama_nf4	runs/resident_tiny_llama_nf4
tiny_llama	bf16	poros_tiny_llama_bf16	resident_tiny_llama_bf16	ready	runs/poros_tiny_llama_bf16	runs/resident_tiny_llama_bf16" ]
	[ -z "$stderr" ]
}

@test "pairs: differ, unmeasured and no-adapter say why a pair is not ready" {
	jq -c '.poros.block_size = 1' run/cells/resident_tiny_qwen2_nf4.json > c && mv c run/cells/resident_tiny_qwen2_nf4.json
	rm run/resident_tiny_qwen2_bf16.json
	rm -r run/runs/poros_tiny_llama_nf4/adapter
	artifact_with '.status = "oom" | .error = "out of memory"' poros_tiny_llama_bf16
	run -0 --separate-stderr poros-cell pairs run
	[ "$(cut -f 1,2,5,6 <<< "$output")" = "tiny_qwen2	nf4	differ	-
tiny_qwen2	bf16	unmeasured	-
tiny_llama	nf4	no-adapter	-
tiny_llama	bf16	unmeasured	-" ]
}

@test "pairs: a cell file that is not a valid cell is named (exit 2); the other pairs are still written" {
	jq -c '.precision = "bf16"' run/cells/resident_tiny_qwen2_nf4.json > c && mv c run/cells/resident_tiny_qwen2_nf4.json
	run -2 --separate-stderr poros-cell pairs run
	[ "$stderr" = 'poros-cell: run/cells/resident_tiny_qwen2_nf4.json: cell_id: "resident_tiny_qwen2_nf4" does not match method, arch and precision ("resident_tiny_qwen2_bf16")' ]
	[ "$(cut -f 3 <<< "$output" | paste -sd ' ')" = "poros_tiny_qwen2_bf16 poros_tiny_llama_nf4 poros_tiny_llama_bf16" ]
}

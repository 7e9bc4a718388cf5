#!/usr/bin/env bats
# Reliability and security across every tool: bad input of every kind, crash
# safety of a bench run (SIGKILL, a full disk), containment of paths and
# values, bounds on a rogue child, and a memcheck run of the trainer.

bats_require_minimum_version 1.5.0

setup_file() {
	# One 100 MB line (a JSON object, so the readers parse all of it) shared by
	# the tests that need it: writing it once keeps the file fast.
	BIG="$BATS_FILE_TMPDIR/big.jsonl"
	{
		printf '{"schema":"poros.artifact/1","blob":"'
		head -c 100000000 /dev/zero | tr '\0' 'a'
		printf '"}\n'
	} > "$BIG"
	export BIG
}

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/robustness"
	SPEC="$FIX/bench.yaml"
	FAKE="$POROS_ROOT/tests/fixtures/driver/fake-train"
	ROGUE="$FIX/rogue-train"
	MAKE_RUN="$POROS_ROOT/tests/fixtures/parity/make-run"
	ARTIFACT="$POROS_ROOT/tests/fixtures/merge/artifact.json"
	TOKENIZER="$POROS_ROOT/tests/fixtures/tokenizer/tiny"
	# the driver's temporaries, left behind only when it is killed
	export TMPDIR="$BATS_TEST_TMPDIR"
	# a cell, as poros-arm and poros-train read it
	poros-expand --jsonl "$SPEC" | head -n 1 > cell.json
	# two good training runs for poros-parity
	"$MAKE_RUN" run_a
	"$MAKE_RUN" run_b
}

teardown() {
	if [ -n "${DISK:-}" ] && mountpoint -q "$DISK" 2>/dev/null; then
		umount "$DISK"
	fi
	# strays of a killed run: every pid a fake trainer recorded, with its group
	if [ -f "$BATS_TEST_TMPDIR/pids" ]; then
		while read -r p; do kill -KILL -- "-$p" "$p" 2>/dev/null || true; done < "$BATS_TEST_TMPDIR/pids"
	fi
}

# --- helpers ------------------------------------------------------------------

# refused TOOL STATUS TEXT -- CMD...: CMD exits STATUS (not a signal), prints
# nothing on stdout, and says exactly one line on stderr that starts with
# "TOOL: " and contains TEXT (the file and position).
refused() {
	local tool=$1 want=$2 text=$3
	shift 4
	run --separate-stderr "$@"
	if [ "$status" -ne "$want" ]; then
		fail "$*: exit $status, expected $want; stderr: ${stderr:0:400}"
	fi
	[ -z "$output" ] || fail "$*: wrote to stdout: ${output:0:200}"
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$*: ${#stderr_lines[@]} lines on stderr, expected 1: ${stderr:0:400}"
	[[ "${stderr_lines[0]}" == "$tool: "* ]] || fail "$*: message does not start with \"$tool: \": ${stderr:0:200}"
	[[ "${stderr_lines[0]}" == *"$text"* ]] || fail "$*: message lacks \"$text\": ${stderr:0:300}"
}

# skipped TOOL TEXT -- CMD...: a reader of many records (poros-merge,
# poros-render) reports the bad record with its position, goes on, and
# exits 2; stdout holds no partial record.
skipped() {
	local tool=$1 text=$2
	shift 3
	run --separate-stderr "$@"
	[ "$status" -eq 2 ] || fail "$*: exit $status, expected 2; stderr: ${stderr:0:400}"
	[[ "${stderr_lines[0]}" == "$tool: "*"$text"* ]] || fail "$*: first message lacks \"$tool: ...$text\": ${stderr:0:300}"
	local l
	for l in "${stderr_lines[@]}"; do
		[[ "$l" == "$tool: "* ]] || fail "$*: stray stderr line: ${l:0:200}"
	done
}

# Every line of FILE is a whole JSON object and FILE ends in a newline.
whole_lines() {
	[ -s "$1" ] || return 0
	[ -z "$(tail -c 1 "$1")" ] || fail "$1 does not end in a newline"
	jq -e -c 'objects' "$1" > /dev/null || fail "$1 holds a line that is not a whole JSON object"
}

# A cell_id appears at most once in FILE.
no_duplicates() {
	[ -s "$1" ] || return 0
	local dup
	dup=$(jq -r .cell_id "$1" | sort | uniq -d)
	[ -z "$dup" ] || fail "$1 holds $dup more than once"
}

# The state a killed bench run may leave: whole lines, whole artifacts.
consistent() {
	local dir=$1 f
	whole_lines "$dir/results.jsonl"
	no_duplicates "$dir/results.jsonl"
	for f in "$dir"/*.json "$dir"/cells/*.json; do
		[ -e "$f" ] || continue
		jq -e 'type == "object"' "$f" > /dev/null || fail "$f is not whole JSON"
	done
}

# Kills what a killed driver left running: the fake trainers (each the
# leader of the process group poros-arm gave it) and their children.
kill_strays() {
	[ -f "$BATS_TEST_TMPDIR/pids" ] || return 0
	local p
	while read -r p; do kill -KILL -- "-$p" 2>/dev/null || true; done < "$BATS_TEST_TMPDIR/pids"
	: > "$BATS_TEST_TMPDIR/pids"
}

# stderr_has TEXT: the last run's stderr contains TEXT.
stderr_has() {
	[[ "$stderr" == *"$1"* ]] || fail "stderr lacks \"$1\": ${stderr:0:500}"
}

# An artifact line with one field changed by a jq program.
artifact_with() {
	jq -c "$1" "$ARTIFACT"
}

# --- bad input: every tool ------------------------------------------------------

@test "an empty file is a one-line positioned error (exit 2), or no records where none is valid" {
	: > empty
	refused poros-expand 2 "empty:1:1: the spec is empty" -- poros-expand -o out empty
	[ ! -e out ]
	refused poros-train 2 "empty:1:1: not valid JSON" -- poros-train --cell empty --out run
	[ ! -e run ]
	refused poros-arm 2 "empty:1:1: not valid JSON" -- poros-arm -o out empty
	refused poros-tokenize 2 "empty:1:1: not valid JSON" -- poros-tokenize --tokenizer empty empty
	: > run_a/events.jsonl
	refused poros-parity 2 "run_a/events.jsonl" -- poros-parity run_a run_b
	# no records is a valid (empty) stream for the JSONL readers
	run -0 --separate-stderr poros-merge empty
	[ -z "$output" ] && [ -z "$stderr" ]
	run -0 --separate-stderr poros-tokenize --tokenizer "$TOKENIZER" empty
	[ -z "$output" ] && [ -z "$stderr" ]
}

@test "a binary file is refused with its position by every tool, never crashing" {
	printf '\177ELF\002\001\001\000\000\000\377\376\000\001\n\200\201' > bin.dat
	refused poros-expand 2 "bin.dat:1:8: contains a NUL byte" -- poros-expand -o out bin.dat
	[ ! -e out ]
	refused poros-train 2 "bin.dat: contains a NUL byte" -- poros-train --cell bin.dat --out run
	refused poros-arm 2 "bin.dat: contains a NUL byte" -- poros-arm -o out bin.dat
	refused poros-tokenize 2 "bin.dat: contains a NUL byte" -- poros-tokenize --tokenizer bin.dat
	refused poros-tokenize 2 "bin.dat:1: invalid UTF-8" -- poros-tokenize --tokenizer "$TOKENIZER" bin.dat
	skipped poros-merge "bin.dat:1: skipped: contains a NUL byte" -- poros-merge bin.dat
	[ -z "$output" ]
	skipped poros-render "bin.dat:1: skipped: contains a NUL byte" -- poros-render --md bin.dat
	cp bin.dat run_a/events.jsonl
	refused poros-parity 2 "run_a/events.jsonl:1" -- poros-parity run_a run_b
	cp bin.dat run_b/adapter/adapter_model.safetensors
	"$MAKE_RUN" run_c
	refused poros-parity 2 "adapter_model.safetensors" -- poros-parity run_c run_b
}

@test "a 100 MB single line is read or refused whole, without a crash or a partial record" {
	refused poros-expand 2 "is too large for a spec" -- poros-expand -o out "$BIG"
	refused poros-train 2 "big.jsonl: blob: unknown field" -- poros-train --cell "$BIG" --out run
	refused poros-arm 2 "big.jsonl: blob: unknown field" -- poros-arm -o out "$BIG"
	refused poros-tokenize 2 "big.jsonl: not a tokenizer.json" -- poros-tokenize --tokenizer "$BIG"
	skipped poros-merge "big.jsonl:1: skipped: blob: unknown field" -- poros-merge "$BIG"
	[ -z "$output" ]
	skipped poros-render "big.jsonl:1: skipped:" -- poros-render --html -o report.html "$BIG"
	# the same line cut short of its newline: a truncated record, never half-read
	head -c 50000000 "$BIG" > cut.jsonl
	skipped poros-merge "cut.jsonl:1: skipped: line does not end in a newline" -- poros-merge cut.jsonl
}

@test "a tokenizer.json whose template names an id with no token is refused at load (found by fuzz_tokenizer)" {
	refused poros-tokenize 2 "template-id-gap.json: post_processor: special id 309 names no token of the vocabulary" -- \
		poros-tokenize --tokenizer "$POROS_ROOT/tests/fuzz/regress/fuzz_tokenizer/template-id-gap.json" /dev/null
}

@test "invalid UTF-8 is refused with the line and byte wherever text is read" {
	printf 'spec_id: caf\303\050\n' > bad.yaml
	refused poros-expand 2 "bad.yaml:1:13: not valid UTF-8 (byte 0xc3)" -- poros-expand -o out bad.yaml
	printf 'caf\303\050\nok line\n' > bad.txt
	refused poros-tokenize 2 "bad.txt:1: invalid UTF-8 at byte 3" -- poros-tokenize --tokenizer "$TOKENIZER" --text bad.txt
	artifact_with '.cell.model.display_name = "X"' | sed 's/"display_name":"X"/"display_name":"caf\xc3\x28"/' > bad.jsonl
	skipped poros-merge "bad.jsonl:1: skipped: cell.model.display_name: not valid UTF-8" -- poros-merge bad.jsonl
	skipped poros-render "bad.jsonl:1: skipped: cell.model.display_name: not valid UTF-8" -- poros-render --html bad.jsonl
	jq -c . cell.json | sed 's/"spec_id":"robust"/"spec_id":"r\xff"/' > badcell.json
	refused poros-train 2 "badcell.json: spec_id:" -- poros-train --cell badcell.json --out run
	[ ! -e run ]
}

@test "deeply nested JSON and YAML are refused at a position, not by a stack overflow" {
	{ head -c 200000 /dev/zero | tr '\0' '['; head -c 200000 /dev/zero | tr '\0' ']'; echo; } > deep.json
	{ yes '{"a":' | head -n 100000 | tr -d '\n'; printf 1; head -c 100000 /dev/zero | tr '\0' '}'; echo; } > deepobj.json
	local i
	for i in $(seq 0 199); do printf '%*sk%d:\n' $((2 * i)) '' "$i"; done > deep.yaml
	printf '%*sv: 1\n' 400 '' >> deep.yaml
	refused poros-expand 2 "deep.yaml:17:" -- poros-expand -o out deep.yaml
	refused poros-train 2 "deep.json:1:1001: not valid JSON" -- poros-train --cell deep.json --out run
	refused poros-arm 2 "deepobj.json:1:" -- poros-arm -o out deepobj.json
	refused poros-tokenize 2 "deepobj.json:1:" -- poros-tokenize --tokenizer deepobj.json
	skipped poros-merge "deep.json:1: skipped: not valid JSON at column 1001" -- poros-merge deep.json
	skipped poros-render "deepobj.json:1: skipped: not valid JSON" -- poros-render --md deepobj.json
	cp deepobj.json run_a/events.jsonl
	refused poros-parity 2 "run_a/events.jsonl:1" -- poros-parity run_a run_b
}

@test "numbers out of range (negative, huge, NaN, 1e309) are refused by name with the value" {
	local v
	for v in -1 99999999999999999999 .nan 1e309; do
		sed "s/^  steps: 2$/  steps: $v/" "$SPEC" > n.yaml
		refused poros-expand 2 "n.yaml:12:10: training.steps:" -- poros-expand -o out n.yaml
	done
	[ ! -e out ]
	jq -c '.training.steps = -1' cell.json > c.json
	refused poros-train 2 "c.json: training.steps: must be at least 1, got -1" -- poros-train --cell c.json --out run
	jq -c '.lora.rank = 99999999999' cell.json > c.json
	refused poros-arm 2 "c.json: lora.rank: must be at most 1024" -- poros-arm -o out c.json
	jq -c . cell.json | sed 's/"learning_rate":[^,]*/"learning_rate":1e309/' > c.json
	refused poros-train 2 "c.json: training.learning_rate:" -- poros-train --cell c.json --out run
	jq -c . cell.json | sed 's/"seed":[^,]*/"seed":NaN/' > c.json
	refused poros-train 2 "c.json:1:" -- poros-train --cell c.json --out run
	[ ! -e run ]
	artifact_with '.metrics.s_per_step = -0.5' > m.jsonl
	skipped poros-merge "m.jsonl:1: skipped: metrics.s_per_step: must not be negative, got -0.5" -- poros-merge m.jsonl
	artifact_with . | sed 's/"vram_peak_mb":[^,]*/"vram_peak_mb":1e309/' > m.jsonl
	skipped poros-merge "m.jsonl:1: skipped: metrics.vram_peak_mb: number out of range" -- poros-merge m.jsonl
	skipped poros-render "m.jsonl:1: skipped: metrics.vram_peak_mb: number out of range" -- poros-render --md m.jsonl
	run -2 poros-train --model poros/tiny-qwen2 --steps 1e309
	assert_output "poros-train: --steps: not a number: 1e309"
	run -2 poros-arm --timeout -5 cell.json
	assert_output --partial "poros-arm: --timeout:"
}

@test "missing required fields and unknown fields are refused by name" {
	sed '/^  seq_len:/d' "$SPEC" > m.yaml
	refused poros-expand 2 "m.yaml:" -- poros-expand -o out m.yaml
	stderr_has "seq_len"
	sed 's/^  seq_len: 16/  seq_len: 16\n  seq_lenn: 3/' "$SPEC" > u.yaml
	refused poros-expand 2 "u.yaml:15:3: unknown key \"seq_lenn\" in training (did you mean \"seq_len\"?)" -- poros-expand -o out u.yaml
	[ ! -e out ]
	jq -c 'del(.training)' cell.json > c.json
	refused poros-train 2 "c.json: training: missing" -- poros-train --cell c.json --out run
	jq -c '.training.bogus = 1' cell.json > c.json
	refused poros-arm 2 "c.json: training.bogus: unknown field" -- poros-arm -o out c.json
	artifact_with '.metrics.bogus = 1' > a.jsonl
	skipped poros-merge "a.jsonl:1: skipped: metrics.bogus: unknown field" -- poros-merge a.jsonl
	artifact_with '.surprise = "x"' > a.jsonl
	skipped poros-render "a.jsonl:1: skipped: surprise: unknown field" -- poros-render --md a.jsonl
	artifact_with 'del(.status)' > a.jsonl
	skipped poros-merge "a.jsonl:1: skipped: status: missing" -- poros-merge a.jsonl
}

# --- crash safety -----------------------------------------------------------------

@test "a bench run killed with SIGKILL at 12 points keeps whole lines and artifacts; the next run completes it once" {
	export POROS_TRAIN="$FAKE" FAKE_SLEEP=0.05 FAKE_PIDS="$BATS_TEST_TMPDIR/pids"
	local out=out/robust d pid
	# kill points spread over a ~2 s run, in a shuffled order: early and late,
	# inside expansion, a child, the append and the skip-and-heal of a rerun
	for d in 0.05 0.9 0.3 1.4 0.15 0.6 1.1 0.45 0.2 1.7 0.75 0.35; do
		setsid poros bench run "$SPEC" > /dev/null 2>> driver.log &
		pid=$!
		sleep "$d"
		kill -KILL -- "-$pid" 2> /dev/null || true
		wait "$pid" || true
		kill_strays
		consistent "$out"
	done
	run -0 --separate-stderr poros bench run "$SPEC"
	consistent "$out"
	[ "$(jq -r .cell_id "$out/results.jsonl" | sort -u | wc -l)" -eq 8 ]
	[ "$(wc -l < "$out/results.jsonl")" -eq 8 ]
	[ "$(jq -s 'map(select(.status == "ok")) | length' "$out/results.jsonl")" -eq 8 ]
	# a further run has nothing left to do and adds nothing
	run -0 --separate-stderr poros bench run "$SPEC"
	[ "$(wc -l < "$out/results.jsonl")" -eq 8 ]
	local f
	for f in "$out"/*_*.json; do jq -e '.schema == "poros.artifact/1"' "$f" > /dev/null; done
}

@test "a full disk (a small tmpfs) is a clear error and the earlier results stay intact" {
	DISK="$BATS_TEST_TMPDIR/disk"
	mkdir -p "$DISK"
	if ! mount -t tmpfs -o size=2m tmpfs "$DISK" 2> /dev/null; then
		DISK=
		skip "mounting a tmpfs is not permitted here (needs root); the RLIMIT_FSIZE test covers short writes"
	fi
	export POROS_TRAIN="$FAKE"
	run -0 --separate-stderr poros bench run "$SPEC" -o "$DISK/out"
	cp "$DISK/out/results.jsonl" before.jsonl
	for f in "$DISK/out"/*.json; do cp "$f" "before.$(basename "$f")"; done
	# fill what is left
	dd if=/dev/zero of="$DISK/filler" bs=4k 2> /dev/null || true
	run --separate-stderr poros bench run --force "$SPEC" -o "$DISK/out"
	[ "$status" -eq 1 ] || fail "exit $status on a full disk, expected 1: ${stderr:0:500}"
	[ -z "$output" ]
	stderr_has "No space left on device"
	cmp before.jsonl "$DISK/out/results.jsonl"
	for f in "$DISK/out"/*.json; do cmp "before.$(basename "$f")" "$f"; done
	consistent "$DISK/out"
}

@test "a size-limited file (RLIMIT_FSIZE) fails an append or a report cleanly, keeping what was there" {
	artifact_with . > results.jsonl
	cp results.jsonl before.jsonl
	# one artifact of ~20 KB against a 16 KB limit; SIGXFSZ ignored as a daemon would
	artifact_with ".error = \"$(head -c 20000 /dev/zero | tr '\0' e)\"" > big.jsonl
	run --separate-stderr bash -c 'trap "" XFSZ; ulimit -f 16; exec poros-merge --append-to results.jsonl < big.jsonl'
	[ "$status" -eq 1 ] || fail "exit $status, expected 1: $stderr"
	stderr_has "File too large"
	cmp before.jsonl results.jsonl
	run --separate-stderr bash -c 'trap "" XFSZ; ulimit -f 16; exec poros-render --html -o report.html big.jsonl'
	[ "$status" -eq 1 ] || fail "exit $status, expected 1: $stderr"
	stderr_has "report.html"
	[ ! -e report.html ]
	[ -z "$(find . -maxdepth 1 -name 'report.html*')" ]
	run --separate-stderr bash -c 'trap "" XFSZ; ulimit -f 1; exec poros-expand -o lim "$0"' "$SPEC"
	[ "$status" -eq 1 ] || fail "exit $status, expected 1: $stderr"
	[ -z "$(find lim -type f 2> /dev/null)" ] || fail "partial output left: $(find lim -type f)"
}

# --- containment ------------------------------------------------------------------

@test "spec_id and output_dir cannot escape: .. and absolute names are refused where a name is expected" {
	sed 's/^spec_id: robust/spec_id: ..\/..\/etc/' "$SPEC" > s.yaml
	refused poros-expand 2 "s.yaml:3:10: spec_id:" -- poros-expand s.yaml
	sed 's/^spec_id: robust/spec_id: \/etc\/x/' "$SPEC" > s.yaml
	refused poros-expand 2 "s.yaml:3:10: spec_id:" -- poros-expand s.yaml
	sed 's|output_dir: out/robust|output_dir: out/../../escape|' "$SPEC" > s.yaml
	refused poros-expand 2 "s.yaml:" -- poros-expand s.yaml
	refused poros-expand 2 "-o: " -- poros-expand -o ../escape "$SPEC"
	[ ! -e ../escape ] && [ ! -e out ]
	# a model id with a path in it only names a (safe) slug
	sed 's|model_id: poros/tiny-qwen2|model_id: ../../../etc/tiny-qwen2|' "$SPEC" > s.yaml
	run -0 --separate-stderr poros-expand -o out s.yaml
	for f in $output; do [[ "$f" == out/cells/*.json ]] && [[ "$(basename "$f")" =~ ^[a-z0-9_]+\.json$ ]]; done
	# cells that name an escaping cell_id or run directory are refused by the readers
	jq -c '.cell_id = "../../victim"' cell.json > c.json
	refused poros-train 2 "cell_id: not a safe name" -- poros-train --cell c.json --out run
	refused poros-arm 2 "cell_id:" -- poros-arm -o out c.json
	jq -c '.output_dir = "a/../../b"' cell.json > c.json
	refused poros-arm 2 "output_dir:" -- poros-arm c.json
}

@test "symlinks planted in the output directory never let a tool overwrite a file outside it" {
	echo precious > victim
	mkdir -p out/cells out/logs
	local id
	id=$(jq -r .cell_id cell.json)
	ln -s ../../victim "out/cells/$id.json"
	ln -s ../victim out/results.jsonl
	ln -s ../victim out/report.html
	ln -s ../victim "out/$id.json"
	ln -s ../../victim "out/logs/$id.log"
	run -0 --separate-stderr poros-expand -o out "$SPEC"
	[ ! -L "out/cells/$id.json" ] && jq -e .cell_id "out/cells/$id.json" > /dev/null
	run -1 --separate-stderr poros-merge --append-to out/results.jsonl < <(artifact_with .)
	stderr_has "out/results.jsonl"
	[ -L out/results.jsonl ]
	run --separate-stderr poros-render --html -o out/report.html "$ARTIFACT"
	[ ! -L out/report.html ] && grep -q '<html' out/report.html
	POROS_TRAIN="$FAKE" run --separate-stderr poros-arm -o out "out/cells/$id.json"
	[ ! -L "out/$id.json" ]
	[ "$(cat victim)" = precious ]
	# a planted directory link: the cells would land (and rename over files) outside
	mkdir -p elsewhere out2
	echo precious > "elsewhere/$id.json"
	ln -s ../elsewhere out2/cells
	refused poros-expand 1 "out2/cells: is a symbolic link; refusing to write through it" -- poros-expand -o out2 "$SPEC"
	[ "$(cat "elsewhere/$id.json")" = precious ] && [ "$(ls elsewhere | wc -l)" -eq 1 ]
	[ ! -e out2/spec.json ]
}

@test "a symlink planted at a run's adapter or adapter-stepN directory is refused: nothing lands outside" {
	mkdir -p elsewhere run
	ln -s ../elsewhere run/adapter
	local train=(poros-train --model poros/tiny-qwen2 --backend cpu --steps 2 --seq-len 8 --rank 2 --targets q_proj --quiet)
	run -1 --separate-stderr "${train[@]}" --out run
	[ "$(jq -r .error <<< "$output")" = "run/adapter: is a symbolic link; refusing to write through it" ]
	stderr_has "poros-train: run/adapter: is a symbolic link"
	rm run/adapter
	ln -s ../elsewhere run/adapter-step1
	run -1 --separate-stderr "${train[@]}" --save-every 1 --out run
	[ "$(jq -r .error <<< "$output")" = "run/adapter-step1: is a symbolic link; refusing to write through it" ]
	[ -L run/adapter-step1 ]
	[ -z "$(ls -A elsewhere)" ] || fail "written outside the run directory: $(ls elsewhere)"
}

@test "temporaries of a save killed mid-write are gone once the run directory is trained again" {
	local dead
	sh -c 'exit 0' &
	dead=$!
	wait "$dead"
	mkdir -p run/adapter run/adapter-step1 run/adapter-step7
	printf torn > "run/adapter/adapter_model.safetensors.tmp.$dead"
	printf torn > "run/adapter-step1/adapter_model.safetensors.tmp.$dead"
	# a step this run does not save again, and a writer that is still alive
	printf torn > "run/adapter-step7/adapter_config.json.tmp.$dead"
	printf live > "run/adapter-step7/adapter_model.safetensors.tmp.$$"
	run -0 --separate-stderr poros-train --model poros/tiny-qwen2 --backend cpu --steps 2 --seq-len 8 --rank 2 \
		--targets q_proj --save-every 1 --out run --quiet
	[ "$(jq -r .status <<< "$output")" = ok ]
	[ -z "$(find run -name "*.tmp.$dead")" ] || fail "left behind: $(find run -name "*.tmp.$dead")"
	[ "$(cat "run/adapter-step7/adapter_model.safetensors.tmp.$$")" = live ]
	[ -s run/adapter-step1/adapter_model.safetensors ] && [ -s run/adapter/adapter_model.safetensors ]
}

@test "a second poros-train into a run directory in use exits 2 naming the first's PID; the first's events stay whole" {
	local first
	poros-train --model poros/tiny-qwen2 --backend cpu --steps 100000 --seq-len 8 --rank 2 --targets q_proj \
		--out run --quiet >first.json 2>first.err &
	first=$!
	echo "$first" >> "$BATS_TEST_TMPDIR/pids"
	for _ in $(seq 100); do [ -s run/events.jsonl ] && break; sleep 0.1; done
	[ -s run/events.jsonl ]
	[ "$(cat run/.lock)" = "$first" ]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --backend cpu --steps 2 --seq-len 8 --rank 2 \
		--targets q_proj --out run --quiet
	[ -z "$output" ]
	[ "$stderr" = "poros-train: run: another trainer is using this run directory (PID $first holds run/.lock): wait for it to end, or stop it" ]
	kill -TERM "$first"
	wait "$first" || true
	# every line one step of the first run, in order: nothing of the second in it
	jq -s -e 'map(.step) == [range(1; length + 1)]' run/events.jsonl
	# the lock went with its holder: the next run has it
	poros-train --model poros/tiny-qwen2 --backend cpu --steps 2 --seq-len 8 --rank 2 --targets q_proj --out run \
		--quiet >next.json
	[ "$(jq -r .status next.json)" = ok ]
	[ "$(wc -l <run/events.jsonl)" -eq 2 ]
}

# signal_driver SIG STATUS: a bench run whose cell sleeps, sent SIG on
# the driver's PID alone, ends within 2 s with STATUS, its children gone
# and its lock free.  The driver starts with SIGINT at its default (a
# background job of this shell would have it ignored).
signal_driver() {
	local sig=$1 want=$2 pid t0 rc=0
	export POROS_TRAIN="$FAKE" FAKE_SLEEP=60 FAKE_PIDS="$BATS_TEST_TMPDIR/pids"
	rm -f "$FAKE_PIDS"
	python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
		poros bench run "$SPEC" >/dev/null 2>driver.log &
	pid=$!
	for _ in $(seq 100); do [ -s "$FAKE_PIDS" ] && break; sleep 0.1; done
	[ -s "$FAKE_PIDS" ]
	t0=$(date +%s%N)
	kill -s "$sig" "$pid"
	wait "$pid" || rc=$?
	[ "$rc" -eq "$want" ]
	[ $(($(date +%s%N) - t0)) -lt 2000000000 ]
	# no child left: poros-arm and the trainer it ran
	while read -r p; do ! kill -0 "$p" 2>/dev/null || fail "trainer $p still running"; done <"$FAKE_PIDS"
	[ -z "$(pgrep -P "$pid")" ]
	flock -n out/robust/.lock true
}

@test "SIGTERM or SIGINT to the driver's PID alone stops its cell at once: exit within 2 s, no child left, lock free" {
	signal_driver TERM 143
	signal_driver INT 130
}

@test "an output_dir with a leading blank runs every cell there, never another directory's cells" {
	export POROS_TRAIN="$FAKE"
	sed "s|output_dir: out/robust|output_dir: ' out'|" "$SPEC" > s.yaml
	# a decoy: another spec's cells in the directory named without the blank
	sed "s|output_dir: out/robust|output_dir: out|; s|^spec_id: robust|spec_id: decoy|" "$SPEC" > decoy.yaml
	poros-expand decoy.yaml > /dev/null
	run -0 --separate-stderr poros bench run s.yaml
	[ "$(wc -l < " out/results.jsonl")" -eq 8 ]
	[ "$(jq -r '.cell.spec_id + " " + .status' " out/results.jsonl" | sort -u)" = "robust ok" ]
	[ ! -e out/results.jsonl ] && [ ! -e out/logs ] && [ -z "$(find out -maxdepth 1 -name '*_*.json')" ]
}

@test "an output_dir named like an option (-rf) stays a directory name for the driver and every tool" {
	export POROS_TRAIN="$FAKE"
	sed "s|output_dir: out/robust|output_dir: '-rf'|" "$SPEC" > s.yaml
	run -0 --separate-stderr poros bench run s.yaml
	[ "$(jq -s 'map(select(.status == "ok")) | length' ./-rf/results.jsonl)" -eq 8 ]
	grep -q '<html' ./-rf/report.html
	run -0 --separate-stderr poros train s.yaml
	[ "$(find ./-rf/runs -name events.jsonl | wc -l)" -eq 8 ]
}

@test "a record over the 1 MiB line bound is refused by name and the results file is untouched" {
	artifact_with . > results.jsonl
	cp results.jsonl before.jsonl
	head -c 2000000 /dev/zero | tr '\0' e > e.txt
	jq -c --rawfile e e.txt '.error = $e' "$ARTIFACT" > big.jsonl
	run -2 --separate-stderr poros-merge --append-to results.jsonl < big.jsonl
	stderr_has "poros-merge: <stdin>:1: not appended: the record is $(wc -c < big.jsonl) bytes, over the 1048576-byte bound on a line"
	cmp before.jsonl results.jsonl
	# one under the bound goes in whole
	head -c 1000000 /dev/zero | tr '\0' e > e.txt
	jq -c --rawfile e e.txt '.error = $e' "$ARTIFACT" > ok.jsonl
	run -0 --separate-stderr poros-merge --append-to results.jsonl < ok.jsonl
	[ "$(wc -l < results.jsonl)" -eq 2 ]
	whole_lines results.jsonl
}

@test "no spec value reaches a shell: metacharacters stay literal through the whole bench" {
	export POROS_TRAIN="$FAKE"
	local nasty='$(touch pwned1); `touch pwned2` | touch pwned3 && "quoted" '"'"'single'"'"' > pwned4 <tag>'
	# the value as a YAML single-quoted scalar ('' is a quote)
	local quoted=${nasty//\'/\'\'}
	awk -v v="'$quoted'" '/display_name: tiny Qwen2/ { i = index($0, "tiny Qwen2"); $0 = substr($0, 1, i - 1) v } { print }' "$SPEC" > s.yaml
	run -0 --separate-stderr poros bench run s.yaml
	[ ! -e pwned1 ] && [ ! -e pwned2 ] && [ ! -e pwned3 ] && [ ! -e pwned4 ]
	[ "$(jq -r 'select(.cell.model.model_id == "poros/tiny-qwen2") | .cell.model.display_name' out/robust/results.jsonl | sort -u)" = "$nasty" ]
	! grep -q '<tag>' out/robust/report.html
	grep -qF '&lt;tag&gt;' out/robust/report.html
}

@test "HTML output escapes every string an artifact carries" {
	local evil='<script>alert(1)</script>"'"'"'&<img src=x onerror=y>'
	jq -c --arg e "$evil" '.cell.model.display_name = $e | .cell.model.model_id = $e | .cell.hardware.gpu_name = $e
		| .error = $e | .env.gpu_name = $e | .env.torch = $e | .env.hostname = $e | .env.cpu = $e' "$ARTIFACT" > evil.jsonl
	run -0 --separate-stderr poros-render --html evil.jsonl
	refute_output --partial '<script>alert'
	refute_output --partial '<img src=x'
	assert_output --partial '&lt;script&gt;alert(1)&lt;&#47;script&gt;&quot;&#39;&amp;&lt;img src=x onerror=y&gt;'
	# no markup beyond what the page itself writes: not one onerror attribute
	[[ "$output" != *"onerror=y>"* ]]
}

# --- resource bounds on a child ------------------------------------------------------

@test "a child flooding stderr is capped at --log-max and the run still finishes" {
	export POROS_TRAIN="$ROGUE" ROGUE=flood ROGUE_BYTES=20000000
	local id
	id=$(jq -r .cell_id cell.json)
	run -0 --separate-stderr timeout 60 poros-arm -o out --log-max 65536 cell.json
	local size
	size=$(stat -c %s "out/logs/$id.log")
	[ "$size" -le $((65536 + 4096)) ] || fail "log is $size bytes, over the 64 KiB cap"
	[ "$size" -ge 32768 ] || fail "log is only $size bytes: the cap ate the log"
	[ "$(jq -r .status <<< "$output")" = ok ]
}

@test "a child that forks and never exits is killed with its whole process group at --timeout" {
	export POROS_TRAIN="$ROGUE" ROGUE=forks ROGUE_KIDS=4 ROGUE_PIDS="$BATS_TEST_TMPDIR/rogue.pids"
	local t0 t1 p alive=''
	t0=$(date +%s)
	run --separate-stderr timeout 60 poros-arm -o out --timeout 1 --kill-grace 1 cell.json
	t1=$(date +%s)
	# exit 0: the cell has its artifact, and the artifact says what happened
	[ "$status" -eq 0 ] || fail "exit $status, expected 0: ${stderr:0:300}"
	[ $((t1 - t0)) -lt 15 ] || fail "poros-arm took $((t1 - t0)) s to give up on a 1 s timeout"
	[ "$(jq -r .status <<< "$output")" = error ]
	assert_equal "$(jq -r '.error | test("^timed out after 1 s")' <<< "$output")" true
	sleep 0.5
	[ "$(wc -l < "$ROGUE_PIDS")" -eq 5 ]
	while read -r p; do
		if kill -0 "$p" 2> /dev/null; then alive="$alive $p"; kill -KILL "$p"; fi
	done < "$ROGUE_PIDS"
	[ -z "$alive" ] || fail "still alive after poros-arm returned:$alive"
}

# --- memory safety --------------------------------------------------------------

# bats test_tags=valgrind
@test "a tiny CPU training run is clean under valgrind memcheck" {
	command -v valgrind > /dev/null || skip "valgrind is not installed"
	[ -z "${POROS_SKIP_VALGRIND:-}" ] || skip "POROS_SKIP_VALGRIND: $POROS_SKIP_VALGRIND"
	run --separate-stderr valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--suppressions="$BATS_TEST_DIRNAME/fixtures/valgrind/dl-load.supp" \
		poros-train --model poros/tiny-qwen2 --backend cpu --steps 2 --seq-len 8 --rank 2 --targets q_proj,v_proj \
		--out vg --quiet
	[ "$status" -eq 0 ] || fail "valgrind exit $status: ${stderr:0:2000}"
	[ "$(jq -r .status <<< "$output")" = ok ]
	[ "$(jq -r .steps <<< "$output")" = 2 ]
	[ -s vg/adapter/adapter_model.safetensors ]
}

@test "a finished write removes the temporaries that killed writers left in its directory, and only those" {
	cp "$POROS_ROOT/tests/fixtures/expand/minimal.yaml" s.yaml
	poros-expand s.yaml >/dev/null
	cells=out/mini/cells
	sh -c 'exit 0' & dead=$!
	wait "$dead"
	# a killed writer's leftover (process gone, two hours old)
	printf 'torn' >"$cells/poros_tiny_qwen2_nf4.json.tmp.$dead"
	touch -d '2 hours ago' "$cells/poros_tiny_qwen2_nf4.json.tmp.$dead"
	# a writer that may still be running elsewhere (process unknown here, but recent)
	printf 'fresh' >"$cells/poros_tiny_qwen2_bf16.json.tmp.$dead"
	# a live writer's temporary, however old
	printf 'live' >"$cells/resident_tiny_qwen2_nf4.json.tmp.$$"
	touch -d '2 hours ago' "$cells/resident_tiny_qwen2_nf4.json.tmp.$$"
	# a killed writer's leftover of a file this run does not write
	printf 'torn' >"$cells/gone.json.tmp.$dead"
	touch -d '2 hours ago' "$cells/gone.json.tmp.$dead"
	# a name that only looks similar
	printf 'keep' >"$cells/poros_tiny_qwen2_nf4.json.tmp.notapid"
	run --separate-stderr poros-expand s.yaml
	assert_success
	assert [ ! -e "$cells/poros_tiny_qwen2_nf4.json.tmp.$dead" ]
	assert [ ! -e "$cells/gone.json.tmp.$dead" ]
	assert [ -f "$cells/poros_tiny_qwen2_bf16.json.tmp.$dead" ]
	assert [ -f "$cells/resident_tiny_qwen2_nf4.json.tmp.$$" ]
	assert [ -f "$cells/poros_tiny_qwen2_nf4.json.tmp.notapid" ]
	run jq -r .cell_id "$cells/poros_tiny_qwen2_nf4.json"
	assert_output "poros_tiny_qwen2_nf4"
}

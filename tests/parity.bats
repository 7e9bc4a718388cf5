#!/usr/bin/env bats
# poros-parity: two runs (events.jsonl + adapter/) in, one poros.parity/1 line out.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	MAKE_RUN="$POROS_ROOT/tests/fixtures/parity/make-run"
	QB1=base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight
	VB1=base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight
}

# refused RUN_A RUN_B MESSAGE: poros-parity exits 2 with nothing on stdout
# and MESSAGE, the whole of stderr.
refused() {
	run -2 --separate-stderr poros-parity "$1" "$2"
	[ -z "$output" ]
	[ "$stderr" = "$3" ]
}

@test "poros-parity --version prints its name and version" {
	assert_version poros-parity
}

@test "poros-parity --help prints the synopsis on stdout and exits 0" {
	assert_help poros-parity "usage: poros-parity [--arch NAME] [--precision NAME] [--artifacts DIR] RUN_A RUN_B"
}

@test "poros-parity with one run is a usage error" {
	"$MAKE_RUN" a
	run -2 --separate-stderr poros-parity a
	[ -z "$output" ]
	[[ "$stderr" == "usage: poros-parity"* ]]
}

@test "two identical runs are bitwise exact with zero deltas and no location" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b
	run -0 --separate-stderr poros-parity a b
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 1 ]
	echo "$output" | jq -e '.schema == "poros.parity/1" and .run_a == "a" and .run_b == "b"
		and .steps_compared == 4 and .loss_max_abs_delta == 0 and .loss_max_step == null
		and .adapter_max_abs_delta == 0 and .adapter_max_tensor == null and .adapter_max_index == null
		and .nonfinite_mismatches == 0 and (.tensors | length) == 8
		and all(.tensors[]; .max_abs_delta == 0 and .n_different == 0) and .bitwise_exact == true'
}

@test "a perturbed adapter weight gives its max delta, tensor name and index" {
	"$MAKE_RUN" a
	# element 5 holds -0.5; 0x3fa00000 is 1.25: the delta is exactly 1.75
	"$MAKE_RUN" b --perturb "$VB1" 5 3fa00000
	run -0 poros-parity a b
	echo "$output" | jq -e --arg t "$VB1" '.bitwise_exact == false and .adapter_max_abs_delta == 1.75
		and .adapter_max_tensor == $t and .adapter_max_index == 5 and .loss_max_abs_delta == 0
		and ([.tensors[] | select(.n_different > 0) | .name] == [$t])
		and (.tensors[] | select(.name == $t) | .max_abs_delta == 1.75 and .max_index == 5 and .n_different == 1)'
}

@test "the largest of two perturbations is the one reported" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --perturb "$QB1" 1 3f900000 # 1.0 -> 1.125
	"$MAKE_RUN" c --perturb "$QB1" 1 3f900000
	# and a second tensor in c with a larger change: 2.0 (element 6) -> 4.0
	"$MAKE_RUN" c2 --perturb "$VB1" 6 40800000
	run -0 poros-parity a b
	echo "$output" | jq -e --arg t "$QB1" '.adapter_max_abs_delta == 0.125 and .adapter_max_tensor == $t and .adapter_max_index == 1'
	run -0 poros-parity a c2
	echo "$output" | jq -e --arg t "$VB1" '.adapter_max_abs_delta == 2 and .adapter_max_tensor == $t and .adapter_max_index == 6'
}

@test "a different loss gives its step and delta" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --bump-loss 3
	run -0 poros-parity a b
	echo "$output" | jq -e '.bitwise_exact == false and .loss_max_abs_delta == 0.125 and .loss_max_step == 3
		and .adapter_max_abs_delta == 0 and .adapter_max_tensor == null'
}

@test "-0 against +0 is not bitwise exact though no value differs, and is located" {
	"$MAKE_RUN" a --perturb "$QB1" 0 00000000
	"$MAKE_RUN" b --perturb "$QB1" 0 80000000
	run -0 poros-parity a b
	echo "$output" | jq -e --arg t "$QB1" '.bitwise_exact == false and .adapter_max_abs_delta == 0
		and .adapter_max_tensor == $t and .adapter_max_index == 0'
}

@test "a NaN on one side is counted as a non-finite mismatch, not folded into the max" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --perturb "$QB1" 2 7fc00000
	run -0 poros-parity a b
	echo "$output" | jq -e '.bitwise_exact == false and .nonfinite_mismatches == 1 and .adapter_max_abs_delta == 0'
}

@test "a null loss on both sides is the same; on one side it is a mismatch" {
	"$MAKE_RUN" a --null-loss 2
	"$MAKE_RUN" b --null-loss 2
	"$MAKE_RUN" c
	run -0 poros-parity a b
	echo "$output" | jq -e '.bitwise_exact == true and .nonfinite_mismatches == 0'
	run -0 poros-parity a c
	echo "$output" | jq -e '.bitwise_exact == false and .nonfinite_mismatches == 1 and .loss_max_abs_delta == 0'
}

@test "--arch and --precision label the record" {
	"$MAKE_RUN" a
	run -0 poros-parity --arch tiny_qwen2 --precision nf4 a a
	echo "$output" | jq -e '.arch == "tiny_qwen2" and .precision == "nf4"'
}

@test "runs with different step counts are an error, not a partial compare" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --steps 3
	refused a b "poros-parity: mismatched runs: a/events.jsonl has 4 steps, b/events.jsonl has 3"
}

@test "runs with a different rank are an error" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --rank 4
	refused a b "poros-parity: mismatched runs: rank 2 in a/adapter, 4 in b/adapter"
}

@test "runs with different tensor names are an error naming the tensor" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b --omit "$QB1" --omit "${QB1/lora_B/lora_A}"
	refused a b "poros-parity: mismatched runs: tensor ${QB1/lora_B/lora_A} is in a/adapter only"
	refused b a "poros-parity: mismatched runs: tensor ${QB1/lora_B/lora_A} is in a/adapter only"
}

@test "events with different step numbers are an error" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b
	sed -i 's/"step":3,/"step":5,/; s/"step":4,/"step":6,/' b/events.jsonl
	refused a b "poros-parity: mismatched runs: event 3 is step 3 in a/events.jsonl, step 5 in b/events.jsonl"
}

@test "a malformed events line is an error with file and line" {
	"$MAKE_RUN" a
	"$MAKE_RUN" b
	sed -i '2s/.*/{"step":2,"loss":/' b/events.jsonl
	run -2 --separate-stderr poros-parity a b
	[ -z "$output" ]
	[[ "$stderr" == "poros-parity: b/events.jsonl:2: not valid JSON at column "* ]]
}

@test "steps that do not increase are an error" {
	"$MAKE_RUN" a
	sed -i '3s/"step":3,/"step":2,/' a/events.jsonl
	refused a a "poros-parity: a/events.jsonl:3: step 2 after step 2: steps must increase"
}

@test "an event without a loss is an error" {
	"$MAKE_RUN" a
	sed -i '1s/"loss":[^,]*,//' a/events.jsonl
	refused a a "poros-parity: a/events.jsonl:1: loss: missing"
}

@test "a missing run directory or adapter is a clear error" {
	"$MAKE_RUN" a
	refused a nowhere "poros-parity: nowhere: No such file or directory"
	"$MAKE_RUN" b
	rm -r b/adapter
	run -2 --separate-stderr poros-parity a b
	[[ "$stderr" == "poros-parity: b/adapter/adapter_config.json: "* ]]
	"$MAKE_RUN" c
	: > c/events.jsonl
	refused a c "poros-parity: c/events.jsonl: no steps (did the run start?)"
}

@test "real tiny CPU runs: blockwise and resident are bitwise exact" {
	[ -x "$POROS_ROOT/bin/poros-train" ] || skip "bin/poros-train is not built"
	poros-expand --jsonl "$POROS_ROOT/configs/bench/tiny.yaml" |
		jq -c 'select(.cell_id == "poros_tiny_qwen2_nf4")' > cell.json
	[ -s cell.json ]
	poros-train --cell cell.json --mode blockwise --out bw > /dev/null 2>bw.log
	poros-train --cell cell.json --mode resident --out res > /dev/null 2>res.log
	run -0 --separate-stderr poros-parity bw res
	echo "$output" | jq -e '.bitwise_exact == true and .steps_compared == 6 and .loss_max_abs_delta == 0
		and .adapter_max_abs_delta == 0 and (.tensors | length) > 0'
}

@test "--artifacts writes the result into the poros and resident artifacts of that model and precision" {
	. "$POROS_ROOT/tests/fixtures/merge/artifact.bash"
	mkdir arts
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > arts/poros_tiny_qwen2_nf4.json
	art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:01Z > arts/resident_tiny_qwen2_nf4.json
	art poros tiny_qwen2 bf16 ok 2026-11-29T10:00:02Z > arts/poros_tiny_qwen2_bf16.json
	cp arts/poros_tiny_qwen2_bf16.json bf16.before
	"$MAKE_RUN" a
	"$MAKE_RUN" b --bump-loss 2
	run -0 --separate-stderr poros-parity --arch tiny_qwen2 --precision nf4 --artifacts arts a b
	[ -z "$stderr" ]
	for m in poros resident; do
		jq -e --argjson p "$output" '.parity == {"loss_max_abs_delta": $p.loss_max_abs_delta,
			"adapter_max_abs_delta": $p.adapter_max_abs_delta, "bitwise_exact": false}
			and $p.loss_max_abs_delta > 0' "arts/${m}_tiny_qwen2_nf4.json"
		# the rest of the artifact is as it was, and it still reads
		poros-merge "arts/${m}_tiny_qwen2_nf4.json" > /dev/null
	done
	# another precision's artifact is left alone
	cmp arts/poros_tiny_qwen2_bf16.json bf16.before
	# the report shows it from the artifact alone
	poros-render --md arts > report.md
	grep -F ' | nf4 | **differs** | -- | ' report.md
	run -2 --separate-stderr poros-parity --artifacts arts a b
	[ "$stderr" = "poros-parity: --artifacts: needs --arch and --precision (nf4 or bf16)" ]
	run -0 --separate-stderr poros-parity --arch other --precision nf4 --artifacts arts a b
	[ "$stderr" = "poros-parity: --artifacts arts: no poros or resident artifact of other nf4 to update" ]
}

#!/usr/bin/env bats
# poros.summary/1 against share/poros/schema/summary.schema.json: both
# writers (poros-train, real runs on the tiny models; armlib.py, its own
# driver over a stand-in for torch, tests/fixtures/arm/fake-torch-arm) and
# the reader (tools/lib/records/artifact_read.c, through poros-arm).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	python3 -c 'import jsonschema' 2>/dev/null || skip "python3 has no jsonschema"
	SCHEMA="$POROS_ROOT/share/poros/schema"
	FIX="$POROS_ROOT/tests/fixtures/arm"
	TINY=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet)
	unset POROS_TRAIN POROS_PYTHON POROS_ARMS_DIR
	mkdir -p s
}

# validate FILE...: each file one summary that the schema accepts, with the
# reader's rules beyond it (step_s has steps_measured times, s_per_step is
# their median) and its keys in the schema's order; prints "status method"
# a line.  Any failure names the file and fails.
validate() {
	python3 - "$SCHEMA/summary.schema.json" "$@" <<-'PY'
	import json, sys, jsonschema
	V = jsonschema.Draft202012Validator
	schema = json.load(open(sys.argv[1]))
	V.check_schema(schema)
	order = list(schema["properties"])
	bad = 0
	for path in sys.argv[2:]:
	    text = open(path).read()
	    assert text.count("\n") == 1 and text.endswith("\n"), f"{path}: not one line"
	    s = json.loads(text)
	    why = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in V(schema).iter_errors(s)]
	    steps = s.get("step_s")
	    if isinstance(steps, list):
	        if len(steps) != s.get("steps_measured"):
	            why.append(f"step_s has {len(steps)} times, steps_measured is {s.get('steps_measured')}")
	        v, n = sorted(steps), len(steps)
	        med = (v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])) if n else None
	        if s.get("s_per_step") != med:
	            why.append(f"s_per_step {s.get('s_per_step')} is not the median of step_s ({med})")
	    if list(s) != [k for k in order if k in s]:
	        why.append(f"keys out of the schema's order: {list(s)}")
	    for w in why:
	        print(f"{path}: {w}", file=sys.stderr)
	    bad += bool(why)
	    print(s["status"], s["method"])
	sys.exit(1 if bad else 0)
	PY
}

# the fixture cell with another method, in FILE
cell() {
	jq -c --arg m "$1" '.method = $m | .cell_id = "\($m)_tiny_llama_bf16"' "$FIX/cell.json" > "$2"
}

# a packed JSONL dataset (documents of 40 ids in rows of 32) and an eval set
datasets() {
	for d in 1 2 3 4 5 6; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done > data.jsonl
	head -2 data.jsonl > eval.jsonl
}

@test "the schema rejects a summary that breaks it: the validator runs" {
	echo '{"schema":"poros.summary/1","status":"ok"}' > s/short.json
	run -1 --separate-stderr validate s/short.json
	[[ "$stderr" == *"s/short.json: : 'error' is a required property"* ]]
}

@test "poros-train's summaries of every status validate: blockwise and resident, eval and packing, oom, errors, resume" {
	datasets
	# ok, with an eval set over packed rows, in both schedules and precisions
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode blockwise --precision nf4 --block-size 2 --steps 3 \
		--timing-warmup 1 --dataset data.jsonl --eval-dataset eval.jsonl --eval-every 2 --out blk > s/blk.json
	poros-train "${TINY[@]}" --model poros/tiny-llama --mode resident --precision bf16 --steps 3 --accum 2 \
		--dataset data.jsonl --eval-dataset eval.jsonl --out res > s/res.json
	jq -e '.status == "ok" and .eval_tokens > 0 and (.eval_loss | type) == "number"
		and (.vram_breakdown_mb | has("slabs") and has("dequant"))' s/blk.json
	jq -e '.status == "ok" and .eval_tokens > 0 and (.vram_breakdown_mb | has("layers"))' s/res.json
	# ok without an eval set: no eval keys; a resumed run counts every step
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 4 --save-every 2 --out half > s/half.json
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 4 --resume half/checkpoint-step2 --out resumed \
		> s/resumed.json
	jq -e 'has("eval_loss") or has("eval_tokens") | not' s/half.json
	jq -e '.status == "ok" and .steps == 4 and .steps_measured == 2' s/resumed.json
	# oom: the plan over --vram-budget, in both schedules
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --vram-budget 64K --out oom
	echo "$output" > s/oom.json
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-llama --mode resident --steps 2 \
		--vram-budget 64K --eval-dataset eval.jsonl --out oom_res
	echo "$output" > s/oom_res.json
	# errors: before the engine (the events file cannot be replaced), after
	# two steps (the step-2 adapter cannot be saved), and with no backend
	mkdir -p noevents/events.jsonl/x
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-llama --mode resident --steps 2 --out noevents
	echo "$output" > s/noevents.json
	mkdir blocked && echo x > blocked/adapter-step2
	run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-llama --steps 4 --timing-warmup 1 --save-every 2 \
		--eval-dataset eval.jsonl --out blocked
	echo "$output" > s/blocked.json
	jq -e '.status == "error" and .steps == 2 and .steps_measured == 1 and .events == "blocked/events.jsonl"
		and .adapter == null and .eval_tokens == 0 and .eval_loss == null' s/blocked.json
	jq -e '.status == "error" and .steps == 0 and .weights == "synthetic" and .events == null' s/noevents.json
	if ! have_gpu; then
		run -1 --separate-stderr poros-train "${TINY[@]/cpu/cuda}" --model poros/tiny-qwen2 --out nocuda
		echo "$output" > s/nocuda.json
		jq -e '.status == "error" and .backend == null and .vram_plan_mb == null' s/nocuda.json
	fi
	run -0 --separate-stderr validate s/*.json
	[ "$(sort -u <<< "$output" | tr '\n' ' ')" = "error poros error resident ok poros ok resident oom poros oom resident " ]
}

@test "the summary says the pinned host memory its --plan line says: blockwise's layer checkpoints, none resident" {
	local mode
	for mode in blockwise resident; do
		poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode "$mode" --plan > "$mode.plan"
		poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode "$mode" --steps 2 --out "$mode" > "s/$mode.json"
		jq -e --slurpfile p "$mode.plan" '.status == "ok" and .host_weights_mb == $p[0].host_weights_mb
			and .host_checkpoints_mb == $p[0].host_checkpoints_mb' "s/$mode.json"
	done
	jq -e '.host_checkpoints_mb > 0' s/blockwise.json
	jq -e '.host_checkpoints_mb == 0' s/resident.json
	jq -e 'has("disk_checkpoints_mb") | not' s/blockwise.json
	# with --checkpoint-dir the disk's keys too, the plan's figures
	mkdir ck
	POROS_DISK_CHECKPOINTS=3 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --checkpoint-dir ck --plan > disk.plan
	POROS_DISK_CHECKPOINTS=3 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --checkpoint-dir ck --steps 2 \
		--out disk > s/disk.json
	jq -e --slurpfile p disk.plan '.status == "ok" and .host_checkpoints_mb == $p[0].host_checkpoints_mb
		and .disk_checkpoints_mb == $p[0].disk_checkpoints_mb and .disk_checkpoints_mb > 0
		and .disk_write_mb_per_step == $p[0].disk_write_mb_per_step
		and .disk_read_mb_per_step == $p[0].disk_read_mb_per_step' s/disk.json
	run -0 --separate-stderr validate s/*.json
}

@test "--seq-len beyond max_position_embeddings warns once, and the summary gives both numbers (schema-valid)" {
	# tiny-llama's config says 512; 520 positions still train
	run --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-llama --batch-size 1 --seq-len 520 --steps 1 \
		--out long
	[ "$status" -eq 0 ]
	echo "$output" > s/long.json
	[ "$(grep -c 'warning: --seq-len 520 is beyond the model' <<< "$stderr")" -eq 1 ]
	[[ "$stderr" == *"poros-train: warning: --seq-len 520 is beyond the model's max_position_embeddings 512 ("* ]]
	jq -e '.status == "ok" and .seq_len_beyond_max_position == {seq_len: 520, max_position_embeddings: 512}' s/long.json
	validate s/long.json
	# within the range: no warning, no key
	run --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-llama --steps 1 --out short
	[ "$status" -eq 0 ]
	[[ "$stderr" != *"max_position_embeddings"* ]]
	jq -e 'has("seq_len_beyond_max_position") | not' <<< "$output"
}

@test "armlib's summaries of every status validate, for each Python arm (armlib's driver over a stand-in for torch)" {
	local m c code
	for m in peft unsloth accelerate_offload; do
		cell "$m" "$m.json"
		for c in ok:0 oom_step:1 oom_load:1 error_step:1 interrupt:1 no_torch:0 no_cuda:0; do
			code=${c#*:} c=${c%:*}
			run -"$code" --separate-stderr "$FIX/fake-torch-arm" "$c" --cell "$m.json" --out "run_${m}_$c"
			echo "$output" > "s/${m}_$c.json"
		done
		# the cell's error (exit 2) and a bad command line, before torch
		jq -c '.training.eval_dataset = "eval.jsonl"' "$m.json" > bad.json
		run -2 --separate-stderr "$FIX/fake-torch-arm" ok --cell bad.json --out "run_${m}_bad"
		echo "$output" > "s/${m}_bad.json"
		run -2 --separate-stderr "$FIX/fake-torch-arm" ok --cell "$m.json"
		echo "$output" > "s/${m}_usage.json"
	done
	# what each case is about reached the summary
	jq -e '.status == "ok" and .steps == 4 and .steps_measured == 3 and .events == "run_peft_ok/events.jsonl"
		and .adapter == "run_peft_ok/adapter" and .backend == "cuda" and .env.torch == "0.0.0+fake"' s/peft_ok.json
	jq -e '.status == "oom" and .steps == 2 and .steps_measured == 1 and .adapter == null' s/unsloth_oom_step.json
	jq -e '.status == "oom" and .steps == 0 and .step_s == null and .events == null and .vram_peak_mb == 50' \
		s/peft_oom_load.json
	jq -e '.status == "error" and .error == "interrupted" and .steps == 1' s/accelerate_offload_interrupt.json
	jq -e '.status == "skipped" and (.error | startswith("torch is not installed")) and .env.torch == null' \
		s/peft_no_torch.json
	jq -e '.status == "skipped" and .env.torch == "0.0.0+fake" and .backend == null' s/peft_no_cuda.json
	jq -e '.status == "error" and .run_dir == null and .steps == null' s/unsloth_usage.json
	run -0 --separate-stderr validate s/*.json
	[ "$(sort -u <<< "$output" | cut -d' ' -f1 | sort -u | tr '\n' ' ')" = "error ok oom skipped " ]
	[ "$(wc -l <<< "$output")" -eq 27 ]
}

@test "both writers' events validate against event.schema.json, keys in its order: poros-train (eval, profile) and armlib" {
	datasets
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 3 --dataset data.jsonl --eval-dataset eval.jsonl \
		--eval-every 2 --out run_train >/dev/null
	POROS_PROFILE=1 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --out run_profile >/dev/null
	cell peft peft.json
	run -0 --separate-stderr "$FIX/fake-torch-arm" ok --cell peft.json --out run_peft
	run -0 python3 - "$SCHEMA/event.schema.json" run_train/events.jsonl run_profile/events.jsonl \
		run_peft/events.jsonl <<-'PY'
	import json, sys, jsonschema
	schema = json.load(open(sys.argv[1]))
	jsonschema.Draft202012Validator.check_schema(schema)
	order, n = list(schema["properties"]), 0
	for path in sys.argv[2:]:
	    for line in open(path):
	        e = json.loads(line)
	        jsonschema.validate(e, schema)
	        assert list(e) == [k for k in order if k in e], f"{path}: keys out of order: {list(e)}"
	        n += 1
	print(n, sum("eval_loss" in json.loads(l) for p in sys.argv[2:3] for l in open(p)),
	      sum("profile" in json.loads(l) for p in sys.argv[3:4] for l in open(p)))
	PY
	# 3 + 2 + 4 events; steps 2 and 3 evaluated; both profiled steps carry the profile
	[ "$output" = "9 2 2" ]
}

@test "armlib away from share/poros/schema names the schema it cannot read and exits 1, printing no summary" {
	mkdir -p lone/arms
	cp "$POROS_ROOT/share/poros/arms/armlib.py" lone/arms/
	cell peft peft.json
	POROS_ARMS_DIR="$PWD/lone/arms" run -1 --separate-stderr "$FIX/fake-torch-arm" ok --cell peft.json --out run_lone
	[ -z "$output" ]
	[[ "$stderr" == *"lone/arms/../schema/summary.schema.json: cannot read the summary's keys: "* ]]
}

# through_arm SUMMARY CODE [METHOD]: poros-arm on a cell of METHOD (by
# default SUMMARY's) whose child prints SUMMARY and exits CODE; the
# artifact on stdout
through_arm() {
	local m=${3:-}
	[ -n "$m" ] || m=$(jq -r .method "$1")
	cell "$m" "$m.json"
	printf '#!/bin/sh\ncat "%s"\nexit %s\n' "$PWD/$1" "$2" > child
	chmod +x child
	POROS_TRAIN="$PWD/child" POROS_PYTHON="$PWD/child" poros-arm -o "arm_$(basename "$1" .json)" "$m.json"
}

@test "poros-arm takes every summary the schema accepts, and refuses what it refuses" {
	datasets
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 3 --timing-warmup 1 --dataset data.jsonl \
		--eval-dataset eval.jsonl --out blk > s/blk.json
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 2 --vram-budget 64K --out oom > s/oom.json || true
	cell peft peft.json
	cell unsloth unsloth.json
	"$FIX/fake-torch-arm" ok --cell peft.json --out run_ok > s/peft_ok.json 2>/dev/null
	"$FIX/fake-torch-arm" no_cuda --cell unsloth.json --out run_skip > s/unsloth_skip.json 2>/dev/null
	"$FIX/fake-torch-arm" error_step --cell peft.json --out run_err > s/peft_err.json 2>/dev/null || true
	validate s/*.json > /dev/null
	local f code
	for f in s/*.json; do
		code=0
		jq -e '.status == "oom" or .status == "error"' "$f" > /dev/null && code=1
		through_arm "$f" "$code" > "art_$(basename "$f")" 2>/dev/null
		# the summary's status, and an artifact its own schema accepts
		jq -e --slurpfile s "$f" '.status == $s[0].status and .env.backend == $s[0].backend
			and .env.weights == $s[0].weights' "art_$(basename "$f")"
	done
	python3 - "$SCHEMA" art_*.json <<-'PY'
	import json, sys, jsonschema
	art = json.load(open(sys.argv[1] + "/artifact.schema.json"))
	for path in sys.argv[2:]:
	    jsonschema.Draft202012Validator(art).validate(json.load(open(path)))
	PY
	# a summary the schema refuses is one the reader refuses too: the
	# artifact is an error naming the field
	local mutant want
	for mutant in '.frobnicate = 1:frobnicate: unknown field' '.env.hostname = "h":env.hostname: unknown field' \
		'.weights = "random":weights: unknown "random" (expected real or synthetic)' \
		'.backend = "rocm":backend: unknown "rocm" (expected cpu or cuda)' \
		'.step_s[0] = -1:step_s[0]: not a time in seconds' '.vram_peak_mb = -1:vram_peak_mb: must not be negative, got -1' \
		'.host_checkpoints_mb = -1:host_checkpoints_mb: must not be negative, got -1' \
		'.vram_breakdown_mb.slabs = "big":vram_breakdown_mb.slabs: not a number' '.eval_tokens = 1.5:eval_tokens: not a count: 1.5' \
		'.method = "lora":method: unknown "lora"' '.mode = "sideways":mode: unknown "sideways"' \
		'.passes = []:passes: unknown field'; do
		want=${mutant#*:}
		jq -c "${mutant%%:*}" s/blk.json > mutant.json
		run -1 --separate-stderr validate mutant.json
		through_arm mutant.json 0 poros > art.json 2>/dev/null
		jq -e --arg w "malformed summary: $want" '.status == "error" and (.error | contains($w))' art.json
	done
}

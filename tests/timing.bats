#!/usr/bin/env bats
# One timing method and one optimizer protocol for every arm (issue 19):
# every arm lists its timed steps, C computes s_per_step from the lists
# (tools/lib/records/timing.c), passes are fresh processes, the LR warmup is apart
# from the timing warmup, and artifacts say what computed.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/arm"
	ARMS="$POROS_ROOT/share/poros/arms"
	unset POROS_TRAIN POROS_PYTHON POROS_ARMS_DIR FAKE_MODE
}

# A stand-in trainer whose pass N (counted in ./pass) times its 3 steps at
# BASE_N + 0, 1, 2 ms, BASE_N from $PASS_BASES ("1.0 1.2 1.1").
fake_passes() {
	cat > fake-passes <<-'SH'
	#!/bin/bash
	n=$(( $(cat pass 2>/dev/null || echo 0) + 1 )); echo $n > pass
	read -r -a base <<< "$PASS_BASES"
	b=${base[$((n - 1))]}
	s=$(awk -v b="$b" 'BEGIN { printf "%.3f,%.3f,%.3f", b + 0.002, b, b + 0.001 }')
	m=$(awk -v b="$b" 'BEGIN { printf "%.3f", b + 0.001 }')
	printf '{"schema":"poros.summary/1","status":"ok","error":null,"backend":"cpu","steps":4,"warmup_steps":1,'
	printf '"steps_measured":3,"step_s":[%s],"s_per_step":%s,"loss_first":6.9,"loss_last":6.8,' "$s" "$m"
	printf '"vram_peak_mb":%d,"env":{}}\n' "$((100 * n))"
	SH
	chmod +x fake-passes
	export POROS_TRAIN="$PWD/fake-passes"
}

@test "training.passes 3 runs three fresh trainers and s_per_step is the median of their medians" {
	fake_passes
	export PASS_BASES="1.0 1.2 1.1"
	jq -c '.training.passes = 3' "$FIX/cell.json" > c.json
	run -0 --separate-stderr poros-arm c.json
	[ "$(cat pass)" -eq 3 ]
	jq -e '.status == "ok" and (.metrics.passes | length) == 3
		and [.metrics.passes[].median_s] == [1.001, 1.201, 1.101]
		and .metrics.passes[1].step_s == [1.202, 1.2, 1.201]
		and .metrics.s_per_step == 1.101 and .metrics.s_per_step_min == 1 and .metrics.s_per_step_max == 1.202
		and (.metrics.s_per_step_spread - 0.2 | fabs) < 1e-9
		and (.metrics.s_per_step_mad - 0.001 | fabs) < 1e-9 and .metrics.passes_agree == false
		and .metrics.vram_peak_mb == 300 and .metrics.steps_measured == 3
		and (.metrics.tokens_per_s - 64 / 1.101 | fabs) < 1e-9' <<< "$output"
	[[ "$stderr" == *"[pass 1/3] [pass 2/3] [pass 3/3]"* ]]
}

@test "passes within the steps' noise agree; a cell without training.passes runs one" {
	fake_passes
	export PASS_BASES="1.0 1.001 1.0"
	jq -c '.training.passes = 3' "$FIX/cell.json" > c.json
	run -0 --separate-stderr poros-arm c.json
	jq -e '.metrics.passes_agree == true and .metrics.s_per_step == 1.001' <<< "$output"
	rm pass
	run -0 --separate-stderr poros-arm -o one "$FIX/cell.json"
	[ "$(cat pass)" -eq 1 ]
	jq -e '(.metrics.passes | length) == 1 and .metrics.s_per_step_spread == 0 and .cell.training.passes == 1' \
		<<< "$output"
}

@test "a summary whose s_per_step is not the median of its step_s makes an error artifact" {
	cat > mean-train <<-'SH'
	#!/bin/bash
	echo '{"schema":"poros.summary/1","status":"ok","steps_measured":3,"step_s":[1,2,6],"s_per_step":3}'
	SH
	chmod +x mean-train
	POROS_TRAIN="$PWD/mean-train" run -0 --separate-stderr poros-arm "$FIX/cell.json"
	jq -e '.status == "error" and (.error | contains("s_per_step: 3 is not the median of step_s (2)"))' <<< "$output"
}

@test "poros-train's s_per_step is the median of its timed steps, which are the events' step_s" {
	run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 16 --rank 2 --alpha 4 \
		--steps 6 --timing-warmup 2 --quiet --out run
	jq -e --slurpfile ev run/events.jsonl '.step_s == [$ev[2:][].step_s] and .steps_measured == 4
		and .s_per_step == (.step_s | sort | (.[1] + .[2]) / 2)
		and .s_per_step_min == (.step_s | min) and .s_per_step_max == (.step_s | max)' <<< "$output"
}

@test "armlib's step_timing reports the median of the timed steps, and a fake step loop agrees" {
	run -0 --separate-stderr python3 - "$ARMS" <<-'PY'
	import json, sys
	sys.path.insert(0, sys.argv[1])
	import armlib
	t = armlib.step_timing([0.5, 0.1, 0.3, 0.2], 64)
	assert t["step_s"] == [0.5, 0.1, 0.3, 0.2] and t["s_per_step"] == 0.25, t
	assert t["s_per_step_min"] == 0.1 and t["s_per_step_max"] == 0.5 and t["tokens_per_s"] == 256
	# not the mean (0.275), and an odd count takes the middle value
	assert armlib.step_timing([3, 1, 2], 1)["s_per_step"] == 2
	# a fake step: wall times as train() records them (6 decimals)
	fake = [0.0123456789, 0.02, 0.0100004]
	t = armlib.step_timing(fake, 10)
	assert t["step_s"] == [0.012346, 0.02, 0.01] and t["s_per_step"] == 0.012346, t
	print(json.dumps(t))
	PY
	jq -e '.s_per_step == (.step_s | sort | .[1])' <<< "$output"
}

@test "the LR warmup is lr_warmup_steps, apart from the timing warmup, in poros-train's events" {
	run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 16 --rank 2 --alpha 4 \
		--steps 4 --timing-warmup 1 --lr 1e-3 --quiet --out plain
	jq -e -s '[.[].lr] == [0.001, 0.001, 0.001, 0.001]' plain/events.jsonl
	jq -e '.warmup_steps == 1 and .steps_measured == 3' <<< "$output"
	run -0 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 16 --rank 2 --alpha 4 \
		--steps 4 --timing-warmup 0 --lr-warmup 2 --lr 1e-3 --quiet --out ramp
	jq -e -s '[.[].lr] == [0, 0.0005, 0.001, 0.001]' ramp/events.jsonl
	jq -e '.warmup_steps == 0 and .steps_measured == 4' <<< "$output"
	# a cell's training.lr_warmup_steps reaches poros-train through poros-arm
	jq -c '.training.lr_warmup_steps = 2 | .training.learning_rate = 0.001' "$FIX/cell.json" > c.json
	run -0 --separate-stderr poros-arm c.json
	jq -e -s '[.[].lr] == [0, 0.0005, 0.001, 0.001]' out/runs/poros_tiny_llama_bf16/events.jsonl
}

@test "armlib's LR schedule is poros-train's, step for step, for every schedule with and without warmup" {
	for sched in constant linear cosine; do
		for w in 0 3; do
			poros-train --backend cpu --model poros/tiny-qwen2 --seq-len 8 --rank 2 --alpha 4 --steps 7 \
				--lr 1e-3 --lr-schedule $sched --lr-warmup $w --quiet --out "r_${sched}_$w" > /dev/null
			jq -c -s '[.[].lr]' "r_${sched}_$w/events.jsonl" > "r_${sched}_$w.lr"
		done
	done
	run -0 --separate-stderr python3 - "$ARMS" <<-'PY'
	import json, sys
	sys.path.insert(0, sys.argv[1])
	import armlib
	for sched in ("constant", "linear", "cosine"):
	    for w in (0, 3):
	        want = json.load(open(f"r_{sched}_{w}.lr"))
	        # LambdaLR's step k (1-based) uses lr_lambda(k - 1)
	        got = [1e-3 * armlib.lr_factor(sched, k - 1, 7, w) for k in range(1, 8)]
	        assert all(abs(a - b) <= 1e-12 for a, b in zip(got, want)), (sched, w, got, want)
	print("same")
	PY
	assert_output same
}

@test "an artifact records the backend and the device that computed" {
	run -0 --separate-stderr poros-arm "$FIX/cell.json"
	jq -e '.status == "ok" and .env.backend == "cpu" and .env.device == .env.cpu and (.env.device | type) == "string"' \
		<<< "$output"
}

@test "an artifact's s_per_step is the median of its passes' medians of the recorded step_s (real poros-train)" {
	jq -c '.training.passes = 3 | .training.steps = 5' "$FIX/cell.json" > c.json
	run -0 --separate-stderr poros-arm c.json
	jq -e '.status == "ok" and (.metrics.passes | length) == 3
		and all(.metrics.passes[]; (.step_s | length) == 4 and .median_s == (.step_s | sort | (.[1] + .[2]) / 2))
		and .metrics.s_per_step == ([.metrics.passes[].median_s] | sort | .[1])
		and .metrics.s_per_step_min == ([.metrics.passes[].step_s[]] | min)
		and .metrics.s_per_step_max == ([.metrics.passes[].step_s[]] | max)' <<< "$output"
	# the run directory holds the last pass: its timed steps are the events'
	jq -e --slurpfile ev out/runs/poros_tiny_llama_bf16/events.jsonl \
		'.metrics.passes[2].step_s == [$ev[1:][].step_s]' <<< "$output"
}

@test "a Python arm's timing reaches the artifact as the same median (armlib.step_timing through poros-arm)" {
	cat > py-train <<-PY
	#!/usr/bin/env python3
	import json, sys
	sys.path.insert(0, "$ARMS")
	import armlib
	s = armlib.new_summary("poros", "run")
	s.update(armlib.step_timing([0.31, 0.1, 0.2, 0.4], 64), status="ok", backend="cuda", steps=5, warmup_steps=1)
	print(json.dumps(s))
	PY
	chmod +x py-train
	POROS_TRAIN="$PWD/py-train" run -0 --separate-stderr poros-arm "$FIX/cell.json"
	jq -e '.status == "ok" and .metrics.passes[0].step_s == [0.31, 0.1, 0.2, 0.4]
		and .metrics.s_per_step == 0.255 and .metrics.tokens_per_s == 64 / 0.255 and .env.backend == "cuda"' <<< "$output"
}

@test "the python arms train on poros-train's synthetic:repeat stream, token for token" {
	# the same golden values as tests/unit/test_train_data.c checks in C
	run -0 --separate-stderr python3 - "$ARMS" <<-'PY'
	import sys
	sys.path.insert(0, sys.argv[1])
	import armlib
	cycle = [215, 102, 105, 136, 140, 37, 135, 133, 195, 65, 116, 9, 248, 250, 197, 92]
	assert armlib.repeat_cycle(42, 256) == cycle
	# sequence i starts at position i * (seq_len + 1) of the endless cycle
	assert armlib.repeat_rows(42, 256, 8, 0, 2) == [cycle[:8], cycle[9:16] + cycle[:1]]
	cell = {"training": {"seed": 42, "seq_len": 8, "batch_size": 1, "gradient_accumulation_steps": 2,
	                     "dataset": "synthetic:repeat"}}
	assert armlib.step_rows(cell, 256, 1) == [[cycle[:8]], [cycle[9:16] + cycle[:1]]]
	print("same")
	PY
	assert_output same
}

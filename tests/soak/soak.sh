#!/usr/bin/env bash
# tests/soak/soak.sh: SIGKILL at random points, many times, and check what
# Poros promises after each kill (docs/robustness.md):
#   bench   `poros bench run` of tests/fixtures/robustness/bench.yaml with 30
#           steps a cell (the real poros-train, 8 tiny CPU cells) killed with
#           its process group:
#           results.jsonl holds whole lines, no cell twice, every artifact and
#           cell file is whole JSON; after the kills one rerun completes every
#           cell exactly once, with the losses of an uninterrupted run.
#   train   poros-train (tiny CPU model, an adapter saved every step) killed:
#           events.jsonl holds whole lines, steps 1..k once each with the
#           uninterrupted run's numbers; every adapter file there is byte for
#           byte the uninterrupted run's; the run directory's lock went with
#           the killed trainer (its PID in .lock, if written, is dead); a rerun
#           in the same directory takes the lock over (its PID in .lock), gives
#           exactly that run again and leaves no temporary behind.
# poros-train --resume does not exist yet: a killed run is redone from step
# 1, which is what is checked; once --resume lands, soak it here too.
#   SOAK_KILLS  kills per part (default 20)
#   SOAK_SEED   seed of the kill times (default: the clock; printed)
#   SOAK_ONLY   bench or train: one part only
# Bounded: about a second per kill and part.  Exit 0 when every check held.
set -u

cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
export PATH="$ROOT/bin:$PATH"
KILLS=${SOAK_KILLS:-20}
SEED=${SOAK_SEED:-$(date +%s)}
case $KILLS in ''|*[!0-9]*) echo "soak: SOAK_KILLS must be a whole number (got \"$KILLS\")" >&2; exit 2 ;; esac
case $SEED in ''|*[!0-9]*) echo "soak: SOAK_SEED must be a whole number (got \"$SEED\")" >&2; exit 2 ;; esac
for t in poros poros-expand poros-arm poros-merge poros-train jq setsid; do
	command -v "$t" > /dev/null || { echo "soak: $t not found (run make first)" >&2; exit 2; }
done
unset POROS_TRAIN
WORK=$(mktemp -d "${TMPDIR:-/tmp}/poros-soak.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT
RANDOM=$SEED
failures=0
echo "soak: seed $SEED, $KILLS kills per part, in $WORK" >&2

bad() { echo "soak: FAIL: $*" >&2; failures=$((failures + 1)); }

# A delay in [0, $1) seconds, from the seeded RANDOM.
delay() { awk -v r="$RANDOM" -v s="$1" 'BEGIN { printf "%.3f", r / 32768 * s }'; }

# FILE holds only whole JSON objects, one a line, and ends in a newline.
whole_lines() {
	[ -s "$1" ] || return 0
	[ -z "$(tail -c 1 "$1")" ] || { bad "$1: last line is torn (no newline)"; return 1; }
	jq -e -c 'objects' "$1" > /dev/null 2>&1 || { bad "$1: a line is not a whole JSON object"; return 1; }
}

# Kills the process group of $1 and waits for it.
kill_group() {
	kill -KILL -- "-$1" 2> /dev/null || true
	wait "$1" 2> /dev/null || true
}

# --- bench ---------------------------------------------------------------------
# the robustness spec with longer cells, so that kills land inside the trainer too
SPEC=$WORK/bench.yaml
sed 's/^  steps: 2$/  steps: 30/' "$ROOT/tests/fixtures/robustness/bench.yaml" > "$SPEC"
grep -q '^  steps: 30$' "$SPEC" || { echo "soak: tests/fixtures/robustness/bench.yaml has no \"  steps: 2\" line to lengthen" >&2; exit 2; }
bench_consistent() {
	local out=$1 f dup
	whole_lines "$out/results.jsonl" || return
	if [ -s "$out/results.jsonl" ]; then
		dup=$(jq -r .cell_id "$out/results.jsonl" | sort | uniq -d)
		[ -z "$dup" ] || bad "$out/results.jsonl: $dup more than once"
	fi
	for f in "$out"/*.json "$out"/cells/*.json; do
		[ -e "$f" ] || continue
		jq -e 'type == "object"' "$f" > /dev/null 2>&1 || bad "$f: not whole JSON"
	done
}

# cell_id, status and losses of each line, sorted: what a rerun must match.
bench_summary() {
	jq -r '[.cell_id, .status, .metrics.loss_first, .metrics.loss_last] | @tsv' "$1" | sort
}

soak_bench() {
	local ref=$WORK/bench-ref kill=$WORK/bench-kill i d pid
	mkdir -p "$ref" "$kill"
	(cd "$ref" && poros bench run "$SPEC" > /dev/null 2> bench.log) || { bad "the uninterrupted bench run failed"; return; }
	bench_summary "$ref/out/robust/results.jsonl" > "$WORK/bench-ref.tsv"
	[ "$(wc -l < "$WORK/bench-ref.tsv")" -eq 8 ] || { bad "the uninterrupted run has not 8 results"; return; }
	local t0 t1 span
	t0=$(date +%s%N)
	(cd "$WORK" && poros bench run --force "$SPEC" -o "$WORK/bench-timing" > /dev/null 2>&1)
	t1=$(date +%s%N)
	span=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 * 1.2 }')
	for i in $(seq 1 "$KILLS"); do
		d=$(delay "$span")
		(cd "$kill" && exec setsid poros bench run "$SPEC" > /dev/null 2>> bench.log) &
		pid=$!
		sleep "$d"
		kill_group "$pid"
		bench_consistent "$kill/out/robust"
	done
	(cd "$kill" && poros bench run "$SPEC" > /dev/null 2>> bench.log) || bad "the rerun after the kills failed (see $kill/bench.log)"
	bench_consistent "$kill/out/robust"
	local res=$kill/out/robust/results.jsonl
	[ "$(wc -l < "$res")" -eq 8 ] || bad "after the rerun, results.jsonl has $(wc -l < "$res") lines, not 8"
	bench_summary "$res" > "$WORK/bench-kill.tsv"
	cmp -s "$WORK/bench-ref.tsv" "$WORK/bench-kill.tsv" ||
		bad "after the kills the results differ from an uninterrupted run: $(diff "$WORK/bench-ref.tsv" "$WORK/bench-kill.tsv" | head -n 4 | tr '\n' ' ')"
	(cd "$kill" && poros bench run "$SPEC" > /dev/null 2>> bench.log)
	[ "$(wc -l < "$res")" -eq 8 ] || bad "a run with nothing to do added lines"
	echo "soak: bench: $KILLS kills over ${span}s runs checked" >&2
}

# --- train ---------------------------------------------------------------------
TRAIN=(poros-train --model poros/tiny-qwen2 --backend cpu --steps 150 --seq-len 16 --rank 2
	--targets q_proj,v_proj --save-every 1 --quiet)

# The deterministic numbers of an events file, one line a step.
train_numbers() { jq -r '[.step, .loss, .lr, .grad_norm] | @tsv' "$1"; }

train_consistent() {
	local run=$1 ref=$2 n f rel
	if [ -e "$run/events.jsonl" ]; then
		whole_lines "$run/events.jsonl" || return
		train_numbers "$run/events.jsonl" > "$WORK/train-kill.tsv"
		n=$(wc -l < "$WORK/train-kill.tsv")
		head -n "$n" "$WORK/train-ref.tsv" | cmp -s - "$WORK/train-kill.tsv" ||
			bad "$run/events.jsonl: its $n steps are not steps 1..$n of the uninterrupted run"
	fi
	for f in "$run"/adapter*/adapter_model.safetensors "$run"/adapter*/adapter_config.json; do
		[ -e "$f" ] || continue
		rel=${f#"$run"/}
		cmp -s "$f" "$ref/$rel" || bad "$f differs from the uninterrupted run's (a torn or partial file)"
	done
}

soak_train() {
	local ref=$WORK/train-ref run=$WORK/train-run i d pid rerun holder t0 t1 span left
	t0=$(date +%s%N)
	"${TRAIN[@]}" --out "$ref" > /dev/null 2> "$WORK/train.log" || { bad "the uninterrupted poros-train run failed"; return; }
	t1=$(date +%s%N)
	span=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 * 1.1 }')
	train_numbers "$ref/events.jsonl" > "$WORK/train-ref.tsv"
	for i in $(seq 1 "$KILLS"); do
		d=$(delay "$span")
		setsid "${TRAIN[@]}" --out "$run" > /dev/null 2>> "$WORK/train.log" &
		pid=$!
		sleep "$d"
		kill_group "$pid"
		train_consistent "$run" "$ref"
		# the lock is a flock: it goes with the killed process, whatever .lock says
		holder=$(cat "$run/.lock" 2> /dev/null)
		[ -z "$holder" ] || ! kill -0 "$holder" 2> /dev/null || bad "$run/.lock names PID $holder, alive after the kill"
		# every other kill, the killed directory is trained again to the end
		if [ $((i % 2)) = 0 ]; then
			"${TRAIN[@]}" --out "$run" > /dev/null 2>> "$WORK/train.log" &
			rerun=$!
			wait "$rerun" || bad "a rerun in $run failed (its lock not taken over from the killed trainer?)"
			[ "$(cat "$run/.lock")" = "$rerun" ] || bad "$run/.lock does not name the rerun (PID $rerun)"
			train_numbers "$run/events.jsonl" | cmp -s - "$WORK/train-ref.tsv" || bad "a rerun's events differ from the uninterrupted run's"
			train_consistent "$run" "$ref"
			[ "$(find "$run" -name 'adapter*' -prune -type d | wc -l)" -eq "$(find "$ref" -name 'adapter*' -prune -type d | wc -l)" ] ||
				bad "a rerun saved a different set of adapters"
			left=$(find "$run" -name '*.tmp.*')
			[ -z "$left" ] || bad "a rerun left temporaries behind: $left"
		fi
	done
	echo "soak: train: $KILLS kills over ${span}s runs checked" >&2
}

case ${SOAK_ONLY:-} in
'') soak_bench; soak_train ;;
bench) soak_bench ;;
train) soak_train ;;
*) echo "soak: SOAK_ONLY must be bench or train" >&2; exit 2 ;;
esac
if [ "$failures" -gt 0 ]; then
	echo "soak: $failures check(s) failed (seed $SEED: SOAK_SEED=$SEED make soak repeats the kill times)" >&2
	exit 1
fi
echo "soak: ok (seed $SEED)" >&2

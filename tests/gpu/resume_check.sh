#!/bin/sh
# tests/gpu/resume_check.sh: tests/resume.bats's every-position check on a
# backend: every checkpoint of an 8-step run over four documents of 5 ids
# (rows of 4 end an epoch exactly, rows of 5 run past it) resumes to the
# uninterrupted run's adapter bytes and losses, blockwise and resident,
# and the last step's checkpoint extends the run.  Needs jq.
#   sh tests/gpu/resume_check.sh OUTDIR [cuda|cpu]
# With POROS_BIN=dist/poros/bin (make bundle) on a machine without the
# build libraries.  Prints one line a case and FAIL lines; exit 1 on any.
set -u
out=${1:-/tmp/poros-resume-check}
backend=${2:-cuda}
P=${POROS_BIN:-bin}
[ -d "$P/../lib" ] && export LD_LIBRARY_PATH="$PWD/$P/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rm -rf "$out"
mkdir -p "$out"
fail=0
bad() { printf 'FAIL %s\n' "$*"; fail=1; }

for d in 1 2 3 4; do
	jq -cn --argjson d "$d" '{input_ids: [range(0; 5) | (. * 7 + $d * 13) % 250]}'
done >"$out/docs.jsonl"
rows() { jq -c '[.step, .loss, .lr, .grad_norm, .tokens, .epoch]' "$1/events.jsonl"; }
same() { # A B: adapter bytes and event rows
	cmp -s "$1/adapter/adapter_model.safetensors" "$2/adapter/adapter_model.safetensors" &&
		[ "$(rows "$1")" = "$(rows "$2")" ]
}

for mode in blockwise resident; do
	for s in 4 5; do
		R="--backend $backend --model poros/tiny-qwen2 --mode $mode --precision nf4 --block-size 1 --rank 4
			--alpha 8 --dropout 0.1 --lr 5e-3 --lr-schedule cosine --timing-warmup 2 --max-grad-norm 0.5 --quiet
			--seq-len $s --batch-size 1 --dataset $out/docs.jsonl --steps 8"
		base=$out/${mode}_$s
		# shellcheck disable=SC2086
		$P/poros-train $R --out "$base-full" >/dev/null 2>"$base.log" &&
			$P/poros-train $R --save-every 1 --out "$base-half" >/dev/null 2>>"$base.log" ||
			{ bad "$mode seq $s: the runs failed: $(tail -1 "$base.log")"; continue; }
		ok=0
		for k in 1 2 3 4 5 6 7; do
			pos=$(jq -c .data_cursor "$base-half/checkpoint-step$k/state.json")
			# shellcheck disable=SC2086
			if $P/poros-train $R --resume "$base-half/checkpoint-step$k" --out "$base-r$k" >/dev/null \
				2>>"$base.log" && same "$base-full" "$base-r$k"; then
				ok=$((ok + 1))
			else
				bad "$mode seq $s: resumed at step $k ($pos) differs from the run that never stopped"
			fi
		done
		printf '%s seq %s: %d of 7 checkpoints resume bit-identical\n' "$mode" "$s" "$ok"
	done
	# the last step's checkpoint extends a finished run (constant schedule)
	R="--backend $backend --model poros/tiny-qwen2 --mode $mode --precision nf4 --block-size 1 --rank 4 --quiet
		--lr-schedule constant --seq-len 5 --batch-size 1 --dataset $out/docs.jsonl"
	base=$out/${mode}_last
	# shellcheck disable=SC2086
	if $P/poros-train $R --steps 9 --out "$base-full" >/dev/null 2>"$base.log" &&
		$P/poros-train $R --steps 5 --save-every 4 --out "$base-half" >/dev/null 2>>"$base.log" &&
		$P/poros-train $R --steps 9 --resume "$base-half/checkpoint-step5" --out "$base-more" >/dev/null \
			2>>"$base.log" && same "$base-full" "$base-more"; then
		printf '%s: the last step'"'"'s checkpoint extends the run bit-identical\n' "$mode"
	else
		bad "$mode: extending from the last step's checkpoint: $(tail -1 "$base.log")"
	fi
done
exit $fail

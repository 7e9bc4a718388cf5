#!/usr/bin/env bats
# Packed rows: documents joined in one row attend only within themselves
# and their positions restart, so each document's per-token losses are the
# ones it gets alone (issue 20 item 3, issue 21 item 2).

setup() {
	load test_helper/common-setup
	_common_setup
	python3 "$POROS_ROOT/tests/fixtures/checkpoint/make_checkpoint.py" m --family qwen2 --vocab 320 >/dev/null
	A='[5,17,33,2,91,45,8,120,77,3,64,19]'
	B='[200,11,9,150,6,88,42,31,7,250]'
	echo "{\"input_ids\":$A}" >a.jsonl
	echo "{\"input_ids\":$B}" >b.jsonl
	cat a.jsonl b.jsonl >ab.jsonl
	# the training data: A's tokens in a file of its own (a.jsonl itself is
	# refused as an eval set of a run that trains on it)
	cp a.jsonl train.jsonl
	# A and B as one document: B's tokens then see A
	jq -nc --argjson a "$A" --argjson b "$B" '{input_ids: ($a + $b)}' >one.jsonl
}

# eval_of NAME MODE: the loss over NAME.jsonl's targets (one row of 64),
# with the adapter after one identical training step; "loss tokens" on stdout
eval_of() {
	poros-train --model "$PWD/m" --backend cpu --mode "$2" --precision bf16 --seq-len 64 --steps 1 --rank 4 \
		--alpha 8 --dropout 0 --dataset train.jsonl --eval-dataset "$1.jsonl" --out "r_$1_$2" --quiet |
		jq -r '"\(.eval_loss) \(.eval_tokens)"'
}

@test "a row packing two documents gives each the losses it has alone, in both schedules" {
	for mode in resident blockwise; do
		read -r la na <<<"$(eval_of a "$mode")"
		read -r lb nb <<<"$(eval_of b "$mode")"
		read -r lab nab <<<"$(eval_of ab "$mode")"
		read -r lone none <<<"$(eval_of one "$mode")"
		# every token of a document predicts the next one of it; the EOS
		# between them predicts nothing (no target across documents)
		[ "$na" -eq 12 ] && [ "$nb" -eq 10 ] && [ "$nab" -eq 22 ] && [ "$none" -eq 22 ]
		# the packed mean is the two alone, weighted, to the 9 digits printed
		awk -v la="$la" -v na="$na" -v lb="$lb" -v nb="$nb" -v l="$lab" 'BEGIN {
			want = (la * na + lb * nb) / (na + nb); d = l - want; if (d < 0) d = -d
			exit !(d <= 1e-6 * want) }'
		# and the check would notice attention across the boundary: B after A
		# in one document has other losses
		awk -v l="$lab" -v o="$lone" 'BEGIN { d = l - o; if (d < 0) d = -d; exit !(d > 1e-3 * l) }'
	done
	# both schedules give the same bits
	[ "$(jq -c '[.loss, .eval_loss]' r_ab_resident/events.jsonl)" = "$(jq -c '[.loss, .eval_loss]' r_ab_blockwise/events.jsonl)" ]
}

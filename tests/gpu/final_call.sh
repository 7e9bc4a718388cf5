#!/bin/sh
# tests/gpu/final_call.sh: one device call at the end of a session, from a
# `make bundle` tree (dist/, build/gpu/): the correctness pass, the chat
# template check against transformers, HF agreement over more seeds and on
# the CPU backend, the long-context runs, then as many long-context bench
# cells as time leaves.  Everything ends up in one tarball under $OUT (a
# device call returns at most 8 files).  usage: sh tests/gpu/final_call.sh
# BUDGET_S (seconds this command may take in all)
set -u
budget=${1:-570}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
export POROS_BIN=dist/poros/bin LD_LIBRARY_PATH=$PWD/dist/poros/lib
P=$POROS_BIN
o=out/final
mkdir -p $o
pack() { tar czf "$OUT/final.tgz" --exclude='adapter*' --exclude='*.safetensors' --exclude='*.bin' $o 2>/dev/null; }
trap pack EXIT
{
	echo "== device_check"; sh tests/gpu/device_check.sh $o/check 2>&1 | tail -40
	echo "== chat templates vs transformers"; python3 tests/gpu/chat_fixtures.py check 2>&1 | tail -15
	echo "== long-context runs (left $(left) s)"
	RUN_TIMEOUT=150 sh tests/gpu/long_check.sh $o/long Qwen/Qwen2.5-7B:nf4:blockwise:32768:1:3 \
		Qwen/Qwen2.5-7B:bf16:blockwise:8192:1:4
	for s in 4 5; do
		timeout 40 python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cuda --seed $s \
			--workdir /tmp/hfc$s 2>/dev/null
	done >$o/hf_seeds.jsonl
	for s in 1 2; do
		timeout 60 python3 tests/gpu/hf_agreement.py --poros-train $P/poros-train --backend cpu --seed $s \
			--workdir /tmp/hfp$s 2>/dev/null
	done >$o/hf_seeds_cpu.jsonl
	echo "== h200_long cells (left $(left) s)"
	$P/poros-expand -o $o/long_bench configs/bench/h200_long.yaml >/dev/null
	$P/poros-expand -o $o/long_32k configs/bench/h200_long_32k.yaml >/dev/null
	for c in long_bench/poros_qwen2_5_7b_bf16 long_bench/resident_qwen2_5_7b_bf16 long_bench/peft_qwen2_5_7b_bf16 \
		long_32k/poros_qwen2_5_7b_nf4 long_32k/peft_qwen2_5_7b_bf16 long_bench/poros_qwen2_5_7b_nf4; do
		t=$(( $(left) - 25 ))
		[ $t -gt 40 ] || { echo "not run (time): $c"; continue; }
		d=${c%%/*}
		$P/poros-arm --timeout $t "$o/$d/cells/${c#*/}.json" >>"$o/$d/results.jsonl" || true
	done
	echo "== done at $(date -u +%T), $(left) s left"
} 2>&1 | tee $o/final.log

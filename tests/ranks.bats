#!/usr/bin/env bats
# poros-train over ranks (mpirun: the CPU backend over MPI; a torchrun-style
# environment: over TCP): N ranks with accumulation k give the bits of one
# process with accumulation N x k, checkpoints move between rank counts that
# cut the same global batch, and a rank that dies ends the others.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	# the CI machine runs as root
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
	# dropout, warmup, a decaying schedule and clipping: every part of a
	# step that depends on the global batch is in play
	RUN=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --dropout 0.1 --lr 5e-3
	     --lr-schedule cosine --timing-warmup 1 --max-grad-norm 0.5 --quiet)
	ADAPTER=adapter/adapter_model.safetensors
}

# MPI's tests need mpirun and the plugin
need_mpi() {
	command -v mpirun >/dev/null || skip "mpirun is not installed (make deps: openmpi-bin)"
	[ -f "$POROS_ROOT/lib/poros/poros-comm-mpi.so" ] || skip "the MPI plugin is not built (make deps all)"
}

# the rows that must agree bit for bit
rows() {
	jq -c '[.step, .loss, .lr, .grad_norm, .tokens, .tokens_supervised]' "$1/events.jsonl"
}

# ranks N K ARGS...: N ranks with accumulation K against one process with
# accumulation N*K, adapter and rows
ranks_equal_one() {
	local n=$1 k=$2
	shift 2
	need_mpi
	poros-train "${RUN[@]}" --accum $((n * k)) --out one "$@" >one.json
	mpirun --oversubscribe -np "$n" poros-train "${RUN[@]}" --accum "$k" --out many "$@" >many.json
	cmp one/$ADAPTER many/$ADAPTER
	diff <(rows one) <(rows many)
	# rank 0 alone writes stdout: one summary line
	[ "$(wc -l <many.json)" -eq 1 ]
	jq -e '.status == "ok"' many.json
	# the throughput counts every rank's tokens (batch 2 x seq 32 a micro-batch)
	jq -e --argjson t $((n * k * 64)) '(.tokens_per_s * .s_per_step | round) == $t' many.json
	# the runs learned something: the comparison is not of equal numbers
	[ "$(jq -r .loss one/events.jsonl | sort -u | wc -l)" -eq "$(wc -l <one/events.jsonl)" ]
}

@test "2 ranks x accum 2 are one process with accum 4, blockwise nf4, bit for bit" {
	ranks_equal_one 2 2 --model poros/tiny-qwen2 --precision nf4 --block-size 2 --steps 3
}

@test "3 ranks x accum 1 are one process with accum 3, resident bf16, bit for bit" {
	ranks_equal_one 3 1 --model poros/tiny-llama --precision bf16 --mode resident --steps 3
}

@test "2 ranks x accum 3 are one process with accum 6, qk-norm, packed documents, bit for bit" {
	for d in 1 2 3 4 5 6 7; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 20 + $d * 3) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
	ranks_equal_one 2 3 --model poros/tiny-qwen3 --precision nf4 --steps 3 --dataset docs.jsonl
}

@test "two compute lanes: 2 ranks x accum 3 are one process with accum 6, bit for bit" {
	# rank 1's first micro-batch is the step's fourth (odd): it runs alone,
	# then its other two as a pair, and the sums keep the one-process order
	POROS_LANES=2 ranks_equal_one 2 3 --model poros/tiny-qwen2 --precision nf4 --block-size 2 --steps 3 --dropout 0.1
}

@test "micro-batch groups: 2 ranks x accum 3 are one process with accum 6, bit for bit" {
	# rows a multiple of 128 (seq 64 x batch 2); each rank's 3 micro-batches a
	# group of 2 and one alone, the leaves pushed in the one-process order
	need_mpi
	local g=(--model poros/tiny-qwen2 --precision nf4 --block-size 2 --steps 3 --seq-len 64 --dropout 0)
	POROS_GROUP=2 poros-train "${RUN[@]}" "${g[@]}" --accum 6 --out one >one.json
	POROS_GROUP=2 mpirun --oversubscribe -np 2 poros-train "${RUN[@]}" "${g[@]}" --accum 3 --out many >many.json
	jq -e '.status == "ok"' many.json
	cmp one/$ADAPTER many/$ADAPTER
	diff <(rows one) <(rows many)
	# the GEMMs' algorithms (CUDA) are chosen at the same rows, and unset
	# (a group of all 6 micro-batches: up to 2048 rows) too: each rank
	# chooses as the one process
	jq -e '.gemm_choice_rows == 256' one/train_config.json many/train_config.json
	poros-train "${RUN[@]}" "${g[@]}" --accum 6 --steps 1 --out one4 >/dev/null
	mpirun --oversubscribe -np 2 poros-train "${RUN[@]}" "${g[@]}" --accum 3 --steps 1 --out many4 >/dev/null
	jq -e '.gemm_choice_rows == 768' one4/train_config.json many4/train_config.json
}

@test "a 2-rank checkpoint resumes on 1 rank with the same global batch, and the other way" {
	need_mpi
	local m=(--model poros/tiny-qwen2 --precision nf4 --steps 4)
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --out full >full.json
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 2 --save-every 2 --out two >two.json
	[ -d two/checkpoint-step2 ]
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --resume two/checkpoint-step2 --out on1 >on1.json
	cmp full/$ADAPTER on1/$ADAPTER
	diff <(rows full) <(rows on1)
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --save-every 2 --out one >one.json
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 2 --resume one/checkpoint-step2 --out on2 >on2.json
	cmp full/$ADAPTER on2/$ADAPTER
	diff <(rows full) <(rows on2)
}

@test "a checkpoint does not resume on ranks that cut another global batch" {
	need_mpi
	local m=(--model poros/tiny-qwen2 --steps 3)
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 2 --save-every 1 --out two >two.json
	run -2 --separate-stderr poros-train "${RUN[@]}" "${m[@]}" --accum 2 --resume two/checkpoint-step1 --out one
	[ -z "$output" ]
	[[ "$stderr" == *accum* ]]
}

@test "a rank killed mid-run ends the others within seconds, naming it; --resume continues" {
	need_mpi
	local m=(--model poros/tiny-qwen2 --steps 60 --save-every 1)
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 1 --out run >run.json 2>run.err &
	local launcher=$! victim="" t0
	# rank 1's process: a child of the launcher whose environment says so
	for _ in $(seq 300); do
		if [ -s run/events.jsonl ] && [ "$(wc -l <run/events.jsonl)" -ge 2 ]; then
			for p in $(pgrep -P "$launcher"); do
				tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
			done
			[ -n "$victim" ] && break
		fi
		sleep 0.1
	done
	[ -n "$victim" ]
	t0=$(date +%s)
	kill -KILL "$victim"
	local rc=0
	wait "$launcher" || rc=$?
	[ "$rc" -ne 0 ]
	[ $(($(date +%s) - t0)) -le 10 ]
	grep -q "rank 1" run.err
	# nothing is left holding the run directory: a rerun resumes there
	local last
	last=$(ls -d run/checkpoint-step* | sed 's/.*step//' | sort -n | tail -1)
	[ "$last" -ge 1 ]
	[ "$last" -lt 60 ]
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 1 --resume "run/checkpoint-step$last" --out run >rerun.json
	jq -e '.status == "ok" and .steps == 60' rerun.json
	[ "$(wc -l <run/events.jsonl)" -eq 60 ]
}

@test "POROS_COMM=mpi with no plugin is a clear error, exit 2" {
	need_mpi
	run -2 --separate-stderr env POROS_COMM=mpi POROS_COMM_PLUGIN=/nonexistent/poros-comm-mpi.so \
		poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 1 --out x
	[ -z "$output" ]
	[[ "$stderr" == *"the data-parallel plugin /nonexistent/poros-comm-mpi.so cannot be loaded"* ]]
	[ ! -e x/events.jsonl ]
}

@test "POROS_COMM with an unknown value is refused by name" {
	run -2 --separate-stderr env POROS_COMM=carrier-pigeon poros-train "${RUN[@]}" --model poros/tiny-qwen2 \
		--steps 1 --out x
	[[ "$stderr" == *'POROS_COMM: unknown value "carrier-pigeon" (expected one of: auto, single, mpi, nccl, tcp)'* ]]
}

@test "POROS_COMM=nccl on the cpu backend is refused: NCCL carries device buffers" {
	run -2 --separate-stderr env POROS_COMM=nccl poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 1 --out x
	[[ "$stderr" == *"POROS_COMM=nccl carries device buffers"* ]]
}

# torch RANK WORLD PORT NAME ARGS...: one rank of a torchrun-style run into
# NAME.RANK.json / .err, in the background (its PID in TORCH_PID)
torch() {
	local rank=$1 world=$2 port=$3 name=$4
	shift 4
	RANK=$rank WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		poros-train "${RUN[@]}" "$@" >"$name.$rank.json" 2>"$name.$rank.err" &
	TORCH_PID=$!
}

@test "a torchrun-style environment over TCP: 2 ranks x accum 2 are one process with accum 4" {
	local m=(--model poros/tiny-qwen2 --precision nf4 --steps 3) port=$((20000 + RANDOM % 40000)) pids=()
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --out one >one.json
	for r in 1 0; do
		torch $r 2 $port tcp "${m[@]}" --accum 2 --out many
		pids+=("$TORCH_PID")
	done
	wait "${pids[@]}"
	cmp one/$ADAPTER many/$ADAPTER
	diff <(rows one) <(rows many)
	jq -e '.status == "ok"' tcp.0.json
	[ ! -s tcp.1.json ]
}

@test "over TCP a killed rank makes rank 0 write a summary naming it within seconds; --resume continues" {
	local m=(--model poros/tiny-qwen2 --steps 60 --save-every 1) port=$((20000 + RANDOM % 40000)) p0 p1 p2 t0 rc=0
	torch 0 3 $port kill "${m[@]}" --out run
	p0=$TORCH_PID
	torch 1 3 $port kill "${m[@]}" --out run
	p1=$TORCH_PID
	torch 2 3 $port kill "${m[@]}" --out run
	p2=$TORCH_PID
	for _ in $(seq 300); do
		[ -s run/events.jsonl ] && [ "$(wc -l <run/events.jsonl)" -ge 2 ] && break
		sleep 0.1
	done
	t0=$(date +%s)
	kill -KILL "$p1"
	wait "$p0" || rc=$?
	[ "$rc" -eq 1 ]
	[ $(($(date +%s) - t0)) -le 5 ]
	jq -e '.status == "error" and (.error | test("rank 1 closed its connection"))' kill.0.json
	rc=0
	wait "$p2" || rc=$?
	[ "$rc" -ne 0 ]
	[ ! -s kill.2.json ]
	local last
	last=$(ls -d run/checkpoint-step* | sed 's/.*step//' | sort -n | tail -1)
	[ "$last" -ge 1 ] && [ "$last" -lt 60 ]
	port=$((port + 1))
	for r in 2 1 0; do
		torch $r 3 $port rerun "${m[@]}" --resume "run/checkpoint-step$last" --out run
	done
	wait
	jq -e '.status == "ok" and .steps == 60' rerun.0.json
	[ "$(wc -l <run/events.jsonl)" -eq 60 ]
}

@test "a torchrun-style environment with a bad RANK is refused by name" {
	run -2 --separate-stderr env RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
		poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 1 --out x
	[ -z "$output" ]
	[[ "$stderr" == *"RANK: not an integer in [0, 1]: 2"* ]]
}

@test "--epochs counts the global batch and an evaluation set agrees, over 2 ranks" {
	need_mpi
	for d in 1 2 3 4 5 6 7 8 9; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 40) | (. * 7 + $d * 13) % 250]}'
	done >d.jsonl
	local m=(--model poros/tiny-qwen2 --batch-size 1 --epochs 2 --dataset d.jsonl --eval-fraction 0.2)
	poros-train "${RUN[@]}" "${m[@]}" --accum 2 --out one >one.json
	mpirun -np 2 poros-train "${RUN[@]}" "${m[@]}" --accum 1 --out two >two.json
	[ "$(jq .steps one.json)" -eq "$(jq .steps two.json)" ]
	[ "$(jq .eval_loss one.json)" = "$(jq .eval_loss two.json)" ]
	cmp one/$ADAPTER two/$ADAPTER
	diff <(jq -c '[.step, .loss, .epoch, .eval_loss]' one/events.jsonl) \
		<(jq -c '[.step, .loss, .epoch, .eval_loss]' two/events.jsonl)
}

@test "--nproc 2 starts its own ranks: accum 2 on each is one process with accum 4" {
	local m=(--model poros/tiny-qwen2 --precision nf4 --steps 3)
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --out one >one.json
	run -0 --separate-stderr poros-train "${RUN[@]}" "${m[@]}" --nproc 2 --accum 2 --out two
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.status == "ok" and .ranks == 2' <<<"$output"
	jq -e '.ranks == 1' one.json
	cmp one/$ADAPTER two/$ADAPTER
	diff <(rows one) <(rows two)
}

@test "--nproc: a rank killed mid-run ends the run within seconds, named in the summary and on stderr" {
	local victim="" t0 rc=0
	poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 60 --nproc 3 --out run >run.json 2>run.err &
	local parent=$!
	for _ in $(seq 300); do
		if [ -s run/events.jsonl ]; then
			for p in $(pgrep -P "$parent"); do
				tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && victim=$p
			done
			[ -n "$victim" ] && break
		fi
		sleep 0.1
	done
	[ -n "$victim" ]
	t0=$(date +%s)
	kill -KILL "$victim"
	wait "$parent" || rc=$?
	[ "$rc" -eq 1 ]
	[ $(($(date +%s) - t0)) -le 5 ]
	grep -q -- "--nproc: rank 1 was killed by signal 9" run.err
	jq -e '.status == "error" and (.error | test("rank 1 closed its connection"))' run.json
}

@test "--nproc: SIGKILL of poros-train leaves no rank running" {
	poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 200 --nproc 2 --out run >run.json 2>run.err &
	local parent=$! ranks=""
	for _ in $(seq 300); do
		ranks=$(pgrep -P "$parent" | tr '\n' ' ')
		[ -s run/events.jsonl ] && [ -n "$ranks" ] && break
		sleep 0.1
	done
	[ -n "$ranks" ]
	kill -KILL "$parent"
	wait "$parent" || true
	# gone, or a zombie waiting for its new parent to reap it
	local alive=1
	for _ in $(seq 30); do
		alive=0
		for p in $ranks; do
			[ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && alive=1
		done
		[ "$alive" -eq 0 ] && break
		sleep 0.1
	done
	[ "$alive" -eq 0 ]
}

@test "--gpus refuses the cpu backend; --nproc refuses a process that is a rank already" {
	run -2 --separate-stderr poros-train "${RUN[@]}" --model poros/tiny-qwen2 --gpus 2 --out x
	[[ "$stderr" == *"--gpus: one rank a GPU on the cuda backend, not --backend cpu (CPU ranks: --nproc N)"* ]]
	run -2 --separate-stderr poros-train "${RUN[@]}" --model poros/tiny-qwen2 --gpus all --out x
	[[ "$stderr" == *"--gpus: one rank a GPU on the cuda backend, not --backend cpu"* ]]
	run -2 --separate-stderr env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
		poros-train "${RUN[@]}" --model poros/tiny-qwen2 --nproc 2 --out x
	[[ "$stderr" == *"--nproc: this process was started as a rank already"* ]]
	run -2 --separate-stderr poros-train "${RUN[@]}" --model poros/tiny-qwen2 --nproc 0 --out x
	[[ "$stderr" == *"--nproc"* ]]
	[ ! -e x ]
}

@test "--resume without --accum cuts the checkpoint's global accumulation over the ranks, or says it cannot" {
	local m=(--model poros/tiny-qwen2 --steps 4) port=$((20000 + RANDOM % 40000)) pids=()
	poros-train "${RUN[@]}" "${m[@]}" --accum 4 --save-every 2 --out one >one.json
	# the checkpoint's 4 micro-batches a step: 2 on each of 2 ranks, the same bits
	for r in 1 0; do
		torch $r 2 $port cut "${m[@]}" --resume one/checkpoint-step2 --out resumed
		pids+=("$TORCH_PID")
	done
	wait "${pids[@]}"
	cmp one/$ADAPTER resumed/$ADAPTER
	# 3 ranks cannot share 4: the error names the checkpoint and what to give
	pids=() port=$((port + 1))
	for r in 2 1 0; do
		torch $r 3 $port odd "${m[@]}" --resume one/checkpoint-step2 --out odd
		pids+=("$TORCH_PID")
	done
	wait "${pids[@]}" || true
	grep -q "the checkpoint's accumulation of 4 micro-batches a step does not divide over 3 ranks: give --accum" odd.0.err
}

# rank_pid PARENT RANK: the process of --nproc's rank RANK
rank_pid() {
	local p
	for p in $(pgrep -P "$1"); do
		if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$p"; fi
	done
}

# kib PID FILE KEY: a "Key: N kB" line of /proc/PID/FILE
kib() {
	awk -v k="$3:" '$1 == k { print $2 }' "/proc/$1/$2"
}

# wide_run NAME [ENV...]: a 2-rank run of a 180 MiB bf16 base in the
# background until its first step is written; PARENT, RANK0, RANK1 set
wide_run() {
	local name=$1
	shift
	env "$@" poros-train "${RUN[@]}" --configs "$POROS_ROOT/tests/fixtures/ranks/configs" --model poros/wide-test --precision bf16 \
		--block-size 1 --batch-size 1 --seq-len 16 --steps 40 --nproc 2 --out "$name" >"$name.json" 2>"$name.err" &
	PARENT=$!
	for _ in $(seq 600); do
		[ -s "$name/events.jsonl" ] && break
		sleep 0.1
	done
	[ -s "$name/events.jsonl" ]
	RANK0=$(rank_pid "$PARENT" 0) RANK1=$(rank_pid "$PARENT" 1)
	[ -n "$RANK0" ] && [ -n "$RANK1" ]
}

@test "the ranks of a host map one copy of the base: its pages count once, and none is left in /dev/shm" {
	local base pss_shared pss_own shm0 shm1 rc=0
	base=$(poros-train "${RUN[@]}" --configs "$POROS_ROOT/tests/fixtures/ranks/configs" --model poros/wide-test --precision bf16 \
		--block-size 1 --batch-size 1 --seq-len 16 --plan --nproc 2 |
		jq -e 'select(.host_ranks == 2 and .host_base_shared) | .host_breakdown_mb | (.base_layers + .base_globals) * 1024 | floor')
	wide_run shared
	# each rank maps all of it, shared, under a name already unlinked
	shm0=$(kib "$RANK0" status RssShmem) shm1=$(kib "$RANK1" status RssShmem)
	[ "$shm0" -ge $((base * 9 / 10)) ] && [ "$shm1" -ge $((base * 9 / 10)) ]
	[ "$(grep -c "/dev/shm/poros-base-$RANK0-.* (deleted)" "/proc/$RANK1/maps")" -ge 1 ]
	[ "$(awk '/poros-base-/ { print $5 }' "/proc/$RANK0/maps" | sort -u)" = \
	  "$(awk '/poros-base-/ { print $5 }' "/proc/$RANK1/maps" | sort -u)" ]
	# proportional set sizes: the base's pages split between the two
	[ $(($(kib "$RANK0" smaps_rollup Pss_Shmem) + $(kib "$RANK1" smaps_rollup Pss_Shmem))) -le $((base * 11 / 10)) ]
	pss_shared=$(($(kib "$RANK0" smaps_rollup Pss) + $(kib "$RANK1" smaps_rollup Pss)))
	# a rank SIGKILLed mid-run leaves no object behind
	kill -KILL "$RANK1"
	wait "$PARENT" || rc=$?
	[ "$rc" -eq 1 ]
	! ls /dev/shm/poros-base-"$RANK0"-* 2>/dev/null
	# POROS_SHARED_BASE=0: a copy a rank, which is what the sharing saves
	wide_run own POROS_SHARED_BASE=0
	[ "$(kib "$RANK0" status RssShmem)" -lt $((base / 10)) ]
	pss_own=$(($(kib "$RANK0" smaps_rollup Pss) + $(kib "$RANK1" smaps_rollup Pss)))
	echo "base $base KiB; the two ranks' Pss: $pss_shared KiB shared, $pss_own KiB a copy each"
	kill -TERM "$PARENT"
	wait "$PARENT" || true
	[ $((pss_own - pss_shared)) -ge $((base * 8 / 10)) ]
}

@test "a run of 2 ranks that ends leaves nothing in /dev/shm; POROS_SHARED_BASE takes 0 or 1" {
	local r0
	poros-train "${RUN[@]}" --model poros/tiny-qwen2 --steps 3 --nproc 2 --out run >run.json 2>run.err &
	local parent=$!
	for _ in $(seq 300); do
		r0=$(rank_pid "$parent" 0)
		[ -n "$r0" ] && break
		sleep 0.05
	done
	wait "$parent"
	jq -e '.status == "ok"' run.json
	[ -n "$r0" ]
	! ls /dev/shm/poros-base-"$r0"-* 2>/dev/null
	run -2 --separate-stderr env POROS_SHARED_BASE=yes poros-train "${RUN[@]}" --model poros/tiny-qwen2 --out x
	[[ "$stderr" == *'POROS_SHARED_BASE: unknown value "yes" (expected 0 or 1)'* ]]
}

@test "--plan with --nproc N is the host's plan: the base once, every other part N times" {
	local m=(--model poros/tiny-qwen2 --precision nf4)
	poros-train "${RUN[@]}" "${m[@]}" --plan >one.json
	poros-train "${RUN[@]}" "${m[@]}" --plan --nproc 3 >three.json
	POROS_SHARED_BASE=0 poros-train "${RUN[@]}" "${m[@]}" --plan --nproc 3 >own.json
	jq -e '.host_ranks == 1 and (.host_base_shared | not)' one.json
	jq -e '.host_ranks == 3 and .host_base_shared' three.json
	jq -e '.host_ranks == 3 and (.host_base_shared | not)' own.json
	jq -e -s '.[0].host_breakdown_mb as $a | .[1].host_breakdown_mb as $b |
		$b.base_layers == $a.base_layers and $b.base_globals == $a.base_globals and
		($b.staging - 3 * $a.staging | fabs) < 0.002 and ($b.device - 3 * $a.device | fabs) < 0.002 and
		$b.process == 3 * $a.process' one.json three.json
	jq -e -s '(.[1].host_breakdown_mb.base_layers - 3 * .[0].host_breakdown_mb.base_layers | fabs) < 0.002' \
		one.json own.json
	jq -e -s '.[1].host_plan_mb > .[0].host_plan_mb' three.json own.json
	# --gpus N plans the cuda ranks of the host, with no device needed
	CUDA_VISIBLE_DEVICES= poros-train --model poros/tiny-qwen2 --seq-len 32 --plan --gpus 2 >gpus.json
	jq -e '.backend == "cuda" and .host_ranks == 2 and .host_base_shared' gpus.json
}

@test "--gpus all counts the CUDA devices the runtime sees: none is refused by name, exit 2" {
	local m=(--seq-len 32 --steps 1 --model poros/tiny-qwen2 --quiet)
	# CUDA_VISIBLE_DEVICES empty: the runtime sees none, on any machine
	run -2 --separate-stderr env CUDA_VISIBLE_DEVICES= poros-train "${m[@]}" --gpus all --out x
	[[ "$stderr" == *"poros-train: --gpus all: no CUDA device"* ]]
	[ "$(grep -c . <<<"$stderr")" -eq 1 ]
	[ -z "$output" ]
	[ ! -e x ]
	run -2 --separate-stderr env CUDA_VISIBLE_DEVICES= poros-train "${m[@]}" --gpus all --plan
	[[ "$stderr" == *"--gpus all: no CUDA device"* ]]
	# a number is checked against the same count: never ranks sharing a GPU
	run -2 --separate-stderr env CUDA_VISIBLE_DEVICES= poros-train "${m[@]}" --gpus 2 --out x
	# the reason in brackets is the backend's: "no CUDA device", or in a CPU-only build why there is no backend
	[[ "$stderr" == *"poros-train: --gpus 2: the CUDA runtime sees 0 devices ("*")"* ]]
	[ ! -e x ]
}

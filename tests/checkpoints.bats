#!/usr/bin/env bats
# poros-train --checkpoints layer|block: blockwise keeps every layer's input
# on the host, or only each block's first (the backward computes the
# block's layers again from it).  The same bits either way, and as
# resident; the host plan shrinks by the block size.  The tiny models have
# 4 layers: block size 3 leaves a tail block of one.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	TINY=(--backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet)
	ADAPTER=adapter/adapter_model.safetensors
}

# train NAME ARGS...: a run into directory NAME, summary in NAME.json
train() {
	local dir=$1
	shift
	poros-train "${TINY[@]}" --out "$dir" "$@" >"$dir.json"
}

# same NAME REF: NAME's adapter and losses are REF's, bit for bit
same() {
	cmp "$2/$ADAPTER" "$1/$ADAPTER"
	diff <(jq -r .loss "$2/events.jsonl") <(jq -r .loss "$1/events.jsonl")
}

# block_parity MODEL ARGS...: resident, --checkpoints layer and block at
# block sizes 2, 3 and 4 give the same bits
block_parity() {
	local model=$1
	shift
	train resident --model "$model" --mode resident --steps 3 "$@"
	train layer2 --model "$model" --checkpoints layer --block-size 2 --steps 3 "$@"
	same layer2 resident
	for bs in 2 3 4; do
		train "block$bs" --model "$model" --checkpoints block --block-size "$bs" --steps 3 "$@"
		jq -e '.status == "ok" and .config.checkpoints == "block"' "block$bs.json"
		same "block$bs" resident
	done
	# the runs learned something: the comparison is not of three equal losses
	[ "$(jq -r .loss resident/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "block checkpoints are bit-identical to resident and layer ones: qwen2, nf4, accumulation 4, dropout" {
	block_parity poros/tiny-qwen2 --precision nf4 --accum 4 --dropout 0.1 --lr 5e-3
}

@test "block checkpoints are bit-identical: llama (tied), bf16, accumulation 1" {
	block_parity poros/tiny-llama --precision bf16 --accum 1 --dropout 0 --lr 5e-3
}

@test "block checkpoints are bit-identical: qwen3 (qk-norm), nf4, accumulation 4, without attention checkpoints" {
	POROS_ATTN_CKPT=0 block_parity poros/tiny-qwen3 --precision nf4 --accum 4 --dropout 0.05 --lr 5e-3
}

@test "block checkpoints are bit-identical with attention checkpoints on, host optimizer state, MLP chunks, no prefetch" {
	POROS_ATTN_CKPT=1 POROS_MLP_CHUNK=16 block_parity poros/tiny-qwen2 --precision bf16 --accum 2 --lr 5e-3 \
		--optimizer-state host
	POROS_MLP_CHUNK=16 train noprefetch --model poros/tiny-qwen2 --checkpoints block --block-size 3 --no-prefetch --steps 3 \
		--precision bf16 --accum 2 --lr 5e-3 --optimizer-state host
	same noprefetch resident
}

@test "block checkpoints are bit-identical over packed documents" {
	# documents of 9 ids and their EOS: three and more a row of 32, with document masks
	for d in 1 2 3 4 5 6 7 8; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 9) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
	block_parity poros/tiny-qwen2 --precision nf4 --accum 2 --lr 5e-3 --dataset docs.jsonl
}

@test "--plan: block checkpoints keep one input a block on the host, and say so" {
	for mode in layer block; do
		POROS_ATTN_CKPT=0 poros-train --plan --backend cpu --model poros/tiny-qwen2 --seq-len 64 --accum 2 \
			--block-size 3 --checkpoints "$mode" >"$mode.json"
	done
	POROS_ATTN_CKPT=1 poros-train --plan --backend cpu --model poros/tiny-qwen2 --seq-len 64 --accum 2 \
		--block-size 3 --checkpoints block >block_attn.json
	# 4 layers, 2 blocks: 2/4 of layer mode's inputs (k T C fp32 each)
	jq -e '.checkpoints == "layer" and .host_checkpoints_mb == 4 * 2 * 64 * 64 * 4 / 1048576
		and (.host_breakdown_mb | has("checkpoints"))' layer.json
	jq -e '.checkpoints == "block" and .host_checkpoints_mb == 2 * 2 * 64 * 64 * 4 / 1048576
		and (.host_breakdown_mb | has("checkpoints") | not) and .host_breakdown_mb.block_checkpoints > 0' block.json
	# the attention checkpoints stay on the device: the host holds the inputs alone
	jq -e '.attention_checkpoints == true and .host_checkpoints_mb == 2 * 2 * 64 * 64 * 4 / 1048576' block_attn.json
	# the device holds block-size sets where layer mode holds two (MiB to 3 decimals)
	jq -e '(.vram_breakdown_mb.checkpoints - 2 * 2 * 64 * 64 * 4 / 1048576 | fabs) < 0.001' layer.json
	jq -e '(.vram_breakdown_mb.checkpoints - 3 * 2 * 64 * 64 * 4 / 1048576 | fabs) < 0.001' block.json
	# block size 1: every layer's input is a block's first, so layer checkpoints run
	poros-train --plan --backend cpu --model poros/tiny-qwen2 --block-size 1 --checkpoints block |
		jq -e '.checkpoints == "layer"'
	poros-train --plan --backend cpu --model poros/tiny-qwen2 --mode resident | jq -e '.checkpoints == null'
	# more than the host has: refused before a step, naming the blocks
	POROS_MEM_AVAILABLE=1M run -1 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len 2048 \
		--accum 4 --block-size 2 --checkpoints block --out oom
	jq -e '.status == "oom" and .steps == 0 and (.error | test("^2 blocks. checkpoints need [0-9.]+ MiB of host memory, 1.0 MiB available \\(POROS_MEM_AVAILABLE\\)$"))' <<<"$output"
}

@test "a block-checkpoint run resumed from its checkpoint is bit-identical to the run straight through" {
	RUN=(--model poros/tiny-qwen2 --precision nf4 --accum 2 --dropout 0.1 --lr 5e-3 --lr-schedule cosine
	     --block-size 3 --checkpoints block --steps 6)
	train full "${RUN[@]}"
	train half "${RUN[@]}" --save-every 3
	jq -e '.config.checkpoints == "block"' half/checkpoint-step3/state.json
	# the checkpoint's setting is taken: no --checkpoints given
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --steps 6 --resume half/checkpoint-step3 --out resumed >resumed.json
	jq -e '.config.checkpoints == "block"' resumed.json
	same resumed full
	[ "$(jq -r .loss full/events.jsonl | sort -u | wc -l)" -eq 6 ]
}

@test "--checkpoints block is refused by name for resident, and an unknown value names the choices" {
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --checkpoints block --out r
	assert_equal "$stderr" "poros-train: --checkpoints block: the resident schedule keeps every layer's input on the device; block checkpoints are blockwise's (--mode blockwise)"
	[ ! -e r ]
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --checkpoints blocks --out r
	[[ "$stderr" == *"--checkpoints"*"blocks"*"layer, block"* ]]
	run -0 poros-train --help
	[[ "$output" == *"--checkpoints layer|block"* ]]
}

@test "a spec's poros.checkpoints and a fine-tune config's checkpoints reach poros-train" {
	{ sed 's/^methods:.*/methods: [poros]/' "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"
	  printf '%s\n' "poros:" "  checkpoints: block"; } >s.yaml
	run -0 --separate-stderr poros-expand s.yaml --jsonl
	jq -e -s 'all(.[]; .poros.checkpoints == "block")' <<<"$output"
	# the default is left out of a cell, so older cells and newer ones read alike
	run -0 --separate-stderr poros-expand "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml" --jsonl
	jq -e -s 'all(.[]; .poros | has("checkpoints") | not)' <<<"$output"
	{ cat "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"; printf '%s\n' "poros:" "  checkpoints: blocks"; } >bad.yaml
	run -2 --separate-stderr poros-expand bad.yaml --jsonl
	assert_equal "$stderr" 'poros-expand: bad.yaml:11:16: unknown checkpoints "blocks" (expected one of: layer, block)'
	# a resident cell would refuse it when it runs: the spec is refused first
	{ cat "$BATS_TEST_DIRNAME/fixtures/expand/minimal.yaml"; printf '%s\n' "poros:" "  checkpoints: block"; } >mixed.yaml
	run -2 --separate-stderr poros-expand mixed.yaml --jsonl
	assert_equal "$stderr" 'poros-expand: mixed.yaml:11:3: poros.checkpoints: block is the poros method'"'"'s (blockwise), and methods lists resident (poros-train refuses it there)'

	printf '%s\n' 'model: poros/tiny-qwen2' 'dataset: synthetic' 'output_dir: out' 'max_steps: 2' 'checkpoints: block' >c.yaml
	run -0 --separate-stderr poros-expand --train-argv c.yaml
	[[ "$output" == *$'--checkpoints\nblock'* ]]
}

# --- --checkpoint-dir DIR: blockwise's checkpoint records that the host
# cannot hold (or POROS_DISK_CHECKPOINTS of them) go to one unlinked file
# in DIR, through two pinned bounce slots.  The same bits as on the host;
# the plan says the file's size and a step's bytes, which the run then
# moves; nothing is ever left in DIR; a DIR that cannot hold the file is
# refused before the base loads.  A copy of tiny-qwen2 with 8 layers
# (test/eight-layers) has more records than slots, so the backward reads
# some back from the file and not only from the slots.

# eight_layers: cfg/ with test/eight-layers, EIGHT its run's flags, ck/ the directory
eight_layers() {
	mkdir -p cfg/models ck
	jq '.model_id = "test/eight-layers" | .num_hidden_layers = 8' \
		"$POROS_ROOT/configs/models/tiny_qwen2.json" >cfg/models/eight_layers.json
	EIGHT=(--configs cfg --model test/eight-layers --precision nf4 --accum 3 --dropout 0.1 --lr 5e-3 --steps 3)
}

# disk_is_plan NAME ARGS...: NAME.json's disk figures are those of the
# plan of ARGS (the same environment), to the byte, and DIR is empty
disk_is_plan() {
	local name=$1
	shift
	poros-train "${TINY[@]}" --plan "$@" >"$name.plan"
	jq -e --slurpfile p "$name.plan" '.status == "ok" and .disk_checkpoints_mb == $p[0].disk_checkpoints_mb
		and .disk_write_mb_per_step == $p[0].disk_write_mb_per_step
		and .disk_read_mb_per_step == $p[0].disk_read_mb_per_step
		and .host_breakdown_mb == $p[0].host_breakdown_mb and .host_plan_mb == $p[0].host_plan_mb' "$name.json"
	run -0 ls -A ck
	assert_output ''
}

@test "layer checkpoints on disk are bit-identical to the host's: any count, with and without attention, buffered" {
	eight_layers
	for attn in 1 0; do
		POROS_ATTN_CKPT=$attn train "ref$attn" "${EIGHT[@]}" --block-size 2
		for n in 1 3 8; do
			POROS_ATTN_CKPT=$attn POROS_DISK_CHECKPOINTS=$n train "d$attn$n" "${EIGHT[@]}" --block-size 2 \
				--checkpoint-dir ck
			same "d$attn$n" "ref$attn"
			POROS_ATTN_CKPT=$attn POROS_DISK_CHECKPOINTS=$n disk_is_plan "d$attn$n" "${EIGHT[@]}" --block-size 2 \
				--checkpoint-dir ck
		done
	done
	# a step writes every disk record (the last layer's attention stays on
	# the device) and reads back all but the two the slots still hold
	jq -e '.disk_checkpoints == 8 and .disk_read_mb_per_step == .disk_checkpoints_mb * 6 / 8
		and .disk_write_mb_per_step < .disk_checkpoints_mb' d18.plan
	jq -e '.disk_checkpoints == 1 and .disk_read_mb_per_step == 0' d11.plan
	POROS_DISK_DIRECT=0 POROS_DISK_CHECKPOINTS=8 train buffered "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck
	same buffered ref1
	# the runs learned something: the comparison is not of three equal losses
	[ "$(jq -r .loss ref1/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "block checkpoints on disk are bit-identical: a tail block, two compute lanes, bf16" {
	eight_layers
	train ref2 "${EIGHT[@]}" --checkpoints block --block-size 2
	train ref3 "${EIGHT[@]}" --checkpoints block --block-size 3
	for n in 1 2 4; do
		POROS_DISK_CHECKPOINTS=$n train "b2$n" "${EIGHT[@]}" --checkpoints block --block-size 2 --checkpoint-dir ck
		same "b2$n" ref2
		POROS_DISK_CHECKPOINTS=$n disk_is_plan "b2$n" "${EIGHT[@]}" --checkpoints block --block-size 2 --checkpoint-dir ck
	done
	jq -e '.disk_read_mb_per_step == .disk_checkpoints_mb / 2 and .disk_write_mb_per_step == .disk_checkpoints_mb' \
		b24.plan
	POROS_DISK_CHECKPOINTS=3 train b33 "${EIGHT[@]}" --checkpoints block --block-size 3 --checkpoint-dir ck
	same b33 ref3
	POROS_LANES=2 POROS_DISK_CHECKPOINTS=4 train lanes "${EIGHT[@]}" --checkpoints block \
		--block-size 2 --checkpoint-dir ck
	same lanes ref2
	train bf16ref --configs cfg --model test/eight-layers --precision bf16 --accum 2 --lr 5e-3 --steps 2 \
		--checkpoints block --block-size 2 --optimizer-state host
	POROS_DISK_CHECKPOINTS=3 train bf16 --configs cfg --model test/eight-layers --precision bf16 --accum 2 \
		--lr 5e-3 --steps 2 --checkpoints block --block-size 2 --optimizer-state host --checkpoint-dir ck
	same bf16 bf16ref
	run -0 ls -A ck
	assert_output ''
}

@test "the host decides: as many records as fit stay in host memory beside the rest of the plan, the others go to disk" {
	eight_layers
	local all rest bytes bounce k
	poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan >all.plan
	# every record fits: none on disk, no bounce slots
	jq -e '.disk_checkpoints == 0 and .disk_checkpoints_mb == 0 and .checkpoint_dir == "ck"
		and (.host_breakdown_mb | has("checkpoint_bounce") | not)' all.plan
	all=$(jq '.host_plan_mb * 1048576 | round' all.plan)
	POROS_DISK_CHECKPOINTS=8 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan >none.plan
	bounce=$(jq '.host_checkpoints_mb * 1048576 | round' none.plan) # no record on the host: the slots alone
	bytes=$(jq '.host_checkpoints_mb * 1048576 / 8 | round' all.plan)
	rest=$((all - 8 * bytes))
	# room for k records and the slots: 8 - k on disk; a byte less, one more
	for k in 5 2; do
		POROS_MEM_AVAILABLE=$((rest + bounce + k * bytes)) poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 \
			--checkpoint-dir ck --plan >"k$k.plan"
		jq -e --argjson k "$k" '.disk_checkpoints == 8 - $k and .host_fits == true' "k$k.plan"
		POROS_MEM_AVAILABLE=$((rest + bounce + k * bytes - 1)) poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 \
			--checkpoint-dir ck --plan | jq -e --argjson k "$k" '.disk_checkpoints == 9 - $k and .host_fits == true'
	done
	# that run, trained: it says where the records went, and gives the bits of one without the option
	POROS_MEM_AVAILABLE=$((rest + bounce + 5 * bytes)) run -0 --separate-stderr poros-train --backend cpu --seq-len 32 \
		--batch-size 2 --rank 4 --alpha 8 "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --out auto
	[[ "$stderr" == *"poros-train: --checkpoint-dir ck: 3 of 8 checkpoint records on disk ("*" KiB), 5 in host memory ("*" KiB)"* ]]
	echo "$output" >auto.json
	POROS_ATTN_CKPT=1 train ref "${EIGHT[@]}" --block-size 2
	same auto ref
	jq -e --slurpfile p k5.plan '.disk_checkpoints_mb == $p[0].disk_checkpoints_mb and .host_plan_mb == $p[0].host_plan_mb' \
		auto.json
	# unset, the attention checkpoints stay: the disk takes what the host cannot
	jq -e '.attention_checkpoints == true' k2.plan
	# nothing on the host's side fits: everything to disk, and the host check still refuses
	POROS_MEM_AVAILABLE=1M poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan |
		jq -e '.disk_checkpoints == 8 and .host_fits == false'
}

@test "a directory that cannot hold the file is refused in one line, exit 2, before the base loads; nothing is left" {
	eight_layers
	local unwritable=ro bytes
	mkdir ro && chmod 555 ro
	[ "$(id -u)" != 0 ] || unwritable=/sys # root writes anywhere but there
	[ -d "$unwritable" ] || skip "no unwritable directory here"
	touch afile
	while IFS='|' read -r dir env want; do
		run -2 --separate-stderr env $env poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir "$dir" \
			--out bad
		[ "$output" = "" ]
		[ "$stderr" = "poros-train: $want" ] || fail "got: $stderr (want: $want)"
		[ ! -e bad ]
	done <<-EOF
		nowhere||--checkpoint-dir nowhere: No such file or directory
		afile||--checkpoint-dir afile: not a directory
		$unwritable||--checkpoint-dir $unwritable: cannot create the checkpoint file: Permission denied
		ck|POROS_DISK_CHECKPOINTS=3 POROS_DISK_AVAILABLE=100K|--checkpoint-dir ck: 3 checkpoint records need 300.0 KiB, 100.0 KiB free (POROS_DISK_AVAILABLE)
		ck|POROS_DISK_CHECKPOINTS=9|POROS_DISK_CHECKPOINTS: 9 records on disk, but the run keeps 8
		ck|POROS_DISK_CHECKPOINTS=x|POROS_DISK_CHECKPOINTS: not a number: x
		ck|POROS_DISK_AVAILABLE=0|POROS_DISK_AVAILABLE: must be more than 0, got 0
		ck|POROS_DISK_DIRECT=yes|POROS_DISK_DIRECT: unknown value "yes" (expected 0 or 1)
	EOF
	# a disk the size of the file to the byte takes it
	POROS_DISK_CHECKPOINTS=3 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan >three.plan
	bytes=$(jq '.disk_checkpoints_mb * 1048576 | round' three.plan)
	POROS_DISK_CHECKPOINTS=3 POROS_DISK_AVAILABLE=$((bytes - 1)) run -2 --separate-stderr poros-train "${TINY[@]}" \
		"${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --out bad
	[[ "$stderr" == "poros-train: --checkpoint-dir ck: 3 checkpoint records need "*" free (POROS_DISK_AVAILABLE)" ]]
	POROS_DISK_CHECKPOINTS=3 POROS_DISK_AVAILABLE=$bytes train fits "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck
	jq -e '.status == "ok"' fits.json
	# what has no checkpoints on the host refuses the option by name
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --checkpoint-dir ck --out r
	assert_equal "$stderr" "poros-train: --checkpoint-dir: the resident schedule keeps every layer's input on the device; checkpoints on disk are blockwise's (--mode blockwise)"
	run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --eval-only --dataset synthetic \
		--eval-fraction 0.5 --checkpoint-dir ck
	assert_equal "$stderr" "poros-train: --eval-only and --checkpoint-dir: an evaluation keeps no checkpoints"
	POROS_DISK_CHECKPOINTS=1 run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --plan
	assert_equal "$stderr" "poros-train: POROS_DISK_CHECKPOINTS: needs --checkpoint-dir"
	run -0 ls -A ck
	assert_output ''
}

@test "the file has no name while the run holds it: nothing is left after a failure or a kill" {
	eight_layers
	# bad input after the file is reserved (the adapter is read once the engine is built)
	POROS_DISK_CHECKPOINTS=4 run -2 --separate-stderr poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 \
		--checkpoint-dir ck --init-adapter nowhere --out failed
	[[ "$stderr" == "poros-train: --init-adapter: "* ]]
	run -0 ls -A ck
	assert_output ''
	# killed mid-run: the open file is there, deleted, and nothing is left after
	POROS_DISK_CHECKPOINTS=8 poros-train "${TINY[@]}" --configs cfg --model test/eight-layers --accum 3 \
		--steps 100000 --seq-len 64 --block-size 2 --checkpoint-dir ck --out killed >killed.json 2>/dev/null &
	local pid=$! i
	for i in $(seq 600); do [ -s killed/events.jsonl ] && break; sleep 0.1; done
	[ -s killed/events.jsonl ]
	run -0 ls -l "/proc/$pid/fd"
	assert_output --regexp "ck/\.poros-checkpoints-$pid-[0-9]+ \(deleted\)"
	run -0 ls -A ck
	assert_output ''
	kill -9 "$pid"
	wait "$pid" || true
	run -0 ls -A ck
	assert_output ''
}

@test "--plan says the disk tier: zeros without --checkpoint-dir, the file, a step's bytes and whether the disk holds it" {
	eight_layers
	poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --plan |
		jq -e '.checkpoint_dir == null and .disk_checkpoints == 0 and .disk_checkpoints_mb == 0
			and .disk_write_mb_per_step == 0 and .disk_read_mb_per_step == 0 and .disk_fits == null'
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --mode resident --plan | jq -e '.disk_checkpoints == 0'
	# a directory that is not there is known to hold nothing: disk_fits null, the plan is still made
	POROS_DISK_CHECKPOINTS=2 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir nowhere --plan |
		jq -e '.checkpoint_dir == "nowhere" and .disk_checkpoints == 2 and .disk_checkpoints_mb > 0 and .disk_fits == null'
	POROS_DISK_CHECKPOINTS=2 POROS_DISK_AVAILABLE=1K poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 \
		--checkpoint-dir ck --plan | jq -e '.disk_fits == false and .host_fits == true'
	POROS_DISK_CHECKPOINTS=2 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan |
		jq -e '.disk_fits == true and .host_breakdown_mb.checkpoint_bounce > 0
			and .host_checkpoints_mb * 1048576 - .host_breakdown_mb.checkpoints * 1048576 > 0'
	# records on disk keep the attention output alone unless asked: groups
	# (64 x 2 rows at accumulation 4) take the sublayer's without a directory only
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len 64 --accum 4 --plan |
		jq -e '.group == 4 and .attention_sublayer == true'
	poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len 64 --accum 4 --checkpoint-dir ck --plan |
		jq -e '.group == 4 and .attention_sublayer == false and .attention_checkpoints == true'
	POROS_ATTN_CKPT=2 poros-train "${TINY[@]}" --model poros/tiny-qwen2 --seq-len 64 --accum 4 --checkpoint-dir ck \
		--plan | jq -e '.attention_sublayer == true'
	# two ranks of a host: a file each
	POROS_DISK_CHECKPOINTS=2 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan >one.plan
	POROS_DISK_CHECKPOINTS=2 poros-train "${TINY[@]}" "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck --plan \
		--nproc 2 >two.plan
	jq -e --slurpfile one one.plan '.host_ranks == 2 and .disk_checkpoints_mb == 2 * $one[0].disk_checkpoints_mb
		and .disk_read_mb_per_step == 2 * $one[0].disk_read_mb_per_step' two.plan
}

@test "a fine-tune config's checkpoint_dir is --checkpoint-dir" {
	printf '%s\n' 'model: poros/tiny-qwen2' 'dataset: synthetic' 'output_dir: out' 'max_steps: 2' \
		'checkpoint_dir: "/scratch/poros ckpt"' >c.yaml
	run -0 --separate-stderr poros-expand --train-argv c.yaml
	[[ "$output" == *$'--checkpoint-dir\n/scratch/poros ckpt'* ]]
}

# --- one device set (POROS_CKPT_SETS=1) -------------------------------------
# Layer checkpoints without the attention's keep one device set of
# records: each layer's output goes over its input once the input is on
# the host, and the backward fetches a layer's record once the layer above
# is done with the set.  The same bits as two sets and as resident.

# same_steps NAME REF: same, and each step's gradient norm too
same_steps() {
	same "$1" "$2"
	diff <(jq -c '[.loss, .grad_norm]' "$2/events.jsonl") <(jq -c '[.loss, .grad_norm]' "$1/events.jsonl")
}

# one_set_parity NAME ARGS...: resident, two sets and one set of ARGS give
# the same bits; NAME-1 is the one-set run
one_set_parity() {
	local name=$1
	shift
	train "$name-res" --mode resident --steps 3 "$@"
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=2 train "$name-2" --steps 3 "$@"
	POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 train "$name-1" --steps 3 "$@"
	same_steps "$name-2" "$name-res"
	same_steps "$name-1" "$name-res"
	# the runs learned something: the comparison is not of three equal losses
	[ "$(jq -r .loss "$name-res/events.jsonl" | sort -u | wc -l)" -eq 3 ]
}

@test "one checkpoint set is bit-identical to two and to resident: dropout, odd accumulation, lanes, MLP chunks" {
	one_set_parity q2 --model poros/tiny-qwen2 --precision nf4 --accum 3 --dropout 0.1 --lr 5e-3 --block-size 2
	one_set_parity q3 --model poros/tiny-qwen3 --precision nf4 --accum 5 --dropout 0.05 --lr 5e-3 --block-size 3
	one_set_parity ll --model poros/tiny-llama --precision bf16 --accum 1 --dropout 0 --lr 5e-3 --block-size 1 \
		--optimizer-state host
	# two compute lanes, a layer's micro-batches in turn; the MLP in chunks writes the output a chunk at a time
	POROS_LANES=2 POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 train lanes --model poros/tiny-qwen2 --precision nf4 --accum 3 \
		--dropout 0.1 --lr 5e-3 --block-size 2 --steps 3
	same_steps lanes q2-res
	POROS_MLP_CHUNK=16 one_set_parity chunk --model poros/tiny-qwen2 --precision bf16 --accum 2 --dropout 0.1 \
		--lr 5e-3 --block-size 2 --no-prefetch
	jq -e '.config.checkpoints == "layer"' q2-1.json
}

@test "one checkpoint set is bit-identical in micro-batch groups and with an eval pass between steps" {
	# a group's rows a multiple of 128: seq 64, batch 2
	one_set_parity grp --model poros/tiny-qwen3 --precision nf4 --accum 4 --dropout 0.1 --lr 5e-3 --block-size 2 \
		--seq-len 64
	POROS_GROUP=4 POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 train g4 --model poros/tiny-qwen3 --precision nf4 --accum 4 \
		--dropout 0.1 --lr 5e-3 --block-size 2 --seq-len 64 --steps 3
	same_steps g4 grp-res
	for i in $(seq 0 15); do printf "\\x$(printf %02x $(((i * 37 + 5) % 200)))\\x00"; done >eval.u16
	for sets in 2 1; do
		POROS_ATTN_CKPT=0 POROS_CKPT_SETS=$sets train "ev$sets" --model poros/tiny-qwen2 --precision nf4 --accum 2 \
			--lr 5e-3 --block-size 2 --steps 3 --eval-dataset eval.u16 --eval-every 1
	done
	same_steps ev1 ev2
	diff <(jq -r .eval_loss ev2/events.jsonl) <(jq -r .eval_loss ev1/events.jsonl)
}

@test "one checkpoint set with records on disk: the host's bits, and the plan's disk figures" {
	eight_layers
	POROS_ATTN_CKPT=0 train ref "${EIGHT[@]}" --block-size 2
	for n in 1 3 8; do
		POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 POROS_DISK_CHECKPOINTS=$n train "one$n" "${EIGHT[@]}" --block-size 2 \
			--checkpoint-dir ck
		same_steps "one$n" ref
		POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 POROS_DISK_CHECKPOINTS=$n disk_is_plan "one$n" "${EIGHT[@]}" \
			--block-size 2 --checkpoint-dir ck
	done
	# the backward fetches the last layer's record too; the slots still hold the last two written
	jq -e '.checkpoint_sets == 1 and .disk_checkpoints == 8 and .disk_read_mb_per_step == .disk_checkpoints_mb * 6 / 8' \
		one8.plan
}

# --- the stream order, with lazy copies (POROS_CPU_LAZY_COPIES=1) ----------
# The CPU backend then runs the copy and checkpoint streams' work only when
# something waits for it (kernels/cpu/backend_cpu.c), so a wait the engine
# lacks gives other bits here, as it would on a GPU.

# lazy NAME ENV ARGS...: a lazy-copies run of ENV (comma-separated
# NAME=VALUE pairs) with ARGS, its steps and evaluations resident's
lazy() {
	local name=$1 env=$2
	shift 2
	# shellcheck disable=SC2046 # the pairs are words
	env POROS_CPU_LAZY_COPIES=1 $(tr , ' ' <<<"$env") poros-train "${TINY[@]}" "$@" --out "$name" >"$name.json"
	jq -e '.status == "ok" and .vram_peak_mb == .vram_plan_mb' "$name.json"
	same_steps "$name" res
	diff <(jq -r .eval_loss res/events.jsonl) <(jq -r .eval_loss "$name/events.jsonl")
}

@test "with lazy copies every blockwise layout keeps resident's bits: sets, attention, lanes, groups, disk, eval" {
	eight_layers
	for i in $(seq 0 15); do printf "\\x$(printf %02x $(((i * 37 + 5) % 200)))\\x00"; done >eval.u16
	local q=("${EIGHT[@]}" --accum 4 --eval-dataset eval.u16 --eval-every 1)
	train res "${q[@]}" --mode resident
	lazy two POROS_ATTN_CKPT=1 "${q[@]}" --block-size 2
	lazy inputs POROS_ATTN_CKPT=0 "${q[@]}" --block-size 3
	lazy sublayer POROS_ATTN_CKPT=2 "${q[@]}" --block-size 2
	lazy one POROS_ATTN_CKPT=0,POROS_CKPT_SETS=1 "${q[@]}" --block-size 2
	lazy lanes POROS_LANES=2 "${q[@]}" --block-size 2
	lazy lanesone POROS_LANES=2,POROS_ATTN_CKPT=0,POROS_CKPT_SETS=1 "${q[@]}" --block-size 2
	lazy block POROS_ATTN_CKPT=1 "${q[@]}" --block-size 3 --checkpoints block
	lazy blocksub POROS_ATTN_CKPT=2 "${q[@]}" --block-size 2 --checkpoints block
	lazy disk POROS_DISK_CHECKPOINTS=5 "${q[@]}" --block-size 2 --checkpoint-dir ck
	lazy diskone POROS_DISK_CHECKPOINTS=5,POROS_ATTN_CKPT=0,POROS_CKPT_SETS=1 "${q[@]}" --block-size 2 \
		--checkpoint-dir ck
	lazy noprefetch POROS_ATTN_CKPT=1 "${q[@]}" --block-size 2 --no-prefetch --optimizer-state host
	[ "$(jq -r .loss res/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "with lazy copies micro-batch groups keep resident's bits, on one lane and two" {
	local q=(--model poros/tiny-qwen3 --precision nf4 --accum 6 --dropout 0.1 --lr 5e-3 --steps 3 --seq-len 64)
	train res "${q[@]}" --mode resident
	lazy g4 POROS_GROUP=4,POROS_ATTN_CKPT=2 "${q[@]}" --block-size 2
	lazy g2lanes POROS_GROUP=2,POROS_LANES=2 "${q[@]}" --block-size 2 --checkpoints block
	lazy g2one POROS_GROUP=2,POROS_LANES=2,POROS_ATTN_CKPT=0,POROS_CKPT_SETS=1 "${q[@]}" --block-size 2
	jq -e '.schedule.group == 2 and .schedule.lanes == 2' g2one.json
}

@test "POROS_CPU_LAZY_COPIES takes 0 or 1: another value is a usage error" {
	POROS_CPU_LAZY_COPIES=yes run -2 --separate-stderr poros-train "${TINY[@]}" --model poros/tiny-qwen2 --out run
	[ "$stderr" = 'poros-train: POROS_CPU_LAZY_COPIES: unknown value "yes" (expected 0 or 1)' ]
	[ -z "$output" ] && [ ! -e run ]
}

# --- the attention sublayer's checkpoints (POROS_ATTN_CKPT=2) ---------------

@test "attention-sublayer checkpoints are bit-identical to resident: dropout, lanes, block checkpoints, disk" {
	eight_layers
	train res "${EIGHT[@]}" --mode resident
	POROS_ATTN_CKPT=2 train sub "${EIGHT[@]}" --block-size 3
	same_steps sub res
	POROS_ATTN_CKPT=2 POROS_LANES=2 train lanes "${EIGHT[@]}" --block-size 2
	same_steps lanes res
	# block checkpoints: every layer but a block's top recomputed twice, from what the first pass kept
	POROS_ATTN_CKPT=2 train block "${EIGHT[@]}" --checkpoints block --block-size 3
	same_steps block res
	POROS_ATTN_CKPT=2 POROS_DISK_CHECKPOINTS=5 train disk "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck
	same_steps disk res
	POROS_ATTN_CKPT=2 POROS_DISK_CHECKPOINTS=5 disk_is_plan disk "${EIGHT[@]}" --block-size 2 --checkpoint-dir ck
	# the recomputation runs the MLP's norm alone: no q, k, v or o product a second time
	for v in 1 2; do
		POROS_PROFILE=1 POROS_ATTN_CKPT=$v poros-train "${TINY[@]}" "${EIGHT[@]}" --steps 1 --block-size 2 \
			--out "p$v" 2>"p$v.err" >/dev/null
		sed -n 's/^poros-train: profile step 1: //p' "p$v.err" >"p$v.profile"
	done
	# per layer and micro-batch: 7 products forward, 6 again (1 and 2), or 2 (gate and up)
	jq -e --slurpfile one p1.profile '.gemm_fwd.n == $one[0].gemm_fwd.n - 8 * 3 * 4' p2.profile
	[ "$(jq -r .loss res/events.jsonl | sort -u | wc -l)" -eq 3 ]
}

@test "attention-sublayer checkpoints are bit-identical in micro-batch groups, on two lanes, over packed documents, with evaluation" {
	# a group's rows a multiple of 128: seq 64, batch 2; documents of 9 ids and an EOS, masks
	for d in 1 2 3 4 5 6 7 8; do
		jq -cn --argjson d "$d" '{input_ids: [range(0; 9) | (. * 7 + $d * 13) % 250]}'
	done >docs.jsonl
	for i in $(seq 0 15); do printf "\\x$(printf %02x $(((i * 37 + 5) % 200)))\\x00"; done >eval.u16
	local q=(--model poros/tiny-qwen3 --precision nf4 --accum 5 --lr 5e-3 --seq-len 64 --steps 3 --dataset docs.jsonl
		--eval-dataset eval.u16 --eval-every 1)
	train res "${q[@]}" --mode resident --dropout 0.1
	for g in 1 4; do
		POROS_ATTN_CKPT=2 POROS_GROUP=$g train "g$g" "${q[@]}" --block-size 2 --dropout 0.1
		jq -e --argjson g "$g" '.schedule.group == $g and .schedule.attention_sublayer == true' "g$g.json"
		same_steps "g$g" res
		diff <(jq -r .eval_loss res/events.jsonl) <(jq -r .eval_loss "g$g/events.jsonl")
	done
	# without dropout the LoRA backward rides in the base GEMMs (the extension)
	train res0 "${q[@]}" --mode resident --dropout 0
	POROS_ATTN_CKPT=2 POROS_GROUP=4 train g4d0 "${q[@]}" --block-size 2 --dropout 0
	same_steps g4d0 res0
	# groups on two lanes, one set of checkpoints (no attention's), records on disk
	POROS_LANES=2 POROS_ATTN_CKPT=2 POROS_GROUP=2 train l2g2 "${q[@]}" --block-size 2 --dropout 0.1
	jq -e '.schedule.lanes == 2 and .schedule.group == 2' l2g2.json
	same_steps l2g2 res
	POROS_LANES=2 POROS_ATTN_CKPT=0 POROS_CKPT_SETS=1 POROS_GROUP=2 train l2one "${q[@]}" --block-size 2 --dropout 0.1
	jq -e '.schedule.lanes == 2 and .schedule.checkpoint_sets == 1' l2one.json
	same_steps l2one res
	mkdir -p ck
	POROS_LANES=2 POROS_GROUP=2 POROS_DISK_CHECKPOINTS=3 train l2disk "${q[@]}" --block-size 2 --dropout 0.1 \
		--checkpoint-dir ck
	same_steps l2disk res
	diff <(jq -r .eval_loss res/events.jsonl) <(jq -r .eval_loss l2disk/events.jsonl)
}

@test "POROS_CKPT_SETS: a bad value is a usage error; 1 is refused with block or attention checkpoints" {
	local q=(--model poros/tiny-qwen2 --steps 1 --out r)
	for v in 0 3 one; do
		POROS_CKPT_SETS=$v run -2 --separate-stderr poros-train "${TINY[@]}" "${q[@]}"
		assert_equal "$stderr" "poros-train: POROS_CKPT_SETS: unknown value \"$v\" (expected 1 or 2)"
	done
	POROS_CKPT_SETS=1 run -2 --separate-stderr poros-train "${TINY[@]}" "${q[@]}" --checkpoints block --block-size 2
	[[ "$stderr" == *"poros-train: POROS_CKPT_SETS: 1 needs --checkpoints layer"* ]]
	for v in 1 2; do
		POROS_CKPT_SETS=1 POROS_ATTN_CKPT=$v run -2 --separate-stderr poros-train "${TINY[@]}" "${q[@]}" --plan
		[[ "$stderr" == *"poros-train: POROS_CKPT_SETS: 1 needs POROS_ATTN_CKPT=0"* ]]
	done
	# unset, the attention checkpoints give way to the one set asked for
	POROS_CKPT_SETS=1 poros-train "${TINY[@]}" "${q[@]}" --plan |
		jq -e '.checkpoint_sets == 1 and .attention_checkpoints == false'
	# block checkpoints say their sets; resident has none
	poros-train "${TINY[@]}" "${q[@]}" --checkpoints block --block-size 3 --plan | jq -e '.checkpoint_sets == 3'
	POROS_CKPT_SETS=1 poros-train "${TINY[@]}" "${q[@]}" --mode resident --plan | jq -e '.checkpoint_sets == null'
	[ ! -e r ]
}

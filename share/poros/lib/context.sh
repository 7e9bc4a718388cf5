# share/poros/lib/context.sh: poros bench context SPEC, sourced by bin/poros.
# Per model and card, the largest seq_len (a multiple of 1024) whose
# exact plan (poros-train --plan --backend cuda) fits the card
# (--vram-budget) and the host (POROS_MEM_AVAILABLE), by bisection over
# the planner; then, where a CUDA device is present, 3 training steps at
# that length to confirm it.  The spec names the memory knobs that change
# no bit (block_size: layers a streamed block; optimizer_state: device or
# host, poros-train --optimizer-state; checkpoints: layer or block,
# poros-train --checkpoints), so each length is planned as run.
# block_size and checkpoints may be lists: every pair is searched and the
# one reaching the longest length is kept (the first listed on a tie),
# named in the table's layout column.  Optional: checkpoint_dir (poros-train
# --checkpoint-dir: the checkpoint records the host cannot hold go to a
# file there, so the host bounds less) with disk_available (the bytes free
# there, POROS_DISK_AVAILABLE; unset: the directory's own, which must then
# exist), a length then fitting the disk too and the table saying the
# file's MiB; and attention_checkpoints, a list of 1 and 0
# (POROS_ATTN_CKPT), searched with the other lists (without it the setting
# is unset, and a plan leaves them out where only that fits the card).  The
# layout column says what the plan at the maximum took: attention on or
# off, and "one set" where layer checkpoints keep one device set.
# With "peft: [bf16, nf4]", beside each row PEFT's own largest length,
# measured: one fresh run of the peft arm per length (poros-arm, as bench
# run runs a peft cell), doubling from 1024 then bisecting.

# ctx_key SPEC KEY: the value of a top-level "KEY: value" line.
ctx_key() {
	sed -n "s/^$2:[[:space:]]*//p" "$1" | sed 's/[[:space:]]*#.*//' | head -n 1
}

# ctx_list SPEC KEY: the items of a "KEY: [a, b]" line, one a line.
ctx_list() {
	ctx_key "$1" "$2" | tr -d '[]' | tr ',' '\n' | sed 's/^[[:space:]]*//; s/[[:space:]]*$//' | grep -v '^$'
}

# ctx_bytes GB: a card's bytes (GB = 10^9 bytes, as cards are sold).
ctx_bytes() {
	awk -v g="$1" 'BEGIN { printf "%.0f", g * 1e9 }'
}

# ctx_env CMD...: CMD with the spec's environment: the host's memory, and
# where given the disk's free bytes and the attention checkpoints of the
# layout in ctx_attn.
ctx_env() {
	env POROS_MEM_AVAILABLE="$ctx_host" ${ctx_disk_free:+POROS_DISK_AVAILABLE="$ctx_disk_free"} \
		${ctx_attn:+POROS_ATTN_CKPT="$ctx_attn"} "$@"
}

# ctx_plan MODEL CARD_GB SEQ: the plan line at the layout in ctx_block,
# ctx_checkpoints and ctx_attn; exit 0 when it fits card and host.
ctx_plan() {
	ctx_env "$ctx_train" --plan --backend cuda --model "$1" --precision "$ctx_precision" \
		--seq-len "$3" --batch-size 1 --rank "$ctx_rank" --alpha "$ctx_alpha" --gradient-checkpointing on \
		--block-size "$ctx_block" --optimizer-state "$ctx_optimizer" --checkpoints "$ctx_checkpoints" \
		${ctx_ckpt_dir:+--checkpoint-dir "$ctx_ckpt_dir"} --vram-budget "$(ctx_bytes "$2")" 2>/dev/null
}

# the card, the host and, with checkpoint_dir, the disk
ctx_fits() {
	if [ -n "$ctx_ckpt_dir" ]; then
		[ "$(ctx_plan "$@" | ask get --null null fits,host_fits,disk_fits)" = "true${tab}true${tab}true" ]
	else
		[ "$(ctx_plan "$@" | ask get fits,host_fits)" = "true${tab}true" ]
	fi
}

# A number's whole part ("-" stays "-").
ctx_floor() {
	awk '{ if ($0 == "-") print; else printf "%d\n", $0 }'
}

# ctx_max MODEL CARD_GB: the largest fitting multiple of 1024 up to the
# ceiling (0: not even 1024), by bisection (the plan grows with seq_len).
ctx_max() {
	_lo=0 _hi=$((ctx_ceiling / 1024 + 1))
	while [ $((_hi - _lo)) -gt 1 ]; do
		_mid=$(((_lo + _hi) / 2))
		if ctx_fits "$1" "$2" $((_mid * 1024)); then _lo=$_mid; else _hi=$_mid; fi
	done
	echo $((_lo * 1024))
}

# The published figures the issue quotes (Unsloth's README, HF + FA2):
# not measured here.
ctx_published() {
	case "$1 $2" in
	"meta-llama/Llama-3.1-70B 48") echo 'Unsloth 12,106 (Llama-3.3-70B)' ;;
	"meta-llama/Llama-3.1-70B 80") echo 'Unsloth 89,389 (Llama-3.3-70B)' ;;
	"meta-llama/Llama-3.1-8B 24") echo 'Unsloth 78,475; HF+FA2 5,789' ;;
	"meta-llama/Llama-3.1-8B 80") echo 'Unsloth 342,733' ;;
	*) echo '-' ;;
	esac
}

# ctx_best SPEC MODEL CARD_GB: "SEQ BLOCK CHECKPOINTS ATTN", the layout of
# the spec's lists reaching the longest length (the first on a tie; ATTN
# "-" without attention_checkpoints); it leaves ctx_block, ctx_checkpoints
# and ctx_attn at that layout.
ctx_best() {
	_best=-1
	for _b in $(ctx_list "$1" block_size); do
		for _c in $(ctx_list "$1" checkpoints); do
			for _a in $(ctx_list "$1" attention_checkpoints || echo -); do
				ctx_block=$_b ctx_checkpoints=$_c ctx_attn=${_a#-}
				_n=$(ctx_max "$2" "$3")
				[ "$_n" -gt "$_best" ] && _best=$_n _bb=$_b _bc=$_c _ba=$_a
			done
		done
	done
	ctx_block=$_bb ctx_checkpoints=$_bc ctx_attn=${_ba#-}
	echo "$_best $_bb $_bc $_ba"
}

# ctx_layout PLAN_LINE: the table's layout of the plan at the maximum:
# "BLOCK, CHECKPOINTS, attention on|off" as the plan took them (searched,
# or, unset, what the run chooses itself), ", one set" where layer
# checkpoints keep one device set; "BLOCK, CHECKPOINTS" without a plan.
ctx_layout() {
	_att=$(printf '%s\n' "$1" | ask get --null - attention_checkpoints 2>/dev/null)
	_sets=$(printf '%s\n' "$1" | ask get --null - checkpoint_sets 2>/dev/null)
	printf '%s, %s' "$ctx_block" "$ctx_checkpoints"
	case $_att in true) printf ', attention on' ;; false) printf ', attention off' ;; esac
	[ "$ctx_checkpoints" != layer ] || [ "$_sets" != 1 ] || printf ', one set'
	echo
}

# ctx_dir PART...: DIR/PART_PART..., a run's folder, its name safe for a file.
ctx_dir() {
	_name=$(printf '%s_' "$@" | tr -c 'A-Za-z0-9_.\n-' '_')
	printf '%s/%s\n' "$ctx_out" "${_name%_}"
}

# 3 steps at the found length, on a CUDA device only; "" when none.  The
# host is the machine's own: POROS_MEM_AVAILABLE is the plan's.
ctx_confirm() {
	env ${ctx_attn:+POROS_ATTN_CKPT="$ctx_attn"} "$ctx_train" --backend cuda --model "$1" --precision "$ctx_precision" \
		--seq-len "$3" --batch-size 1 \
		--rank "$ctx_rank" --alpha "$ctx_alpha" --gradient-checkpointing on --block-size "$ctx_block" \
		--optimizer-state "$ctx_optimizer" --checkpoints "$ctx_checkpoints" --vram-budget "$(ctx_bytes "$2")" \
		${ctx_ckpt_dir:+--checkpoint-dir "$ctx_ckpt_dir"} \
		--steps 3 --quiet --out "$(ctx_dir "$1" "$2" "$3")" |
		ask get --null null status,vram_peak_mb,s_per_step,tokens_per_s,host_peak_rss_mb |
		awk -F "$tab" '{ printf "%s peak %s MiB, %s s/step, %s tok/s, host peak %s MiB\n", $1, $2, $3, $4, $5 }'
}

# --- PEFT's own maximum, measured ---------------------------------------------

# ctx_gib GB: the card in GiB, as the arms read hardware.vram_gb (2^30
# bytes, cap_device_memory): GB * 10^9 / 2^30, so that PEFT is capped at
# the very bytes the planner is given (24 -> 22.351741790771484).
ctx_gib() {
	awk -v g="$1" 'BEGIN { printf "%.17g", g * 1e9 / 1073741824 }'
}

# ctx_peft_spec MODEL CARD_GB PRECISION SEQ: the one-cell bench spec of a probe.
ctx_peft_spec() {
	printf '%s\n' "# poros bench context: PEFT $3 at seq_len $4 on a $2 GB card" \
		'spec_id: context_peft' 'hardware:' "  vram_gb: $(ctx_gib "$2")" \
		'models:' "  - model_id: $1" 'methods: [peft]' "precisions: [$3]" \
		'training:' '  steps: 2' '  warmup_steps: 0' "  seq_len: $4" '  batch_size: 1' \
		'  gradient_accumulation_steps: 1' '  dataset: synthetic' '  seed: 42' '  gradient_checkpointing: true' \
		'lora:' "  rank: $ctx_rank" "  alpha: $ctx_alpha" '  dropout: 0.0' '  target_modules: all-linear'
}

# ctx_probe MODEL CARD_GB PRECISION SEQ: one PEFT run in a fresh process,
# in its own folder DIR/peft_MODEL_CARD_PRECISION_SEQ: the spec, its cell
# expanded (expand) and run by poros-arm (run_child), as bench run runs a
# cell.  Returns 0 ok, 1 oom, 2 skipped, 3 anything else; ctx_why is the
# arm's error.
ctx_probe() {
	outdir=$(ctx_dir peft "$@")
	spec=$outdir/spec.yaml
	rm -rf -- "$outdir"
	mkdir -p -- "$outdir" || die 1 "$outdir: cannot create the probe's directory"
	ctx_peft_spec "$@" > "$spec"
	expand
	_arm_rc=0
	run_child "$ctx_arm" --progress "PEFT $2 GB, seq_len $4" "$(head -n 1 "$tmpdir/cells")" \
		> "$tmpdir/artifact" < /dev/null || _arm_rc=$?
	_fields=$(ask get --null null status,error "$tmpdir/artifact" 2>/dev/null) || _fields="error${tab}no artifact"
	_status=${_fields%%"$tab"*} ctx_why=${_fields#*"$tab"}
	[ "$_arm_rc" = 0 ] || _status=error ctx_why="poros-arm failed (exit $_arm_rc): $ctx_why"
	case $_status in
	ok) return 0 ;;
	oom) return 1 ;;
	skipped) return 2 ;;
	*) return 3 ;;
	esac
}

# ctx_peft MODEL CARD_GB PRECISION: PEFT's largest seq_len, a multiple of
# 1024 up to the ceiling at which 2 steps train: doubling from 1024 while
# ok (the ceiling last), then bisecting between the last ok and the first
# oom.  Prints the table's words for it.
ctx_peft() {
	_lo=0 _hi='' _k=1 _top=$((ctx_ceiling / 1024))
	while [ -z "$_hi" ] && [ "$_k" -le "$_top" ]; do
		ctx_peft_try "$@" "$_k" || return 0
		[ "$_k" -lt "$_top" ] || break
		_k=$((_k * 2))
		[ "$_k" -le "$_top" ] || _k=$_top
	done
	while [ -n "$_hi" ] && [ $((_hi - _lo)) -gt 1 ]; do
		ctx_peft_try "$@" $(((_lo + _hi) / 2)) || return 0
	done
	if [ -z "$_hi" ]; then
		printf '%s (%s, 2 steps ok; the ceiling)' $((_lo * 1024)) "$3"
	elif [ "$_lo" = 0 ]; then
		printf '0 (%s; %s oom)' "$3" $((_hi * 1024))
	else
		printf '%s (%s, 2 steps ok; %s oom)' $((_lo * 1024)) "$3" $((_hi * 1024))
	fi
}

# ctx_peft_try MODEL CARD_GB PRECISION K: the probe at K * 1024; ok
# raises _lo to K, oom lowers _hi to K.  A skip or an error ends the
# search (return 1) and prints the table's words for it; an error is also
# said on stderr and recorded in $tmpdir/ctx_failed.
ctx_peft_try() {
	_rc=0
	ctx_probe "$1" "$2" "$3" $(($4 * 1024)) || _rc=$?
	case $_rc in
	0) _lo=$4; return 0 ;;
	1) _hi=$4; return 0 ;;
	2) printf 'skipped (%s): %s' "$3" "$ctx_why" ;;
	*)
		note "$1, $2 GB card: PEFT $3 at seq_len $(($4 * 1024)) failed: $ctx_why (see $outdir)"
		printf '%s %s GB %s %s\n' "$1" "$2" "$3" $(($4 * 1024)) >> "$tmpdir/ctx_failed"
		printf 'error at %s (%s)' $(($4 * 1024)) "$3" ;;
	esac
	return 1
}

# The table's PEFT column of one row: each listed precision's maximum.
ctx_peft_cell() {
	_cell=
	for _p in $ctx_peft_precisions; do
		_cell="$_cell${_cell:+; }$(ctx_peft "$1" "$2" "$_p")"
	done
	# a "|" in an arm's reason would end the markdown cell
	printf '%s\n' "$_cell" | sed 's/|/\\|/g'
}

bench_context() {
	[ $# -ge 1 ] || usage
	case $1 in -h|--help) sub_help "bench context" ;; esac
	[ -f "$1" ] || die 2 "$1: no such spec file"
	ctx_train=$(trainer) || no_trainer ""
	ctx_host=$(ctx_key "$1" host_mem_available)
	ctx_ceiling=$(ctx_key "$1" ceiling)
	ctx_precision=$(ctx_key "$1" precision)
	ctx_rank=$(ctx_key "$1" rank)
	ctx_alpha=$(ctx_key "$1" alpha)
	ctx_optimizer=$(ctx_key "$1" optimizer_state)
	for _k in host_mem_available ceiling precision rank alpha block_size optimizer_state checkpoints; do
		[ -n "$(ctx_key "$1" "$_k")" ] || die 2 "$1: context spec needs \"$_k:\" (no default)"
	done
	case $ctx_ceiling in *[!0-9]*) die 2 "$1: ceiling: not a whole number: $ctx_ceiling" ;; esac
	for _b in $(ctx_list "$1" block_size); do
		case $_b in '' | *[!0-9]* | 0) die 2 "$1: block_size: not a whole number of layers: $_b" ;; esac
	done
	for _c in $(ctx_list "$1" checkpoints); do
		case $_c in layer | block) ;; *) die 2 "$1: checkpoints: \"$_c\" (expected layer or block)" ;; esac
	done
	for _a in $(ctx_list "$1" attention_checkpoints); do
		case $_a in 0 | 1) ;; *) die 2 "$1: attention_checkpoints: \"$_a\" (expected 1 or 0)" ;; esac
	done
	ctx_ckpt_dir=$(ctx_key "$1" checkpoint_dir)
	ctx_disk_free=$(ctx_key "$1" disk_available)
	[ -z "$ctx_disk_free" ] || [ -n "$ctx_ckpt_dir" ] ||
		die 2 "$1: disk_available: needs checkpoint_dir (the directory whose free bytes it gives)"
	[ -n "$ctx_disk_free" ] || [ -z "$ctx_ckpt_dir" ] || [ -d "$ctx_ckpt_dir" ] ||
		die 2 "$1: checkpoint_dir: $ctx_ckpt_dir: no such directory here (disk_available: SIZE plans it elsewhere)"
	ctx_peft_precisions=$(ctx_list "$1" peft) || ctx_peft_precisions=
	for _p in $ctx_peft_precisions; do
		case $_p in bf16 | nf4) ;; *) die 2 "$1: peft: \"$_p\" (expected bf16 or nf4)" ;; esac
	done
	[ -n "$(ctx_list "$1" models)" ] && [ -n "$(ctx_list "$1" cards_gb)" ] ||
		die 2 "$1: context spec needs \"models: [...]\" and \"cards_gb: [...]\""
	ctx_out=${2:-context-runs}
	ctx_device=1
	"$ctx_train" --backend cuda --model poros/tiny-qwen2 --plan >/dev/null 2>&1 &&
		command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || ctx_device=0
	[ "$ctx_device" = 1 ] ||
		note "no CUDA device here: the confirming 3-step runs are not made${ctx_peft_precisions:+, nor the PEFT runs}" \
			"(the table is the planner's only)"
	if [ -n "$ctx_peft_precisions" ] && [ "$ctx_device" = 1 ]; then
		ctx_arm=$(need poros-arm)
		# poros-arm ends its run when this driver is gone, as in bench run
		POROS_ARM_WATCH_PID=$$
		export POROS_ARM_WATCH_PID
	fi
	: > "$tmpdir/ctx_failed"
	# the disk's column only where the spec has it
	_disk_head= _disk_rule=
	[ -z "$ctx_ckpt_dir" ] || _disk_head=' disk MiB at max |' _disk_rule='---|'
	printf '| model | precision | card (GB) | max seq_len (plan) | layout (block size, checkpoints, attention checkpoints) | device MiB at max | host MiB at max |%s confirmed (3 steps) | published (not measured here) | PEFT max seq_len (measured, precision) |\n' \
		"$_disk_head"
	printf '|---|---|---|---|---|---|---|%s---|---|---|\n' "$_disk_rule"
	ctx_list "$1" models | while IFS= read -r _m; do
		ctx_list "$1" cards_gb | while IFS= read -r _gb; do
			_best=$(ctx_best "$1" "$_m" "$_gb")
			_s=${_best%% *} _best=${_best#* }
			ctx_block=${_best%% *} _best=${_best#* }
			ctx_checkpoints=${_best%% *} _a=${_best#* }
			ctx_attn=${_a#-}
			# not even 1024 fits: no plan to show, nothing to confirm
			_line='{}' _conf=-
			[ "$_s" = 0 ] || _line=$(ctx_plan "$_m" "$_gb" "$_s")
			_layout=$(ctx_layout "$_line")
			_disk=
			[ -z "$ctx_ckpt_dir" ] ||
				_disk=" $(printf '%s\n' "$_line" | ask get --null - disk_checkpoints_mb 2>/dev/null | ctx_floor) |"
			if [ "$ctx_device" = 0 ]; then
				_conf='no CUDA device'
			elif [ "$_s" != 0 ]; then
				_conf=$(ctx_confirm "$_m" "$_gb" "$_s")
			fi
			if [ -z "$ctx_peft_precisions" ]; then
				_peft=-
			elif [ "$ctx_device" = 0 ]; then
				_peft='no CUDA device'
			else
				_peft=$(ctx_peft_cell "$_m" "$_gb")
			fi
			printf '| %s | %s | %s | %s | %s | %s | %s |%s %s | %s | %s |\n' "$_m" "$ctx_precision" "$_gb" "$_s" \
				"$_layout" \
				"$(printf '%s\n' "$_line" | ask get --null - vram_plan_mb 2>/dev/null | ctx_floor)" \
				"$(printf '%s\n' "$_line" | ask get --null - host_plan_mb 2>/dev/null | ctx_floor)" \
				"$_disk" "$_conf" "$(ctx_published "$_m" "$_gb")" "$_peft"
		done
	done
	_failed=$(wc -l < "$tmpdir/ctx_failed" | tr -d ' ')
	[ "$_failed" = 0 ] || die 1 "$_failed PEFT search(es) ended in an error (see above): no maximum for them"
}

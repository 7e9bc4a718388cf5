# shellcheck shell=sh disable=SC2154  # the driver's variables (outdir, tmpdir, arm, ...)
# share/poros/lib/slurm.sh: the Slurm part of the poros driver (bench run
# --slurm and bench collect).  Sourced by bin/poros (load_slurm), never run:
# it uses the driver's note, die, need, ask, render_reports, heal_results, parity_from_runs,
# lock_outdir, claim_lock and its variables (outdir, tmpdir, arm, the
# --slurm options).
# Like the driver, no value ever passes through eval or a shell string.

# --- a Slurm cluster (--slurm) -------------------------------------------------
# Quotes a word for sh: 'it'\''s'.
shquote() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

# Replaces DEST by a copy of SRC in one rename (a job starting meanwhile
# reads the old file or the new one, never half of one).
install_file() {
	cp -p -- "$1" "$2.tmp"
	mv -f -- "$2.tmp" "$2"
}

# Refuses (exit 2, before anything is written) an output directory that
# cannot go into the batch scripts.
slurm_check_paths() {
	nl='
'
	case $outdir$(pwd -P) in *"$nl"*) die 2 "--slurm: $outdir: a path with a newline cannot go into a batch script" ;; esac
	# sbatch expands %j, %A, ... in the log path it is given.
	case $outdir in *%*) die 2 "--slurm: $outdir: a directory named with % cannot hold Slurm's logs" ;; esac
}

# Writes OUTDIR/slurm/{cells.txt,all-cells.txt,array.sh,finish.sh,submit.sh},
# submits an array job (task N runs poros-arm on line N of cells.txt) for
# each hardware.gpus of the cells, with that many GPUs a task, and a
# finishing job that waits for them (afterany) and runs `poros bench collect`.
# Prints the job ids as a JSON line; with --wait, waits for the finishing job.
slurm_submit() {
	_cwd=$(pwd -P)
	_sdir=$outdir/slurm
	mkdir -p -- "$_sdir/logs"
	_abs_sdir=$(cd -- "$_sdir" && pwd -P)
	_self=$(cd -- "$(dirname -- "$0")" && pwd -P)/$(basename -- "$0")
	_arm=$(cd -- "$(dirname -- "$arm")" && pwd -P)/$(basename -- "$arm")
	_name=$(ask get --raw spec_id "$outdir/spec.json" 2>/dev/null) || _name=bench
	case $_name in *[!A-Za-z0-9_.-]*|'') _name=bench ;; esac

	# A new submission replaces the lists; the status of an earlier finishing job goes.
	cut -d ' ' -f 3- "$tmpdir/todo" > "$tmpdir/cells.txt"
	install_file "$tmpdir/cells.txt" "$_sdir/cells.txt"
	install_file "$tmpdir/order" "$_sdir/all-cells.txt"
	rm -f -- "$_sdir/finish.rc"
	write_array_script "$_sdir/array.sh"
	write_finish_script "$_sdir/finish.sh"

	printf '%s\n' '#!/bin/sh' \
		'# Submits the jobs of `poros bench run --slurm` again, as they were: every' \
		'# cell of cells.txt (ok or not), with the same options; prints the job ids.' \
		'set -eu' > "$tmpdir/submit.sh"
	array_id= array_ids= _deps= _vars= _k=0
	if [ "$ntodo" -gt 0 ]; then
		note "submitting $ntodo cells as a job array ($nskipped skipped)"
		gpu_groups
		# One array a GPU count, 1 first: the same array.sh and cells.txt,
		# each taking its own lines of it (--array=1-3,5).
		while read -r _gpus _tasks <&4; do
			_jname=poros-$_name _g=$gres
			if [ "$_gpus" -gt 1 ]; then
				_jname=$_jname-${_gpus}gpu _g=$(gres_with_gpus "$gres" "$_gpus")
				note "cells of hardware.gpus $_gpus: array tasks $_tasks, each with --gres=$_g"
			fi
			submit_job "$_abs_sdir/array.sh" --job-name="$_jname" --array="$_tasks" \
				--output="$_abs_sdir/logs/array-%A_%a.out" ${_g:+"--gres=$_g"} \
				${time_limit:+"--time=$time_limit"} || {
				[ -z "$array_ids" ] || die 1 "sbatch failed (see above); the array job(s) $array_ids are queued: scancel $array_ids"
				die 1 "sbatch failed (see above): nothing was submitted"
			}
			# In submit.sh each array's id is a variable: array, array2, ...
			_k=$((_k + 1)) _var=array
			[ "$_k" = 1 ] || _var=array$_k
			printf '%s=$(%s)\n%s=${%s%%%%;*}\necho "$%s"\n' "$_var" "$sbatch_line" "$_var" "$_var" "$_var" >> "$tmpdir/submit.sh"
			array_id=${array_id:-$job_id}
			array_ids="$array_ids${array_ids:+ }$job_id"
			_deps="$_deps:$job_id" _vars="$_vars:\$$_var"
		done 4< "$tmpdir/gpu_groups"
		_dep="--dependency=afterany$_deps"
	else
		note "all $ncells cells have an ok artifact: submitting only the finishing job"
		_dep=
	fi
	# It needs no GPU and takes seconds: no --gres, no --time.
	submit_job "$_abs_sdir/finish.sh" --job-name="poros-$_name-finish" ${_dep:+"$_dep"} \
		--output="$_abs_sdir/logs/finish-%j.out" || {
		[ -z "$array_id" ] || die 1 "sbatch failed (see above) for the finishing job; the array job(s) $array_ids are queued: scancel $array_ids, or submit $_sdir/finish.sh with ${_dep}"
		die 1 "sbatch failed (see above): nothing was submitted"
	}
	finish_id=$job_id
	if [ -n "$array_id" ]; then
		# In submit.sh the dependency names the array jobs it has just submitted.
		printf '%s\n' "$sbatch_line" |
			sed "s/'$_dep'/\"--dependency=afterany$_vars\"/" >> "$tmpdir/submit.sh"
	else
		printf '%s\n' "$sbatch_line" >> "$tmpdir/submit.sh"
	fi
	chmod +x "$tmpdir/submit.sh"
	install_file "$tmpdir/submit.sh" "$_sdir/submit.sh"
	# shellcheck disable=SC2086 # job ids: digits and spaces
	printf '%s\n' $array_ids "$finish_id" > "$tmpdir/jobs"
	install_file "$tmpdir/jobs" "$_sdir/jobs"
	note "submitted: array job$(case $array_ids in *' '*) echo s ;; esac) ${array_ids:-(none)}, finishing job $finish_id; scripts and logs in $_sdir"
	# From here the jobs own the directory (a new run is refused while they
	# are queued or running); the finishing job takes the lock in its turn.
	exec 9>&-
	# (jq only writes this line: bench_run checked it is there)
	jq -n -c --arg dir "$outdir" --arg a "$array_id" --arg ids "$array_ids" --arg f "$finish_id" \
		--argjson n "$ntodo" --argjson s "$nskipped" \
		'{output_dir: $dir, array_job_id: (if $a == "" then null else ($a | tonumber) end),
		  array_job_ids: ($ids | split(" ") | map(select(. != "") | tonumber)),
		  finish_job_id: ($f | tonumber), cells: $n, skipped: $s}'
	[ "$slurm_wait" = 0 ] || slurm_wait_job "$finish_id"
}

# Writes $tmpdir/gpu_groups: "GPUS TASKS" for each number of GPUs the
# cells of $tmpdir/cells.txt run on, in increasing order, TASKS their line
# numbers as sbatch's --array takes them ("1-3,5").  A cell runs on
# hardware.gpus GPUs when its method is poros or resident; poros-arm skips
# the other methods' cells of hardware.gpus > 1 at once, so those ask for
# one GPU, not for N to write a skip.
gpu_groups() {
	set --
	while IFS= read -r _c; do
		set -- "$@" "$_c"
	done < "$tmpdir/cells.txt"
	ask get --null 1 method,hardware.gpus "$@" > "$tmpdir/cell_gpus" ||
		die 1 "$_sdir/cells.txt: cannot read the cells' hardware.gpus"
	awk -F '\t' '{ n = ($1 ~ /^(poros|resident)$/ && $2 ~ /^[0-9]+$/ && $2 > 1) ? $2 + 0 : 1
	       if (!(n in lines)) order[++k] = n
	       lines[n] = lines[n] " " NR }
	     END {
		for (i = 1; i <= k; i++) {
			m = split(lines[order[i]], l, " "); out = ""; first = l[1]
			for (j = 2; j <= m + 1; j++) {
				if (j <= m && l[j] == l[j - 1] + 1)
					continue
				out = out (out == "" ? "" : ",") (first == l[j - 1] ? first : first "-" l[j - 1])
				first = l[j]
			}
			print order[i], out
		}
	     }' "$tmpdir/cell_gpus" |
		sort -n -k1,1 > "$tmpdir/gpu_groups"
}

# gres_with_gpus G N: the --gres G with its gpu count set to N (gpu:a100:1
# -> gpu:a100:N, gpu -> gpu:N); gpu:N added when G names no gpu.
gres_with_gpus() {
	printf '%s\n' "$1" | awk -v n="$2" -F , '{
		out = ""; found = 0
		for (i = 1; i <= NF; i++) {
			item = $i
			if (item == "gpu" || item ~ /^gpu:/) {
				k = split(item, f, ":")
				if (k >= 2 && f[k] ~ /^[0-9]+$/)
					k--
				item = f[1]
				for (j = 2; j <= k; j++)
					item = item ":" f[j]
				item = item ":" n; found = 1
			}
			out = out (out == "" ? "" : ",") item
		}
		if (!found)
			out = out (out == "" ? "" : ",") "gpu:" n
		print out
	}'
}

# submit_job SCRIPT OPTION...: submits SCRIPT with these options, then the
# ones both jobs share: --parsable, --chdir (the cells' paths are relative to
# it), --partition, --account and last the user's --sbatch-arg (which may
# override ours).  Sets job_id and sbatch_line.
submit_job() {
	_script=$1; shift
	set -- --parsable --chdir="$_cwd" "$@"
	[ -z "$partition" ] || set -- "$@" --partition="$partition"
	[ -z "$account" ] || set -- "$@" --account="$account"
	while IFS= read -r _a; do
		[ -z "$_a" ] || set -- "$@" "$_a"
	done <<SBATCH_ARGS
$sbatch_args
SBATCH_ARGS
	sbatch_submit "$@" "$_script"
}

# Runs sbatch with these arguments (no shell between) and sets job_id;
# sets sbatch_line to the same command, quoted, for submit.sh.
sbatch_submit() {
	sbatch_line=sbatch
	for _a in "$@"; do
		sbatch_line="$sbatch_line $(shquote "$_a")"
	done
	_out=$("$sbatch" "$@" < /dev/null) || return 1
	# --parsable prints "JOBID" or "JOBID;CLUSTER".
	_id=${_out%%;*}
	case $_id in ''|*[!0-9]*) note "sbatch: unexpected answer \"$_out\" (expected a job id)"; return 1 ;; esac
	job_id=$_id
}

write_array_script() {
	{
		printf '%s\n' '#!/bin/sh' \
			'# Written by `poros bench run --slurm`: array task N runs poros-arm on the' \
			'# cell file on line N of cells.txt, which writes OUTDIR/<cell_id>.json.' \
			'# The finishing job (finish.sh) appends the artifacts to results.jsonl.' \
			'set -eu'
		printf 'cd %s\n' "$(shquote "$_cwd")"
		printf 'list=%s\n' "$(shquote "$_sdir/cells.txt")"
		printf '%s\n' 'task=${SLURM_ARRAY_TASK_ID:?not a Slurm array task}' \
			'case $task in *[!0-9]*|"") echo "array.sh: bad SLURM_ARRAY_TASK_ID \"$task\"" >&2; exit 2 ;; esac' \
			'cell=$(sed -n "${task}p" "$list")' \
			'[ -n "$cell" ] || { echo "array.sh: task $task: no line $task in $list" >&2; exit 2; }'
		printf 'exec %s "$cell"\n' "$(shquote "$_arm")"
	} > "$tmpdir/array.sh"
	chmod +x "$tmpdir/array.sh"
	install_file "$tmpdir/array.sh" "$1"
}

write_finish_script() {
	{
		printf '%s\n' '#!/bin/sh' \
			'# Written by `poros bench run --slurm`: runs after every array task ended' \
			'# (afterany); appends the artifacts to results.jsonl in spec order, renders' \
			'# the reports, and leaves its exit status in finish.rc for `--wait`.' \
			'set -u'
		printf 'cd %s || exit 1\n' "$(shquote "$_cwd")"
		printf 'rc=0\n'
		printf '%s bench collect %s || rc=$?\n' "$(shquote "$_self")" "$(shquote "$outdir")"
		printf 'printf '\''%%s\\n'\'' "$rc" > %s.tmp && mv -f %s.tmp %s\n' \
			"$(shquote "$_sdir/finish.rc")" "$(shquote "$_sdir/finish.rc")" "$(shquote "$_sdir/finish.rc")"
		printf 'exit "$rc"\n'
	} > "$tmpdir/finish.sh"
	chmod +x "$tmpdir/finish.sh"
	install_file "$tmpdir/finish.sh" "$1"
}

# Waits for the job to end (polling scontrol, every 1 s at first, then less
# often, at most every 10 s) and exits with its status.
slurm_wait_job() {
	_delay=1
	note "waiting for the finishing job $1"
	while :; do
		_err=0
		_info=$(scontrol -o show job "$1" 2> "$tmpdir/scontrol.err") || _err=$?
		if [ "$_err" != 0 ]; then
			# Gone from slurmctld's memory (MinJobAge): finish.rc says how it ended.
			if grep -q 'Invalid job id' "$tmpdir/scontrol.err" && [ -f "$outdir/slurm/finish.rc" ]; then
				_rc=$(cat "$outdir/slurm/finish.rc")
				break
			fi
			grep -q 'Invalid job id' "$tmpdir/scontrol.err" &&
				die 1 "job $1: unknown to Slurm, and it left no $outdir/slurm/finish.rc"
			note "scontrol show job $1 failed ($(head -n 1 "$tmpdir/scontrol.err")); trying again"
		else
			_state=$(printf '%s\n' "$_info" | tr ' ' '\n' | sed -n 's/^JobState=//p')
			_code=$(printf '%s\n' "$_info" | tr ' ' '\n' | sed -n 's/^ExitCode=//p')
			case $_state in
			COMPLETED|FAILED)
				# ExitCode=STATUS:SIGNAL
				_rc=${_code%%:*}
				[ "${_code#*:}" = 0 ] || _rc=1
				[ "$_state" = COMPLETED ] || [ "$_rc" != 0 ] || _rc=1
				break ;;
			CANCELLED*|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY)
				die 1 "the finishing job $1 ended $_state" ;;
			esac
		fi
		sleep "$_delay"
		[ "$_delay" -ge 10 ] || _delay=$((_delay * 2))
	done
	case $_rc in ''|*[!0-9]*) die 1 "job $1: unreadable exit status \"$_rc\"" ;; esac
	[ "$_rc" = 0 ] || die "$_rc" "the finishing job $1 failed (exit $_rc): see $outdir/slurm/logs/finish-$1.out"
	note "the finishing job $1 is done: results in $outdir"
}

# bench collect DIR: what the finishing job runs.  Appends each artifact of
# the cells in DIR/slurm/all-cells.txt that DIR/results.jsonl lacks, in that
# (spec) order, then renders the reports; exit 1 when a cell has no artifact.
bench_collect() {
	case ${1:-} in -h|--help) sub_help "bench collect" ;; esac
	[ $# -eq 1 ] || usage
	outdir=$1
	[ -d "$outdir" ] || die 2 "$outdir: not a directory"
	case $outdir in -*) outdir=./$outdir ;; esac
	_list=$outdir/slurm/all-cells.txt
	[ -f "$_list" ] || die 2 "$_list: no such file (bench collect finishes a bench run --slurm)"
	merge=$(need poros-merge)
	lock_outdir
	claim_lock
	_n=0 _missing=0
	while IFS= read -r _id <&3; do
		case $_id in *[!a-z0-9_]*|'') die 2 "$_list: unexpected cell_id \"$_id\"" ;; esac
		_n=$((_n + 1))
		if [ -f "$outdir/$_id.json" ]; then
			heal_results "$_id"
		else
			note "$_id: no artifact (see its array task's log in $outdir/slurm/logs/)"
			_missing=$((_missing + 1))
		fi
	done 3< "$_list"
	failed=0
	# this submission's cells (cells.txt holds their cell files)
	sed -e 's#.*/##' -e 's/[.]json$//' "$outdir/slurm/cells.txt" > "$tmpdir/ran" 2>/dev/null || : > "$tmpdir/ran"
	parity_from_runs "$tmpdir/ran"
	_rc=0
	render_reports "$outdir" || _rc=1
	[ "$_missing" = 0 ] || die 1 "$_missing of $_n cells have no artifact"
	[ "$failed" = 0 ] || die 1 "$failed parity comparison(s) failed or were not bitwise exact"
	return "$_rc"
}

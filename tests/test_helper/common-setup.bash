# Shared by every bats file: `load test_helper/common-setup` then `_common_setup`.
_common_setup() {
	load '/usr/lib/bats/bats-support/load'
	load '/usr/lib/bats/bats-assert/load'
	POROS_ROOT="$(cd "$(dirname "$BATS_TEST_FILENAME")/.." && pwd)"
	export POROS_ROOT
	PATH="$POROS_ROOT/bin:$PATH"
	export PATH
	# Every CPU run of the suite tests the schedule's stream order: the copy
	# and checkpoint streams' work runs only when waited for, so a missing
	# wait gives other bits (kernels/cpu/backend_cpu.c); a test may set 0.
	export POROS_CPU_LAZY_COPIES="${POROS_CPU_LAZY_COPIES-1}"
	# Tests never reach the network or a real HF cache.
	export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
	export HF_HOME="$BATS_TEST_TMPDIR/hf-home"
	cd "$BATS_TEST_TMPDIR" || return 1
}

# True when a CUDA device is usable.
have_gpu() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# assert_version TOOL: TOOL --version exits 0 printing its name and the
# version every Poros tool has.
assert_version() {
	run -0 "$1" --version
	assert_output "$1 0.1.0"
}

# assert_help TOOL SYNOPSIS: TOOL --help exits 0 with SYNOPSIS as its first
# line on stdout and nothing on stderr.
assert_help() {
	run -0 --separate-stderr "$1" --help
	assert_line --index 0 "$2"
	[ -z "$stderr" ]
}

# wait_until TRIES STEP COMMAND...: runs COMMAND every STEP seconds until it
# succeeds, TRIES times at most (for what a background process does);
# fails when it never did, so a bare call asserts that it did.
wait_until() {
	local tries=$1 step=$2 i
	shift 2
	for ((i = 1; i <= tries; i++)); do
		"$@" && return 0
		sleep "$step"
	done
	return 1
}

# lines_at_least FILE N: FILE exists and has N lines or more.
lines_at_least() {
	[ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ]
}

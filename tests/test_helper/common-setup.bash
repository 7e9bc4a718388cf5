# Shared by every bats file: `load test_helper/common-setup` then `_common_setup`.
_common_setup() {
	load '/usr/lib/bats/bats-support/load'
	load '/usr/lib/bats/bats-assert/load'
	POROS_ROOT="$(cd "$(dirname "$BATS_TEST_FILENAME")/.." && pwd)"
	export POROS_ROOT
	PATH="$POROS_ROOT/bin:$PATH"
	export PATH
	# Tests never reach the network or a real HF cache.
	export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
	export HF_HOME="$BATS_TEST_TMPDIR/hf-home"
	cd "$BATS_TEST_TMPDIR" || return 1
}

# True when a CUDA device is usable.
have_gpu() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

#!/usr/bin/env bats
# The CUDA backend as a shared object beside the tools, opened only when a
# tool asks for the GPU (tools/lib/util/backend_load.c): a CPU run maps no CUDA
# library, and a tool runs where the backend or the CUDA libraries are absent.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	# not --quiet: the backend's line is a progress line
	TINY=(--model poros/tiny-qwen2 --seq-len 16 --rank 8 --steps 1 --dataset synthetic)
}

# A CUDA build's poros-train names the backend it loads (a CPU-only build,
# e.g. the ASan one, does not, whatever lies in bin/).
cuda_build() { grep -aq poros-backend-cuda.so "$POROS_ROOT/bin/poros-train"; }

@test "no tool links a CUDA library: poros-train --version stays under 20 MB of RSS" {
	for tool in "$POROS_ROOT"/bin/poros-*; do
		case "$tool" in *.so) continue ;; esac
		run -0 ldd "$tool"
		refute_output --regexp 'libcudart|libcublas|libcudnn'
	done
	kb=$(/usr/bin/time -f %M poros-train --version 2>&1 >/dev/null)
	echo "poros-train --version: $kb KB"
	[ "$kb" -lt 20480 ]
}

@test "without the backend beside it, --backend auto says why in one line and trains on the CPU; cuda is refused" {
	mkdir alone
	cp "$POROS_ROOT/bin/poros-train" alone/
	run -0 --separate-stderr env POROS_HOME="$POROS_ROOT" alone/poros-train --backend auto "${TINY[@]}" --out run
	echo "$output" | jq -e '.status == "ok" and .backend == "cpu"'
	[ "$(printf '%s\n' "$stderr" | grep -c 'backend')" -eq 1 ]
	if cuda_build; then
		assert_equal "${stderr_lines[0]}" "poros-train: the CUDA backend did not load: $PWD/alone/poros-backend-cuda.so: cannot open shared object file: No such file or directory: CPU backend"
	else
		assert_equal "${stderr_lines[0]}" "poros-train: built without CUDA: CPU backend"
	fi
	run -1 --separate-stderr env POROS_HOME="$POROS_ROOT" alone/poros-train --backend cuda "${TINY[@]}" --out run2
	echo "$output" | jq -e '.status == "error" and (.error | startswith("--backend cuda: "))'
}

@test "with the backend beside it, a CUDA build loads it: without a device the error is the device's" {
	cuda_build || skip "a CPU-only build"
	[ -e "$POROS_ROOT/bin/poros-backend-cuda.so" ]
	have_gpu && skip "a GPU is present"
	run -1 --separate-stderr poros-train --backend cuda "${TINY[@]}" --out run
	echo "$output" | jq -e '.status == "error" and (.error | startswith("--backend cuda: "))'
	[[ "$output" != *"did not load"* ]]
}

#!/usr/bin/env bats
# make install: binaries, the driver, share/ and man pages under DESTDIR/PREFIX,
# and the installed tools find their configs and arms without the source tree.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
}

@test "make install puts tools, driver, share and man pages under DESTDIR and PREFIX" {
	run -0 make -s -C "$POROS_ROOT" install DESTDIR="$BATS_TEST_TMPDIR/inst" PREFIX=/opt/poros
	local root="$BATS_TEST_TMPDIR/inst/opt/poros"
	for t in poros poros-expand poros-arm poros-train poros-parity poros-merge poros-render poros-tokenize poros-checkpoint poros-cell; do
		[ -x "$root/bin/$t" ]
	done
	[ -f "$root/share/poros/configs/models/tiny_qwen2.json" ]
	[ -f "$root/share/poros/arms/peft_arm.py" ]
	[ -f "$root/share/poros/schema/artifact.schema.json" ]
	[ -f "$root/share/man/man1/poros-train.1" ]
	[ -f "$root/share/man/man5/poros-spec.5" ]
	# the data-parallel plugin, where an installed poros-train looks for it
	if command -v mpicc >/dev/null; then
		[ -f "$root/lib/poros/poros-comm-mpi.so" ]
	fi
}

@test "installed tools run from their prefix alone: a tiny training run finds its model config" {
	run -0 make -s -C "$POROS_ROOT" install DESTDIR="$BATS_TEST_TMPDIR/inst" PREFIX=/usr
	local bin="$BATS_TEST_TMPDIR/inst/usr/bin"
	run -0 --separate-stderr env -u POROS_HOME "$bin/poros-train" --model poros/tiny-llama --steps 2 --seq-len 16 \
		--backend cpu --out "$BATS_TEST_TMPDIR/run" --quiet
	jq -e '.status == "ok" and .weights == "synthetic" and .steps == 2' <<< "$output"
	run -0 "$bin/poros" --version
	assert_output "poros 0.1.0"
}

#!/bin/sh
# tests/fuzz/run.sh: builds the libFuzzer harnesses (tests/fuzz/fuzz_*.c)
# with clang, ASan and UBSan into build-fuzz/, replays the regression
# inputs (tests/fuzz/regress/HARNESS/*), then fuzzes each harness for
# FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/HARNESS/), with its
# dictionary tests/fuzz/HARNESS.dict where there is one, and prints
# one line per harness: executions run and crashes found.
#   FUZZ_SECONDS   seconds per harness (default 60)
#   FUZZ_CC        the compiler (default clang); needs libFuzzer
#                  (Debian: clang libclang-rt-14-dev)
#   FUZZ_ONLY      run only these harnesses (space-separated names)
# New corpus entries go to build-fuzz/corpus/, crashes to build-fuzz/crashes/:
# the checked-in corpus is only read.  Exit 0 when no harness crashed.
set -eu

cd "$(dirname "$0")/../.."
CC=${FUZZ_CC:-clang}
SECONDS_EACH=${FUZZ_SECONDS:-60}
OUT=build-fuzz
prog=fuzz

note() { printf '%s: %s\n' "$prog" "$*" >&2; }

case $SECONDS_EACH in ''|*[!0-9]*) note "FUZZ_SECONDS must be a whole number of seconds (got \"$SECONDS_EACH\")"; exit 2 ;; esac
if ! command -v "$CC" >/dev/null 2>&1; then
	note "$CC not found: make fuzz needs clang with libFuzzer (apt-get install clang libclang-rt-14-dev)"
	exit 2
fi
# libFuzzer ships separately from clang on Debian: say so rather than fail at link time.
probe=$(mktemp -d "${TMPDIR:-/tmp}/poros-fuzz-probe.XXXXXX")
trap 'rm -rf -- "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! "$CC" -fsanitize=fuzzer,address -o "$probe/p" "$probe/p.c" 2> "$probe/err"; then
	note "$CC cannot link a libFuzzer program (apt-get install libclang-rt-14-dev):"
	head -n 3 "$probe/err" >&2
	exit 2
fi

PKGS="yaml-0.1 libcjson zlib libpcre2-8 libutf8proc"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CFLAGS="-std=c11 -Wall -Wextra -Werror -Wno-unknown-pragmas -O1 -g -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64
	-DPOROS_VERSION=\"0.1.0\" -DPOROS_GIT_SHA=\"fuzz\" -Itools/lib -Ikernels -Itools/poros-expand -Itests/fuzz
	$(pkg-config --cflags $PKGS)"
# libyaml statically, so that the allocation wrappers (fuzz_common.h) see its blocks too.
LIBS="-Wl,-Bstatic -lyaml -Wl,-Bdynamic $(pkg-config --libs $(echo "$PKGS" | sed 's/yaml-0.1//')) -lm -lpthread"
WRAP="-Wl,--wrap=exit,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup,--wrap=strndup"

# Objects: only what changed since the last build is compiled again.
compile() { # SRC OBJ [extra flags]
	_src=$1 _obj=$2; shift 2
	if [ ! -f "$_obj" ] || [ "$_src" -nt "$_obj" ] || [ -n "$(find tools/lib kernels -name '*.h' -newer "$_obj" 2>/dev/null | head -n 1)" ]; then
		mkdir -p "$(dirname "$_obj")"
		# shellcheck disable=SC2086 # word splitting of the flag lists is wanted
		"$CC" $CFLAGS $SAN "$@" -c -o "$_obj" "$_src"
	fi
}
note "building the harnesses with $CC in $OUT/"
objs=
for src in tools/lib/*/*.c kernels/cpu/*.c tools/poros-expand/spec.c tools/poros-expand/yaml_tree.c tests/fuzz/fuzz_common.c; do
	obj=$OUT/obj/${src%.c}.o
	compile "$src" "$obj" -fsanitize=fuzzer-no-link
	objs="$objs $obj"
done
rm -f "$OUT/libfuzzpieces.a"
# shellcheck disable=SC2086
ar rcs "$OUT/libfuzzpieces.a" $objs

harnesses=
for src in tests/fuzz/fuzz_*.c; do
	name=$(basename "$src" .c)
	[ "$name" != fuzz_common ] || continue
	if [ -n "${FUZZ_ONLY:-}" ]; then
		case " $FUZZ_ONLY " in *" $name "*) ;; *) continue ;; esac
	fi
	compile "$src" "$OUT/obj/$name.o" -fsanitize=fuzzer-no-link
	# shellcheck disable=SC2086
	"$CC" $SAN -fsanitize=fuzzer $WRAP -o "$OUT/$name" "$OUT/obj/$name.o" "$OUT/libfuzzpieces.a" $LIBS
	harnesses="$harnesses $name"
done
[ -n "$harnesses" ] || { note "no harness matches FUZZ_ONLY=\"${FUZZ_ONLY:-}\""; exit 2; }


status=0 total_execs=0 total_crashes=0
printf '%-18s %12s %8s %s\n' harness executions crashes seconds
for name in $harnesses; do
	corpus=$OUT/corpus/$name
	crashes=$OUT/crashes/$name
	rm -rf -- "$crashes"
	mkdir -p "$corpus" "$crashes"
	log=$OUT/$name.log
	: > "$log"
	# 1. Every input that once crashed a harness must pass now.
	if [ -d "tests/fuzz/regress/$name" ] && [ -n "$(ls -A "tests/fuzz/regress/$name")" ]; then
		if ! "$OUT/$name" "tests/fuzz/regress/$name"/* >> "$log" 2>&1; then
			note "$name: a regression input fails again (see $log)"
			status=1
		fi
	fi
	# 2. Fuzz for the time given; -print_final_stats gives the execution count.
	rc=0
	dict=
	[ ! -f "tests/fuzz/$name.dict" ] || dict=-dict=tests/fuzz/$name.dict
	# shellcheck disable=SC2086 # $dict is one word or none
	"$OUT/$name" $dict -max_total_time="$SECONDS_EACH" \
		-print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-artifact_prefix="$crashes/" "$corpus" "tests/fuzz/corpus/$name" >> "$log" 2>&1 || rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	ncrash=$(find "$crashes" -type f | wc -l | tr -d ' ')
	[ "$rc" = 0 ] || [ "$ncrash" != 0 ] || ncrash=1
	printf '%-18s %12s %8s %s\n' "$name" "${execs:-?}" "$ncrash" "$SECONDS_EACH"
	total_execs=$((total_execs + ${execs:-0}))
	total_crashes=$((total_crashes + ncrash))
	if [ "$ncrash" != 0 ]; then
		status=1
		note "$name: crash inputs in $crashes/ (log: $log); add each to tests/fuzz/regress/$name/ once fixed"
	fi
done
printf '%-18s %12s %8s\n' total "$total_execs" "$total_crashes"
exit $status

/* tests/fuzz/fuzz_common.h: what every Poros libFuzzer harness shares.
 *
 * The readers under test report bad input by returning -1, except the spec
 * parser, which ends the program through die() -> exit(2) the way the tool
 * does.  The harnesses are linked with -Wl,--wrap=exit so that such an exit
 * jumps back into the harness instead of ending the fuzzing run: a clean
 * "bad input" exit is the expected outcome, never a finding. */
#ifndef POROS_FUZZ_COMMON_H
#define POROS_FUZZ_COMMON_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the harness around the code that may call exit(). */
extern jmp_buf fuzz_exit_jump;
extern int fuzz_exit_armed;
extern int fuzz_exit_code;

/* Allocation tracking (the harnesses link with --wrap=malloc and friends,
 * libyaml statically so its allocations are seen too).  Between
 * fuzz_track_begin and fuzz_track_end every block still live is recorded;
 * fuzz_track_release frees them all: what a die() inside the code under test
 * left behind, which the process exit would have freed in the real tool. */
void fuzz_track_begin(void);
void fuzz_track_release(void);
void fuzz_track_end(void);

/* Writes data to a fresh file under a per-process scratch directory (in
 * /dev/shm when it exists, so the fuzzing loop does not wear a disk) and
 * returns its path, valid until the next call with the same name. */
const char *fuzz_write_file(const char *name, const uint8_t *data, size_t size);
/* The per-process scratch directory itself. */
const char *fuzz_scratch_dir(void);

#endif

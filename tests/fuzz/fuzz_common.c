/* tests/fuzz/fuzz_common.c: scratch files and the exit() trap shared by
 * the harnesses (see fuzz_common.h). */
#include "fuzz_common.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "util/util.h"

jmp_buf fuzz_exit_jump;
int fuzz_exit_armed;
int fuzz_exit_code;

noreturn void __real_exit(int code);

/* Every exit() in the code under test lands here (-Wl,--wrap=exit). */
noreturn void __wrap_exit(int code);
void __wrap_exit(int code)
{
	if (fuzz_exit_armed) {
		fuzz_exit_armed = 0;
		fuzz_exit_code = code;
		longjmp(fuzz_exit_jump, 1);
	}
	__real_exit(code);
}

/* --- allocation tracking ---------------------------------------------------
 * An open-addressing set of live pointers; no allocation of its own, so the
 * wrappers can use it. */
#define TRACK_SLOTS (1u << 20)
#define TRACK_TOMB ((void *)1)
static void *track_set[TRACK_SLOTS];
static size_t track_touched[TRACK_SLOTS / 2]; /* slots filled since the last clear */
static size_t track_used; /* live + tombstones */
static int tracking;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static size_t track_hash(const void *p)
{
	uintptr_t x = (uintptr_t)p >> 4;
	x ^= x >> 17;
	x *= 0x9e3779b97f4a7c15u;
	return (size_t)(x >> 20) & (TRACK_SLOTS - 1);
}

static void track_add(void *p)
{
	if (!tracking || p == NULL)
		return;
	if (track_used > TRACK_SLOTS / 2) {
		/* Far more live blocks than any spec needs: stop tracking rather than overflow. */
		tracking = 0;
		return;
	}
	size_t i = track_hash(p);
	while (track_set[i] != NULL && track_set[i] != TRACK_TOMB)
		i = (i + 1) & (TRACK_SLOTS - 1);
	if (track_set[i] == NULL)
		track_touched[track_used++] = i;
	track_set[i] = p;
}

static void track_del(void *p)
{
	if (!tracking || p == NULL)
		return;
	for (size_t i = track_hash(p); track_set[i] != NULL; i = (i + 1) & (TRACK_SLOTS - 1)) {
		if (track_set[i] == p) {
			track_set[i] = TRACK_TOMB;
			return;
		}
	}
}

void *__wrap_malloc(size_t n) { void *p = __real_malloc(n); track_add(p); return p; }
void *__wrap_calloc(size_t n, size_t size) { void *p = __real_calloc(n, size); track_add(p); return p; }
void __wrap_free(void *p) { track_del(p); __real_free(p); }
char *__wrap_strdup(const char *s) { char *p = __real_strdup(s); track_add(p); return p; }
char *__wrap_strndup(const char *s, size_t n) { char *p = __real_strndup(s, n); track_add(p); return p; }
void *__wrap_realloc(void *p, size_t n)
{
	void *q = __real_realloc(p, n);
	if (q != NULL || n == 0)
		track_del(p);
	track_add(q);
	return q;
}

/* Only the slots used: clearing the whole set each run would dominate it. */
static void track_clear(void)
{
	for (size_t k = 0; k < track_used; k++)
		track_set[track_touched[k]] = NULL;
	track_used = 0;
}

void fuzz_track_begin(void)
{
	track_clear();
	tracking = 1;
}

void fuzz_track_release(void)
{
	tracking = 0;
	for (size_t k = 0; k < track_used; k++) {
		void *p = track_set[track_touched[k]];
		if (p != TRACK_TOMB)
			__real_free(p);
	}
	track_clear();
}

void fuzz_track_end(void)
{
	tracking = 0;
	track_clear();
}

static char scratch[256];

const char *fuzz_scratch_dir(void)
{
	if (scratch[0] == '\0') {
		struct stat st;
		const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
		snprintf(scratch, sizeof scratch, "%s/poros-fuzz.%ld", base, (long)getpid());
		if (mkdir(scratch, 0700) < 0 && mkdir_p(scratch, 0700) < 0) {
			perror(scratch);
			abort();
		}
	}
	return scratch;
}

const char *fuzz_write_file(const char *name, const uint8_t *data, size_t size)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", fuzz_scratch_dir(), name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(path);
		abort();
	}
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			perror(path);
			abort();
		}
		off += (size_t)w;
	}
	close(fd);
	return path;
}

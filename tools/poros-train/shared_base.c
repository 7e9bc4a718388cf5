/* tools/poros-train/shared_base.c: one copy of the base per host
 * (shared_base.h).  Every exchange is collective over all ranks, in the
 * same order on each, whatever a rank's own result: a failure is agreed
 * on, never left for the others to wait on. */
#include "shared_base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "util/util.h"

#define HOST_KEY_BYTES 128
#define TOKEN_BYTES 48

/* "hostname boot-id": equal for the ranks that share one kernel's /dev/shm */
static void host_key(char key[HOST_KEY_BYTES])
{
	char host[64] = "", boot[40] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f != NULL) {
		if (fgets(boot, sizeof boot, f) == NULL)
			boot[0] = '\0';
		fclose(f);
		boot[strcspn(boot, "\n")] = '\0';
	}
	if (gethostname(host, sizeof host - 1) != 0)
		host[0] = '\0';
	memset(key, 0, HOST_KEY_BYTES);
	snprintf(key, HOST_KEY_BYTES, "%s %s", host, boot);
}

/* rank 0's "PID-RANDOM", the same on every rank */
static int run_token(struct comm *c, char token[TOKEN_BYTES])
{
	memset(token, 0, TOKEN_BYTES);
	if (comm_rank(c) == 0) {
		unsigned long long r = (unsigned long long)time(NULL) * 2654435761u ^ (unsigned long long)getpid() << 20;
		int fd = open("/dev/urandom", O_RDONLY);

		if (fd >= 0) {
			if (read(fd, &r, sizeof r) != (ssize_t)sizeof r)
				r ^= (unsigned long long)clock();
			close(fd);
		}
		snprintf(token, TOKEN_BYTES, "%ld-%016llx", (long)getpid(), r);
	}
	return comm_bcast_bytes(c, token, TOKEN_BYTES, 0);
}

int shared_base_plan(struct base_share *s, struct comm *c, char *err, size_t errsz)
{
	int me = comm_rank(c), world = comm_world(c);
	char *keys = xcalloc((size_t)world, HOST_KEY_BYTES), token[TOKEN_BYTES];

	memset(s, 0, sizeof *s);
	s->comm = c;
	host_key(keys + (size_t)me * HOST_KEY_BYTES);
	if (comm_allgather_bytes(c, keys, HOST_KEY_BYTES) < 0 || run_token(c, token) < 0) {
		snprintf(err, errsz, "sharing the base: %s", comm_error(c));
		free(keys);
		return -1;
	}
	s->leader = -1;
	for (int r = 0; r < world; r++)
		if (memcmp(keys + (size_t)r * HOST_KEY_BYTES, keys + (size_t)me * HOST_KEY_BYTES, HOST_KEY_BYTES) == 0) {
			if (s->leader < 0)
				s->leader = r;
			s->local_rank += r < me;
			s->local_ranks++;
		}
	free(keys);
	snprintf(s->name, sizeof s->name, "/" SHARED_BASE_PREFIX "%s-r%d", token, s->leader);
	return 0;
}

int shared_base_agree(struct base_share *s, int rc, const char *what, char *err, size_t errsz)
{
	int world = comm_world(s->comm), *all = xcalloc((size_t)world, sizeof *all), first = -1, code;

	all[comm_rank(s->comm)] = rc;
	if (comm_allgather_bytes(s->comm, all, sizeof *all) < 0) {
		if (rc == 0)
			snprintf(err, errsz, "sharing the base (%s): %s", what, comm_error(s->comm));
		free(all);
		return rc < 0 ? rc : -2;
	}
	for (int r = 0; r < world && first < 0; r++)
		if (all[r] != 0)
			first = r;
	code = first < 0 ? 0 : all[first];
	free(all);
	if (rc != 0)
		return rc;
	if (first >= 0)
		snprintf(err, errsz, "rank %d failed in %s (its message says why)", first, what);
	return code;
}

/* The leader's part: the object created, its memory reserved (tmpfs
 * without room fails here, not with SIGBUS in the middle of the fill). */
static int create_object(struct base_share *s, char *err, size_t errsz)
{
	char sz[32];
	int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600), e;

	if (fd < 0)
		return snprintf(err, errsz, "shm_open %s: %s", s->name, strerror(errno)), -2;
	if ((e = posix_fallocate(fd, 0, (off_t)s->bytes)) != 0) {
		close(fd);
		shm_unlink(s->name);
		return snprintf(err, errsz, "reserving %s of shared memory for the base in /dev/shm: %s "
		                "(POROS_SHARED_BASE=0: a copy a rank)", format_bytes(sz, sizeof sz, (double)s->bytes),
		                strerror(e)), -2;
	}
	s->map = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		shm_unlink(s->name);
		return snprintf(err, errsz, "mmap %s: %s", s->name, strerror(errno)), -2;
	}
	return 0;
}

static int open_object(struct base_share *s, char *err, size_t errsz)
{
	struct stat st;
	int fd = shm_open(s->name, O_RDONLY, 0);

	if (fd < 0)
		return snprintf(err, errsz, "shm_open %s (made by rank %d): %s", s->name, s->leader, strerror(errno)), -2;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size != s->bytes) {
		close(fd);
		return snprintf(err, errsz, "%s: %lld bytes, not the base's %zu", s->name, (long long)st.st_size,
		                s->bytes), -2;
	}
	s->map = mmap(NULL, s->bytes, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		return snprintf(err, errsz, "mmap %s: %s", s->name, strerror(errno)), -2;
	}
	return 0;
}

int shared_base_map(struct base_share *s, const struct backend *be, size_t bytes, unsigned char **p, char *err,
                    size_t errsz)
{
	int lead = s->local_rank == 0, rc;

	s->be = be;
	s->bytes = bytes;
	rc = lead ? create_object(s, err, errsz) : 0;
	if ((rc = shared_base_agree(s, rc, "creating the shared base", err, errsz)) < 0) {
		shared_base_unmap(s);
		if (lead && s->name[0])
			shm_unlink(s->name);
		return rc;
	}
	rc = lead ? 0 : open_object(s, err, errsz);
	rc = shared_base_agree(s, rc, "mapping the shared base", err, errsz);
	if (lead)
		shm_unlink(s->name); /* mapped everywhere, or given up: the name goes */
	if (rc < 0) {
		shared_base_unmap(s);
		return rc;
	}
	*p = s->map;
	return 0;
}

int shared_base_register(struct base_share *s, char *err, size_t errsz)
{
	char sz[32];

	if (s->be->host_register(s->map, s->bytes, s->local_rank != 0) != 0)
		return snprintf(err, errsz, "registering the shared base (%s) for device copies failed",
		                format_bytes(sz, sizeof sz, (double)s->bytes)), -2;
	s->registered = 1;
	return 0;
}

void shared_base_unmap(struct base_share *s)
{
	if (s->map == NULL)
		return;
	if (s->registered)
		s->be->host_unregister(s->map);
	munmap(s->map, s->bytes);
	s->map = NULL;
	s->registered = 0;
}

void shared_base_remove_left(long rank0_pid)
{
	char prefix[64], name[320];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t n;

	if (d == NULL)
		return;
	n = (size_t)snprintf(prefix, sizeof prefix, SHARED_BASE_PREFIX "%ld-", rank0_pid);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, prefix, n) == 0) {
			snprintf(name, sizeof name, "/%s", e->d_name);
			shm_unlink(name);
		}
	closedir(d);
}

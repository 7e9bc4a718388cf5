/* tools/poros-train/ckpt_disk.c: checkpoint records on disk
 * (ckpt_disk.h).  The main thread queues the device side (a record's
 * piece copied into a slot, a slot copied to the device) on the
 * checkpoint stream as for a host record; the file side is jobs for one
 * I/O thread, run in the order queued: each waits for the copy its bytes
 * depend on (an event), then writes or reads.  The main thread waits only
 * where it would touch a slot's bytes that a job still uses. */
#define _GNU_SOURCE /* O_DIRECT */
#include "ckpt_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "alloc.h"
#include "util/util.h"

/* One pread or pwrite moves at most this much (Linux stops a call at
 * 2 GiB less a page anyway). */
#define IO_CHUNK ((size_t)1 << 30)
#define QUEUE_MAX 16

static size_t align_io(size_t bytes)
{
	return (bytes + CKPT_DISK_ALIGN - 1) / CKPT_DISK_ALIGN * CKPT_DISK_ALIGN;
}

/* --- the file -------------------------------------------------------------- */

struct ckpt_file {
	int fd;
	char *dir;
};

size_t ckpt_disk_free(const char *dir, size_t free_given, const char **source)
{
	struct statvfs sv;

	*source = free_given ? "POROS_DISK_AVAILABLE" : "free on its filesystem";
	if (free_given)
		return free_given;
	if (statvfs(dir, &sv) < 0)
		return 0;
	return (size_t)sv.f_bavail * sv.f_frsize;
}

/* A new file of its own name in dir, with flags; -1 with errno. */
static int create_unique(const char *dir, int flags, char **path)
{
	for (int i = 0; i < 1000; i++) {
		int fd;

		*path = xasprintf("%s/.poros-checkpoints-%ld-%d", dir, (long)getpid(), i);
		fd = open(*path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | flags, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd;
		free(*path);
	}
	*path = NULL;
	errno = EEXIST;
	return -1;
}

int ckpt_file_open(struct ckpt_file **out, const char *dir, size_t bytes, int records, int direct,
                   size_t free_given, int quiet, char *err, size_t errsz)
{
	struct stat st;
	const char *source;
	char *path = NULL, need[32], have[32];
	size_t avail;
	int fd = -1, rc;

	*out = NULL;
	if (stat(dir, &st) < 0)
		return set_error(err, errsz, "--checkpoint-dir %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return set_error(err, errsz, "--checkpoint-dir %s: not a directory", dir);
	if (direct) {
		fd = create_unique(dir, O_DIRECT, &path);
		/* a filesystem without O_DIRECT (an older tmpfs, some FUSE ones) says EINVAL */
		if (fd < 0 && errno == EINVAL) {
			if (!quiet)
				warnmsg("--checkpoint-dir %s: the filesystem refuses O_DIRECT: buffered reads and writes", dir);
			direct = 0;
		}
	}
	if (!direct)
		fd = create_unique(dir, 0, &path);
	if (fd < 0)
		return set_error(err, errsz, "--checkpoint-dir %s: cannot create the checkpoint file: %s", dir,
		                 strerror(errno));
	/* no name from here on: nothing is left behind, whatever ends the process */
	unlink(path);
	free(path);
	avail = ckpt_disk_free(dir, free_given, &source);
	if (bytes > 0 && avail && bytes > avail) {
		close(fd);
		return set_error(err, errsz, "--checkpoint-dir %s: %d checkpoint records need %s, %s free (%s)", dir,
		                 records, format_bytes(need, sizeof need, (double)bytes),
		                 format_bytes(have, sizeof have, (double)avail), source);
	}
	/* the whole file now: a disk that cannot hold it fails here, not in a step */
	if (bytes > 0 && (rc = posix_fallocate(fd, 0, (off_t)bytes)) != 0) {
		close(fd);
		return set_error(err, errsz, "--checkpoint-dir %s: reserving %s for %d checkpoint records failed: %s", dir,
		                 format_bytes(need, sizeof need, (double)bytes), records, strerror(rc));
	}
	*out = xcalloc(1, sizeof **out);
	(*out)->fd = fd;
	(*out)->dir = xstrdup(dir);
	return 0;
}

void ckpt_file_close(struct ckpt_file *f)
{
	if (f == NULL)
		return;
	close(f->fd);
	free(f->dir);
	free(f);
}

/* --- the slots and the I/O thread ------------------------------------------ */

struct slot {
	unsigned char *buf;      /* stride bytes, aligned; NULL in a dry run */
	int rec;                 /* the record it holds or is receiving; -1: none */
	unsigned have;           /* rec's pieces in it, or on their way (bit p) */
	long long last[2];       /* the last job that reads or writes piece p's bytes; 0: none */
	long long reading;       /* the job reading rec into it, until a get has waited for it; 0: none */
	struct backend_event *d2h[2], *h2d; /* the last copy into piece p, the last copy out */
};

struct job {
	int write, rec;
	unsigned char *buf;
	size_t len;
	off_t off;
	struct backend_event *wait; /* the device copy the bytes wait for */
};

struct ckpt_disk {
	const struct backend *be;   /* NULL: a dry run, which only counts (ckpt_tier_make) */
	struct ckpt_tier t;
	int fd;
	const char *dir;
	unsigned char *mem;         /* the slots' pinned allocation */
	struct slot slot[CKPT_DISK_SLOTS];
	pthread_t thread;
	int thread_up, stop;
	pthread_mutex_t lock;
	pthread_cond_t queued_cv, done_cv;
	struct job queue[QUEUE_MAX];
	long long queued, done;     /* jobs are numbered from 1: the last queued, the last finished */
	char err[320];              /* the first I/O error */
	char err_seen[320];         /* the main thread's copy */
	long long written, read;
};

/* pread or pwrite of all len bytes; 0, or -1 with errno (EIO for a read
 * past the end, which a preallocated file has not). */
static int io_all(int fd, int write, unsigned char *buf, size_t len, off_t off)
{
	while (len > 0) {
		size_t n = len < IO_CHUNK ? len : IO_CHUNK;
		ssize_t got = write ? pwrite(fd, buf, n, off) : pread(fd, buf, n, off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			if (got == 0)
				errno = EIO;
			return -1;
		}
		buf += got;
		len -= (size_t)got;
		off += got;
	}
	return 0;
}

static void *io_thread(void *arg)
{
	struct ckpt_disk *d = arg;

	for (;;) {
		struct job j;

		pthread_mutex_lock(&d->lock);
		while (d->done == d->queued && !d->stop)
			pthread_cond_wait(&d->queued_cv, &d->lock);
		if (d->done == d->queued) { /* stopping, and nothing left */
			pthread_mutex_unlock(&d->lock);
			return NULL;
		}
		j = d->queue[d->done % QUEUE_MAX];
		pthread_mutex_unlock(&d->lock);
		if (j.wait)
			d->be->event_synchronize(j.wait);
		if (io_all(d->fd, j.write, j.buf, j.len, j.off) < 0) {
			int e = errno;

			pthread_mutex_lock(&d->lock);
			if (!d->err[0])
				snprintf(d->err, sizeof d->err, "the checkpoint file in %s: %s record %d: %s", d->dir,
				         j.write ? "writing" : "reading", j.rec, strerror(e));
			pthread_mutex_unlock(&d->lock);
		}
		pthread_mutex_lock(&d->lock);
		d->done++;
		pthread_cond_broadcast(&d->done_cv);
		pthread_mutex_unlock(&d->lock);
	}
}

/* Queues a job; its number.  A dry run only numbers it. */
static long long queue_job(struct ckpt_disk *d, int write, int rec, unsigned char *buf, size_t len, off_t off,
                           struct backend_event *wait)
{
	long long n;

	if (write)
		d->written += (long long)len;
	else
		d->read += (long long)len;
	if (d->be == NULL)
		return d->done = ++d->queued;
	pthread_mutex_lock(&d->lock);
	while (d->queued - d->done >= QUEUE_MAX)
		pthread_cond_wait(&d->done_cv, &d->lock);
	d->queue[d->queued % QUEUE_MAX] = (struct job){ write, rec, buf, len, off, wait };
	n = ++d->queued;
	pthread_cond_signal(&d->queued_cv);
	pthread_mutex_unlock(&d->lock);
	return n;
}

static void wait_job(struct ckpt_disk *d, long long n)
{
	if (d->be == NULL || n == 0)
		return;
	pthread_mutex_lock(&d->lock);
	while (d->done < n)
		pthread_cond_wait(&d->done_cv, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

static off_t file_off(const struct ckpt_disk *d, int r, int piece)
{
	return (off_t)((size_t)r * d->t.stride + d->t.piece_file[piece]);
}

void ckpt_disk_put(struct ckpt_disk *d, int r, int piece, const void *src, int stream)
{
	struct slot *s = &d->slot[r % CKPT_DISK_SLOTS];
	size_t len = d->t.piece_len[piece];
	unsigned char *dst = s->buf ? s->buf + d->t.piece_file[piece] : NULL;

	/* a copy of r the backward read into another slot is the last step's */
	for (int i = 0; i < CKPT_DISK_SLOTS; i++)
		if (&d->slot[i] != s && d->slot[i].rec == r)
			d->slot[i].rec = -1, d->slot[i].have = 0;
	wait_job(d, s->last[piece]); /* the piece's bytes are free */
	/* a forward puts piece 0 first: what the slot held of r before is the last step's */
	if (s->rec != r || piece == 0)
		s->rec = r, s->have = 0, s->reading = 0;
	if (d->be) {
		d->be->copy_d2h_async(dst, src, len, stream);
		d->be->event_record(s->d2h[piece], stream);
	}
	s->have |= 1u << piece;
	s->last[piece] = queue_job(d, 1, r, dst, align_io(len), file_off(d, r, piece), s->d2h[piece]);
}

/* Record r into slot s, read from the file once s's last copy out is done. */
static void read_into(struct ckpt_disk *d, struct slot *s, int r)
{
	s->rec = r;
	s->have = (1u << d->t.pieces) - 1;
	s->reading = queue_job(d, 0, r, s->buf, d->t.stride, file_off(d, r, 0), s->h2d);
	s->last[0] = s->last[1] = s->reading;
}

static int held(const struct ckpt_disk *d, int r)
{
	for (int i = 0; i < CKPT_DISK_SLOTS; i++)
		if (d->slot[i].rec == r)
			return 1;
	return 0;
}

/* After record r went to the device: the backward takes records in
 * descending order, so a slot that holds nothing, r or a record above it
 * is done with, and reads the highest record below r that no slot holds. */
static void read_ahead(struct ckpt_disk *d, int r)
{
	for (int i = 0; i < CKPT_DISK_SLOTS; i++) {
		struct slot *s = &d->slot[i];
		int next = r - 1;

		if (s->rec >= 0 && s->rec < r)
			continue;
		while (next >= 0 && held(d, next))
			next--;
		if (next < 0)
			return;
		read_into(d, s, next);
	}
}

/* The slot to read r into when none holds it: one the backward is done
 * with, else the one holding the highest record. */
static struct slot *slot_to_fill(struct ckpt_disk *d, int r)
{
	struct slot *best = &d->slot[0];

	for (int i = 0; i < CKPT_DISK_SLOTS; i++) {
		struct slot *s = &d->slot[i];

		if (s->rec < 0 || s->rec >= r)
			return s;
		if (s->rec > best->rec)
			best = s;
	}
	return best;
}

void ckpt_disk_get(struct ckpt_disk *d, int r, unsigned char *dst, int stream)
{
	unsigned whole = (1u << d->t.pieces) - 1;
	struct slot *s = NULL;

	for (int i = 0; i < CKPT_DISK_SLOTS && s == NULL; i++)
		if (d->slot[i].rec == r && d->slot[i].have == whole)
			s = &d->slot[i];
	if (s == NULL) {
		s = slot_to_fill(d, r);
		read_into(d, s, r);
	}
	/* a slot the forward filled holds its bytes behind the copies on stream */
	wait_job(d, s->reading);
	s->reading = 0;
	if (d->be) {
		for (int p = 0; p < d->t.pieces; p++)
			d->be->copy_h2d(dst + d->t.piece_off[p], s->buf + d->t.piece_file[p], d->t.piece_len[p], stream);
		d->be->event_record(s->h2d, stream);
	}
	read_ahead(d, r);
}

const char *ckpt_disk_error(struct ckpt_disk *d)
{
	if (d->be == NULL)
		return NULL;
	pthread_mutex_lock(&d->lock);
	memcpy(d->err_seen, d->err, sizeof d->err_seen);
	pthread_mutex_unlock(&d->lock);
	return d->err_seen[0] ? d->err_seen : NULL;
}

void ckpt_disk_take_counts(struct ckpt_disk *d, long long *written, long long *read)
{
	if (written)
		*written = d->written;
	if (read)
		*read = d->read;
	d->written = d->read = 0;
}

static void slots_reset(struct ckpt_disk *d)
{
	for (int i = 0; i < CKPT_DISK_SLOTS; i++)
		d->slot[i].rec = -1;
}

struct ckpt_disk *ckpt_disk_start(const struct backend *be, const struct ckpt_tier *t, struct ckpt_file *f,
                                  char *err, size_t errsz)
{
	struct ckpt_disk *d = xcalloc(1, sizeof *d);
	unsigned char *base;
	char sz[32];

	d->be = be;
	d->t = *t;
	d->fd = f->fd;
	d->dir = f->dir;
	slots_reset(d);
	if (be->host_alloc((void **)&d->mem, t->bounce) != 0) {
		free(d);
		set_error(err, errsz, "allocating host memory for the checkpoint records' bounce slots (%s) failed",
		          format_bytes(sz, sizeof sz, (double)t->bounce));
		return NULL;
	}
	/* the bytes past a piece go to the file too (whole blocks): never uninitialised */
	memset(d->mem, 0, t->bounce);
	base = (unsigned char *)(((uintptr_t)d->mem + CKPT_DISK_ALIGN - 1) / CKPT_DISK_ALIGN * CKPT_DISK_ALIGN);
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->queued_cv, NULL);
	pthread_cond_init(&d->done_cv, NULL);
	for (int i = 0; i < CKPT_DISK_SLOTS; i++) {
		struct slot *s = &d->slot[i];

		s->buf = base + (size_t)i * t->stride;
		if ((s->d2h[0] = be->event_create()) == NULL || (s->d2h[1] = be->event_create()) == NULL ||
		    (s->h2d = be->event_create()) == NULL) {
			ckpt_disk_stop(d);
			set_error(err, errsz, "%s backend: cannot create events", be->name);
			return NULL;
		}
	}
	if (pthread_create(&d->thread, NULL, io_thread, d) != 0) {
		ckpt_disk_stop(d);
		set_error(err, errsz, "cannot start the checkpoint file's thread");
		return NULL;
	}
	d->thread_up = 1;
	return d;
}

void ckpt_disk_stop(struct ckpt_disk *d)
{
	if (d == NULL)
		return;
	if (d->thread_up) {
		pthread_mutex_lock(&d->lock);
		d->stop = 1;
		pthread_cond_signal(&d->queued_cv);
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->thread, NULL);
	}
	for (int i = 0; i < CKPT_DISK_SLOTS; i++) {
		struct slot *s = &d->slot[i];

		if (s->d2h[0])
			d->be->event_destroy(s->d2h[0]);
		if (s->d2h[1])
			d->be->event_destroy(s->d2h[1]);
		if (s->h2d)
			d->be->event_destroy(s->h2d);
	}
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->queued_cv);
	pthread_cond_destroy(&d->done_cv);
	d->be->host_free(d->mem);
	free(d);
}

/* --- the tier ------------------------------------------------------------------ */

void ckpt_tier_make(struct ckpt_tier *t, int n, int n_disk, size_t bytes, size_t split, int fetch_top)
{
	struct ckpt_disk dry;

	memset(t, 0, sizeof *t);
	t->n = n;
	t->n_disk = n_disk < n ? n_disk : n;
	t->fetch_top = fetch_top;
	t->bytes = bytes;
	t->pieces = split > 0 && split < bytes ? 2 : 1;
	t->piece_len[0] = t->pieces == 2 ? split : bytes;
	t->piece_off[1] = t->piece_len[0];
	t->piece_len[1] = t->pieces == 2 ? bytes - split : 0;
	t->piece_file[1] = align_io(t->piece_len[0]);
	t->stride = t->piece_file[1] + align_io(t->piece_len[1]);
	t->host = (size_t)(n - t->n_disk) * bytes;
	if (t->n_disk == 0)
		return;
	t->bounce = CKPT_DISK_SLOTS * t->stride + CKPT_DISK_ALIGN;
	t->file = (size_t)t->n_disk * t->stride;
	/* a step's bytes, from the slots' own rules in schedule.c's order */
	memset(&dry, 0, sizeof dry);
	dry.t = *t;
	slots_reset(&dry);
	for (int r = 0; r < n; r++) {
		if (r < t->n_disk)
			ckpt_disk_put(&dry, r, 0, NULL, 0);
		if (t->pieces == 2 && r > 0 && r - 1 < t->n_disk)
			ckpt_disk_put(&dry, r - 1, 1, NULL, 0);
	}
	for (int r = fetch_top < t->n_disk - 1 ? fetch_top : t->n_disk - 1; r >= 0; r--)
		ckpt_disk_get(&dry, r, NULL, 0);
	t->write_step = (size_t)dry.written;
	t->read_step = (size_t)dry.read;
}

size_t ckpt_tier_bounce_bytes(const struct ckpt_tier *t)
{
	return CKPT_DISK_SLOTS * t->stride + CKPT_DISK_ALIGN;
}

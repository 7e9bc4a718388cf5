/* tools/poros-train/ckpt_disk.h: the disk tier of blockwise's checkpoint
 * records (--checkpoint-dir).  The records the host cannot hold (records
 * 0..n_disk-1: the first layers' or blocks', written earliest in the
 * forward and read last in the backward) live in one preallocated,
 * unlinked file; each goes between the device and the file through a
 * pinned bounce slot, the file's side on a thread of its own, so the
 * compute stream never waits for the disk unless the disk is behind.
 * docs/engine.md ("Checkpoints on disk") says why it is built so. */
#ifndef POROS_TRAIN_CKPT_DISK_H
#define POROS_TRAIN_CKPT_DISK_H

#include <stddef.h>

#include "backend.h"

/* O_DIRECT wants offsets, lengths and buffers in whole logical blocks:
 * 4096 covers every device in use. */
#define CKPT_DISK_ALIGN ((size_t)4096)
/* Bounce slots: a record in flight to the file and one coming back, or
 * the last two the forward wrote, which the backward takes first. */
#define CKPT_DISK_SLOTS 2

/* Where a run's checkpoint records live, and what the file costs.  A
 * record is saved in pieces (layer mode with attention checkpoints: its
 * inputs when its layer starts, its attention output when the next layer
 * starts; otherwise one piece); in the file and in a slot each piece
 * starts on an aligned offset. */
struct ckpt_tier {
	int n;                /* records: L (layer mode) or the blocks (block mode); 0 resident */
	int n_disk;           /* records 0..n_disk-1 are in the file, the others in pinned host memory */
	int pieces;           /* 1 or 2 */
	int fetch_top;        /* the highest record a backward brings back (layer mode: L-2, the last layer's stays; L-1 with one device set) */
	size_t bytes;         /* one record as the host and the device hold it */
	size_t piece_off[2], piece_len[2]; /* each piece's place in that record */
	size_t piece_file[2]; /* and in a record of the file and of a slot */
	size_t stride;        /* a record of the file and of a slot */
	size_t host;          /* (n - n_disk) x bytes: the pinned host records */
	size_t bounce;        /* the slots, pinned, with the alignment's slack; 0 without disk records */
	size_t file;          /* n_disk x stride */
	size_t write_step, read_step; /* the file's bytes written and read a step (ckpt_tier_make counts them) */
};

/* The tier of n records of `bytes` each (pieces: with piece 1 from
 * `split` on; split 0: one piece), n_disk of them on disk; fetch_top as
 * above.  The bytes a step moves come from a dry run of the slots over
 * the schedule's order (schedule.c): the forward saves every record in
 * order (piece 1 of record r with record r+1's piece 0), the backward
 * takes fetch_top..0. */
void ckpt_tier_make(struct ckpt_tier *t, int n, int n_disk, size_t bytes, size_t split, int fetch_top);
/* The bounce slots' bytes were any of t's records on disk. */
size_t ckpt_tier_bounce_bytes(const struct ckpt_tier *t);

/* The file: created under dir with a name of its own (O_EXCL), unlinked
 * at once (nothing is left behind, whatever ends the process), reserved
 * whole (posix_fallocate), opened O_DIRECT unless direct is 0 or the
 * filesystem refuses it (then buffered, said once on stderr unless
 * quiet).  free_given: the free bytes to check against instead of the
 * filesystem's (POROS_DISK_AVAILABLE; 0: statvfs).  0, or -1 with err
 * naming dir (bad input: exit 2). */
struct ckpt_file;
int ckpt_file_open(struct ckpt_file **out, const char *dir, size_t bytes, int records, int direct,
                   size_t free_given, int quiet, char *err, size_t errsz);
void ckpt_file_close(struct ckpt_file *f);
/* The bytes free under dir (free_given when not 0), and what said so
 * ("statvfs" or "POROS_DISK_AVAILABLE"); 0 where statvfs fails. */
size_t ckpt_disk_free(const char *dir, size_t free_given, const char **source);

/* The engine's side: the slots, their events and the I/O thread, over
 * file f; be's copies and events (the CPU backend's run at once).  NULL
 * with err when the slots cannot be pinned. */
struct ckpt_disk;
struct ckpt_disk *ckpt_disk_start(const struct backend *be, const struct ckpt_tier *t, struct ckpt_file *f,
                                  char *err, size_t errsz);
/* Waits for the I/O thread's queue, ends it, frees the slots and events. */
void ckpt_disk_stop(struct ckpt_disk *d);
/* Piece `piece` of disk record r, at src on the device, out on stream:
 * into a slot (once the slot's last use of that piece is done), then to
 * the file.  Every put and get runs on one stream, which orders a slot's
 * copies. */
void ckpt_disk_put(struct ckpt_disk *d, int r, int piece, const void *src, int stream);
/* Disk record r onto the device at dst (the record's layout) on stream:
 * from the slot that holds it, or read into one first; then the slots
 * the backward is done with read the next records ahead. */
void ckpt_disk_get(struct ckpt_disk *d, int r, unsigned char *dst, int stream);
/* The first I/O error ("reading the checkpoint file: ..."), or NULL. */
const char *ckpt_disk_error(struct ckpt_disk *d);
/* The bytes written to and read from the file since the last call (a step's). */
void ckpt_disk_take_counts(struct ckpt_disk *d, long long *written, long long *read);

#endif

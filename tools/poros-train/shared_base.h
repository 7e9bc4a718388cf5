/* tools/poros-train/shared_base.h: the ranks of one host hold one copy of
 * the base.  The host's first rank (its leader) creates a POSIX shared
 * memory object, the others map it read-only, and the leader unlinks it as
 * soon as all have mapped it, before it is filled: from then on only the
 * mappings hold it, so a rank that dies leaves nothing in /dev/shm.  Every
 * rank registers its mapping with the backend (pinned on CUDA).  Ranks
 * are grouped by host by their host key (hostname and boot id), exchanged
 * over the communicator, not by a launcher's LOCAL_RANK. */
#ifndef POROS_TRAIN_SHARED_BASE_H
#define POROS_TRAIN_SHARED_BASE_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"

/* The prefix of every object's name: /dev/shm/poros-base-PID-... where PID
 * is the process id of rank 0 (spawn.c removes what its rank 0 left). */
#define SHARED_BASE_PREFIX "poros-base-"

struct base_share {
	struct comm *comm;
	int leader;       /* the global rank of this host's first rank */
	int local_rank;   /* this rank's place among its host's ranks */
	int local_ranks;  /* the ranks of this host */
	char name[96];    /* the object's name, "/poros-base-PID-TOKEN-rLEADER" */
	/* filled by shared_base_map */
	unsigned char *map;
	size_t bytes;
	const struct backend *be;
	int registered;
};

/* Who shares with whom: collective over c (every rank calls it).  0, or -1
 * with err. */
int shared_base_plan(struct base_share *s, struct comm *c, char *err, size_t errsz);
/* Collective: the leader's rc (0, or weights.c's -1/-2/-3) against every
 * rank's; 0 when all are 0, else the first failing rank's code, with err
 * naming it where this rank's own rc was 0. */
int shared_base_agree(struct base_share *s, int rc, const char *what, char *err, size_t errsz);
/* Collective: bytes of shared memory mapped by every rank of the host
 * (writable for the leader, read-only for the others) and unlinked; *p its
 * start.  The content is the leader's to fill; shared_base_agree after it
 * says it is filled.  0, or weights.c's -2 with err. */
int shared_base_map(struct base_share *s, const struct backend *be, size_t bytes, unsigned char **p, char *err,
                    size_t errsz);
/* After the fill: the mapping registered with the backend (pinned).  0, or
 * -2 with err. */
int shared_base_register(struct base_share *s, char *err, size_t errsz);
void shared_base_unmap(struct base_share *s);
/* spawn.c: unlinks what rank 0 (process rank0_pid) may have left. */
void shared_base_remove_left(long rank0_pid);

#endif

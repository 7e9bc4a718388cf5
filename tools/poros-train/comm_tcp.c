/* tools/poros-train/comm_tcp.c: the ranks of a torchrun-style environment
 * (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) over TCP, with no library:
 * rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects,
 * and each collective goes through rank 0 (a star; the CPU backend's
 * exchanges are a few MB a step).  A peer that ends or dies closes its
 * socket, so the rank waiting on it gets EOF at once and names it. */
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

#define TCP_MAGIC 0x50524f53u /* "PROS" */
#define TCP_WAIT_S 120        /* for every rank to arrive */

struct tcp_comm {
	struct comm_plugin table;
	int *fd;   /* rank 0: a socket per rank (fd[0] unused); others: fd[0] to rank 0 */
	char err[256];
};

static int tcp_fail(struct tcp_comm *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tcp_fail(struct tcp_comm *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->err, sizeof t->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* peer: the rank at the other end, for the message */
static int send_all(struct tcp_comm *t, int fd, const void *buf, size_t n, int peer)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return tcp_fail(t, "rank %d closed its connection (it ended or died): %s", peer,
			                k < 0 ? strerror(errno) : "no progress");
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int recv_all(struct tcp_comm *t, int fd, void *buf, size_t n, int peer)
{
	char *p = buf;

	while (n > 0) {
		ssize_t k = recv(fd, p, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return tcp_fail(t, "rank %d closed its connection (it ended or died)%s%s", peer, k < 0 ? ": " : "",
			                k < 0 ? strerror(errno) : "");
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int tcp_allgather(void *h, void *buf, size_t bytes)
{
	struct tcp_comm *t = h;
	int rank = t->table.rank, world = t->table.world;
	char *base = buf;

	if (rank > 0)
		return send_all(t, t->fd[0], base + (size_t)rank * bytes, bytes, 0) < 0 ||
		       recv_all(t, t->fd[0], base, (size_t)world * bytes, 0) < 0 ? -1 : 0;
	for (int r = 1; r < world; r++)
		if (recv_all(t, t->fd[r], base + (size_t)r * bytes, bytes, r) < 0)
			return -1;
	for (int r = 1; r < world; r++)
		if (send_all(t, t->fd[r], base, (size_t)world * bytes, r) < 0)
			return -1;
	return 0;
}

static int tcp_bcast(void *h, void *buf, size_t bytes, int root)
{
	struct tcp_comm *t = h;
	int rank = t->table.rank;

	if (root != 0 && (rank == root || rank == 0)) /* the root's bytes go to rank 0 first */
		if (rank == root ? send_all(t, t->fd[0], buf, bytes, 0) : recv_all(t, t->fd[root], buf, bytes, root))
			return -1;
	if (rank > 0)
		return rank == root ? 0 : recv_all(t, t->fd[0], buf, bytes, 0);
	for (int r = 1; r < t->table.world; r++)
		if (r != root && send_all(t, t->fd[r], buf, bytes, r) < 0)
			return -1;
	return 0;
}

static int tcp_barrier(void *h)
{
	struct tcp_comm *t = h;
	char *b = xcalloc((size_t)t->table.world, 1);
	int rc = tcp_allgather(h, b, 1);

	free(b);
	return rc;
}

static void tcp_close(void *h)
{
	struct tcp_comm *t = h;

	for (int r = 0; r < t->table.world; r++)
		if (t->fd[r] >= 0)
			close(t->fd[r]);
	free(t->fd);
	free(t);
}

/* the peers see EOF and stop in turn */
static void tcp_abort(void *h, int code)
{
	(void)code;
	tcp_close(h);
}

static const char *tcp_error(void *h)
{
	return ((struct tcp_comm *)h)->err;
}

static int env_int(const char *name, long lo, long hi, long *out, char *err, size_t errsz)
{
	const char *v = getenv(name);
	char *end;

	if (v == NULL || *v == '\0')
		return set_error(err, errsz, "%s is not set (a torchrun-style run needs RANK, WORLD_SIZE, MASTER_ADDR "
		                 "and MASTER_PORT)", name);
	errno = 0;
	*out = strtol(v, &end, 10);
	if (errno || *end || *out < lo || *out > hi)
		return set_error(err, errsz, "%s: not an integer in [%ld, %ld]: %s", name, lo, hi, v);
	return 0;
}

static int resolve(struct addrinfo **ai, const char *host, const char *port, int passive, char *err, size_t errsz)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0 };
	int rc = getaddrinfo(host, port, &hints, ai);

	if (rc != 0)
		return set_error(err, errsz, "MASTER_ADDR %s, MASTER_PORT %s: %s", host, port, gai_strerror(rc));
	return 0;
}

static int listen_and_accept(struct tcp_comm *t, const char *host, const char *port, char *err, size_t errsz)
{
	struct addrinfo *ai;
	int one = 1, lfd = -1, world = t->table.world;
	time_t until = time(NULL) + TCP_WAIT_S;

	if (resolve(&ai, host, port, 1, err, errsz) < 0)
		return -1;
	lfd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(lfd, world) < 0) {
		set_error(err, errsz, "rank 0: listening on %s:%s: %s", host, port, strerror(errno));
		freeaddrinfo(ai);
		if (lfd >= 0)
			close(lfd);
		return -1;
	}
	freeaddrinfo(ai);
	for (int arrived = 1; arrived < world;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		uint32_t hello[2];
		int fd, left = (int)(until - time(NULL));

		if (left <= 0 || poll(&p, 1, left * 1000) <= 0) {
			close(lfd);
			return set_error(err, errsz, "rank 0: %d of %d ranks arrived at %s:%s in %d s", arrived, world, host,
			                 port, TCP_WAIT_S);
		}
		if ((fd = accept(lfd, NULL, NULL)) < 0)
			continue;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (recv_all(t, fd, hello, sizeof hello, -1) < 0 || hello[0] != TCP_MAGIC || hello[1] == 0 ||
		    hello[1] >= (uint32_t)world || t->fd[hello[1]] >= 0) {
			close(fd); /* not one of ours, or a rank twice: not counted */
			continue;
		}
		t->fd[hello[1]] = fd;
		arrived++;
	}
	close(lfd);
	return 0;
}

static int connect_to_root(struct tcp_comm *t, const char *host, const char *port, char *err, size_t errsz)
{
	time_t until = time(NULL) + TCP_WAIT_S;
	uint32_t hello[2] = { TCP_MAGIC, (uint32_t)t->table.rank };
	int one = 1;

	for (;;) { /* rank 0 may not be listening yet */
		struct addrinfo *ai;
		int fd;

		if (resolve(&ai, host, port, 0, err, errsz) < 0)
			return -1;
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			t->fd[0] = fd;
			return send_all(t, fd, hello, sizeof hello, 0) < 0 ? set_error(err, errsz, "%s", t->err) : 0;
		}
		freeaddrinfo(ai);
		if (fd >= 0)
			close(fd);
		if (time(NULL) >= until)
			return set_error(err, errsz, "rank %d: rank 0 did not answer at %s:%s in %d s", t->table.rank, host,
			                 port, TCP_WAIT_S);
		usleep(100 * 1000);
	}
}

int comm_tcp_env(void)
{
	return getenv("RANK") && getenv("WORLD_SIZE") && getenv("MASTER_ADDR") && getenv("MASTER_PORT");
}

int comm_tcp_open(const struct comm_plugin **table, void **h, char *err, size_t errsz)
{
	struct tcp_comm *t = xcalloc(1, sizeof *t);
	const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
	long rank, world, portnum;
	int rc;

	if (env_int("WORLD_SIZE", 1, 4096, &world, err, errsz) < 0 ||
	    env_int("RANK", 0, world - 1, &rank, err, errsz) < 0 ||
	    env_int("MASTER_PORT", 1, 65535, &portnum, err, errsz) < 0 || (host == NULL || *host == '\0')) {
		if (host == NULL || *host == '\0')
			set_error(err, errsz, "MASTER_ADDR is not set (a torchrun-style run needs RANK, WORLD_SIZE, "
			          "MASTER_ADDR and MASTER_PORT)");
		free(t);
		return -1;
	}
	t->table = (struct comm_plugin){
		.abi = POROS_COMM_ABI, .name = "tcp", .rank = (int)rank, .world = (int)world,
		.allgather_host = tcp_allgather, .allgather_device = tcp_allgather, .bcast_host = tcp_bcast,
		.barrier = tcp_barrier, .abort = tcp_abort, .close = tcp_close, .error = tcp_error,
	};
	t->fd = xmalloc((size_t)world * sizeof *t->fd);
	for (long r = 0; r < world; r++)
		t->fd[r] = -1;
	rc = world == 1 ? 0 : rank == 0 ? listen_and_accept(t, host, port, err, errsz)
	                                : connect_to_root(t, host, port, err, errsz);
	if (rc < 0) {
		tcp_close(t);
		return -1;
	}
	*table = &t->table;
	*h = t;
	return 0;
}

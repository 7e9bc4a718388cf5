/* tests/unit/test_backend_lazy.c: the CPU backend's lazy copies
 * (POROS_CPU_LAZY_COPIES=1, kernels/cpu/backend_cpu.c): the copy and
 * checkpoint streams' work waits in order until something waits for it,
 * so a missing wait in the engine shows as other bits.  Each case checks
 * both that the work did not run early and that a wait runs it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "test_common.h"

static const struct backend *be;

/* Queued copies and memsets run only when a wait reaches them, with the
 * source as it is then. */
static void test_deferred(void)
{
	int src = 1, dst = 0, zero = 7;
	struct backend_event *e = be->event_create();

	be->copy_d2h_async(&dst, &src, sizeof src, STREAM_AUX);
	be->memset_zero(&zero, sizeof zero, STREAM_AUX);
	be->event_record(e, STREAM_AUX);
	src = 2;
	CHECK(dst == 0 && zero == 7);
	be->stream_wait_event(STREAM_COMPUTE, e);
	CHECKF(dst == 2 && zero == 0, "dst %d zero %d", dst, zero);
	be->event_destroy(e);
}

/* The compute stream runs at once, lazy or not. */
static void test_compute_at_once(void)
{
	int src = 3, dst = 0;

	be->copy_h2d(&dst, &src, sizeof src, STREAM_COMPUTE);
	CHECK(dst == 3);
}

/* A queue waiting for the other's event runs the other up to it first,
 * and only when its own work is reached. */
static void test_cross_queue(void)
{
	int a = 5, b = 0, c = 0;
	struct backend_event *ea = be->event_create(), *eb = be->event_create();

	be->copy_h2d(&b, &a, sizeof a, STREAM_AUX);
	be->event_record(ea, STREAM_AUX);
	be->stream_wait_event(STREAM_COPY, ea);
	be->copy_h2d(&c, &b, sizeof b, STREAM_COPY);
	be->event_record(eb, STREAM_COPY);
	CHECK(b == 0 && c == 0);
	be->event_synchronize(eb);
	CHECKF(b == 5 && c == 5, "b %d c %d", b, c);
	be->event_destroy(ea);
	be->event_destroy(eb);
}

/* A wait is for the event's latest record: recorded again behind more
 * work, it waits for that work too. */
static void test_rerecord(void)
{
	int s1 = 1, s2 = 2, d1 = 0, d2 = 0;
	struct backend_event *e = be->event_create();

	be->copy_h2d(&d1, &s1, sizeof s1, STREAM_COPY);
	be->event_record(e, STREAM_COPY);
	be->copy_h2d(&d2, &s2, sizeof s2, STREAM_COPY);
	be->event_record(e, STREAM_COPY);
	be->stream_wait_event(STREAM_COMPUTE, e);
	CHECKF(d1 == 1 && d2 == 2, "d1 %d d2 %d", d1, d2);
	be->event_destroy(e);
}

/* Waiting for the first of two records runs no more than it needs. */
static void test_runs_no_further(void)
{
	int s = 4, d1 = 0, d2 = 0;
	struct backend_event *first = be->event_create(), *second = be->event_create();

	be->copy_h2d(&d1, &s, sizeof s, STREAM_AUX);
	be->event_record(first, STREAM_AUX);
	be->copy_h2d(&d2, &s, sizeof s, STREAM_AUX);
	be->event_record(second, STREAM_AUX);
	be->stream_wait_event(STREAM_COMPUTE, first);
	CHECKF(d1 == 4 && d2 == 0, "d1 %d d2 %d", d1, d2);
	be->synchronize();
	CHECK(d2 == 4);
	be->event_destroy(first);
	be->event_destroy(second);
}

/* A never-recorded event waits for nothing; an event recorded on the
 * compute stream is complete at once. */
static void test_trivial_events(void)
{
	int s = 9, d = 0;
	struct backend_event *never = be->event_create(), *now = be->event_create();

	be->copy_h2d(&d, &s, sizeof s, STREAM_AUX);
	be->stream_wait_event(STREAM_COMPUTE, never);
	be->event_record(now, STREAM_COMPUTE);
	be->stream_wait_event(STREAM_COMPUTE, now);
	CHECK(d == 0);
	be->synchronize();
	CHECK(d == 9);
	be->event_destroy(never);
	be->event_destroy(now);
}

struct waiter {
	struct backend_event *e;
};

static void *wait_on(void *arg)
{
	const struct waiter *w = arg;

	be->event_synchronize(w->e);
	return NULL;
}

/* event_synchronize from another thread (the disk tier's I/O thread) runs
 * the queue as far as the event. */
static void test_other_thread(void)
{
	int s = 6, d = 0;
	struct waiter w = { be->event_create() };
	pthread_t t;

	be->copy_d2h_async(&d, &s, sizeof s, STREAM_AUX);
	be->event_record(w.e, STREAM_AUX);
	CHECK(pthread_create(&t, NULL, wait_on, &w) == 0);
	pthread_join(t, NULL);
	CHECK(d == 6);
	be->event_destroy(w.e);
}

int main(void)
{
	setenv("POROS_CPU_LAZY_COPIES", "1", 1); /* read at the backend's first copy */
	be = backend_cpu();
	test_deferred();
	test_compute_at_once();
	test_cross_queue();
	test_rerecord();
	test_runs_no_further();
	test_trivial_events();
	test_other_thread();
	if (failures) {
		fprintf(stderr, "test_backend_lazy: %d failure(s)\n", failures);
		return 1;
	}
	fprintf(stderr, "test_backend_lazy: ok\n");
	return 0;
}

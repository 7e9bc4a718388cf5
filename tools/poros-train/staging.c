/* tools/poros-train/staging.c: the step's batch, staged on the host and
 * copied to the device.  Two pinned stagings: while step s runs from one,
 * a second thread reads step s+1's tokens from the token source
 * (tokenizing, packing) and gathers their embedding rows into the other. */
#include "engine_impl.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* The embedding rows of the step's tokens, from the host table into the
 * pinned staging buffer: k*T rows instead of a V-row table on the device. */
int staging_gather(const struct engine *e, struct staging *st)
{
	const bf16 *table = (const bf16 *)(e->hw->globals + e->hw->glob.embed);
	long n = (long)e->k * e->lc.T;
	int C = e->lc.C, V = e->lc.V;

	for (long i = 0; i < n; i++) {
		int32_t tok = st->tokens[i];

		if (tok < 0 || tok >= V)
			return set_error(st->err, sizeof st->err, "token id %d out of the vocabulary (%d)", (int)tok, V);
		memcpy(st->rows + (size_t)i * C, table + (size_t)tok * C, (size_t)C * sizeof(bf16));
	}
	return 0;
}

/* Reads one step's k micro-batches, in order, from the token source into a
 * staging.  Runs on the caller's thread for the first step, then on the
 * prefetch thread; only one of them touches the token source at a time. */
static void stage_batch(struct engine *e, struct staging *st, int step)
{
	int T = e->lc.T, first = e->comm_rank * e->k, n = e->comm_world * e->k;
	int32_t *other = n > e->k ? xmalloc(3 * (size_t)T * sizeof *other) : NULL;

	st->step = step;
	st->rc = 0;
	st->n_supervised = 0;
	/* every rank reads the whole step's batch, in order, and keeps its own
	 * micro-batches: the shards are the one-process batch cut in ranks,
	 * and the token source stands where one process's would */
	for (int g = 0; g < n && st->rc == 0; g++) {
		int j = g - first, mine = j >= 0 && j < e->k, pred = 0;
		int32_t *tok = mine ? st->tokens + (size_t)j * T : other;
		int32_t *tg = mine ? st->targets + (size_t)j * T : other + T;
		int32_t *pos = mine ? st->pos + (size_t)j * T : other + 2 * (size_t)T;

		if (token_source_next(e->data, tok, tg, pos, e->lc.B, st->err, sizeof st->err) < 0) {
			st->rc = -1;
			break;
		}
		for (int t = 0; t < T; t++)
			pred += tg[t] >= 0;
		if (mine)
			st->n_pred[j] = pred;
		st->n_supervised += pred;
	}
	free(other);
	token_source_tell(e->data, &st->after);
	if (st->rc == 0 && staging_gather(e, st) < 0)
		st->rc = -1;
}

struct prefetch_job {
	struct engine *e;
	int step;
};

static void *prefetch_main(void *arg)
{
	struct prefetch_job *job = arg;
	struct engine *e = job->e;

	stage_batch(e, &e->stage[1 - e->cur], job->step);
	free(job);
	return NULL;
}

static void prefetch_join(struct engine *e)
{
	if (e->prefetch_running) {
		pthread_join(e->prefetch_thread, NULL);
		e->prefetch_running = 0;
	}
}

/* Starts staging step+1 in the background; on failure to start a thread it
 * is simply staged in line at the next step. */
static void prefetch_start(struct engine *e, int step)
{
	struct prefetch_job *job;

	if (!e->cfg->data_prefetch) /* the ablation: stage every batch in line, at its step */
		return;
	job = xmalloc(sizeof *job);
	job->e = e;
	job->step = step;
	e->stage[1 - e->cur].step = 0;
	if (pthread_create(&e->prefetch_thread, NULL, prefetch_main, job) == 0)
		e->prefetch_running = 1;
	else
		free(job);
}

void staging_mark_plain(struct engine *e, const int32_t *pos, int nmb)
{
	int T = e->lc.T, S = e->lc.S;

	for (int j = 0; j < nmb; j++) {
		const int32_t *p = pos + (size_t)j * T;
		int plain = 1;

		for (int t = 0; t < T && plain; t++)
			plain = p[t] == t % S;
		e->pos_plain[j] = plain;
	}
}

int staging_load(struct engine *e, int step)
{
	size_t n = (size_t)e->k * e->lc.T;
	int again = e->loaded_step == step; /* a step repeated: its batch is still staged */
	struct staging *st;

	if (again && !e->batch_stale && !e->embed_rows_shared)
		return 0;
	if (!again) {
		prefetch_join(e);
		if (e->loaded_step > 0 && e->stage[1 - e->cur].step == step)
			e->cur = 1 - e->cur;
		else
			stage_batch(e, &e->stage[e->cur], step);
	}
	st = &e->stage[e->cur];
	if (st->rc < 0)
		return set_error(e->err, sizeof e->err, "%s", st->err);
	memcpy(e->n_pred, st->n_pred, (size_t)e->k * sizeof *e->n_pred);
	staging_mark_plain(e, st->pos, e->k);
	e->n_supervised = st->n_supervised; /* every rank's: the loss is their mean */
	/* The other staging was last read by the previous step's copies, which
	 * that step's end (reading its losses back) has waited for. */
	e->be->copy_h2d(e->embed_rows, st->rows, n * e->lc.C * sizeof(bf16), STREAM_COMPUTE);
	e->be->copy_h2d(e->targets, st->targets, n * sizeof(int32_t), STREAM_COMPUTE);
	e->be->copy_h2d(e->pos, st->pos, n * sizeof(int32_t), STREAM_COMPUTE);
	if (e->be->pos_mirror) /* st->pos holds these until the next staging_load */
		e->be->pos_mirror(e->pos, st->pos, n);
	e->batch_stale = 0;
	if (!again) {
		e->loaded_step = step;
		prefetch_start(e, step + 1);
	}
	return 0;
}

void engine_data_cursor(const struct engine *e, struct token_cursor *cur)
{
	if (e->loaded_step > 0)
		*cur = e->stage[e->cur].after;
	else /* nothing read yet (and no thread running) */
		token_source_tell(e->data, cur);
}

int staging_alloc(struct engine *e, char *err, size_t errsz)
{
	const struct backend *be = e->be;
	size_t tok_bytes = (size_t)e->k * e->lc.T * sizeof(int32_t);
	size_t rows_bytes = (size_t)e->k * e->lc.T * e->lc.C * sizeof(bf16);

	for (int i = 0; i < 2; i++) {
		struct staging *st = &e->stage[i];

		if (be->host_alloc((void **)&st->tokens, tok_bytes) != 0 || be->host_alloc((void **)&st->targets, tok_bytes) != 0 ||
		    be->host_alloc((void **)&st->pos, tok_bytes) != 0 || be->host_alloc((void **)&st->rows, rows_bytes) != 0)
			return set_error(err, errsz, "allocating host memory for tokens failed");
		st->n_pred = xcalloc((size_t)e->k, sizeof *st->n_pred);
	}
	return 0;
}

void staging_free(struct engine *e)
{
	prefetch_join(e);
	for (int i = 0; i < 2; i++) {
		if (e->stage[i].tokens)
			e->be->host_free(e->stage[i].tokens);
		if (e->stage[i].targets)
			e->be->host_free(e->stage[i].targets);
		if (e->stage[i].pos)
			e->be->host_free(e->stage[i].pos);
		if (e->stage[i].rows)
			e->be->host_free(e->stage[i].rows);
		free(e->stage[i].n_pred);
	}
	if (e->eval.tokens)
		e->be->host_free(e->eval.tokens);
	if (e->eval.targets)
		e->be->host_free(e->eval.targets);
	if (e->eval.pos)
		e->be->host_free(e->eval.pos);
	if (e->eval.rows)
		e->be->host_free(e->eval.rows);
}

/* tools/poros-train/eval.c: evaluation with the adapter as it is: the
 * mean loss over an eval set's supervised tokens, forward only, no
 * dropout, through the run's own schedule (schedule.c's eval_pass). */
#include "engine_impl.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static int eval_alloc(struct engine *e, char *err, size_t errsz)
{
	struct staging *st = &e->eval;
	size_t tok = (size_t)e->k * e->lc.T * sizeof(int32_t), rows = (size_t)e->k * e->lc.T * e->lc.C * sizeof(bf16);

	if (st->tokens)
		return 0;
	if (e->be->host_alloc((void **)&st->tokens, tok) != 0 || e->be->host_alloc((void **)&st->targets, tok) != 0 ||
	    e->be->host_alloc((void **)&st->pos, tok) != 0 || e->be->host_alloc((void **)&st->rows, rows) != 0)
		return set_error(err, errsz, "allocating host memory for the evaluation's tokens failed");
	return 0;
}

int engine_eval(struct engine *e, struct token_source *src, long rows, double *loss, long long *tokens, char *err,
                size_t errsz)
{
	struct staging *st = &e->eval;
	int B = e->lc.B, T = e->lc.T;
	float dropout = e->lc.dropout;
	double sum = 0;
	long long count = 0;

	if (eval_alloc(e, err, errsz) < 0)
		return -1;
	e->lc.dropout = 0.0f; /* evaluation sees the adapter as it is */
	/* k micro-batches of B rows at a time, the last rows past the set masked */
	for (long row = 0; row < rows; row += (long)e->k * B) {
		int nmb = 0;

		for (; nmb < e->k && row + (long)nmb * B < rows; nmb++) {
			int32_t *tg = st->targets + (size_t)nmb * T;

			if (token_source_next(src, st->tokens + (size_t)nmb * T, tg, st->pos + (size_t)nmb * T, B, err, errsz) < 0)
				goto fail;
			for (int b = 0; b < B; b++)
				if (row + (long)nmb * B + b >= rows)
					for (int t = 0; t < e->lc.S; t++)
						tg[(size_t)b * e->lc.S + t] = -1;
		}
		/* the unused micro-batches' rows are gathered too: make them valid */
		memset(st->tokens + (size_t)nmb * T, 0, (size_t)(e->k - nmb) * T * sizeof *st->tokens);
		memset(st->pos + (size_t)nmb * T, 0, (size_t)(e->k - nmb) * T * sizeof *st->pos);
		if (staging_gather(e, st) < 0) {
			set_error(err, errsz, "%s", st->err);
			goto fail;
		}
		e->be->copy_h2d(e->embed_rows, st->rows, (size_t)nmb * T * e->lc.C * sizeof(bf16), STREAM_COMPUTE);
		e->be->copy_h2d(e->targets, st->targets, (size_t)nmb * T * sizeof(int32_t), STREAM_COMPUTE);
		e->be->copy_h2d(e->pos, st->pos, (size_t)nmb * T * sizeof(int32_t), STREAM_COMPUTE);
		if (e->be->pos_mirror) /* until the next batch: the losses' read below waits for the ops */
			e->be->pos_mirror(e->pos, st->pos, (size_t)nmb * T);
		staging_mark_plain(e, st->pos, nmb);
		e->batch_stale = 1;
		eval_pass(e, nmb);
		e->be->copy_d2h(e->h_losses, e->lc.losses, (size_t)nmb * T * sizeof(float));
		/* summed in one fixed order; ignored targets have loss 0 */
		for (long i = 0; i < (long)nmb * T; i++)
			if (st->targets[i] >= 0) {
				sum += e->h_losses[i];
				count++;
			}
	}
	e->lc.dropout = dropout;
	*loss = count ? sum / (double)count : 0.0;
	*tokens = count;
	if (count == 0)
		return set_error(err, errsz, "the evaluation set has no supervised tokens");
	return 0;
fail:
	e->lc.dropout = dropout;
	return -1;
}

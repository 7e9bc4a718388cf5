/* tools/lib/text/dataset_pack.c: tokenized documents packed into rows of
 * inputs, targets and positions, epoch by epoch (man/poros-dataset.5 gives the rule),
 * and the cursor that continues the same stream after a resume. */
#include "dataset_int.h"

#include <stdint.h>
#include <stdlib.h>

#include "util/util.h"

/* ---- packing ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t uniform_below(uint64_t *state, uint64_t n)
{
	uint64_t threshold = (0 - n) % n, r;

	do
		r = splitmix64(state);
	while (r < threshold);
	return r % n;
}

static void start_epoch(struct dataset *ds)
{
	uint64_t state;

	ds->epoch++;
	for (size_t i = 0; i < ds->n_docs; i++)
		ds->order[i] = i;
	if (ds->shuffle) {
		state = (uint64_t)ds->seed ^ ((uint64_t)ds->epoch * 0xd1b54a32d192ed03ULL);
		(void)splitmix64(&state);
		for (size_t i = ds->n_docs; i > 1; i--) {
			size_t j = (size_t)uniform_below(&state, i);
			size_t tmp = ds->order[i - 1];
			ds->order[i - 1] = ds->order[j];
			ds->order[j] = tmp;
		}
	}
	ds->stream_pos = ds->cur_doc = ds->cur_off = 0;
}

/* The stream's token at the cursor, then one step on; -1 past the end.
 * *sup: whether it is a target; *off: its offset in its document. */
static int32_t stream_next(const struct dataset *ds, size_t *doc, size_t *off, uint8_t *sup, size_t *at)
{
	size_t d, len;

	*sup = 0;
	*at = 0;
	if (*doc >= ds->n_docs)
		return -1;
	d = ds->order[*doc];
	len = ds->doc_off[d + 1] - ds->doc_off[d];
	*at = *off;
	if (*off < len) {
		*sup = ds->sup[ds->doc_off[d] + *off];
		return ds->tokens[ds->doc_off[d] + (*off)++];
	}
	(*doc)++;
	*off = 0;
	*sup = ds->sep_sup[d];
	return ds->eos_id;
}

static void fill_row(struct dataset *ds, int32_t *tokens, int32_t *targets, int32_t *pos)
{
	int L = ds->seq_len, pad_start = -1;
	size_t stream_len = ds->n_tokens + ds->n_docs, prev_at, next_at;
	uint8_t prev_sup, next_sup;
	int32_t prev;

	/* a row needs an input and its target: two tokens left */
	if (ds->epoch < 0 || ds->stream_pos + 2 > stream_len)
		start_epoch(ds);
	prev = stream_next(ds, &ds->cur_doc, &ds->cur_off, &prev_sup, &prev_at);
	(void)prev_sup; /* an input's own flag does not matter, its target's does */
	for (int j = 0; j < L; j++) {
		size_t doc = ds->cur_doc, off = ds->cur_off;
		/* the row's last target is the next row's first input: peek it */
		int32_t next = j + 1 < L ? stream_next(ds, &ds->cur_doc, &ds->cur_off, &next_sup, &next_at)
					 : stream_next(ds, &doc, &off, &next_sup, &next_at);
		tokens[j] = prev >= 0 ? prev : ds->eos_id;
		/* no target across a document boundary: the next document's first
		 * token cannot be predicted from a context it does not attend to
		 * (as transformers' packing with position_ids drops it) */
		targets[j] = prev >= 0 && next >= 0 ? (next_sup && next_at > 0 ? next : -100) : -1;
		if (pos) {
			/* the place in the document, counted from the row's start
			 * when the document began in an earlier row; the padding
			 * is a document of its own */
			if (prev < 0 && pad_start < 0)
				pad_start = j;
			pos[j] = prev >= 0 ? (int32_t)(prev_at < (size_t)j ? prev_at : (size_t)j) : j - pad_start;
		}
		prev = next;
		prev_at = next_at;
	}
	ds->stream_pos += (size_t)L;
}

int dataset_next(struct dataset *ds, int32_t *tokens, int32_t *targets, int32_t *pos, int batch, char *err,
		 size_t errsz)
{
	if (!ds->prepared && dataset_prepare(ds, err, errsz) < 0)
		return -1;
	if (batch < 1) {
		set_error(err, errsz, "batch must be at least 1 (got %d)", batch);
		return -1;
	}
	for (int b = 0; b < batch; b++) {
		size_t o = (size_t)b * (size_t)ds->seq_len;
		fill_row(ds, tokens + o, targets + o, pos ? pos + o : NULL);
	}
	return 0;
}

long long dataset_rows_per_epoch(const struct dataset *ds)
{
	long long t = dataset_tokens(ds);
	return t < 2 ? 0 : (t - 1 + ds->seq_len - 1) / ds->seq_len;
}

/* ---- the packing cursor (exact resume) ----------------------------------- */

void dataset_tell(const struct dataset *ds, struct dataset_cursor *cur)
{
	cur->epoch = ds->epoch;
	cur->stream_pos = ds->stream_pos;
	cur->doc = ds->cur_doc;
	cur->off = ds->cur_off;
}

/* Where (doc, off) of the current epoch's order stands in the stream. */
static size_t stream_offset(const struct dataset *ds, size_t doc, size_t off)
{
	size_t at = off;

	for (size_t i = 0; i < doc && i < ds->n_docs; i++)
		at += ds->doc_off[ds->order[i] + 1] - ds->doc_off[ds->order[i]] + 1;
	return at;
}

/* A cursor dataset_tell can have given: the epoch's last row may end past
 * the stream (its padding), by at most seq_len - 2 positions, and
 * (doc, off) is where stream_pos is, or the stream's end past it. */
static int cursor_check(const struct dataset *ds, const struct dataset_cursor *cur, char *err, size_t errsz)
{
	size_t stream_len = ds->n_tokens + ds->n_docs, last = stream_len + (size_t)ds->seq_len - 2, at;

	if (cur->epoch < -1 || cur->stream_pos > last || cur->doc > ds->n_docs)
		return set_error(err, errsz, "cursor (epoch %lld, position %zu, document %zu) is outside this dataset's "
		                 "%zu tokens", cur->epoch, cur->stream_pos, cur->doc, stream_len);
	if (cur->epoch < 0)
		return cur->stream_pos == 0 && cur->doc == 0 && cur->off == 0
		               ? 0 : set_error(err, errsz, "cursor before the first epoch is not at the start");
	if (cur->doc < ds->n_docs && cur->off > ds->doc_off[ds->order[cur->doc] + 1] - ds->doc_off[ds->order[cur->doc]])
		return set_error(err, errsz, "cursor offset %zu is past document %zu of epoch %lld", cur->off, cur->doc,
		                 cur->epoch);
	at = stream_offset(ds, cur->doc, cur->off);
	if (at != (cur->stream_pos < stream_len ? cur->stream_pos : stream_len))
		return set_error(err, errsz, "cursor (epoch %lld, position %zu) is not at document %zu offset %zu",
		                 cur->epoch, cur->stream_pos, cur->doc, cur->off);
	return 0;
}

int dataset_seek(struct dataset *ds, const struct dataset_cursor *cur, char *err, size_t errsz)
{
	if (!ds->prepared && dataset_prepare(ds, err, errsz) < 0)
		return -1;
	/* the epoch's document order comes from the seed alone */
	ds->epoch = cur->epoch >= 0 ? cur->epoch - 1 : -1;
	if (cur->epoch >= 0)
		start_epoch(ds);
	if (cursor_check(ds, cur, err, errsz) < 0)
		return -1;
	ds->stream_pos = cur->stream_pos;
	ds->cur_doc = cur->doc;
	ds->cur_off = cur->off;
	return 0;
}

/* tools/lib/text/dataset_split.c: which files of a directory are a split, by
 * the file-name rules of HF datasets' data_files.py (man/poros-dataset.5 gives
 * them), and whole documents held out of a prepared dataset. */
#include "dataset_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- split names ---------------------------------------------------------- */

enum { N_SPLITS = 3 };
static const char *const split_names[N_SPLITS] = { "train", "validation", "test" };
static const char *const split_keywords[N_SPLITS][5] = {
	{ "train", "training", NULL },
	{ "validation", "valid", "dev", "val", NULL },
	{ "test", "testing", "eval", "evaluation", NULL },
};

/* HF's NON_WORDS_CHARS: what may stand around a keyword */
static int is_sep(char c)
{
	return c == '-' || c == '.' || c == '_' || c == ' ' || isdigit((unsigned char)c);
}

/* Whether name[0 .. n) holds kw as a word: at its start or after a
 * separator, and followed by a separator (at_end: or by its end). */
static int has_word(const char *name, size_t n, const char *kw, int at_end)
{
	size_t k = strlen(kw);

	for (size_t i = 0; i + k <= n; i++) {
		if ((i > 0 && !is_sep(name[i - 1])) || strncmp(name + i, kw, k) != 0)
			continue;
		if (i + k == n ? at_end : is_sep(name[i + k]))
			return 1;
	}
	return 0;
}

/* The splits a path's file name names (bit s: split_names[s]). */
static unsigned name_splits(const char *rel)
{
	const char *base = strrchr(rel, '/');
	unsigned mask = 0;

	base = base ? base + 1 : rel;
	for (int s = 0; s < N_SPLITS; s++)
		for (int k = 0; split_keywords[s][k]; k++)
			if (has_word(base, strlen(base), split_keywords[s][k], 0))
				mask |= 1u << s;
	return mask;
}

/* The splits a path's directories name. */
static unsigned dir_splits(const char *rel)
{
	unsigned mask = 0;

	for (const char *p = rel, *slash; (slash = strchr(p, '/')) != NULL; p = slash + 1)
		for (int s = 0; s < N_SPLITS; s++)
			for (int k = 0; split_keywords[s][k]; k++)
				if (has_word(p, (size_t)(slash - p), split_keywords[s][k], 1))
					mask |= 1u << s;
	return mask;
}

/* "-NNNNN-of-NNNNN" at p (a NUL ends the match) */
static int is_shard_tag(const char *p)
{
	static const char shape[] = "-#####-of-#####";

	for (int i = 0; shape[i]; i++)
		if (shape[i] == '#' ? !isdigit((unsigned char)p[i]) : p[i] != shape[i])
			return 0;
	return 1;
}

/* data/{split}-NNNNN-of-NNNNN*.* (HF's sharded layout, any split name):
 * the length of the split name, or 0. */
static size_t sharded_split(const char *rel)
{
	const char *name = rel + 5;

	if (strncmp(rel, "data/", 5) != 0 || strchr(name, '/') != NULL)
		return 0;
	for (const char *p = strchr(name, '-'); p != NULL; p = strchr(p + 1, '-'))
		if (p > name && is_shard_tag(p) && strchr(p + 15, '.') != NULL)
			return (size_t)(p - name);
	return 0;
}

/* "train, test": the splits present, for an error. */
static void list_splits(char *buf, size_t n, const unsigned *mask, size_t files)
{
	unsigned all = 0;

	for (size_t i = 0; i < files; i++)
		all |= mask[i];
	buf[0] = '\0';
	for (int s = 0; s < N_SPLITS; s++)
		if (all & (1u << s))
			snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", split_names[s]);
}

static int split_index(const char *name, size_t len)
{
	for (int s = 0; s < N_SPLITS; s++)
		if (strlen(split_names[s]) == len && strncmp(split_names[s], name, len) == 0)
			return s;
	return -1;
}

/* The sharded layout: keep[i] when file i is of split want. */
static int select_sharded(char *const *files, size_t n, const char *want, size_t want_len, unsigned char *keep)
{
	int any = 0;

	for (size_t i = 0; i < n; i++) {
		size_t len = sharded_split(files[i]);

		keep[i] = len == want_len && strncmp(files[i] + 5, want, len) == 0;
		any |= keep[i];
	}
	return any;
}

static void sharded_names(char *buf, size_t n, char *const *files, size_t count)
{
	buf[0] = '\0';
	for (size_t i = 0; i < count; i++) {
		size_t len = sharded_split(files[i]);
		char name[128];

		if (len == 0 || len >= sizeof name)
			continue;
		snprintf(name, sizeof name, "%.*s", (int)len, files[i] + 5);
		if (!has_word(buf, strlen(buf), name, 1))
			snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", name);
	}
}

int dataset_select_split(char *const *files, size_t n, const char *want, unsigned char *keep, const char **chosen,
                         char *err, size_t errsz)
{
	unsigned *mask = xcalloc(n ? n : 1, sizeof *mask);
	int sharded = 0, by_dir = 0, by_name = 0, rc = -1;
	char have[256];

	for (size_t i = 0; i < n; i++) {
		sharded |= sharded_split(files[i]) > 0;
		by_dir |= dir_splits(files[i]) != 0;
		by_name |= name_splits(files[i]) != 0;
	}
	/* HF's order: the sharded layout, then directory names, then file
	 * names; with none of them every file is train */
	for (size_t i = 0; i < n; i++)
		mask[i] = by_dir ? dir_splits(files[i]) : by_name ? name_splits(files[i]) : 1u;
	if (sharded)
		sharded_names(have, sizeof have, files, n);
	else
		list_splits(have, sizeof have, mask, n);
	/* want is a name, or names joined by '|': the first the directory has */
	for (const char *w = want, *bar; w != NULL; w = bar ? bar + 1 : NULL) {
		size_t len = (bar = strchr(w, '|')) ? (size_t)(bar - w) : strlen(w);
		int s = split_index(w, len), any = 0;

		if (sharded) {
			any = select_sharded(files, n, w, len, keep);
		} else {
			for (size_t i = 0; i < n; i++)
				any |= keep[i] = s >= 0 && (mask[i] & (1u << s));
		}
		if (any) {
			*chosen = s >= 0 ? split_names[s] : NULL;
			rc = 0;
			break;
		}
	}
	if (rc < 0) {
		char names[256] = "";

		/* "validation" or "test" for a list */
		for (const char *w = want; *w && strlen(names) + 8 < sizeof names; w++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s", *w == '|' ? "\" or \"" : (char[2]){ *w, 0 });
		set_error(err, errsz, "no files of split \"%s\" (the splits there: %s)", names, have[0] ? have : "none");
	}
	free(mask);
	return rc;
}

/* ---- held-out documents --------------------------------------------------- */

static uint64_t mix(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Documents [0, n) in a seeded order; the first ones are held out. */
static size_t *seeded_order(size_t n, unsigned long long seed)
{
	size_t *order = xmalloc((n ? n : 1) * sizeof *order);
	uint64_t state = (uint64_t)seed ^ 0x6576616c686f6c64ULL; /* "evalhold" */

	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(mix(&state) % i), t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
	return order;
}

/* Document d of from appended to to. */
static void copy_doc(struct dataset *to, const struct dataset *from, size_t d)
{
	size_t len = from->doc_off[d + 1] - from->doc_off[d], at = to->n_tokens;

	memcpy(to->tokens + at, from->tokens + from->doc_off[d], len * sizeof *to->tokens);
	memcpy(to->sup + at, from->sup + from->doc_off[d], len);
	to->sep_sup[to->n_docs] = from->sep_sup[d];
	to->n_tokens += len;
	to->doc_off[++to->n_docs] = to->n_tokens;
}

static struct dataset *empty_like(const struct dataset *ds)
{
	struct dataset *o = dataset_new(ds->tok, ds->seq_len, ds->seed, ds->eos_id, ds->shuffle);

	o->train_on = ds->train_on;
	o->tokens = xmalloc((ds->n_tokens ? ds->n_tokens : 1) * sizeof *o->tokens);
	o->sup = xmalloc(ds->n_tokens ? ds->n_tokens : 1);
	o->sep_sup = xmalloc(ds->n_docs ? ds->n_docs : 1);
	o->doc_off = xcalloc(ds->n_docs + 1, sizeof *o->doc_off);
	o->order = xmalloc((ds->n_docs ? ds->n_docs : 1) * sizeof *o->order);
	o->max_id = ds->max_id;
	memcpy(o->roles, ds->roles, sizeof o->roles);
	o->n_records = ds->n_records;
	o->prepared = 1;
	return o;
}

/* The documents of from with held[d] == side, in their order. */
static struct dataset *part(const struct dataset *from, const unsigned char *held, int side)
{
	struct dataset *o = empty_like(from);

	for (size_t d = 0; d < from->n_docs; d++)
		if (held[d] == side)
			copy_doc(o, from, d);
	o->n_supervised = dataset_count_supervised(o);
	return o;
}

static void take(struct dataset *ds, struct dataset *from)
{
	free(ds->tokens);
	free(ds->sup);
	free(ds->sep_sup);
	free(ds->doc_off);
	free(ds->order);
	ds->tokens = from->tokens;
	ds->sup = from->sup;
	ds->sep_sup = from->sep_sup;
	ds->doc_off = from->doc_off;
	ds->order = from->order;
	ds->n_tokens = from->n_tokens;
	ds->n_docs = from->n_docs;
	ds->n_supervised = from->n_supervised;
	from->tokens = NULL;
	from->sup = from->sep_sup = NULL;
	from->doc_off = from->order = NULL;
	dataset_close(from);
}

int dataset_hold_out(struct dataset *ds, double fraction, struct dataset **held_out, char *err, size_t errsz)
{
	size_t n, n_held, *order;
	unsigned char *held;

	*held_out = NULL;
	if (!ds->prepared && dataset_prepare(ds, err, errsz) < 0)
		return -1;
	n = ds->n_docs;
	/* as HF's train_test_split(test_size=fraction): ceil of the share */
	n_held = (size_t)ceil(fraction * (double)n);
	if (!(fraction > 0 && fraction < 1) || n_held < 1 || n_held >= n)
		return set_error(err, errsz, "holding out %g of %zu documents leaves %s", fraction, n,
		                 n_held >= n ? "none to train on" : "none to evaluate on");
	order = seeded_order(n, ds->seed);
	held = xcalloc(n, 1);
	for (size_t i = 0; i < n_held; i++)
		held[order[i]] = 1;
	*held_out = part(ds, held, 1);
	take(ds, part(ds, held, 0));
	ds->epoch = -1;
	free(held);
	free(order);
	return 0;
}

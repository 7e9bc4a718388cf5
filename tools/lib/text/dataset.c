/* tools/lib/text/dataset.c: records -> tokenized documents and their targets
 * (man/poros-dataset.5 gives the formats and the packing rule); dataset_files.c
 * reads the files, dataset_pack.c packs the rows. */
#include "dataset_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
#endif

#include "chat_template.h"
#include "model/model.h"
#include "jinja.h"
#include "util/util.h"

/* ---- progress ------------------------------------------------------------ */

static int progress_on;
static double progress_after = 1.0;

void dataset_set_progress(double after_s)
{
	progress_on = after_s >= 0;
	progress_after = after_s;
}

/* Whether a progress line is due now: after a second of work, then once a second. */
static int progress_due(struct dataset *ds)
{
	double now;

	if (!progress_on)
		return 0;
	now = now_seconds();
	if (ds->progress_start == 0)
		ds->progress_start = now;
	if (now - ds->progress_start < progress_after || now - ds->progress_last < 1.0)
		return 0;
	ds->progress_last = now;
	ds->progress_said = 1;
	return 1;
}

void dataset_progress_read(struct dataset *ds, const char *path, long long done, long long size)
{
	if (!progress_due(ds))
		return;
	fprintf(stderr, "%s: dataset: %lld records read (%s: %.1f of %.1f MiB)\n", progname, ds->n_records, path,
	        (double)done / 1048576.0, (double)size / 1048576.0);
}

/* ---- building ------------------------------------------------------------ */

int dataset_set_chat_date(struct dataset *ds, const char *ymd, char *err, size_t errsz)
{
	struct tm t;
	char why[128];

	if (ds->n_pending || ds->prepared)
		return set_error(err, errsz, "the chat date is set before the first record");
	if (jinja_parse_date(&t, ymd, why, sizeof why) < 0)
		return set_error(err, errsz, "%s", why);
	free(ds->chat_date);
	ds->chat_date = xstrdup(ymd);
	return 0;
}

struct dataset *dataset_new(const struct tokenizer *tok, int seq_len, unsigned long long seed, int eos_id, int shuffle)
{
	struct dataset *ds = xcalloc(1, sizeof *ds);

	ds->tok = tok;
	ds->seq_len = seq_len;
	ds->seed = seed;
	ds->eos_id = eos_id;
	ds->shuffle = shuffle;
	ds->epoch = -1;
	ds->max_id = -1;
	return ds;
}

int dataset_set_split(struct dataset *ds, const char *split)
{
	if (ds->n_pending || ds->prepared)
		return -1;
	free(ds->split);
	ds->split = split ? xstrdup(split) : NULL;
	return 0;
}

const char *dataset_split_read(const struct dataset *ds) { return ds->split_read; }

static int cmp_file_id(const void *a, const void *b)
{
	const struct file_id *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

int dataset_same_files(const struct dataset *a, const struct dataset *b)
{
	struct file_id *x, *y;
	int same;

	if (a->n_files != b->n_files || a->n_files == 0)
		return 0;
	x = xmalloc(a->n_files * sizeof *x);
	y = xmalloc(b->n_files * sizeof *y);
	memcpy(x, a->files, a->n_files * sizeof *x);
	memcpy(y, b->files, b->n_files * sizeof *y);
	qsort(x, a->n_files, sizeof *x, cmp_file_id);
	qsort(y, b->n_files, sizeof *y, cmp_file_id);
	same = memcmp(x, y, a->n_files * sizeof *x) == 0;
	free(x);
	free(y);
	return same;
}

size_t dataset_file_count(const struct dataset *ds)
{
	return ds->n_files;
}

const char *dataset_file(const struct dataset *ds, size_t i, const char **name)
{
	*name = ds->file_names[i];
	return ds->file_paths[i];
}

int dataset_set_train_on(struct dataset *ds, enum train_on mode)
{
	if (ds->n_pending || ds->prepared)
		return -1;
	ds->train_on = mode;
	return 0;
}

static struct pending_doc *new_pending(struct dataset *ds)
{
	if (ds->n_pending == ds->cap_pending) {
		ds->cap_pending = ds->cap_pending ? ds->cap_pending * 2 : 1024;
		ds->pending = xrealloc(ds->pending, ds->cap_pending * sizeof *ds->pending);
	}
	memset(&ds->pending[ds->n_pending], 0, sizeof *ds->pending);
	ds->pending[ds->n_pending].all_targets = 1;
	ds->pending[ds->n_pending].eos_target = 1;
	return &ds->pending[ds->n_pending++];
}

int dataset_add_text(struct dataset *ds, const char *text, size_t len, const char *where, char *err, size_t errsz)
{
	size_t ok;
	struct pending_doc *d;

	if (ds->prepared) {
		set_error(err, errsz, "%s: the dataset is already prepared", where);
		return -1;
	}
	if (ds->tok == NULL) {
		set_error(err, errsz, "%s: text needs a tokenizer, and none was given", where);
		return -1;
	}
	if (ds->train_on == TRAIN_ON_ASSISTANT) {
		set_error(err, errsz, "%s: train_on \"assistant\" needs \"messages\" records, and this one is text", where);
		return -1;
	}
	ok = utf8_valid_prefix(text, len);
	if (ok != len) {
		set_error(err, errsz, "%s: invalid UTF-8 at byte %zu of the text", where, ok);
		return -1;
	}
	if (len == 0)
		return 0; /* an empty document would only add a stray EOS */
	d = new_pending(ds);
	d->text = xmalloc(len + 1);
	memcpy(d->text, text, len);
	d->text[len] = '\0';
	d->len = len;
	return 0;
}

/* Adds each message's role to ds->roles, once; what does not fit is "...". */
static void note_roles(struct dataset *ds, const cJSON *messages)
{
	const cJSON *m;

	cJSON_ArrayForEach(m, messages) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		char quoted[80];
		size_t have = strlen(ds->roles);

		if (!cJSON_IsString(role))
			continue;
		snprintf(quoted, sizeof quoted, "\"%.60s\"", role->valuestring);
		if (strstr(ds->roles, quoted) != NULL || strstr(ds->roles, "...") != NULL)
			continue;
		if (have + strlen(quoted) + 8 < sizeof ds->roles)
			snprintf(ds->roles + have, sizeof ds->roles - have, "%s%s", have ? ", " : "", quoted);
		else
			snprintf(ds->roles + have, sizeof ds->roles - have, ", ...");
	}
}

static void drop_prompt_answers(struct chat_render *r, int n_prompt);

/* A messages record, rendered by the model's own chat template; the
 * first n_prompt messages are a conversational prompt, whose answers are
 * not targets unless train_on says all or assistant. */
static int add_chat(struct dataset *ds, const cJSON *messages, int n_prompt, const cJSON *kwargs, const char *where,
		    char *err, size_t errsz)
{
	struct pending_doc *d;
	struct chat_render *r;
	char why[1024];

	if (ds->tok == NULL) {
		set_error(err, errsz, "%s: messages need the model's tokenizer and chat template, and there is none", where);
		return -1;
	}
	if (ds->chat == NULL) {
		int rc = chat_template_load(&ds->chat, tokenizer_path(ds->tok), why, sizeof why);
		if (rc <= 0) {
			set_error(err, errsz, rc == 0 ? "%s: the data has messages, but the model has no chat template: %s"
						   : "%s: %s", where, why);
			return -1;
		}
		if (ds->chat_date && chat_template_set_date(ds->chat, ds->chat_date, why, sizeof why) < 0) {
			set_error(err, errsz, "%s: %s", where, why);
			return -1;
		}
	}
	note_roles(ds, messages);
	r = xcalloc(1, sizeof *r);
	if (chat_template_render(r, ds->chat, messages, kwargs, why, sizeof why) < 0) {
		set_error(err, errsz, "%s: %s", where, why);
		free(r);
		return -1;
	}
	if (r->len == 0) {
		chat_render_free(r);
		free(r);
		return 0;
	}
	if (n_prompt > 0 && ds->train_on == TRAIN_ON_DEFAULT)
		drop_prompt_answers(r, n_prompt);
	d = new_pending(ds);
	d->chat = r;
	d->text = r->text;
	d->len = r->len;
	d->all_targets = ds->train_on == TRAIN_ON_ALL;
	d->eos_target = d->all_targets;
	return 0;
}

/* The answers of messages before n_prompt stop being answers: their bytes
 * and their end-of-turn anchors leave the render's assistant map. */
static void drop_prompt_answers(struct chat_render *r, int n_prompt)
{
	size_t kept = 0;

	for (size_t i = 0; i < r->len; i++)
		if (r->assistant[i] > 0 && r->assistant[i] <= n_prompt)
			r->assistant[i] = 0;
	for (size_t k = 0; k < r->n_anchor; k++)
		if (r->anchor_msg[k] > n_prompt) {
			r->anchor_pos[kept] = r->anchor_pos[k];
			r->anchor_msg[kept++] = r->anchor_msg[k];
		}
	r->n_anchor = kept;
}

static int add_ids(struct dataset *ds, const cJSON *ids, const char *where, char *err, size_t errsz)
{
	const cJSON *v;
	struct token_ids t = { 0 };
	int vocab = ds->tok ? tokenizer_vocab_size(ds->tok) : INT32_MAX;
	size_t i = 0;

	if (!cJSON_IsArray(ids)) {
		set_error(err, errsz, "%s: \"input_ids\" is not an array", where);
		return -1;
	}
	cJSON_ArrayForEach(v, ids) {
		if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= vocab ||
		    v->valuedouble != (double)(int32_t)v->valuedouble) {
			set_error(err, errsz, "%s: input_ids[%zu] is not a token id in [0, %d)", where, i, vocab);
			token_ids_free(&t);
			return -1;
		}
		token_ids_push(&t, (int32_t)v->valuedouble);
		i++;
	}
	if (t.n == 0)
		return 0;
	new_pending(ds)->ids = t;
	return 0;
}

/* TRL's standard prompt/completion: the text prompt + completion, encoded
 * whole; the prompt's own encoding's length of it is not a target, the
 * rest and the EOS after it are (TRL's completion_only_loss, and the EOS
 * it appends to the completion). */
static int add_prompt_completion(struct dataset *ds, const cJSON *prompt, const cJSON *completion, const char *where,
                                 char *err, size_t errsz)
{
	size_t np = strlen(prompt->valuestring), nc = strlen(completion->valuestring);
	char *both = xmalloc(np + nc + 1);
	size_t before = ds->n_pending;
	int rc;

	memcpy(both, prompt->valuestring, np);
	memcpy(both + np, completion->valuestring, nc + 1);
	rc = dataset_add_text(ds, both, np + nc, where, err, errsz);
	free(both);
	if (rc == 0 && ds->n_pending > before && ds->train_on != TRAIN_ON_ALL) {
		struct pending_doc *d = &ds->pending[ds->n_pending - 1];

		d->prompt_len = np;
		d->all_targets = 0;
		d->eos_target = 1;
	}
	return rc;
}

/* ShareGPT's "from" names, as Axolotl maps them to roles. */
static const char *const sharegpt_roles[][2] = {
	{ "human", "user" }, { "user", "user" }, { "gpt", "assistant" }, { "assistant", "assistant" },
	{ "system", "system" },
};

/* conversations: [{"from", "value"}...] as messages [{"role", "content"}...]
 * in *out; NULL with err naming the turn and what is wrong. */
static cJSON *sharegpt_messages(const cJSON *conv, const char *where, char *err, size_t errsz)
{
	cJSON *msgs = cJSON_CreateArray();
	const cJSON *turn;
	int i = 0;

	if (!cJSON_IsArray(conv)) {
		set_error(err, errsz, "%s: \"conversations\" is not an array", where);
		goto bad;
	}
	cJSON_ArrayForEach(turn, conv) {
		const cJSON *from = cJSON_GetObjectItemCaseSensitive(turn, "from");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(turn, "value"), *key;
		const char *role = NULL;
		cJSON *m;

		if (!cJSON_IsObject(turn) || !cJSON_IsString(from) || !cJSON_IsString(value)) {
			set_error(err, errsz, "%s: conversations[%d]: not an object with \"from\" and \"value\" strings",
			          where, i);
			goto bad;
		}
		cJSON_ArrayForEach(key, turn) /* e.g. Axolotl's per-turn "weight": not taken, so refused */
			if (strcmp(key->string, "from") != 0 && strcmp(key->string, "value") != 0) {
				set_error(err, errsz, "%s: conversations[%d]: unknown key \"%.60s\" (a turn has \"from\" "
				          "and \"value\")", where, i, key->string);
				goto bad;
			}
		for (size_t r = 0; r < sizeof sharegpt_roles / sizeof *sharegpt_roles; r++)
			if (strcmp(from->valuestring, sharegpt_roles[r][0]) == 0)
				role = sharegpt_roles[r][1];
		if (role == NULL) {
			set_error(err, errsz, "%s: conversations[%d]: unknown \"from\" \"%.60s\" (expected one of: human, "
			          "gpt, system, user, assistant)", where, i, from->valuestring);
			goto bad;
		}
		m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", role);
		cJSON_AddStringToObject(m, "content", value->valuestring);
		cJSON_AddItemToArray(msgs, m);
		i++;
	}
	return msgs;
bad:
	cJSON_Delete(msgs);
	return NULL;
}

/* TRL's conversational prompt/completion: both lists of messages, one
 * chat; the prompt's answers are not targets by default. */
static int add_chat_prompt_completion(struct dataset *ds, const cJSON *prompt, const cJSON *completion,
                                      const cJSON *kwargs, const char *where, char *err, size_t errsz)
{
	cJSON *both = cJSON_CreateArray();
	const cJSON *m;
	int rc;

	cJSON_ArrayForEach(m, prompt)
		cJSON_AddItemToArray(both, cJSON_Duplicate(m, 1));
	cJSON_ArrayForEach(m, completion)
		cJSON_AddItemToArray(both, cJSON_Duplicate(m, 1));
	rc = add_chat(ds, both, cJSON_GetArraySize(prompt), kwargs, where, err, errsz);
	cJSON_Delete(both);
	return rc;
}

/* A record of no shape man/poros-dataset.5 names: its keys, and the shapes. */
static int unknown_shape(const cJSON *rec, const char *where, char *err, size_t errsz)
{
	char keys[256] = "";
	const cJSON *k;
	size_t have;

	cJSON_ArrayForEach(k, rec) {
		have = strlen(keys);
		if (have + strlen(k->string) + 8 >= sizeof keys) {
			snprintf(keys + have, sizeof keys - have, ", ...");
			break;
		}
		snprintf(keys + have, sizeof keys - have, "%s\"%s\"", have ? ", " : "", k->string);
	}
	return set_error(err, errsz, "%s: a record of keys %s is none of the shapes taken: \"text\" (a string), "
	                 "\"messages\", \"input_ids\", \"prompt\" and \"completion\" (strings, or lists of "
	                 "messages), \"conversations\" (ShareGPT)", where, keys[0] ? keys : "(none)");
}

int dataset_add_record(struct dataset *ds, const cJSON *rec, const char *where, char *err, size_t errsz)
{
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(rec, "input_ids");
	const cJSON *messages = cJSON_GetObjectItemCaseSensitive(rec, "messages");
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(rec, "text");
	const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
	const cJSON *completion = cJSON_GetObjectItemCaseSensitive(rec, "completion");
	const cJSON *conv = cJSON_GetObjectItemCaseSensitive(rec, "conversations");
	const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(rec, "chat_template_kwargs");

	if (!cJSON_IsObject(rec)) {
		set_error(err, errsz, "%s: not a JSON object", where);
		return -1;
	}
	if (ds->prepared) {
		set_error(err, errsz, "%s: the dataset is already prepared", where);
		return -1;
	}
	ds->n_records++;
	if (ids && ds->train_on == TRAIN_ON_ASSISTANT) {
		set_error(err, errsz, "%s: train_on \"assistant\" needs \"messages\" records, and this one is input_ids",
		          where);
		return -1;
	}
	if (ids)
		return add_ids(ds, ids, where, err, errsz);
	if (messages)
		return add_chat(ds, messages, 0, kwargs, where, err, errsz);
	if (cJSON_IsString(text))
		return dataset_add_text(ds, text->valuestring, strlen(text->valuestring), where, err, errsz);
	if (prompt && completion) {
		if (cJSON_IsString(prompt) && cJSON_IsString(completion)) {
			if (ds->train_on == TRAIN_ON_ASSISTANT)
				return set_error(err, errsz, "%s: train_on \"assistant\" needs chats, and this prompt and "
				                 "completion are text", where);
			return add_prompt_completion(ds, prompt, completion, where, err, errsz);
		}
		if (cJSON_IsArray(prompt) && cJSON_IsArray(completion))
			return add_chat_prompt_completion(ds, prompt, completion, kwargs, where, err, errsz);
		return set_error(err, errsz, "%s: \"prompt\" and \"completion\" are both strings or both lists of "
		                 "messages", where);
	}
	if (conv) {
		cJSON *msgs = sharegpt_messages(conv, where, err, errsz);
		int rc;

		if (msgs == NULL)
			return -1;
		rc = add_chat(ds, msgs, 0, kwargs, where, err, errsz);
		cJSON_Delete(msgs);
		return rc;
	}
	return unknown_shape(rec, where, err, errsz);
}

/* ---- tokenizing ---------------------------------------------------------- */

/* The targets of one epoch, as the packing gives them: every supervised
 * token but a document's first (no context predicts it), and the EOS
 * after a document where it is supervised. */
long long dataset_count_supervised(const struct dataset *ds)
{
	long long n = 0;

	for (size_t d = 0; d < ds->n_docs; d++) {
		for (size_t k = ds->doc_off[d] + 1; k < ds->doc_off[d + 1]; k++)
			n += ds->sup[k];
		n += ds->sep_sup[d];
	}
	return n;
}

int dataset_prepare(struct dataset *ds, char *err, size_t errsz)
{
	size_t n = ds->n_pending, total = 0, d = 0;
	long first_bad = -1;
	char bad_err[256] = "";

	if (ds->prepared)
		return 0;
	if (ds->eos_id < 0) {
		set_error(err, errsz, "no EOS id to put between documents");
		return -1;
	}
	if (ds->tok && ds->eos_id >= tokenizer_vocab_size(ds->tok)) {
		set_error(err, errsz, "EOS id %d is beyond the tokenizer's vocabulary (%d)", ds->eos_id,
		          tokenizer_vocab_size(ds->tok));
		return -1;
	}
	if (ds->seq_len < 1) {
		set_error(err, errsz, "seq_len must be at least 1 (got %d)", ds->seq_len);
		return -1;
	}
	if (n == 0) {
		set_error(err, errsz, "no documents (every record was empty)");
		return -1;
	}
	/* Each thread its own workspace; documents are independent, and their
	 * ids land in their own slot, so the result is the same on any number of
	 * threads. */
	long long docs_done = 0, tokens_done = 0;
	if (progress_on && ds->progress_start == 0)
		ds->progress_start = now_seconds();
#pragma omp parallel
	{
		struct tok_workspace *ws = ds->tok ? tok_workspace_new(ds->tok) : NULL;
		char why[256];
#pragma omp for schedule(dynamic, 16)
		for (size_t i = 0; i < n; i++) {
			struct pending_doc *p = &ds->pending[i];
			int rc = 0;
			if (p->text != NULL) {
				/* a chat is tokenized as apply_chat_template does it: the
				 * template wrote the special tokens it wants */
				rc = tokenizer_encode(ds->tok, ws, p->text, p->len, p->chat ? 0 : TOK_ADD_SPECIAL, &p->ids, why,
						      sizeof why);
			}
			p->sup = xmalloc(p->ids.n ? p->ids.n : 1);
			memset(p->sup, 1, p->ids.n);
			if (rc == 0 && p->chat && !p->all_targets)
				rc = chat_supervised(p->sup, ds->tok, p->ids.v, p->ids.n, p->chat, why, sizeof why);
			if (rc == 0 && p->prompt_len > 0 && !p->all_targets) {
				/* as TRL: the prompt's own encoding says how many tokens it is */
				struct token_ids prompt = { 0 };

				rc = tokenizer_encode(ds->tok, ws, p->text, p->prompt_len, TOK_ADD_SPECIAL, &prompt, why,
				                      sizeof why);
				memset(p->sup, 0, prompt.n < p->ids.n ? prompt.n : p->ids.n);
				token_ids_free(&prompt);
			}
			if (rc < 0) {
#pragma omp critical(dataset_error)
				if (first_bad < 0 || (long)i < first_bad) {
					first_bad = (long)i;
					snprintf(bad_err, sizeof bad_err, "%s", why);
				}
			}
#pragma omp atomic
			docs_done++;
#pragma omp atomic
			tokens_done += (long long)p->ids.n;
			if (progress_on && omp_get_thread_num() == 0 && progress_due(ds))
				fprintf(stderr, "%s: dataset: tokenizing: %lld of %zu documents, %lld tokens\n", progname,
				        docs_done, n, tokens_done);
			if (p->chat) {
				chat_render_free(p->chat); /* frees the text too */
				free(p->chat);
				p->chat = NULL;
			} else
				free(p->text);
			p->text = NULL;
		}
		tok_workspace_free(ws);
	}
	if (first_bad >= 0) {
		set_error(err, errsz, "document %ld: %s", first_bad + 1, bad_err);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		total += ds->pending[i].ids.n;
	ds->tokens = xmalloc((total ? total : 1) * sizeof *ds->tokens);
	ds->sup = xmalloc(total ? total : 1);
	ds->sep_sup = xmalloc(n ? n : 1);
	ds->doc_off = xmalloc((n + 1) * sizeof *ds->doc_off);
	ds->doc_off[0] = 0;
	ds->max_id = ds->eos_id;
	for (size_t i = 0; i < n; i++) {
		struct token_ids *t = &ds->pending[i].ids;
		if (t->n == 0) { /* text that encoded to nothing */
			free(ds->pending[i].sup);
			continue;
		}
		memcpy(ds->tokens + ds->doc_off[d], t->v, t->n * sizeof *t->v);
		memcpy(ds->sup + ds->doc_off[d], ds->pending[i].sup, t->n);
		/* the EOS between documents: an answer where all is, and after a completion */
		ds->sep_sup[d] = (uint8_t)ds->pending[i].eos_target;
		free(ds->pending[i].sup);
		for (size_t k = 0; k < t->n; k++)
			if (t->v[k] > ds->max_id)
				ds->max_id = t->v[k];
		ds->doc_off[d + 1] = ds->doc_off[d] + t->n;
		d++;
		token_ids_free(t);
	}
	free(ds->pending);
	ds->pending = NULL;
	ds->n_pending = ds->cap_pending = 0;
	ds->n_docs = d;
	ds->n_tokens = ds->doc_off[d];
	if (d == 0) {
		set_error(err, errsz, "no documents (every text encoded to no tokens)");
		return -1;
	}
	ds->order = xmalloc(d * sizeof *ds->order);
	ds->n_supervised = dataset_count_supervised(ds);
	ds->prepared = 1;
	if (ds->progress_said)
		fprintf(stderr, "%s: dataset: %lld records, %zu documents, %zu tokens in %.1f s\n", progname,
		        ds->n_records, ds->n_docs, ds->n_tokens, now_seconds() - ds->progress_start);
	return 0;
}

long long dataset_supervised(const struct dataset *ds) { return ds->n_supervised; }

long long dataset_documents(const struct dataset *ds) { return ds->prepared ? (long long)ds->n_docs : (long long)ds->n_pending; }
long long dataset_tokens(const struct dataset *ds) { return (long long)(ds->n_tokens + ds->n_docs); }
int dataset_max_token_id(const struct dataset *ds) { return ds->max_id; }

void dataset_close(struct dataset *ds)
{
	if (ds == NULL)
		return;
	for (size_t i = 0; i < ds->n_pending; i++) {
		if (ds->pending[i].chat) {
			chat_render_free(ds->pending[i].chat);
			free(ds->pending[i].chat);
		} else
			free(ds->pending[i].text);
		free(ds->pending[i].sup);
		token_ids_free(&ds->pending[i].ids);
	}
	chat_template_free(ds->chat);
	free(ds->chat_date);
	free(ds->split);
	for (size_t i = 0; i < ds->n_files; i++) {
		free(ds->file_paths[i]);
		free(ds->file_names[i]);
	}
	free(ds->files);
	free(ds->file_paths);
	free(ds->file_names);
	free(ds->sup);
	free(ds->sep_sup);
	free(ds->pending);
	free(ds->tokens);
	free(ds->doc_off);
	free(ds->order);
	free(ds);
}

/* ---- opening a spec ------------------------------------------------------ */

/* A dataset that trains nothing: only chats can be one (text and ids are
 * all targets), so the roles say why. */
static int no_targets(const struct dataset *ds, char *err, size_t errsz)
{
	int answered = strstr(ds->roles, "\"assistant\"") != NULL;

	return set_error(err, errsz, "%lld record%s, no supervised token: the targets are the assistant turns%s, and "
	                 "the chats' roles are %s%s", ds->n_records, ds->n_records == 1 ? "" : "s",
	                 ds->train_on == TRAIN_ON_ASSISTANT ? " (train_on \"assistant\")" : "",
	                 ds->roles[0] ? ds->roles : "none",
	                 answered ? " (the chat template renders none of the assistant turns)" : "");
}

int dataset_open(struct dataset **out, const char *spec, const struct tokenizer *tok, int seq_len,
		 unsigned long long seed, int eos_id, enum train_on train_on, const char *chat_date, const char *split,
		 char *err, size_t errsz)
{
	struct dataset *ds;
	struct stat st;
	char why[1024], *snap = NULL;
	const char *path = spec;
	int rc;

	*out = NULL;
	if (spec == NULL || *spec == '\0') {
		set_error(err, errsz, "dataset: empty spec");
		return -1;
	}
	if (stat(spec, &st) != 0) {
		int local_errno = errno;
		snap = hf_cache_find("dataset", spec, why, sizeof why);
		if (snap == NULL) {
			set_error(err, errsz, "dataset \"%s\": not a local file or directory (%s), nor in the HF cache (%s)", spec,
			          strerror(local_errno), why);
			return -1;
		}
		path = snap;
	}
	ds = dataset_new(tok, seq_len, seed, eos_id, 1);
	ds->train_on = train_on;
	dataset_set_split(ds, split);
	/* before any record: a template's strftime_now formats this day */
	rc = 0;
	if (chat_date && dataset_set_chat_date(ds, chat_date, err, errsz) < 0) {
		set_error(why, sizeof why, "chat date \"%.20s\": %s", chat_date, err);
		rc = -1;
	}
	if (rc == 0)
		rc = dataset_add_path(ds, path, why, sizeof why);
	if (rc == 0)
		rc = dataset_prepare(ds, why, sizeof why);
	if (rc == 0 && ds->n_supervised == 0)
		rc = no_targets(ds, why, sizeof why);
	if (rc < 0) {
		/* name the spec when the message is about the whole of it */
		if (strncmp(why, path, strlen(path)) == 0)
			set_error(err, errsz, "dataset: %s", why);
		else
			set_error(err, errsz, "dataset \"%s\": %s", spec, why);
		dataset_close(ds);
		free(snap);
		return -1;
	}
	free(snap);
	*out = ds;
	return 0;
}

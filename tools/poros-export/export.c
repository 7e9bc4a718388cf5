/* tools/poros-export/export.c: a PEFT LoRA adapter merged into its base
 * checkpoint, written as a bf16 Hugging Face checkpoint directory.
 *
 * Merge: W' = bf16(W + scale * (B @ A)) with every step in fp32 (the sum
 * over r in order 0..R-1), scale = lora_alpha / r (alpha / sqrt(r) with
 * use_rslora), round to nearest even; PEFT's own merge computes the same
 * up to its GEMM's summation order.  Every other tensor is copied, BF16
 * bit for bit, F32/F16 rounded to BF16.  The output is built in a
 * temporary directory beside --out and renamed into place at the end, so
 * a failed or killed export leaves no partial checkpoint behind.
 *
 * This file is the run and its plan; export.h names the other parts. */
#include "export.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/model.h"
#include "util/util.h"
#include "numerics.h"

int fail(struct job *j, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->err, j->errsz, fmt, ap);
	va_end(ap);
	return code;
}

int is_float(enum st_dtype d)
{
	return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

char *human_bytes(char *buf, size_t n, double b)
{
	static const char *const unit[] = { "B", "KB", "MB", "GB", "TB" };
	int u = 0;

	while (b >= 1000 && u < 4) {
		b /= 1000;
		u++;
	}
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

/* --- sizes --------------------------------------------------------------- */

int export_parse_size(const char *s, long long *out, const char **why)
{
	static const struct { const char *suffix; long long mult; } units[] = {
		{ "KiB", 1LL << 10 }, { "MiB", 1LL << 20 }, { "GiB", 1LL << 30 }, { "TiB", 1LL << 40 },
		{ "KB", 1000LL }, { "MB", 1000000LL }, { "GB", 1000000000LL }, { "TB", 1000000000000LL },
	};
	size_t len = strlen(s), digits = 0;
	long long mult = 1, v = 0;

	while (digits < len && isdigit((unsigned char)s[digits]))
		digits++;
	if (digits == 0)
		return *why = "not a size (e.g. 5GB, 500MB, 2GiB or a byte count)", -1;
	if (digits < len) {
		const char *suf = s + digits;
		size_t i;

		/* transformers reads "5Gb" as bits: say so rather than guess */
		if (suf[strlen(suf) - 1] == 'b' && strlen(suf) == 2)
			return *why = "a unit ending in lower-case b means bits to transformers (write GB, MB, KB, or GiB ...)", -1;
		for (i = 0; i < sizeof units / sizeof *units; i++)
			if (strcasecmp(suf, units[i].suffix) == 0)
				break;
		if (i == sizeof units / sizeof *units)
			return *why = "unknown unit (expected KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB)", -1;
		mult = units[i].mult;
	}
	for (size_t i = 0; i < digits; i++) {
		if (v > (LLONG_MAX - 9) / 10)
			return *why = "too large", -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v == 0)
		return *why = "must be at least 1 byte", -1;
	if (v > LLONG_MAX / mult)
		return *why = "too large", -1;
	*out = v * mult;
	return 0;
}

/* --- the plan: tensors in order, shards ---------------------------------- */

/* Digit runs compared as numbers, so layers.2 comes before layers.10. */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			const char *ea = a, *eb = b, *sa, *sb;
			int c;

			while (isdigit((unsigned char)*ea))
				ea++;
			while (isdigit((unsigned char)*eb))
				eb++;
			for (sa = a; *sa == '0' && sa + 1 < ea; sa++)
				;
			for (sb = b; *sb == '0' && sb + 1 < eb; sb++)
				;
			if (ea - sa != eb - sb)
				return ea - sa < eb - sb ? -1 : 1;
			if ((c = strncmp(sa, sb, (size_t)(ea - sa))) != 0)
				return c;
			if (ea - a != eb - b)
				return ea - a < eb - b ? -1 : 1;
			a = ea;
			b = eb;
		} else if (*a != *b) {
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		} else {
			a++;
			b++;
		}
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int cmp_out(const void *x, const void *y)
{
	return natural_cmp(((const struct out_tensor *)x)->t->name, ((const struct out_tensor *)y)->t->name);
}

/* A layer's projection weight (q_proj ... down_proj): what poros-train
 * --precision nf4 quantizes, every one of every layer. */
static int is_projection(const char *name)
{
	int layer, at = 0;

	if (sscanf(name, ARCH_LAYER_PREFIX "%n", &layer, &at) != 1 || at == 0)
		return 0;
	for (int m = 0; m < N_MODULES; m++) {
		size_t len = strlen(arch_proj_name[m]);

		if (strncmp(name + at, arch_proj_name[m], len) == 0 && strcmp(name + at + len, ".weight") == 0)
			return 1;
	}
	return 0;
}

static int mark_dequantized(struct job *j)
{
	for (int i = 0; i < j->n; i++) {
		struct out_tensor *o = &j->t[i];

		if (!is_projection(o->t->name))
			continue;
		if (!is_float(o->t->dtype) || o->t->ndim != 2 || o->t->shape[1] % POROS_NF4_BLOCK != 0)
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\": not a float matrix with rows of whole NF4 blocks of %d "
			            "(--merge-into dequantized)", o->f->path, o->t->name, POROS_NF4_BLOCK);
		o->nf4 = 1;
		j->ndequantized++;
	}
	return 0;
}

static int plan(struct job *j)
{
	int total = 0;

	for (int i = 0; i < j->ck.nfiles; i++)
		total += j->ck.files[i].n;
	j->t = xcalloc((size_t)total + 1, sizeof *j->t);
	for (int i = 0; i < j->ck.nfiles; i++)
		for (int k = 0; k < j->ck.files[i].n; k++) {
			struct out_tensor *o = &j->t[j->n++];

			o->f = &j->ck.files[i];
			o->t = &j->ck.files[i].t[k];
			if (o->t->dtype == ST_F64)
				return fail(j, EXIT_USAGE, "%s: tensor \"%s\": dtype F64 is not supported", o->f->path, o->t->name);
			o->dtype = is_float(o->t->dtype) ? ST_BF16 : o->t->dtype;
			o->nbytes = (size_t)st_numel(o->t) * st_dtype_size(o->dtype);
		}
	qsort(j->t, (size_t)j->n, sizeof *j->t, cmp_out);
	if (j->merge_into == MERGE_DEQUANTIZED && mark_dequantized(j) != 0)
		return EXIT_USAGE;
	for (int i = 1; i < j->n; i++)
		if (strcmp(j->t[i].t->name, j->t[i - 1].t->name) == 0)
			return fail(j, EXIT_USAGE, "%s: tensor \"%s\" is in two shards (%s and %s)", j->ck.dir, j->t[i].t->name,
			            j->t[i - 1].f->path, j->t[i].f->path);
	for (int l = 0; l < j->mc.num_hidden_layers; l++)
		for (int m = 0; m < N_MODULES; m++) {
			const struct lora_pair *pr = &j->pairs[l * N_MODULES + m];

			if (pr->a == NULL)
				continue;
			for (int i = 0; i < j->n; i++)
				if (j->t[i].t == pr->w)
					j->t[i].lora = pr;
		}
	/* transformers' rule: a new shard when the next tensor would pass the
	 * limit; a tensor larger than the limit gets a shard of its own */
	j->shards = xcalloc((size_t)j->n + 1, sizeof *j->shards);
	for (int i = 0; i < j->n; i++) {
		struct shard *s = j->nshards ? &j->shards[j->nshards - 1] : NULL;
		size_t b = j->t[i].nbytes;

		if (s == NULL || (s->count > 0 && s->bytes + b > (size_t)j->o->max_shard_size)) {
			s = &j->shards[j->nshards++];
			s->first = i;
		}
		s->count++;
		s->bytes += b;
		j->t[i].shard = j->nshards - 1;
		j->total_size += b;
	}
	for (int s = 0; s < j->nshards; s++)
		j->shards[s].name = j->nshards == 1 ? xstrdup("model.safetensors")
		                                    : xasprintf("model-%05d-of-%05d.safetensors", s + 1, j->nshards);
	return 0;
}

/* --- the run ------------------------------------------------------------- */

/* Without --merge-into: what the adapter's run trained on, from its
 * train_config.json (the run directory, above the adapter): precision nf4
 * merges into dequant(NF4(W)), bf16 into W; no file, W (as PEFT does). */
static int resolve_merge_into(struct job *j)
{
	char lerr[768], *run;
	const cJSON *p;
	cJSON *tc;
	int rc = 0;

	j->merge_into = j->o->merge_into;
	if (j->o->merge_into_set || j->o->format == FORMAT_GGUF_LORA)
		return 0;
	run = adapter_run_dir(j->o->adapter);
	j->train_config = xasprintf("%s/train_config.json", run);
	free(run);
	if (!is_file(j->train_config)) {
		free(j->train_config);
		j->train_config = NULL;
		return 0;
	}
	if ((tc = json_read_file(j->train_config, lerr, sizeof lerr)) == NULL)
		return fail(j, EXIT_USAGE, "%s", lerr);
	p = cJSON_GetObjectItemCaseSensitive(tc, "precision");
	if (cJSON_IsString(p) && strcmp(p->valuestring, "nf4") == 0)
		j->merge_into = MERGE_DEQUANTIZED;
	else if (cJSON_IsString(p) && strcmp(p->valuestring, "bf16") == 0)
		j->merge_into = MERGE_ORIGINAL;
	else
		rc = fail(j, EXIT_USAGE, "%s: \"precision\" is not \"nf4\" or \"bf16\": give --merge-into original or "
		          "dequantized", j->train_config);
	cJSON_Delete(tc);
	return rc;
}

static void merge_into_note(const struct job *j)
{
	const char *into = j->merge_into == MERGE_DEQUANTIZED ? "dequant(NF4(W)) (--merge-into dequantized)"
	                                                      : "the checkpoint's weights (--merge-into original)";

	if (j->o->merge_into_set || j->o->format == FORMAT_GGUF_LORA)
		return;
	if (j->train_config != NULL)
		warnmsg("note: merging into %s, as the run's %s says it trained on %s", into, j->train_config,
		        j->merge_into == MERGE_DEQUANTIZED ? "nf4" : "bf16");
	else
		warnmsg("note: no train_config.json beside %s: merging into %s; an adapter trained on NF4 is closer to "
		        "its training with --merge-into dequantized", j->o->adapter, into);
}

static void job_free(struct job *j)
{
	model_config_free(&j->mc);
	cJSON_Delete(j->config);
	if (j->ck.dir != NULL)
		st_checkpoint_close(&j->ck);
	if (j->af_open)
		st_close(&j->af);
	for (int s = 0; s < j->nshards; s++)
		free(j->shards[s].name);
	free(j->shards);
	free(j->t);
	free(j->pairs);
	free(j->layer_on);
	free(j->adapter_base);
	free(j->train_config);
	free(j->acfg_path);
	free(j->aweights_path);
	free(j->out);
	free(j->parent);
	free(j->name);
}

static const char *const merge_into_names[] = { "original", "dequantized" };

static void print_summary(const struct job *j, FILE *summary, int copied)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "out", j->out);
	cJSON_AddStringToObject(o, "base", j->mc.checkpoint_dir);
	cJSON_AddStringToObject(o, "adapter", j->o->adapter);
	cJSON_AddNumberToObject(o, "rank", j->rank);
	cJSON_AddNumberToObject(o, "scale", j->scale);
	cJSON_AddNumberToObject(o, "tensors", j->n);
	cJSON_AddNumberToObject(o, "merged", j->npairs);
	cJSON_AddNumberToObject(o, "shards", j->nshards);
	cJSON_AddNumberToObject(o, "total_size", (double)j->total_size);
	cJSON_AddNumberToObject(o, "tokenizer_files", copied);
	cJSON_AddStringToObject(o, "merge_into", merge_into_names[j->merge_into]);
	cJSON_AddNumberToObject(o, "dequantized", j->ndequantized);
	if (jsonl_write(summary, o) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	cJSON_Delete(o);
}

static const char *const outtype_names[] = { "", "bf16", "f16", "q8_0", "f32" };

/* --format gguf and gguf-lora: the same keys, less the merge's for an adapter */
static void print_gguf_summary(const struct job *j, FILE *summary, size_t file_size, int ntensors)
{
	int lora = j->o->format == FORMAT_GGUF_LORA;
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "out", j->out);
	cJSON_AddStringToObject(o, "format", lora ? "gguf-lora" : "gguf");
	cJSON_AddStringToObject(o, "outtype", outtype_names[j->o->outtype]);
	cJSON_AddStringToObject(o, "architecture", j->mc.model_type);
	cJSON_AddStringToObject(o, "base", j->mc.checkpoint_dir);
	cJSON_AddStringToObject(o, "adapter", j->o->adapter);
	cJSON_AddNumberToObject(o, "rank", j->rank);
	cJSON_AddNumberToObject(o, lora ? "alpha" : "scale", lora ? j->alpha : (double)j->scale);
	cJSON_AddNumberToObject(o, "tensors", ntensors);
	if (!lora) {
		cJSON_AddNumberToObject(o, "merged", j->npairs);
		cJSON_AddStringToObject(o, "merge_into", merge_into_names[j->merge_into]);
		cJSON_AddNumberToObject(o, "dequantized", j->ndequantized);
	}
	cJSON_AddNumberToObject(o, "file_size", (double)file_size);
	if (jsonl_write(summary, o) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	cJSON_Delete(o);
}

static int run_gguf_lora(struct job *j, FILE *summary)
{
	size_t file_size = 0;
	int ntensors = 0, rc = write_gguf_lora(j, &file_size, &ntensors);
	char sz[32];

	scratch_remove();
	if (rc == 0) {
		warnmsg("wrote %s: LoRA GGUF %s, %d tensors (%d pairs, rank %d, alpha %g), %s", j->out,
		        outtype_names[j->o->outtype], ntensors, ntensors / 2, j->rank, j->alpha,
		        human_bytes(sz, sizeof sz, (double)file_size));
		print_gguf_summary(j, summary, file_size, ntensors);
	}
	return rc;
}

static int run_gguf(struct job *j, FILE *summary)
{
	size_t file_size = 0;
	int ntensors = 0, rc = write_gguf(j, &file_size, &ntensors);
	char sz[32];

	scratch_remove();
	if (rc == 0) {
		warnmsg("wrote %s: GGUF %s, %d tensors (%d merged, scale %g), %s", j->out, outtype_names[j->o->outtype],
		        ntensors, j->npairs, (double)j->scale, human_bytes(sz, sizeof sz, (double)file_size));
		print_gguf_summary(j, summary, file_size, ntensors);
	}
	return rc;
}

static int run_hf(struct job *j, FILE *summary)
{
	char sz[32];
	int rc, copied = 0;

	if ((rc = scratch_create(j, j->nshards + 3 + (int)n_tokenizer_files)) != 0)
		return rc;
	/* the small files first: a bad run record fails before the weights */
	rc = write_config(j);
	if (rc == 0)
		rc = copy_tokenizer(j, &copied);
	if (rc == 0)
		rc = write_model_card(j, copied);
	for (int s = 0; s < j->nshards && rc == 0; s++)
		rc = write_shard(j, &j->shards[s]);
	if (rc == 0 && j->nshards > 1)
		rc = write_index(j);
	if (rc == 0)
		rc = commit(j);
	scratch_remove();
	if (rc == 0) {
		warnmsg("wrote %s: %d tensors (%d merged, scale %g), %d shard%s, %s, %d tokenizer file%s", j->out, j->n,
		        j->npairs, (double)j->scale, j->nshards, j->nshards == 1 ? "" : "s",
		        human_bytes(sz, sizeof sz, (double)j->total_size), copied, copied == 1 ? "" : "s");
		print_summary(j, summary, copied);
	}
	return rc;
}

int export_run(const struct export_opts *o, FILE *summary, char *err, size_t errsz)
{
	struct job j;
	int rc, gguf = o->format != FORMAT_HF;

	memset(&j, 0, sizeof j);
	j.o = o;
	j.err = err;
	j.errsz = errsz;
	if ((rc = split_out(&j)) != 0 || (rc = open_base(&j)) != 0 || (rc = open_adapter(&j)) != 0 ||
	    (rc = load_pairs(&j)) != 0 || (rc = find_weights(&j)) != 0 || (rc = resolve_merge_into(&j)) != 0 ||
	    (rc = gguf ? check_out_file(&j) : check_out(&j)) != 0 || (rc = plan(&j)) != 0)
		goto out;
	if (!same_base(&j))
		warnmsg("note: the adapter was trained on \"%s\" (its base_model_name_or_path), merging into %s",
		        j.adapter_base, j.mc.checkpoint_dir);
	rc = o->format == FORMAT_GGUF_LORA ? run_gguf_lora(&j, summary)
	   : gguf                          ? run_gguf(&j, summary)
	                                   : run_hf(&j, summary);
	/* after the work, so that a failure's message stays the only line */
	if (rc == 0)
		merge_into_note(&j);
out:
	job_free(&j);
	return rc;
}

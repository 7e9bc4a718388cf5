/* tools/poros-export/merge.c: the shards: each tensor merged or copied
 * into its shard's file, and the file read back.
 *
 * The library's st_write builds a whole file in memory; a 5 GB shard would
 * need that much again, so shards are streamed here after st_header (the
 * start of the file st_write would write), then re-read with st_open as a
 * check of what was written. */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "ops.h"
#include "util/util.h"

/* Element i of a float tensor's data, as fp32 (data need not be aligned). */
static float load_f32(const unsigned char *p, enum st_dtype dt, size_t i)
{
	uint16_t h;
	float x;

	switch (dt) {
	case ST_F32:
		memcpy(&x, p + 4 * i, 4);
		return x;
	case ST_BF16:
		memcpy(&h, p + 2 * i, 2);
		return f32_from_bf16(h);
	default:
		memcpy(&h, p + 2 * i, 2);
		return st_f32_from_f16(h);
	}
}

/* out (N,K) = bf16(W + scale * (B @ A)); W (N,K) any float dtype at w,
 * B (N,R), A (R,K) fp32.  Per element: acc = sum over r = 0..R-1 of
 * B[n,r] * A[r,k], each product and sum rounded to fp32, then
 * W + scale * acc in fp32, then round to nearest even.  Rows in parallel:
 * each element's arithmetic is the same whatever the thread count. */
static void merge_lora(uint16_t *out, const unsigned char *w, enum st_dtype wdt, const float *b, const float *a,
                       float scale, long N, long K, int R)
{
#pragma omp parallel
	{
		float *acc = xmalloc((size_t)K * sizeof *acc);

#pragma omp for schedule(static)
		for (long n = 0; n < N; n++) {
			for (long k = 0; k < K; k++)
				acc[k] = 0.0f;
			for (int r = 0; r < R; r++) {
				const float br = b[n * R + r], *ar = a + (size_t)r * K;

				/* columns are independent: vector lanes change no result */
#pragma omp simd
				for (long k = 0; k < K; k++)
					acc[k] += br * ar[k];
			}
			for (long k = 0; k < K; k++) {
				float delta = scale * acc[k];

				out[n * K + k] = bf16_from_f32(load_f32(w, wdt, (size_t)(n * K + k)) + delta);
			}
		}
		free(acc);
	}
}

/* The tensor's own values rounded to bf16 (BF16 ones bit for bit). */
static void copied_bf16(const struct out_tensor *o, uint16_t *out)
{
	const unsigned char *src = st_data(o->f, o->t);
	size_t n = (size_t)st_numel(o->t);

	if (o->t->dtype == ST_BF16)
		memcpy(out, src, n * sizeof *out);
	else
		for (size_t i = 0; i < n; i++)
			out[i] = bf16_from_f32(load_f32(src, o->t->dtype, i));
}

/* A projection weight (N,K) as poros-train --precision nf4 computes with
 * it: its bf16 values quantized to NF4 (nf4.h) and dequantized by the CPU
 * kernel, into out (N*K bf16). */
static void dequantized_bf16(const struct out_tensor *o, uint16_t *out)
{
	long N = (long)o->t->shape[0], K = (long)o->t->shape[1], n = N * K;
	uint16_t *w = xmalloc((size_t)n * sizeof *w);
	uint8_t *packed = xmalloc((size_t)n / 2);
	float *absmax = xmalloc((size_t)n / POROS_NF4_BLOCK * sizeof *absmax);

	copied_bf16(o, w);
	nf4_quantize_bf16(packed, absmax, w, n);
	poros_cpu_ops.nf4_dequantize(out, (int)K, packed, absmax, N, (int)K);
	free(w);
	free(packed);
	free(absmax);
}

/* The merged weight (N,K) in bf16 into out; the adapter's pair read as fp32. */
static int merged_bf16(struct job *j, const struct out_tensor *o, uint16_t *out)
{
	const struct lora_pair *pr = o->lora;
	long N = (long)pr->w->shape[0], K = (long)pr->w->shape[1];
	int R = j->rank;
	float *a = xmalloc((size_t)R * (size_t)K * sizeof *a), *b = xmalloc((size_t)N * (size_t)R * sizeof *b);
	uint16_t *wq = NULL;
	char lerr[512];
	int rc = 0;

	if (st_read_f32(&j->af, pr->a, a, (size_t)R * (size_t)K, lerr, sizeof lerr) < 0 ||
	    st_read_f32(&j->af, pr->b, b, (size_t)N * (size_t)R, lerr, sizeof lerr) < 0) {
		rc = fail(j, EXIT_USAGE, "%s", lerr);
	} else if (o->nf4) {
		wq = xmalloc((size_t)N * (size_t)K * sizeof *wq);
		dequantized_bf16(o, wq);
		merge_lora(out, (const unsigned char *)wq, ST_BF16, b, a, j->scale, N, K, R);
	} else {
		merge_lora(out, st_data(pr->wf, pr->w), pr->w->dtype, b, a, j->scale, N, K, R);
	}
	free(wq);
	free(a);
	free(b);
	return rc;
}

int tensor_bf16(struct job *j, const struct out_tensor *o, uint16_t *out)
{
	if (o->lora != NULL)
		return merged_bf16(j, o, out);
	if (o->nf4)
		dequantized_bf16(o, out);
	else
		copied_bf16(o, out);
	return 0;
}

/* A merged or dequantized tensor: computed whole, then written. */
static int write_computed(struct job *j, int fd, const char *path, const struct out_tensor *o)
{
	uint16_t *out = xmalloc(o->nbytes);
	int rc = tensor_bf16(j, o, out);

	if (rc == 0 && write_all(fd, out, o->nbytes) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	free(out);
	return rc;
}

/* A copied tensor: BF16 and non-float bytes as they are, F32/F16 rounded
 * to BF16 a chunk at a time. */
static int write_copied(struct job *j, int fd, const char *path, const struct out_tensor *o)
{
	const unsigned char *src = st_data(o->f, o->t);
	size_t n = (size_t)st_numel(o->t), chunk = (size_t)1 << 20;
	uint16_t *buf;

	if (o->t->dtype == o->dtype) {
		if (write_all(fd, src, o->nbytes) < 0)
			return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
		return 0;
	}
	buf = xmalloc(chunk * sizeof *buf);
	for (size_t at = 0; at < n; at += chunk) {
		size_t m = n - at < chunk ? n - at : chunk;

		for (size_t i = 0; i < m; i++)
			buf[i] = bf16_from_f32(load_f32(src, o->t->dtype, at + i));
		if (write_all(fd, buf, m * sizeof *buf) < 0) {
			free(buf);
			return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
		}
	}
	free(buf);
	return 0;
}

/* The shard's safetensors header, as st_write would write it: tensors in
 * order, data packed.  NULL with the job's error. */
static unsigned char *shard_header(struct job *j, const struct shard *s, const char *path, size_t *len)
{
	struct st_out *outs = xcalloc((size_t)s->count + 1, sizeof *outs);
	cJSON *meta = cJSON_CreateObject();
	unsigned char *header;
	char lerr[512];

	for (int i = 0; i < s->count; i++) {
		const struct out_tensor *o = &j->t[s->first + i];

		outs[i].name = o->t->name;
		outs[i].dtype = o->dtype;
		outs[i].ndim = o->t->ndim;
		memcpy(outs[i].shape, o->t->shape, sizeof outs[i].shape);
	}
	/* transformers refuses a safetensors file without format "pt" */
	cJSON_AddStringToObject(meta, "format", "pt");
	header = st_header(len, outs, s->count, meta, path, lerr, sizeof lerr);
	if (header == NULL)
		fail(j, EXIT_RUNTIME, "%s", lerr);
	cJSON_Delete(meta);
	free(outs);
	return header;
}

/* What was written, read back with the library's reader: the header parses
 * and names every tensor with its dtype, shape and size. */
static int verify_shard(struct job *j, const char *path, const struct shard *s)
{
	struct st_file f;
	char lerr[512];
	int rc = 0;

	if (st_open(&f, path, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_RUNTIME, "reading back what was written: %s", lerr);
	if (f.n != s->count)
		rc = fail(j, EXIT_RUNTIME, "%s: read back %d tensors, wrote %d", path, f.n, s->count);
	for (int i = s->first; rc == 0 && i < s->first + s->count; i++) {
		const struct out_tensor *o = &j->t[i];
		const struct st_tensor *t = st_find(&f, o->t->name);

		if (t == NULL || t->dtype != o->dtype || t->nbytes != o->nbytes || t->ndim != o->t->ndim ||
		    memcmp(t->shape, o->t->shape, sizeof t->shape[0] * (size_t)t->ndim) != 0)
			rc = fail(j, EXIT_RUNTIME, "%s: tensor \"%s\" does not read back as written", path, o->t->name);
	}
	st_close(&f);
	return rc;
}

int write_shard(struct job *j, const struct shard *s)
{
	char *path = scratch_path(s->name), sz[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = 0, merged = 0;
	unsigned char *header;
	size_t hlen;

	if (fd < 0)
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	header = shard_header(j, s, path, &hlen);
	if (header == NULL)
		rc = EXIT_RUNTIME;
	else if (write_all(fd, header, hlen) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	free(header);
	for (int i = s->first; rc == 0 && i < s->first + s->count; i++) {
		rc = j->t[i].lora || j->t[i].nf4 ? write_computed(j, fd, path, &j->t[i]) : write_copied(j, fd, path, &j->t[i]);
		merged += j->t[i].lora != NULL;
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (close(fd) < 0 && rc == 0)
		rc = fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	if (rc == 0)
		rc = verify_shard(j, path, s);
	if (rc == 0)
		warnmsg("%s: %d tensors (%d merged), %s", s->name, s->count, merged, human_bytes(sz, sizeof sz, (double)s->bytes));
	return rc;
}

/* tools/lib/model/gguf.c: the GGUF v3 writer (gguf.h has the layout), and the
 * pre-tokenizers tokenizer.ggml.pre names. */
#include "gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "util/util.h"

#define QWEN2_SPLIT "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_SPLIT "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
const struct gguf_pre_tokenizer gguf_pre_tokenizers[] = {
	{ "qwen2", QWEN2_SPLIT, 0 },
	{ "llama-bpe", LLAMA3_SPLIT, 1 },
};
const int n_gguf_pre_tokenizers = sizeof gguf_pre_tokenizers / sizeof *gguf_pre_tokenizers;

static void put(struct gguf_bytes *b, const void *data, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 256;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

/* Integers little-endian, as the host is (safetensors.h: Poros assumes it). */
static void put_u32(struct gguf_bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct gguf_bytes *b, uint64_t v) { put(b, &v, 8); }

static void put_string(struct gguf_bytes *b, const char *s)
{
	size_t n = strlen(s);

	put_u64(b, n);
	put(b, s, n);
}

static void put_key(struct gguf_writer *w, const char *key, enum gguf_value_type type)
{
	put_string(&w->kv, key);
	put_u32(&w->kv, type);
	w->nkv++;
}

void gguf_kv_uint32(struct gguf_writer *w, const char *key, uint32_t v)
{
	put_key(w, key, GGUF_TYPE_UINT32);
	put_u32(&w->kv, v);
}

void gguf_kv_float32(struct gguf_writer *w, const char *key, float v)
{
	put_key(w, key, GGUF_TYPE_FLOAT32);
	put(&w->kv, &v, 4);
}

void gguf_kv_bool(struct gguf_writer *w, const char *key, int v)
{
	unsigned char byte = v != 0;

	put_key(w, key, GGUF_TYPE_BOOL);
	put(&w->kv, &byte, 1);
}

void gguf_kv_string(struct gguf_writer *w, const char *key, const char *v)
{
	put_key(w, key, GGUF_TYPE_STRING);
	put_string(&w->kv, v);
}

void gguf_kv_strings(struct gguf_writer *w, const char *key, const char *const *v, size_t n)
{
	put_key(w, key, GGUF_TYPE_ARRAY);
	put_u32(&w->kv, GGUF_TYPE_STRING);
	put_u64(&w->kv, n);
	for (size_t i = 0; i < n; i++)
		put_string(&w->kv, v[i]);
}

void gguf_kv_int32s(struct gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
	put_key(w, key, GGUF_TYPE_ARRAY);
	put_u32(&w->kv, GGUF_TYPE_INT32);
	put_u64(&w->kv, n);
	put(&w->kv, v, n * sizeof *v);
}

size_t ggml_nbytes(enum ggml_type type, size_t n)
{
	switch (type) {
	case GGML_TYPE_F32: return 4 * n;
	case GGML_TYPE_Q8_0: return n / Q8_0_BLOCK * Q8_0_BLOCK_BYTES;
	default: return 2 * n;
	}
}

const char *ggml_type_name(enum ggml_type type)
{
	switch (type) {
	case GGML_TYPE_F32: return "F32";
	case GGML_TYPE_F16: return "F16";
	case GGML_TYPE_Q8_0: return "Q8_0";
	default: return "BF16";
	}
}

size_t gguf_padding(size_t nbytes)
{
	return (GGUF_ALIGNMENT - nbytes % GGUF_ALIGNMENT) % GGUF_ALIGNMENT;
}

uint64_t gguf_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, int ndim, const int64_t *ne)
{
	uint64_t offset = w->data_size, n = 1;

	put_string(&w->info, name);
	put_u32(&w->info, (uint32_t)ndim);
	for (int i = 0; i < ndim; i++) {
		put_u64(&w->info, (uint64_t)ne[i]);
		n *= (uint64_t)ne[i];
	}
	put_u32(&w->info, type);
	put_u64(&w->info, offset);
	w->ntensors++;
	w->data_size += ggml_nbytes(type, n) + gguf_padding(ggml_nbytes(type, n));
	return offset;
}

unsigned char *gguf_header(const struct gguf_writer *w, size_t *len)
{
	struct gguf_bytes b = { 0 };
	static const unsigned char zeros[GGUF_ALIGNMENT];

	put(&b, "GGUF", 4);
	put_u32(&b, GGUF_VERSION);
	put_u64(&b, w->ntensors);
	put_u64(&b, w->nkv);
	put(&b, w->kv.p, w->kv.n);
	put(&b, w->info.p, w->info.n);
	put(&b, zeros, gguf_padding(b.n));
	*len = b.n;
	return b.p;
}

void gguf_writer_free(struct gguf_writer *w)
{
	free(w->kv.p);
	free(w->info.p);
	memset(w, 0, sizeof *w);
}

void q8_0_quantize(unsigned char *out, const float *x, size_t n)
{
	for (size_t blk = 0; blk < n / Q8_0_BLOCK; blk++) {
		const float *v = x + blk * Q8_0_BLOCK;
		unsigned char *o = out + blk * Q8_0_BLOCK_BYTES;
		float amax = 0.0f, d, id;
		uint16_t dh;

		for (int i = 0; i < Q8_0_BLOCK; i++)
			if (fabsf(v[i]) > amax)
				amax = fabsf(v[i]);
		d = amax / 127.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		dh = st_f16_from_f32(d);
		memcpy(o, &dh, 2);
		for (int i = 0; i < Q8_0_BLOCK; i++)
			o[2 + i] = (unsigned char)(int8_t)roundf(v[i] * id);
	}
}

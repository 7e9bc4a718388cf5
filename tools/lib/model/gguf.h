/* tools/lib/model/gguf.h: the GGUF v3 container (llama.cpp's model file) written:
 * the header, typed key/value metadata, the tensor infos and the aligned
 * tensor data, from the GGUF specification; and its metadata read back.
 *
 * File layout (little-endian): "GGUF", u32 version 3, u64 tensor count,
 * u64 key/value count; each key/value: string key, u32 value type, value
 * (an array: u32 element type, u64 count, the elements; a string: u64
 * length, bytes, no NUL); each tensor info: string name, u32 dimension
 * count, u64 dimensions in ggml order (ne[0] first: the length of a row),
 * u32 ggml type, u64 offset into the data; padding to the alignment; the
 * data, each tensor starting at a multiple of the alignment. */
#ifndef POROS_GGUF_H
#define POROS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define GGUF_VERSION 3
#define GGUF_ALIGNMENT 32   /* general.alignment, written explicitly */

enum gguf_value_type {
	GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
};

/* The ggml tensor types Poros writes. */
enum ggml_type { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q8_0 = 8, GGML_TYPE_BF16 = 30 };

#define Q8_0_BLOCK 32               /* values per block */
#define Q8_0_BLOCK_BYTES (2 + 32)   /* fp16 scale, then 32 int8 */

struct gguf_bytes { unsigned char *p; size_t n, cap; };

struct gguf_writer {
	struct gguf_bytes kv, info;
	uint64_t nkv, ntensors;
	uint64_t data_size;         /* the data section so far, padded */
};

void gguf_kv_uint32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_kv_float32(struct gguf_writer *w, const char *key, float v);
void gguf_kv_bool(struct gguf_writer *w, const char *key, int v);
void gguf_kv_string(struct gguf_writer *w, const char *key, const char *v);
void gguf_kv_strings(struct gguf_writer *w, const char *key, const char *const *v, size_t n);
void gguf_kv_int32s(struct gguf_writer *w, const char *key, const int32_t *v, size_t n);

/* Bytes of n values of type (n a multiple of Q8_0_BLOCK for Q8_0). */
size_t ggml_nbytes(enum ggml_type type, size_t n);
const char *ggml_type_name(enum ggml_type type);   /* "F32", "Q8_0", ... */

/* Adds a tensor info; ne in ggml order, ndim at most 4.  Returns the
 * offset of its data in the data section (a multiple of GGUF_ALIGNMENT). */
uint64_t gguf_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, int ndim, const int64_t *ne);

/* Everything before the data: header, key/values, tensor infos, padding.
 * malloc'd, *len its size (a multiple of GGUF_ALIGNMENT). */
unsigned char *gguf_header(const struct gguf_writer *w, size_t *len);
void gguf_writer_free(struct gguf_writer *w);

/* Zero bytes that take a tensor of nbytes to the next alignment. */
size_t gguf_padding(size_t nbytes);

/* out: n / Q8_0_BLOCK blocks of x (n a multiple of Q8_0_BLOCK).  Per block:
 * d = absmax / 127, stored fp16 (round to nearest even); q = round(x / d)
 * with ties away from zero, computed as x * (1 / d) in fp32 with the fp32 d;
 * an all-zero block has d = 0 and q = 0. */
void q8_0_quantize(unsigned char *out, const float *x, size_t n);

/* gguf_read.c: the key/value section of a GGUF file (v2 or v3) as one JSON
 * object: integers and floats as numbers, bools, strings, arrays of them.
 * NULL with err ("path: byte N: what is wrong"). */
cJSON *gguf_read_metadata(const char *path, char *err, size_t errsz);

/* The byte-level BPE pre-tokenizers llama.cpp implements, by the name
 * tokenizer.ggml.pre gives them: the Split regex of their tokenizer.json,
 * and whether llama.cpp's BPE ignores merges for a word in the vocabulary
 * (tokenizer.json's model.ignore_merges). */
struct gguf_pre_tokenizer { const char *name, *split_regex; int ignore_merges; };
extern const struct gguf_pre_tokenizer gguf_pre_tokenizers[];
extern const int n_gguf_pre_tokenizers;

/* llama.cpp's token types (tokenizer.ggml.token_type) */
enum { GGUF_TOKEN_NORMAL = 1, GGUF_TOKEN_CONTROL = 3, GGUF_TOKEN_USER_DEFINED = 4, GGUF_TOKEN_UNUSED = 5 };

#endif

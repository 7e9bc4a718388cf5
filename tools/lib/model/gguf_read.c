/* tools/lib/model/gguf_read.c: a GGUF file's metadata read back (gguf.h has the
 * layout): the key/value section as one JSON object, for Poros' own
 * checks of what it wrote (the tokenizer loaded from a GGUF file). */
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/util.h"

struct reader {
	FILE *f;
	const char *path;
	uint64_t at, size;
	char *err;
	size_t errsz;
};

static int take(struct reader *r, void *out, uint64_t n)
{
	if (n > r->size - r->at)
		return set_error(r->err, r->errsz, "%s: byte %llu: truncated (a value of %llu bytes past the end)", r->path,
		                 (unsigned long long)r->at, (unsigned long long)n);
	if (n > 0 && fread(out, 1, (size_t)n, r->f) != n)
		return set_error(r->err, r->errsz, "%s: byte %llu: %s", r->path, (unsigned long long)r->at,
		                 ferror(r->f) ? strerror(errno) : "unexpected end of file");
	r->at += n;
	return 0;
}

static int take_u32(struct reader *r, uint32_t *v) { return take(r, v, 4); }
static int take_u64(struct reader *r, uint64_t *v) { return take(r, v, 8); }

static char *take_string(struct reader *r)
{
	uint64_t n;
	char *s;

	if (take_u64(r, &n) < 0)
		return NULL;
	if (n > r->size - r->at) {
		set_error(r->err, r->errsz, "%s: byte %llu: a string of %llu bytes past the end", r->path,
		          (unsigned long long)r->at, (unsigned long long)n);
		return NULL;
	}
	s = xmalloc((size_t)n + 1);
	if (take(r, s, n) < 0) {
		free(s);
		return NULL;
	}
	s[n] = '\0';
	return s;
}

/* One scalar of type into a JSON value; NULL with the error set. */
static cJSON *take_scalar(struct reader *r, uint32_t type)
{
	union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
	        uint64_t u64; int64_t i64; double f64; } v;
	static const unsigned char size[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	char *s;
	cJSON *out;

	if (type == GGUF_TYPE_STRING) {
		if ((s = take_string(r)) == NULL)
			return NULL;
		out = cJSON_CreateString(s);
		free(s);
		return out;
	}
	if (type >= sizeof size || size[type] == 0) {
		set_error(r->err, r->errsz, "%s: byte %llu: unknown value type %u", r->path, (unsigned long long)r->at, type);
		return NULL;
	}
	if (take(r, &v, size[type]) < 0)
		return NULL;
	switch (type) {
	case GGUF_TYPE_UINT8: return cJSON_CreateNumber(v.u8);
	case GGUF_TYPE_INT8: return cJSON_CreateNumber(v.i8);
	case GGUF_TYPE_UINT16: return cJSON_CreateNumber(v.u16);
	case GGUF_TYPE_INT16: return cJSON_CreateNumber(v.i16);
	case GGUF_TYPE_UINT32: return cJSON_CreateNumber(v.u32);
	case GGUF_TYPE_INT32: return cJSON_CreateNumber(v.i32);
	case GGUF_TYPE_FLOAT32: return cJSON_CreateNumber(v.f32);
	case GGUF_TYPE_BOOL: return cJSON_CreateBool(v.u8 != 0);
	case GGUF_TYPE_UINT64: return cJSON_CreateNumber((double)v.u64);
	case GGUF_TYPE_INT64: return cJSON_CreateNumber((double)v.i64);
	default: return cJSON_CreateNumber(v.f64);
	}
}

static cJSON *take_value(struct reader *r, uint32_t type)
{
	uint32_t elem;
	uint64_t n;
	cJSON *arr, *item;

	if (type != GGUF_TYPE_ARRAY)
		return take_scalar(r, type);
	if (take_u32(r, &elem) < 0 || take_u64(r, &n) < 0)
		return NULL;
	if (elem == GGUF_TYPE_ARRAY) {
		set_error(r->err, r->errsz, "%s: byte %llu: an array of arrays is not read", r->path, (unsigned long long)r->at);
		return NULL;
	}
	/* every element takes a byte at least: a count past the end is corrupt */
	if (n > r->size - r->at) {
		set_error(r->err, r->errsz, "%s: byte %llu: an array of %llu values past the end", r->path,
		          (unsigned long long)r->at, (unsigned long long)n);
		return NULL;
	}
	arr = cJSON_CreateArray();
	for (uint64_t i = 0; i < n; i++) {
		if ((item = take_scalar(r, elem)) == NULL) {
			cJSON_Delete(arr);
			return NULL;
		}
		cJSON_AddItemToArray(arr, item);
	}
	return arr;
}

cJSON *gguf_read_metadata(const char *path, char *err, size_t errsz)
{
	struct reader r = { .path = path, .err = err, .errsz = errsz };
	struct stat st;
	char magic[4], *key;
	uint32_t version, type;
	uint64_t ntensors, nkv;
	cJSON *md = NULL, *v;

	if ((r.f = fopen(path, "rb")) == NULL || fstat(fileno(r.f), &st) < 0) {
		set_error(err, errsz, "%s: %s", path, strerror(errno));
		goto out;
	}
	r.size = (uint64_t)st.st_size;
	if (take(&r, magic, 4) < 0 || take_u32(&r, &version) < 0 || take_u64(&r, &ntensors) < 0 ||
	    take_u64(&r, &nkv) < 0)
		goto out;
	if (memcmp(magic, "GGUF", 4) != 0 || (version != 2 && version != GGUF_VERSION)) {
		set_error(err, errsz, "%s: not a GGUF file of version 2 or 3", path);
		goto out;
	}
	md = cJSON_CreateObject();
	for (uint64_t i = 0; i < nkv; i++) {
		if ((key = take_string(&r)) == NULL)
			goto fail;
		if (take_u32(&r, &type) < 0 || (v = take_value(&r, type)) == NULL) {
			free(key);
			goto fail;
		}
		if (cJSON_GetObjectItemCaseSensitive(md, key) != NULL) {
			set_error(err, errsz, "%s: key \"%s\" appears twice", path, key);
			cJSON_Delete(v);
			free(key);
			goto fail;
		}
		cJSON_AddItemToObject(md, key, v);
		free(key);
	}
	goto out;
fail:
	cJSON_Delete(md);
	md = NULL;
out:
	if (r.f != NULL)
		fclose(r.f);
	return md;
}

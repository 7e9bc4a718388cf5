/* tools/lib/model/safetensors.c: safetensors files and HF checkpoint directories.
 * Every header value is checked before any offset is trusted, so a bad file
 * is a one-line error and never an out-of-bounds read. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"
#include "ops.h"

/* The length field and tensor bytes are little-endian and used in place. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* Integers in a header are JSON numbers, parsed as doubles: beyond 2^53 they
 * are no longer exact, so they are refused rather than silently rounded. */
#define ST_MAX_EXACT 9007199254740992.0

static const struct {
	const char *name;
	size_t size;
} dtype_info[ST_DTYPE_COUNT] = {
	[ST_F32] = { "F32", 4 },  [ST_F16] = { "F16", 2 }, [ST_BF16] = { "BF16", 2 },
	[ST_F64] = { "F64", 8 },  [ST_I64] = { "I64", 8 }, [ST_I32] = { "I32", 4 },
	[ST_I16] = { "I16", 2 },  [ST_I8] = { "I8", 1 },   [ST_U8] = { "U8", 1 },
	[ST_BOOL] = { "BOOL", 1 },
};

size_t st_dtype_size(enum st_dtype d)
{
	return (unsigned)d < ST_DTYPE_COUNT ? dtype_info[d].size : 0;
}

const char *st_dtype_name(enum st_dtype d)
{
	return (unsigned)d < ST_DTYPE_COUNT ? dtype_info[d].name : "?";
}

int st_dtype_from_name(const char *s)
{
	for (int i = 0; i < ST_DTYPE_COUNT; i++)
		if (strcmp(s, dtype_info[i].name) == 0)
			return i;
	return -1;
}

/* a * b into *out unless it overflows size_t. */
static int mul_size(size_t a, size_t b, size_t *out)
{
	return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* Any zero dimension makes the product zero, however large the others
 * ([2^53, 1024, 0] is an empty tensor, not an overflow). */
static int shape_has_zero(const long long *shape, int ndim)
{
	for (int i = 0; i < ndim; i++)
		if (shape[i] == 0)
			return 1;
	return 0;
}

long long st_numel(const struct st_tensor *t)
{
	long long n = 1;

	if (shape_has_zero(t->shape, t->ndim))
		return 0;
	for (int i = 0; i < t->ndim; i++)
		if (__builtin_mul_overflow(n, t->shape[i], &n))
			return -1;
	return n;
}

int st_check_regular(const char *path, char *err, size_t errsz)
{
	struct stat st, lst;
	int fd;

	if (stat(path, &st) < 0) {
		int e = errno;

		if (e == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
			return set_error(err, errsz, "%s: a dangling symbolic link (an interrupted download?)", path);
		return set_error(err, errsz, "%s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode))
		return set_error(err, errsz, "%s: not a regular file", path);
	/* O_NONBLOCK: should it have become a FIFO since, open does not wait */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return set_error(err, errsz, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return set_error(err, errsz, "%s: not a regular file", path);
	}
	close(fd);
	return 0;
}

/* A non-negative integer JSON number that doubles represent exactly. */
static int json_uint(const cJSON *v, unsigned long long *out)
{
	double d;

	if (!cJSON_IsNumber(v))
		return -1;
	d = v->valuedouble;
	if (!isfinite(d) || d < 0 || d != floor(d) || d > ST_MAX_EXACT)
		return -1;
	*out = (unsigned long long)d;
	return 0;
}

/* Reads one header entry into t; the caller owns the name. */
static int parse_entry(struct st_tensor *t, const cJSON *e, size_t data_size, const char *path, char *err, size_t errsz)
{
	const cJSON *dt, *shape, *offs, *v;
	unsigned long long begin, end, dim;
	size_t need;
	int d, i;

	if (!cJSON_IsObject(e))
		return set_error(err, errsz, "%s: tensor \"%s\": entry is not an object", path, t->name);
	dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
	offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (dt == NULL || shape == NULL || offs == NULL)
		return set_error(err, errsz, "%s: tensor \"%s\": missing \"%s\"", path, t->name,
		                 dt == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
	if (!cJSON_IsString(dt) || (d = st_dtype_from_name(dt->valuestring)) < 0)
		return set_error(err, errsz, "%s: tensor \"%s\": unknown dtype %s%s%s (expected one of: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)",
		                 path, t->name, cJSON_IsString(dt) ? "\"" : "", cJSON_IsString(dt) ? dt->valuestring : "(not a string)",
		                 cJSON_IsString(dt) ? "\"" : "");
	t->dtype = (enum st_dtype)d;
	if (!cJSON_IsArray(shape))
		return set_error(err, errsz, "%s: tensor \"%s\": shape is not an array", path, t->name);
	t->ndim = cJSON_GetArraySize(shape);
	if (t->ndim > ST_MAX_DIMS)
		return set_error(err, errsz, "%s: tensor \"%s\": %d dimensions (at most %d)", path, t->name, t->ndim, ST_MAX_DIMS);
	need = st_dtype_size(t->dtype);
	i = 0;
	cJSON_ArrayForEach(v, shape) {
		if (json_uint(v, &dim) < 0)
			return set_error(err, errsz, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path, t->name, i);
		t->shape[i++] = (long long)dim;
	}
	if (shape_has_zero(t->shape, t->ndim)) {
		need = 0;
	} else {
		for (i = 0; i < t->ndim; i++)
			if (mul_size(need, (size_t)t->shape[i], &need) < 0 || need > (size_t)LLONG_MAX)
				return set_error(err, errsz, "%s: tensor \"%s\": shape overflows the size of a tensor", path,
				                 t->name);
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return set_error(err, errsz, "%s: tensor \"%s\": data_offsets is not an array of two integers", path, t->name);
	if (json_uint(cJSON_GetArrayItem(offs, 0), &begin) < 0 || json_uint(cJSON_GetArrayItem(offs, 1), &end) < 0)
		return set_error(err, errsz, "%s: tensor \"%s\": data_offsets are not non-negative integers", path, t->name);
	if (end < begin)
		return set_error(err, errsz, "%s: tensor \"%s\": data_offsets end %llu before begin %llu", path, t->name, end, begin);
	if (end > data_size)
		return set_error(err, errsz, "%s: tensor \"%s\": data_offsets end %llu past the end of the data (%zu bytes)",
		                 path, t->name, end, data_size);
	if (end - begin != need)
		return set_error(err, errsz, "%s: tensor \"%s\": shape and dtype %s need %zu bytes, data_offsets give %llu",
		                 path, t->name, st_dtype_name(t->dtype), need, end - begin);
	t->offset = (size_t)begin;
	t->nbytes = need;
	return 0;
}

static const struct st_file *sort_file; /* qsort has no context argument */

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp(sort_file->t[*(const int *)a].name, sort_file->t[*(const int *)b].name);
}

static int cmp_by_offset(const void *a, const void *b)
{
	const struct st_tensor *x = &sort_file->t[*(const int *)a], *y = &sort_file->t[*(const int *)b];

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Duplicate names (cJSON keeps both) and overlapping byte ranges; leaves
 * f->by_name sorted for st_find's binary search. */
static int check_names_and_ranges(struct st_file *f, char *err, size_t errsz)
{
	int *order = xmalloc(((size_t)f->n + 1) * sizeof *order);
	const struct st_tensor *prev = NULL;

	for (int i = 0; i < f->n; i++)
		f->by_name[i] = order[i] = i;
	sort_file = f;
	if (f->n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_by_name);
	if (f->n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(order, (size_t)f->n, sizeof *order, cmp_by_offset);
	sort_file = NULL;
	for (int i = 1; i < f->n; i++) {
		if (strcmp(f->t[f->by_name[i]].name, f->t[f->by_name[i - 1]].name) == 0) {
			set_error(err, errsz, "%s: duplicate tensor name \"%s\"", f->path, f->t[f->by_name[i]].name);
			free(order);
			return -1;
		}
	}
	for (int i = 0; i < f->n; i++) {
		const struct st_tensor *t = &f->t[order[i]];

		if (t->nbytes == 0) /* an empty tensor occupies no bytes */
			continue;
		if (prev != NULL && t->offset < prev->offset + prev->nbytes) {
			set_error(err, errsz, "%s: tensors \"%s\" and \"%s\" overlap", f->path, prev->name, t->name);
			free(order);
			return -1;
		}
		prev = t;
	}
	free(order);
	return 0;
}

/* Parses the JSON header at f->map + 8 into f->t and f->metadata. */
static int parse_header(struct st_file *f, size_t hlen, char *err, size_t errsz)
{
	const char *text = (const char *)f->map + 8, *endp = NULL;
	size_t data_size = f->size - f->data_start;
	cJSON *root, *e;
	int n = 0, i = 0;

	/* the format's header is UTF-8 JSON (the safetensors library refuses
	 * other bytes, in __metadata__ too) */
	size_t valid = utf8_valid_prefix(text, hlen);
	if (valid != hlen)
		return set_error(err, errsz, "%s: header is not valid UTF-8 (byte %zu of the file)", f->path, valid + 8);
	root = cJSON_ParseWithLengthOpts(text, hlen, &endp, 0);
	if (root == NULL) {
		const char *at = cJSON_GetErrorPtr();
		long off = (at >= text && at <= text + hlen) ? (long)(at - text) : 0;
		return set_error(err, errsz, "%s: header is not valid JSON (near byte %ld of the header)", f->path, off + 8);
	}
	/* Only the padding spaces the format allows may follow the object. */
	for (const char *p = endp; p < text + hlen; p++) {
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
			cJSON_Delete(root);
			return set_error(err, errsz, "%s: header has trailing bytes after the JSON object (byte %ld)", f->path,
			                 (long)(p - text) + 8);
		}
	}
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return set_error(err, errsz, "%s: header is not a JSON object", f->path);
	}
	cJSON_ArrayForEach(e, root)
		n++;
	f->t = xcalloc((size_t)n + 1, sizeof *f->t);
	f->by_name = xcalloc((size_t)n + 1, sizeof *f->by_name);
	cJSON_ArrayForEach(e, root) {
		if (strcmp(e->string, "__metadata__") == 0) {
			const cJSON *v;

			if (f->metadata != NULL || !cJSON_IsObject(e))
				goto bad_meta;
			cJSON_ArrayForEach(v, e)
				if (!cJSON_IsString(v))
					goto bad_meta;
			f->metadata = cJSON_Duplicate(e, 1);
			continue;
		}
		f->t[i].name = xstrdup(e->string);
		f->n = ++i;
		if (parse_entry(&f->t[i - 1], e, data_size, f->path, err, errsz) < 0) {
			cJSON_Delete(root);
			return -1;
		}
	}
	cJSON_Delete(root);
	return check_names_and_ranges(f, err, errsz);
bad_meta:
	cJSON_Delete(root);
	return set_error(err, errsz, "%s: __metadata__ is not a single object of strings", f->path);
}

int st_open(struct st_file *f, const char *path, char *err, size_t errsz)
{
	struct stat st;
	uint64_t hlen;
	int fd;

	memset(f, 0, sizeof *f);
	f->path = xstrdup(path);
	/* O_NONBLOCK: a FIFO is refused below instead of waiting for a writer */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		struct stat lst;
		int e = errno;

		if (e == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
			set_error(err, errsz, "%s: a dangling symbolic link (an interrupted download?)", path);
		else
			set_error(err, errsz, "%s: %s", path, strerror(e));
		goto fail_fd;
	}
	if (fstat(fd, &st) < 0) {
		set_error(err, errsz, "%s: %s", path, strerror(errno));
		goto fail_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		set_error(err, errsz, "%s: not a regular file", path);
		goto fail_fd;
	}
	if (st.st_size < 8) {
		set_error(err, errsz, "%s: file is %lld bytes, shorter than the 8-byte header length", path, (long long)st.st_size);
		goto fail_fd;
	}
	f->size = (size_t)st.st_size;
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		set_error(err, errsz, "%s: mmap: %s", path, strerror(errno));
		goto fail_fd;
	}
	close(fd);
	fd = -1;
	memcpy(&hlen, f->map, 8); /* little-endian host */
	if (hlen > ST_MAX_HEADER) {
		set_error(err, errsz, "%s: header length %llu is larger than %u bytes", path, (unsigned long long)hlen, ST_MAX_HEADER);
		goto fail;
	}
	if (hlen > f->size - 8) {
		set_error(err, errsz, "%s: header length %llu is larger than the file (%zu bytes)", path, (unsigned long long)hlen, f->size);
		goto fail;
	}
	f->data_start = 8 + (size_t)hlen;
	if (parse_header(f, (size_t)hlen, err, errsz) < 0)
		goto fail;
	return 0;
fail_fd:
	if (fd >= 0)
		close(fd);
fail:
	st_close(f);
	return -1;
}

void st_close(struct st_file *f)
{
	if (f->map != NULL)
		munmap(f->map, f->size);
	for (int i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->by_name);
	free(f->path);
	cJSON_Delete(f->metadata);
	memset(f, 0, sizeof *f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	int lo = 0, hi = f->n - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(name, f->t[f->by_name[mid]].name);

		if (c == 0)
			return &f->t[f->by_name[mid]];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

const void *st_data(const struct st_file *f, const struct st_tensor *t)
{
	return f->map + f->data_start + t->offset;
}

/* --- half precision ------------------------------------------------------ */

float st_f32_from_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
	union { uint32_t u; float f; } v;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13); /* inf, NaN keeps its payload */
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else if (man == 0) {
		bits = sign;
	} else {
		/* subnormal: man * 2^-24, exact in float */
		v.f = (float)man * 5.9604644775390625e-8f;
		v.u |= sign;
		return v.f;
	}
	v.u = bits;
	return v.f;
}

uint16_t st_f16_from_f32(float f)
{
	union { float f; uint32_t u; } v = { f };
	uint32_t sign = (v.u >> 16) & 0x8000u, abs = v.u & 0x7fffffffu;
	int exp;
	uint32_t man, half, rem, halfway;
	int shift;

	if (abs > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
	if (abs >= 0x477ff000u) /* rounds to 65536 or more: inf */
		return (uint16_t)(sign | 0x7c00u);
	exp = (int)(abs >> 23) - 127;
	man = (abs & 0x7fffffu) | 0x800000u;
	if (exp >= -14) {
		/* normal: keep 10 of 23 mantissa bits, round to nearest even; a carry
		 * into the exponent is exactly the right result */
		half = ((uint32_t)(exp + 15) << 10) | ((man >> 13) & 0x3ffu);
		rem = man & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
			half++;
		return (uint16_t)(sign | half);
	}
	if (abs == 0)
		return (uint16_t)sign;
	shift = -exp - 14 + 13; /* bits dropped for a subnormal half */
	if (shift > 24)
		return (uint16_t)sign;
	half = man >> shift;
	rem = man & ((1u << shift) - 1);
	halfway = 1u << (shift - 1);
	if (rem > halfway || (rem == halfway && (half & 1u)))
		half++;
	return (uint16_t)(sign | half);
}

/* --- conversion ---------------------------------------------------------- */

static int check_float_tensor(const struct st_file *f, const struct st_tensor *t, size_t n, char *err, size_t errsz)
{
	if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
		return set_error(err, errsz, "%s: tensor \"%s\": dtype %s is not a float type (expected F32, F16 or BF16)",
		                 f->path, t->name, st_dtype_name(t->dtype));
	if (st_numel(t) < 0 || (unsigned long long)st_numel(t) != (unsigned long long)n)
		return set_error(err, errsz, "%s: tensor \"%s\": has %lld elements, expected %zu", f->path, t->name, st_numel(t), n);
	return 0;
}

/* A weight that is NaN or infinite, in the file or once rounded to bf16,
 * is refused naming its tensor: a quantizer would turn it into a finite
 * code and train on another model.  x is the value read, file_x the
 * file's own.  (st_read_f32 reads adapters, which poros-parity compares
 * NaN and all.) */
static int non_finite(const struct st_file *f, const struct st_tensor *t, size_t i, float x, float file_x, char *err,
                      size_t errsz)
{
	if (isfinite(file_x))
		return set_error(err, errsz, "%s: tensor \"%s\": element %zu is %s in bf16, %g in the file (a weight must be "
		                 "finite)", f->path, t->name, i, x > 0 ? "+Inf" : "-Inf", file_x);
	return set_error(err, errsz, "%s: tensor \"%s\": element %zu is %s (a weight must be finite)", f->path, t->name, i,
	                 isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf");
}

static int check_finite_bf16(const struct st_file *f, const struct st_tensor *t, const uint16_t *v, size_t n,
                             char *err, size_t errsz)
{
	const unsigned char *p = st_data(f, t);
	float file_x;
	uint16_t h;

	for (size_t i = 0; i < n; i++) {
		if ((v[i] & 0x7f80) != 0x7f80) /* exponent all ones: Inf or NaN */
			continue;
		if (t->dtype == ST_F32) {
			memcpy(&file_x, p + 4 * i, 4);
		} else {
			memcpy(&h, p + 2 * i, 2);
			file_x = t->dtype == ST_F16 ? st_f32_from_f16(h) : f32_from_bf16(h);
		}
		return non_finite(f, t, i, f32_from_bf16(v[i]), file_x, err, errsz);
	}
	return 0;
}

int st_read_f32(const struct st_file *f, const struct st_tensor *t, float *out, size_t n, char *err, size_t errsz)
{
	const unsigned char *p = st_data(f, t);
	uint16_t h;

	if (check_float_tensor(f, t, n, err, errsz) < 0)
		return -1;
	/* memcpy per element: data need not be aligned (header lengths are not
	 * always multiples of 8 in files from other writers) */
	switch (t->dtype) {
	case ST_F32:
		memcpy(out, p, n * 4);
		break;
	case ST_BF16:
		for (size_t i = 0; i < n; i++) {
			memcpy(&h, p + 2 * i, 2);
			out[i] = f32_from_bf16(h);
		}
		break;
	default:
		for (size_t i = 0; i < n; i++) {
			memcpy(&h, p + 2 * i, 2);
			out[i] = st_f32_from_f16(h);
		}
		break;
	}
	return 0;
}

int st_read_bf16(const struct st_file *f, const struct st_tensor *t, uint16_t *out, size_t n, char *err, size_t errsz)
{
	const unsigned char *p = st_data(f, t);
	uint16_t h;
	float x;

	if (check_float_tensor(f, t, n, err, errsz) < 0)
		return -1;
	switch (t->dtype) {
	case ST_BF16:
		memcpy(out, p, n * 2);
		break;
	case ST_F32:
		for (size_t i = 0; i < n; i++) {
			memcpy(&x, p + 4 * i, 4);
			out[i] = bf16_from_f32(x);
		}
		break;
	default:
		for (size_t i = 0; i < n; i++) {
			memcpy(&h, p + 2 * i, 2);
			out[i] = bf16_from_f32(st_f32_from_f16(h));
		}
		break;
	}
	return check_finite_bf16(f, t, out, n, err, errsz);
}

/* --- writing ------------------------------------------------------------- */

static int check_out(const struct st_out *t, int n, const cJSON *metadata, const char *path, char *err, size_t errsz)
{
	const cJSON *v;

	if (n < 0)
		return set_error(err, errsz, "%s: negative tensor count", path);
	for (int i = 0; i < n; i++) {
		if (t[i].name == NULL || t[i].name[0] == '\0' || strcmp(t[i].name, "__metadata__") == 0)
			return set_error(err, errsz, "%s: tensor %d: name is empty or reserved", path, i);
		if ((unsigned)t[i].dtype >= ST_DTYPE_COUNT)
			return set_error(err, errsz, "%s: tensor \"%s\": unknown dtype %d", path, t[i].name, (int)t[i].dtype);
		if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS)
			return set_error(err, errsz, "%s: tensor \"%s\": %d dimensions (0 to %d)", path, t[i].name, t[i].ndim, ST_MAX_DIMS);
		for (int d = 0; d < t[i].ndim; d++)
			if (t[i].shape[d] < 0)
				return set_error(err, errsz, "%s: tensor \"%s\": shape[%d] is negative", path, t[i].name, d);
		for (int j = 0; j < i; j++)
			if (strcmp(t[i].name, t[j].name) == 0)
				return set_error(err, errsz, "%s: duplicate tensor name \"%s\"", path, t[i].name);
	}
	if (metadata != NULL) {
		if (!cJSON_IsObject(metadata))
			return set_error(err, errsz, "%s: metadata is not an object", path);
		cJSON_ArrayForEach(v, metadata)
			if (!cJSON_IsString(v))
				return set_error(err, errsz, "%s: metadata \"%s\" is not a string (safetensors metadata is a string map)",
				                 path, v->string);
	}
	return 0;
}

/* Each tensor's data size into nbytes[i] and their sum into *total; with
 * need_data, a tensor of any bytes must have its data. */
static int out_sizes(size_t *nbytes, size_t *total, const struct st_out *t, int n, int need_data, const char *path,
                     char *err, size_t errsz)
{
	size_t offset = 0;

	for (int i = 0; i < n; i++) {
		size_t sz = st_dtype_size(t[i].dtype);

		for (int d = 0; d < t[i].ndim; d++) {
			if ((unsigned long long)t[i].shape[d] > SIZE_MAX || mul_size(sz, (size_t)t[i].shape[d], &sz) < 0)
				goto overflow;
		}
		if (need_data && sz > 0 && t[i].data == NULL)
			return set_error(err, errsz, "%s: tensor \"%s\": no data", path, t[i].name);
		if (offset + sz < offset || (double)(offset + sz) > ST_MAX_EXACT)
			goto overflow;
		nbytes[i] = sz;
		offset += sz;
	}
	*total = offset;
	return 0;
overflow:
	return set_error(err, errsz, "%s: tensor sizes overflow", path);
}

/* The u64 length and the JSON header of t[0..n) packed in order, in a
 * malloc'd buffer with room for data_size bytes after it; *hlen the
 * header's size.  NULL with err when out of memory. */
static unsigned char *header_bytes(size_t *hlen, const struct st_out *t, int n, const cJSON *metadata,
                                   const size_t *nbytes, size_t data_size, const char *path, char *err, size_t errsz)
{
	cJSON *root, *e, *arr;
	size_t offset = 0, jlen, padded;
	unsigned char *buf;
	char *json;
	uint64_t hlen64;

	root = cJSON_CreateObject();
	if (metadata != NULL)
		cJSON_AddItemToObject(root, "__metadata__", cJSON_Duplicate(metadata, 1));
	for (int i = 0; i < n; i++) {
		e = cJSON_AddObjectToObject(root, t[i].name);
		cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype));
		arr = cJSON_AddArrayToObject(e, "shape");
		for (int d = 0; d < t[i].ndim; d++)
			cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)t[i].shape[d]));
		arr = cJSON_AddArrayToObject(e, "data_offsets");
		cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)offset));
		cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)(offset + nbytes[i])));
		offset += nbytes[i];
	}
	json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (json == NULL) {
		set_error(err, errsz, "%s: out of memory", path);
		return NULL;
	}
	jlen = strlen(json);
	padded = (jlen + 7) & ~(size_t)7; /* keeps the data 8-byte aligned */
	buf = xmalloc(8 + padded + data_size);
	hlen64 = padded;
	memcpy(buf, &hlen64, 8); /* little-endian host */
	memcpy(buf + 8, json, jlen);
	memset(buf + 8 + jlen, ' ', padded - jlen);
	free(json);
	*hlen = 8 + padded;
	return buf;
}

unsigned char *st_header(size_t *len, const struct st_out *t, int n, const cJSON *metadata, const char *path, char *err,
                         size_t errsz)
{
	unsigned char *header = NULL;
	size_t *nbytes, total;

	if (check_out(t, n, metadata, path, err, errsz) < 0)
		return NULL;
	nbytes = xcalloc((size_t)n + 1, sizeof *nbytes);
	if (out_sizes(nbytes, &total, t, n, 0, path, err, errsz) == 0)
		header = header_bytes(len, t, n, metadata, nbytes, 0, path, err, errsz);
	free(nbytes);
	return header;
}

int st_write(const char *path, const struct st_out *t, int n, const cJSON *metadata, char *err, size_t errsz)
{
	size_t *nbytes, offset, hlen;
	unsigned char *buf;

	if (check_out(t, n, metadata, path, err, errsz) < 0)
		return -1;
	nbytes = xcalloc((size_t)n + 1, sizeof *nbytes);
	if (out_sizes(nbytes, &offset, t, n, 1, path, err, errsz) < 0 ||
	    (buf = header_bytes(&hlen, t, n, metadata, nbytes, offset, path, err, errsz)) == NULL) {
		free(nbytes);
		return -1;
	}
	offset = 0;
	for (int i = 0; i < n; i++) {
		if (nbytes[i] > 0)
			memcpy(buf + hlen + offset, t[i].data, nbytes[i]);
		offset += nbytes[i];
	}
	free(nbytes);
	if (atomic_write(path, buf, hlen + offset) < 0) {
		set_error(err, errsz, "%s: %s", path, strerror(errno));
		free(buf);
		return -1;
	}
	free(buf);
	return 0;
}

/* --- checkpoints --------------------------------------------------------- */

/* 1: a directory entry exists at path (a dangling link counts), 0: none. */
static int entry_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Opens every shard named by the index's weight_map, each once, and checks
 * that each listed tensor is in the shard the index names. */
static int open_indexed(struct st_checkpoint *c, const char *index_path, char *err, size_t errsz)
{
	char jerr[512];
	cJSON *root;
	const cJSON *map, *e;
	const char **names = NULL;
	int nnames = 0, rc = -1;

	if (st_check_regular(index_path, err, errsz) < 0)
		return -1;
	if ((root = json_read_file(index_path, jerr, sizeof jerr)) == NULL)
		return set_error(err, errsz, "%s", jerr);
	map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map) || map->child == NULL) {
		set_error(err, errsz, "%s: no \"weight_map\" object (or it is empty)", index_path);
		goto out;
	}
	cJSON_ArrayForEach(e, map) {
		int seen = 0;

		if (!cJSON_IsString(e) || !path_is_confined(e->valuestring)) {
			set_error(err, errsz, "%s: weight_map \"%s\": not a file name inside the checkpoint directory", index_path, e->string);
			goto out;
		}
		for (int i = 0; i < nnames && !seen; i++)
			seen = strcmp(names[i], e->valuestring) == 0;
		if (!seen) {
			names = xrealloc(names, ((size_t)nnames + 1) * sizeof *names);
			names[nnames++] = e->valuestring;
		}
	}
	c->files = xcalloc((size_t)nnames, sizeof *c->files);
	for (int i = 0; i < nnames; i++) {
		char *p = path_under(c->dir, names[i]);
		int r = st_open(&c->files[i], p, err, errsz);

		free(p);
		if (r < 0)
			goto out;
		c->nfiles = i + 1;
	}
	cJSON_ArrayForEach(e, map) {
		const struct st_file *f = NULL;
		int found = 0;

		for (int i = 0; i < c->nfiles && f == NULL; i++)
			if (strcmp(names[i], e->valuestring) == 0)
				f = &c->files[i];
		for (int i = 0; i < c->nfiles; i++)
			found += st_find(&c->files[i], e->string) != NULL;
		if (st_find(f, e->string) == NULL) {
			set_error(err, errsz, "%s: tensor \"%s\" is not in %s, where the index puts it", index_path, e->string, e->valuestring);
			goto out;
		}
		if (found > 1) {
			set_error(err, errsz, "%s: tensor \"%s\" is in %d shards", index_path, e->string, found);
			goto out;
		}
	}
	rc = 0;
out:
	free(names);
	cJSON_Delete(root);
	return rc;
}

int st_checkpoint_open(struct st_checkpoint *c, const char *dir, char *err, size_t errsz)
{
	char *index = xasprintf("%s/model.safetensors.index.json", dir);
	char *single = xasprintf("%s/model.safetensors", dir);
	int rc = -1;

	memset(c, 0, sizeof *c);
	c->dir = xstrdup(dir);
	/* what is there decides, readable or not: a broken index or file is
	 * an error naming it, never a reason to look elsewhere */
	if (entry_exists(index)) {
		rc = open_indexed(c, index, err, errsz);
	} else if (entry_exists(single)) {
		c->files = xcalloc(1, sizeof *c->files);
		rc = st_open(&c->files[0], single, err, errsz);
		c->nfiles = rc == 0;
	} else {
		char *bin = xasprintf("%s/pytorch_model.bin", dir), *bin_index = xasprintf("%s/pytorch_model.bin.index.json", dir);

		if (entry_exists(bin) || entry_exists(bin_index))
			set_error(err, errsz, "%s: no model.safetensors or model.safetensors.index.json (only pytorch_model.bin "
			          "weights, which poros-train does not read: convert them to safetensors)", dir);
		else
			set_error(err, errsz, "%s: no model.safetensors or model.safetensors.index.json (a checkpoint "
			          "directory must hold its weights)", dir);
		free(bin);
		free(bin_index);
	}
	free(index);
	free(single);
	if (rc < 0)
		st_checkpoint_close(c);
	return rc;
}

void st_checkpoint_close(struct st_checkpoint *c)
{
	for (int i = 0; i < c->nfiles; i++)
		st_close(&c->files[i]);
	free(c->files);
	free(c->dir);
	memset(c, 0, sizeof *c);
}

const struct st_tensor *st_checkpoint_find(const struct st_checkpoint *c, const char *name, const struct st_file **file)
{
	for (int i = 0; i < c->nfiles; i++) {
		const struct st_tensor *t = st_find(&c->files[i], name);

		if (t != NULL) {
			if (file != NULL)
				*file = &c->files[i];
			return t;
		}
	}
	return NULL;
}

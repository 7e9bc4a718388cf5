/* tools/lib/model/safetensors.h: the safetensors format (read by mmap, written
 * atomically) and HF checkpoint directories (one file, or an index and
 * shards).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON (an object
 * name -> {"dtype","shape","data_offsets":[begin,end]}, plus an optional
 * "__metadata__" string map), then the data; offsets are relative to the
 * start of the data.  Tensor data is little-endian; Poros assumes a
 * little-endian host (x86-64, aarch64) and reads it in place. */
#ifndef POROS_SAFETENSORS_H
#define POROS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL };
#define ST_DTYPE_COUNT 10
#define ST_MAX_DIMS 8
/* The reader refuses a header larger than this (the format's own bound). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

size_t st_dtype_size(enum st_dtype);
const char *st_dtype_name(enum st_dtype);     /* "F32", "BF16", ... */
int st_dtype_from_name(const char *s);        /* -1 if unknown */

struct st_tensor {
	char *name;
	enum st_dtype dtype;
	int ndim;                  /* 0 for a scalar */
	long long shape[ST_MAX_DIMS];
	size_t offset, nbytes;     /* offset relative to data_start */
};

struct st_file {
	char *path;
	unsigned char *map;        /* the whole file, read-only */
	size_t size;
	size_t data_start;         /* 8 + header length */
	int n;
	struct st_tensor *t;       /* in header order */
	cJSON *metadata;           /* "__metadata__" object, or NULL */
	int *by_name;              /* indices into t sorted by name, for st_find */
};

/* mmap, read-only; validates the whole header.  0, or -1 with err naming
 * the file ("x.safetensors: tensor \"w\": shape [2,3] needs 24 bytes, data_offsets give 20"). */
int st_open(struct st_file *f, const char *path, char *err, size_t errsz);
void st_close(struct st_file *f);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
const void *st_data(const struct st_file *f, const struct st_tensor *t);
/* Product of the shape (1 for a scalar, 0 with any zero dimension); -1 if
 * it does not fit in 64 bits (never for a tensor st_open accepted). */
long long st_numel(const struct st_tensor *t);
/* 0 if path is a regular file that opens for reading, without blocking on
 * a FIFO; -1 with err naming it ("a dangling symbolic link", "not a
 * regular file", or the system's reason). */
int st_check_regular(const char *path, char *err, size_t errsz);

/* A checkpoint directory: model.safetensors.index.json + shards when the
 * index is there, else model.safetensors.  Every file is opened without
 * blocking and must be a regular file; a missing or dangling one is an
 * error that names it. */
struct st_checkpoint { char *dir; int nfiles; struct st_file *files; };
int st_checkpoint_open(struct st_checkpoint *c, const char *dir, char *err, size_t errsz);
void st_checkpoint_close(struct st_checkpoint *c);
/* Finds a tensor across shards; NULL if absent. *file receives the shard (file may be NULL). */
const struct st_tensor *st_checkpoint_find(const struct st_checkpoint *c, const char *name, const struct st_file **file);

/* Converts a tensor of dtype F32/F16/BF16 into n floats or n bf16 (uint16_t, round-to-nearest-even via
   bf16_from_f32 in kernels/ops.h); -1 with err on a dtype or element-count mismatch, and st_read_bf16 (the
   base weights' reader) on a value that is NaN or infinite (in the file, or once rounded to bf16). */
int st_read_f32(const struct st_file *f, const struct st_tensor *t, float *out, size_t n, char *err, size_t errsz);
int st_read_bf16(const struct st_file *f, const struct st_tensor *t, uint16_t *out, size_t n, char *err, size_t errsz);

struct st_out { const char *name; enum st_dtype dtype; int ndim; long long shape[ST_MAX_DIMS]; const void *data; };
/* Writes a safetensors file atomically (tensors in the given order, 8-byte aligned header padded with spaces,
   optional __metadata__ string map: every value must be a string); 0 or -1 with err. */
int st_write(const char *path, const struct st_out *t, int n, const cJSON *metadata, char *err, size_t errsz);
/* The start of the file st_write would write (t[i].data is not read): the
 * u64 length and the header, padded with spaces so the data, the tensors
 * packed in order, starts 8-byte aligned; for a writer that streams the
 * data itself.  malloc'd, *len its size; NULL with err (st_write's checks,
 * path naming the file). */
unsigned char *st_header(size_t *len, const struct st_out *t, int n, const cJSON *metadata, const char *path, char *err,
                         size_t errsz);

/* IEEE half <-> float (exact for every half; float -> half rounds to nearest even). */
float st_f32_from_f16(uint16_t h);
uint16_t st_f16_from_f32(float f);

#endif

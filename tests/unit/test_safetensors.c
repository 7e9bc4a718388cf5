/* tests/unit/test_safetensors.c: safetensors writer/reader round trips,
 * conversions, every malformed-header rejection, sharded checkpoints. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops.h"
#include "model/model.h"
#include "util/util.h"
#include "test_common.h"

static char tmpdir[] = "/tmp/poros-test-st-XXXXXX";

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float f32_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* A raw file: an 8-byte length, the header as given, then data_len bytes. */
static char *write_raw(const char *name, uint64_t hlen_field, const char *header, size_t data_len)
{
	char *path = xasprintf("%s/%s", tmpdir, name);
	FILE *f = fopen(path, "wb");

	fwrite(&hlen_field, 8, 1, f);
	fputs(header, f);
	for (size_t i = 0; i < data_len; i++)
		fputc((int)(i & 0xff), f);
	fclose(f);
	return path;
}

static void test_roundtrip(void)
{
	float f32[6] = { 1.5f, -2.25f, 0.0f, 3.0e38f, -1.0e-40f, 7.0f };
	uint16_t f16[4] = { 0x3c00, 0xc000, 0x0001, 0x7bff };   /* 1, -2, 2^-24, 65504 */
	uint16_t bf[3] = { 0x3f80, 0xbfc0, 0x7f80 };            /* 1, -1.5, inf */
	double f64[2] = { 3.141592653589793, -1e300 };
	int64_t i64[2] = { INT64_MIN, 9007199254740993LL };
	int32_t i32[3] = { -7, 0, 123456789 };
	int16_t i16[2] = { -32768, 32767 };
	int8_t i8[1] = { -128 };
	uint8_t u8[5] = { 0, 1, 2, 254, 255 };
	uint8_t boolean[2] = { 1, 0 };
	float scalar = 42.0f;
	const struct st_out outs[] = {
		{ "a.f32", ST_F32, 2, { 2, 3 }, f32 },
		{ "b.f16", ST_F16, 1, { 4 }, f16 },
		{ "c.bf16", ST_BF16, 3, { 1, 3, 1 }, bf },
		{ "d.f64", ST_F64, 1, { 2 }, f64 },
		{ "e.i64", ST_I64, 1, { 2 }, i64 },
		{ "f.i32", ST_I32, 1, { 3 }, i32 },
		{ "g.i16", ST_I16, 1, { 2 }, i16 },
		{ "h.i8", ST_I8, 1, { 1 }, i8 },
		{ "i.u8", ST_U8, 1, { 5 }, u8 },
		{ "j.bool", ST_BOOL, 2, { 2, 1 }, boolean },
		{ "k.scalar", ST_F32, 0, { 0 }, &scalar },
		{ "l.empty", ST_F32, 2, { 0, 5 }, NULL },
		{ "model.layers.0.self_attn.q_proj.weight \"quoted\"", ST_U8, 1, { 1 }, u8 },
	};
	const int n = (int)(sizeof outs / sizeof *outs);
	char *path = xasprintf("%s/rt.safetensors", tmpdir), err[512];
	cJSON *meta = cJSON_CreateObject();
	struct st_file f;
	size_t expect_off = 0;

	cJSON_AddStringToObject(meta, "format", "pt");
	cJSON_AddStringToObject(meta, "note", "round \"trip\"");
	CHECKF(st_write(path, outs, n, meta, err, sizeof err) == 0, "st_write: %s", err);
	CHECKF(st_open(&f, path, err, sizeof err) == 0, "st_open: %s", err);
	if (f.map == NULL)
		goto out;
	CHECKF(f.n == n, "n = %d, want %d", f.n, n);
	CHECKF(f.data_start % 8 == 0, "data_start %zu is not 8-aligned", f.data_start);
	CHECKF(f.map[f.data_start - 1] == ' ' || f.map[f.data_start - 1] == '}', "header does not end in padding");
	for (int i = 0; i < n && i < f.n; i++) {
		const struct st_tensor *t = &f.t[i];
		size_t nb = st_dtype_size(outs[i].dtype);

		for (int d = 0; d < outs[i].ndim; d++)
			nb *= (size_t)outs[i].shape[d];
		CHECKF(strcmp(t->name, outs[i].name) == 0, "tensor %d is \"%s\", want \"%s\" (order kept)", i, t->name, outs[i].name);
		CHECKF(t->dtype == outs[i].dtype, "%s: dtype %s", t->name, st_dtype_name(t->dtype));
		CHECKF(t->ndim == outs[i].ndim, "%s: ndim %d, want %d", t->name, t->ndim, outs[i].ndim);
		for (int d = 0; d < t->ndim; d++)
			CHECKF(t->shape[d] == outs[i].shape[d], "%s: shape[%d] %lld", t->name, d, t->shape[d]);
		CHECKF(t->nbytes == nb, "%s: nbytes %zu, want %zu", t->name, t->nbytes, nb);
		CHECKF(t->offset == expect_off, "%s: offset %zu, want %zu", t->name, t->offset, expect_off);
		CHECKF(nb == 0 || memcmp(st_data(&f, t), outs[i].data, nb) == 0, "%s: data differs", t->name);
		CHECKF(st_find(&f, outs[i].name) == t, "st_find(%s)", outs[i].name);
		expect_off += nb;
	}
	CHECKF(f.size == f.data_start + expect_off, "file size %zu, want %zu", f.size, f.data_start + expect_off);
	CHECKF(st_find(&f, "missing") == NULL, "st_find of an absent name");
	CHECKF(f.metadata != NULL && strcmp(cJSON_GetObjectItem(f.metadata, "format")->valuestring, "pt") == 0 &&
	           strcmp(cJSON_GetObjectItem(f.metadata, "note")->valuestring, "round \"trip\"") == 0,
	       "metadata not read back");
	CHECKF(st_numel(st_find(&f, "k.scalar")) == 1 && st_numel(st_find(&f, "l.empty")) == 0, "numel of scalar/empty");
	st_close(&f);
out:
	cJSON_Delete(meta);
	free(path);
}

static void test_f16(void)
{
	int bad = 0;

	/* every non-NaN half survives half -> float -> half */
	for (uint32_t h = 0; h < 65536; h++) {
		if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
			continue;
		if (st_f16_from_f32(st_f32_from_f16((uint16_t)h)) != h && bad++ < 5)
			fprintf(stderr, "  half 0x%04x -> %g -> 0x%04x\n", h, st_f32_from_f16((uint16_t)h),
			        st_f16_from_f32(st_f32_from_f16((uint16_t)h)));
	}
	CHECKF(bad == 0, "%d halves do not round-trip", bad);
	CHECKF(st_f32_from_f16(0x0001) == ldexpf(1, -24), "smallest subnormal");
	CHECKF(st_f32_from_f16(0x7bff) == 65504.0f, "largest half");
	CHECKF(st_f32_from_f16(0x8000) == 0.0f && signbit(st_f32_from_f16(0x8000)), "-0");
	CHECKF(isinf(st_f32_from_f16(0xfc00)) && st_f32_from_f16(0xfc00) < 0, "-inf");
	CHECKF(isnan(st_f32_from_f16(0x7e00)), "NaN");
	CHECKF(st_f16_from_f32(1.0f + ldexpf(1, -11)) == 0x3c00, "tie rounds to even (down)");
	CHECKF(st_f16_from_f32(1.0f + 3 * ldexpf(1, -11)) == 0x3c02, "tie rounds to even (up)");
	CHECKF(st_f16_from_f32(65519.0f) == 0x7bff, "65519 -> 65504");
	CHECKF(st_f16_from_f32(65520.0f) == 0x7c00, "65520 -> inf");
	CHECKF(st_f16_from_f32(ldexpf(1, -25)) == 0x0000, "2^-25 ties to 0");
	CHECKF(st_f16_from_f32(ldexpf(1.5f, -25)) == 0x0001, "1.5 * 2^-25 -> 2^-24");
	CHECKF(st_f16_from_f32(ldexpf(1023, -24) + ldexpf(1, -25)) == 0x0400, "subnormal carries into the smallest normal");
	CHECKF((st_f16_from_f32(NAN) & 0x7e00) == 0x7e00, "NaN stays NaN");
}

static void test_conversions(void)
{
	/* 1 + 2^-8 is a bf16 tie (rounds to 1); 1 + 3*2^-8 rounds up to even */
	float src[4] = { 1.0f, f32_of(0x3f808000u), f32_of(0x3f818000u), -0.15625f };
	uint16_t half[4] = { 0x3c00, 0x3c01, 0x0001, 0xfbff }; /* 1, 1+2^-10, 2^-24, -65504 */
	uint16_t bsrc[2] = { 0x4049, 0x8001 };
	const struct st_out outs[] = {
		{ "f32", ST_F32, 1, { 4 }, src },
		{ "f16", ST_F16, 1, { 4 }, half },
		{ "bf16", ST_BF16, 1, { 2 }, bsrc },
		{ "i32", ST_I32, 1, { 4 }, src },
	};
	char *path = xasprintf("%s/conv.safetensors", tmpdir), err[512];
	struct st_file f;
	float out[4];
	uint16_t ob[4];

	CHECKF(st_write(path, outs, 4, NULL, err, sizeof err) == 0, "st_write: %s", err);
	if (st_open(&f, path, err, sizeof err) < 0) {
		CHECKF(0, "st_open: %s", err);
		free(path);
		return;
	}
	CHECKF(f.metadata == NULL, "no metadata written, none read");
	CHECKF(st_read_f32(&f, st_find(&f, "f32"), out, 4, err, sizeof err) == 0 && memcmp(out, src, sizeof src) == 0,
	       "F32 -> f32 exact");
	CHECKF(st_read_bf16(&f, st_find(&f, "f32"), ob, 4, err, sizeof err) == 0 && ob[0] == 0x3f80 && ob[1] == 0x3f80 &&
	           ob[2] == 0x3f82 && ob[3] == bf16_from_f32(-0.15625f),
	       "F32 -> bf16 round-to-nearest-even: %04x %04x %04x %04x", ob[0], ob[1], ob[2], ob[3]);
	CHECKF(st_read_f32(&f, st_find(&f, "f16"), out, 4, err, sizeof err) == 0 && out[0] == 1.0f &&
	           out[1] == 1.0f + ldexpf(1, -10) && out[2] == ldexpf(1, -24) && out[3] == -65504.0f,
	       "F16 -> f32: %g %g %g %g", out[0], out[1], out[2], out[3]);
	CHECKF(st_read_bf16(&f, st_find(&f, "f16"), ob, 4, err, sizeof err) == 0 && ob[0] == 0x3f80 && ob[1] == 0x3f80 &&
	           ob[2] == 0x3380 && ob[3] == 0xc780,
	       "F16 -> bf16: %04x %04x %04x %04x", ob[0], ob[1], ob[2], ob[3]);
	CHECKF(st_read_f32(&f, st_find(&f, "bf16"), out, 2, err, sizeof err) == 0 && f32_bits(out[0]) == 0x40490000u &&
	           f32_bits(out[1]) == 0x80010000u,
	       "BF16 -> f32 exact");
	CHECKF(st_read_bf16(&f, st_find(&f, "bf16"), ob, 2, err, sizeof err) == 0 && ob[0] == 0x4049 && ob[1] == 0x8001,
	       "BF16 -> bf16 copies");
	CHECKF(st_read_f32(&f, st_find(&f, "i32"), out, 4, err, sizeof err) < 0 && strstr(err, "dtype I32 is not a float type"),
	       "I32 refused: %s", err);
	CHECKF(st_read_f32(&f, st_find(&f, "f32"), out, 3, err, sizeof err) < 0 && strstr(err, "has 4 elements, expected 3") &&
	           strstr(err, path),
	       "count mismatch refused: %s", err);
	CHECKF(st_read_bf16(&f, st_find(&f, "f16"), ob, 5, err, sizeof err) < 0 && strstr(err, "expected 5"),
	       "bf16 count mismatch refused: %s", err);
	st_close(&f);
	free(path);
}

struct bad_case {
	const char *name;
	const char *header;  /* NULL: only the length field */
	uint64_t hlen;       /* 0: strlen(header) */
	size_t data_len;
	size_t file_len;     /* nonzero: truncate to this many bytes */
	const char *want;
};

static void test_malformed(void)
{
	static const struct bad_case cases[] = {
		{ "short", "", 0, 0, 4, "shorter than the 8-byte header length" },
		{ "hlen_past_end", "{}", 1000, 0, 0, "header length 1000 is larger than the file" },
		{ "hlen_huge", "{}", 200000000, 0, 0, "header length 200000000 is larger than 100000000 bytes" },
		{ "bad_json", "{\"a\": {\"dtype\": \"F32\",", 0, 0, 0, "header is not valid JSON" },
		{ "trailing", "{} x", 0, 0, 0, "trailing bytes after the JSON object" },
		{ "not_object", "[1, 2]", 0, 0, 0, "header is not a JSON object" },
		{ "entry_not_object", "{\"a\": 5}", 0, 0, 0, "tensor \"a\": entry is not an object" },
		{ "no_dtype", "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 0, 4, 0, "tensor \"a\": missing \"dtype\"" },
		{ "no_shape", "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 0, 4, 0, "tensor \"a\": missing \"shape\"" },
		{ "no_offsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 0, 4, 0, "tensor \"a\": missing \"data_offsets\"" },
		{ "unknown_dtype", "{\"a\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 0, 1, 0,
		  "unknown dtype \"F8_E4M3\"" },
		{ "dtype_not_string", "{\"a\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", 0, 4, 0, "unknown dtype (not a string)" },
		{ "negative_shape", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 0, 4, 0,
		  "shape[0] is not a non-negative integer" },
		{ "fraction_shape", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 1.5], \"data_offsets\": [0, 4]}}", 0, 4, 0,
		  "shape[1] is not a non-negative integer" },
		{ "string_shape", "{\"a\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 0, 4, 0,
		  "shape[0] is not a non-negative integer" },
		{ "too_many_dims", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 0, 1, 0,
		  "9 dimensions (at most 8)" },
		{ "negative_offset", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 0, 4, 0,
		  "data_offsets are not non-negative integers" },
		{ "fraction_offset", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4.5]}}", 0, 8, 0,
		  "data_offsets are not non-negative integers" },
		{ "offsets_not_pair", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 0, 4, 0,
		  "data_offsets is not an array of two integers" },
		{ "end_before_begin", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 0, 8, 0,
		  "data_offsets end 4 before begin 8" },
		{ "past_end", "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 0, 12, 0,
		  "data_offsets end 16 past the end of the data (12 bytes)" },
		{ "size_mismatch", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 0, 24, 0,
		  "shape and dtype F32 need 24 bytes, data_offsets give 20" },
		{ "size_overflow", "{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 0, 8, 0,
		  "shape overflows" },
		{ "overlap", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
		             " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 0, 12, 0,
		  "tensors \"a\" and \"b\" overlap" },
		{ "duplicate", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
		               " \"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 0, 2, 0,
		  "duplicate tensor name \"w\"" },
		{ "meta_not_strings", "{\"__metadata__\": {\"format\": 1}}", 0, 0, 0, "__metadata__ is not a single object of strings" },
	};
	char err[512];

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const struct bad_case *c = &cases[i];
		char *name = xasprintf("%s.safetensors", c->name);
		char *path = write_raw(name, c->hlen ? c->hlen : strlen(c->header), c->header, c->data_len);
		struct st_file f;
		int rc;

		if (c->file_len)
			CHECKF(truncate(path, (off_t)c->file_len) == 0, "truncate");
		err[0] = '\0';
		rc = st_open(&f, path, err, sizeof err);
		CHECKF(rc == -1, "%s: accepted", c->name);
		CHECKF(strstr(err, c->want) != NULL, "%s: message \"%s\" lacks \"%s\"", c->name, err, c->want);
		CHECKF(strncmp(err, path, strlen(path)) == 0, "%s: message \"%s\" does not start with the file", c->name, err);
		CHECKF(f.map == NULL && f.t == NULL && f.path == NULL, "%s: st_open left state behind", c->name);
		if (rc == 0)
			st_close(&f);
		free(name);
		free(path);
	}
	/* the same checks accept the good neighbours of those cases */
	{
		char *path = write_raw("edge_ok.safetensors", 0, "", 0);
		struct st_file f;
		const char *h = "{\"z\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
		                " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
		                " \"b\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [4, 6]}}  ";

		free(path);
		path = write_raw("edge_ok.safetensors", strlen(h), h, 6);
		CHECKF(st_open(&f, path, err, sizeof err) == 0, "edge_ok: %s", err);
		if (f.map != NULL) {
			CHECKF(f.n == 3 && st_find(&f, "b") != NULL && st_find(&f, "b")->ndim == 0, "edge_ok parsed");
			st_close(&f);
		}
		free(path);
	}
	{
		char *path = xasprintf("%s/absent.safetensors", tmpdir);
		struct st_file f;

		CHECKF(st_open(&f, path, err, sizeof err) < 0 && strstr(err, "No such file"), "absent file: %s", err);
		free(path);
	}
}

static void test_write_errors(void)
{
	uint8_t b[2] = { 1, 2 };
	const struct st_out dup[] = { { "x", ST_U8, 1, { 1 }, b }, { "x", ST_U8, 1, { 1 }, b + 1 } };
	const struct st_out neg[] = { { "x", ST_U8, 1, { -1 }, b } };
	const struct st_out nodata[] = { { "x", ST_U8, 1, { 2 }, NULL } };
	const struct st_out reserved[] = { { "__metadata__", ST_U8, 1, { 1 }, b } };
	char *path = xasprintf("%s/werr.safetensors", tmpdir), err[512];
	cJSON *meta = cJSON_CreateObject();
	struct stat st;

	CHECKF(st_write(path, dup, 2, NULL, err, sizeof err) < 0 && strstr(err, "duplicate tensor name \"x\""), "dup: %s", err);
	CHECKF(st_write(path, neg, 1, NULL, err, sizeof err) < 0 && strstr(err, "shape[0] is negative"), "neg: %s", err);
	CHECKF(st_write(path, nodata, 1, NULL, err, sizeof err) < 0 && strstr(err, "no data"), "nodata: %s", err);
	CHECKF(st_write(path, reserved, 1, NULL, err, sizeof err) < 0 && strstr(err, "reserved"), "reserved: %s", err);
	cJSON_AddNumberToObject(meta, "step", 3);
	CHECKF(st_write(path, dup, 1, meta, err, sizeof err) < 0 && strstr(err, "metadata \"step\" is not a string"), "meta: %s", err);
	CHECKF(stat(path, &st) < 0, "a failed st_write left %s behind", path);
	cJSON_Delete(meta);
	free(path);
	path = xasprintf("%s/no/such/dir/x.safetensors", tmpdir);
	CHECKF(st_write(path, dup, 1, NULL, err, sizeof err) < 0 && strstr(err, path), "unwritable path: %s", err);
	free(path);
}

static void write_shard(const char *dir, const char *name, const char *t1, const char *t2, float base)
{
	float a[4] = { base, base + 1, base + 2, base + 3 }, b[2] = { -base, -base - 1 };
	const struct st_out outs[] = { { t1, ST_F32, 2, { 2, 2 }, a }, { t2, ST_F32, 1, { 2 }, b } };
	char *path = xasprintf("%s/%s", dir, name), err[512];

	CHECKF(st_write(path, outs, 2, NULL, err, sizeof err) == 0, "shard: %s", err);
	free(path);
}

static void test_checkpoint(void)
{
	char *dir = xasprintf("%s/ckpt", tmpdir), *index = xasprintf("%s/model.safetensors.index.json", dir), err[512];
	struct st_checkpoint c;
	const struct st_file *file = NULL;
	const struct st_tensor *t;
	float v[4];

	mkdir(dir, 0755);
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 && strstr(err, "no model.safetensors or model.safetensors.index.json"),
	       "empty dir: %s", err);
	write_shard(dir, "model-00001-of-00002.safetensors", "model.embed_tokens.weight", "model.norm.weight", 1);
	write_shard(dir, "model-00002-of-00002.safetensors", "lm_head.weight", "model.layers.0.input_layernorm.weight", 10);
	write_fixture(index, "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {"
	                  "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
	                  "\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
	                  "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
	                  "\"model.layers.0.input_layernorm.weight\": \"model-00002-of-00002.safetensors\"}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) == 0, "two shards: %s", err);
	CHECKF(c.nfiles == 2, "nfiles %d", c.nfiles);
	t = st_checkpoint_find(&c, "lm_head.weight", &file);
	CHECKF(t != NULL && file == &c.files[1] && strstr(file->path, "model-00002-of-00002.safetensors"), "lm_head in shard 2");
	CHECKF(t != NULL && st_read_f32(file, t, v, 4, err, sizeof err) == 0 && v[0] == 10 && v[3] == 13, "lm_head values");
	t = st_checkpoint_find(&c, "model.norm.weight", &file);
	CHECKF(t != NULL && file == &c.files[0] && st_read_f32(file, t, v, 2, err, sizeof err) == 0 && v[1] == -2,
	       "norm in shard 1");
	CHECKF(st_checkpoint_find(&c, "model.layers.1.input_layernorm.weight", &file) == NULL, "absent tensor");
	st_checkpoint_close(&c);

	write_fixture(index, "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 &&
	           strstr(err, "tensor \"model.norm.weight\" is not in model-00002-of-00002.safetensors"),
	       "wrong shard: %s", err);
	write_fixture(index, "{\"weight_map\": {\"model.norm.weight\": \"../escape.safetensors\"}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 && strstr(err, "not a file name inside the checkpoint directory"),
	       "escape: %s", err);
	write_fixture(index, "{\"weight_map\": {\"x\": \"model-00003-of-00003.safetensors\"}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 && strstr(err, "model-00003-of-00003.safetensors: No such file"),
	       "missing shard: %s", err);
	write_fixture(index, "{\"weight_map\": {}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 && strstr(err, "no \"weight_map\""), "empty map: %s", err);
	write_shard(dir, "model-00003-of-00003.safetensors", "model.norm.weight", "other", 5);
	write_fixture(index, "{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
	                  "\"other\": \"model-00003-of-00003.safetensors\"}}");
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) < 0 && strstr(err, "\"model.norm.weight\" is in 2 shards"),
	       "duplicate across shards: %s", err);
	unlink(index);

	/* without an index, model.safetensors */
	write_shard(dir, "model.safetensors", "w", "b", 3);
	CHECKF(st_checkpoint_open(&c, dir, err, sizeof err) == 0 && c.nfiles == 1, "single file: %s", err);
	CHECKF(st_checkpoint_find(&c, "w", NULL) != NULL && st_checkpoint_find(&c, "lm_head.weight", NULL) == NULL,
	       "single-file lookup");
	st_checkpoint_close(&c);
	free(index);
	free(dir);
}

/* A file torch + safetensors 0.8 wrote (save_file with metadata): header
 * order, metadata and values as torch meant them. */
static void test_torch_written(void)
{
	const char *fx = getenv("POROS_FIXTURES");
	char *path = xasprintf("%s/torch-written.safetensors", fx && *fx ? fx : "tests/fixtures/formats"), err[512];
	const float h[5] = { 1.0f, -2.5f, 65504.0f, 5.960464477539063e-08f, 0.0999755859375f };
	const float b[5] = { 1.0f, -2.5f, 3.00405527047391e+38f, 9.98402083170343e-31f, 0.10009765625f };
	const float fl[4] = { 0.1f, 0.2f, 0.3f, 0.4f };
	struct st_file f;
	float out[5];
	int64_t ints[6];

	if (st_open(&f, path, err, sizeof err) < 0) {
		CHECKF(0, "torch file: %s", err);
		free(path);
		return;
	}
	CHECKF(f.n == 4 && strcmp(f.t[0].name, "i") == 0 && strcmp(f.t[3].name, "h") == 0, "header order i f b h");
	CHECKF(f.data_start == 280 && f.size == 280 + 84, "layout: data at %zu, size %zu", f.data_start, f.size);
	CHECKF(f.metadata && strcmp(cJSON_GetObjectItem(f.metadata, "who")->valuestring, "torch") == 0, "metadata");
	CHECKF(st_read_f32(&f, st_find(&f, "h"), out, 5, err, sizeof err) == 0 && memcmp(out, h, sizeof h) == 0, "F16 from torch");
	CHECKF(st_read_f32(&f, st_find(&f, "b"), out, 5, err, sizeof err) == 0 && memcmp(out, b, sizeof b) == 0, "BF16 from torch");
	CHECKF(st_read_f32(&f, st_find(&f, "f"), out, 4, err, sizeof err) == 0 && memcmp(out, fl, sizeof fl) == 0 &&
	           st_find(&f, "f")->shape[0] == 2 && st_find(&f, "f")->shape[1] == 2,
	       "F32 from torch");
	CHECKF(st_find(&f, "i")->dtype == ST_I64 && st_find(&f, "i")->shape[1] == 3, "I64 shape");
	memcpy(ints, st_data(&f, st_find(&f, "i")), sizeof ints);
	CHECKF(ints[0] == 0 && ints[5] == 5, "I64 values");
	st_close(&f);
	free(path);
}

/* Shapes whose product does not fit 64 bits, or does only through a zero:
 * checked without overflow (UBSan would flag a signed wrap). */
static void test_huge_shapes(void)
{
	char err[512];
	struct st_file f;
	char *p;

	/* 2^53 x 1024 x 0: an empty tensor, whatever the other dimensions */
	static const char zero_dim[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,1024,0],\"data_offsets\":[0,0]}}";
	static const char huge_dim[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,1024],\"data_offsets\":[0,0]}}";

	p = write_raw("zero_dim.safetensors", strlen(zero_dim), zero_dim, 0);
	CHECKF(st_open(&f, p, err, sizeof err) == 0, "zero-dim tensor: %s", err);
	if (f.n == 1)
		CHECKF(st_numel(&f.t[0]) == 0 && f.t[0].nbytes == 0, "numel %lld", st_numel(&f.t[0]));
	st_close(&f);
	free(p);
	/* 2^53 x 1024 bytes: more than 2^63 */
	p = write_raw("huge_dim.safetensors", strlen(huge_dim), huge_dim, 0);
	CHECKF(st_open(&f, p, err, sizeof err) < 0 && strstr(err, "shape overflows the size of a tensor"), "huge: %s", err);
	free(p);
}

/* A FIFO, a directory and a dangling link are refused at once (the FIFO
 * open must not wait for a writer: a blocked test would hang here). */
static void test_not_regular(void)
{
	char *fifo = xasprintf("%s/fifo.safetensors", tmpdir), *dir = xasprintf("%s/dir.safetensors", tmpdir);
	char *link = xasprintf("%s/link.safetensors", tmpdir), err[512];
	struct st_file f;

	CHECKF(mkfifo(fifo, 0644) == 0 && mkdir(dir, 0755) == 0 && symlink("nowhere/blob", link) == 0, "make files");
	CHECKF(st_open(&f, fifo, err, sizeof err) < 0 && strstr(err, "fifo.safetensors: not a regular file"), "fifo: %s", err);
	CHECKF(st_check_regular(fifo, err, sizeof err) < 0 && strstr(err, "not a regular file"), "fifo check: %s", err);
	CHECKF(st_open(&f, dir, err, sizeof err) < 0 && strstr(err, "not a regular file"), "dir: %s", err);
	CHECKF(st_open(&f, link, err, sizeof err) < 0 && strstr(err, "link.safetensors: a dangling symbolic link"),
	       "link: %s", err);
	CHECKF(st_check_regular(link, err, sizeof err) < 0 && strstr(err, "a dangling symbolic link"), "link check: %s", err);
	unlink(fifo);
	rmdir(dir);
	unlink(link);
	free(fifo);
	free(dir);
	free(link);
}

/* st_header is the start of the file st_write writes, without the data. */
static void test_header(void)
{
	float w[6] = { 1, 2, 3, 4, 5, 6 };
	uint16_t h[3] = { 0x3f80, 0xbfc0, 0x7f80 };
	const struct st_out outs[] = {
		{ "w", ST_F32, 2, { 2, 3 }, w },
		{ "empty", ST_BF16, 2, { 0, 4 }, NULL },
		{ "h", ST_BF16, 1, { 3 }, h },
	};
	struct st_out bare[3], dup[2];
	char *path = xasprintf("%s/header.safetensors", tmpdir), err[512], *file;
	cJSON *meta = cJSON_CreateObject();
	unsigned char *header;
	size_t len = 0, flen = 0;

	cJSON_AddStringToObject(meta, "format", "pt");
	CHECKF(st_write(path, outs, 3, meta, err, sizeof err) == 0, "st_write: %s", err);
	file = read_whole_file(path, &flen);
	memcpy(bare, outs, sizeof bare);
	for (int i = 0; i < 3; i++)
		bare[i].data = NULL;   /* never read */
	header = st_header(&len, bare, 3, meta, path, err, sizeof err);
	CHECKF(header != NULL, "st_header: %s", err);
	CHECKF(len % 8 == 0 && flen == len + sizeof w + sizeof h, "header %zu bytes, file %zu", len, flen);
	CHECK(header != NULL && file != NULL && flen >= len && memcmp(header, file, len) == 0);
	free(header);
	dup[0] = outs[0];
	dup[1] = outs[0];
	CHECKF(st_header(&len, dup, 2, NULL, path, err, sizeof err) == NULL && strstr(err, "duplicate tensor name \"w\""),
	       "dup: %s", err);
	free(file);
	free(path);
	cJSON_Delete(meta);
}

int main(void)
{
	if (scratch_make(tmpdir) < 0)
		return 1;
	test_roundtrip();
	test_f16();
	test_conversions();
	test_malformed();
	test_write_errors();
	test_header();
	test_checkpoint();
	test_torch_written();
	test_huge_shapes();
	test_not_regular();
	scratch_remove(tmpdir);
	return test_verdict("test_safetensors");
}

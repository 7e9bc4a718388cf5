/* tools/poros-train/model_hash.c: the base model's content digest (see
 * model_hash.h).  Four independent 64-bit lanes, each word multiplied,
 * rotated and multiplied again, so the loop runs at memory speed; the
 * lanes are mixed with the length at the end. */
#include "model_hash.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "util/util.h"

#define P1 0x9e3779b185ebca87ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull

static uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* the 8 bytes at p as a little-endian word, whatever the host */
static uint64_t word_at(const unsigned char *p)
{
	uint64_t w = 0;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&w, p, sizeof w);
#else
	for (int i = 7; i >= 0; i--)
		w = (w << 8) | p[i];
#endif
	return w;
}

static uint64_t lane_step(uint64_t lane, uint64_t w)
{
	return rotl(lane + w * P2, 31) * P1;
}

static void stripe(struct content_hash *h, const unsigned char *p)
{
	for (int i = 0; i < 4; i++)
		h->lane[i] = lane_step(h->lane[i], word_at(p + 8 * i));
}

void content_hash_init(struct content_hash *h)
{
	memset(h, 0, sizeof *h);
	for (int i = 0; i < 4; i++)
		h->lane[i] = P3 * (uint64_t)(i + 1);
}

void content_hash_update(struct content_hash *h, const void *data, size_t len)
{
	const unsigned char *p = data;

	h->total += len;
	if (h->tail_len) {
		size_t take = 32 - h->tail_len < len ? 32 - h->tail_len : len;

		memcpy(h->tail + h->tail_len, p, take);
		h->tail_len += take;
		p += take;
		len -= take;
		if (h->tail_len < 32)
			return;
		stripe(h, h->tail);
		h->tail_len = 0;
	}
	for (; len >= 32; p += 32, len -= 32)
		stripe(h, p);
	memcpy(h->tail, p, len);
	h->tail_len = len;
}

static uint64_t avalanche(uint64_t x)
{
	x ^= x >> 33;
	x *= P2;
	x ^= x >> 29;
	x *= P3;
	return x ^ (x >> 32);
}

void content_hash_final(struct content_hash *h, char out[65])
{
	unsigned char last[32] = { 0 };
	uint64_t mix = h->total * P1;

	/* the tail zero-padded; the length tells "ab" from "ab\0" */
	memcpy(last, h->tail, h->tail_len);
	stripe(h, last);
	for (int i = 0; i < 4; i++)
		mix = rotl(mix ^ h->lane[i], 27) * P1 + P3;
	for (int i = 0; i < 4; i++)
		snprintf(out + 16 * i, 17, "%016llx", (unsigned long long)avalanche(h->lane[i] ^ mix ^ (uint64_t)i * P2));
}

int content_hash_file(struct content_hash *h, const char *path, size_t *bytes, char *err, size_t errsz)
{
	enum { CHUNK = 1 << 20 };
	struct stat st;
	size_t got, len = 0;
	char sz[32];
	unsigned char *buf;
	FILE *f;

	/* regular first: opening a FIFO would wait */
	if (stat(path, &st) < 0)
		return snprintf(err, errsz, "%s: %s", path, strerror(errno)), -1;
	if (!S_ISREG(st.st_mode))
		return snprintf(err, errsz, "%s: not a regular file", path), -1;
	if ((f = fopen(path, "rb")) == NULL)
		return snprintf(err, errsz, "%s: %s", path, strerror(errno)), -1;
	snprintf(sz, sizeof sz, "%lld:", (long long)st.st_size);
	content_hash_update(h, sz, strlen(sz));
	buf = xmalloc(CHUNK);
	while ((got = fread(buf, 1, CHUNK, f)) > 0) {
		content_hash_update(h, buf, got);
		len += got;
	}
	free(buf);
	if (ferror(f) || len != (size_t)st.st_size) {
		int e = ferror(f) ? errno : 0;

		fclose(f);
		return snprintf(err, errsz, "%s: %s", path, e ? strerror(e) : "changed while it was read"), -1;
	}
	fclose(f);
	*bytes += len;
	return 0;
}

int model_hash(char out[MODEL_HASH_LEN + 1], size_t *bytes, const struct model_config *mc, unsigned long long seed,
               char *err, size_t errsz)
{
	struct content_hash h;
	char hex[65], buf[64];

	*bytes = 0;
	content_hash_init(&h);
	if (content_hash_file(&h, mc->config_path, bytes, err, errsz) < 0)
		return -1;
	if (mc->checkpoint_dir == NULL) {
		snprintf(buf, sizeof buf, "seed:%llu", seed);
		content_hash_update(&h, buf, strlen(buf));
		content_hash_final(&h, hex);
		snprintf(out, MODEL_HASH_LEN + 1, "synthetic:%s", hex);
		return 0;
	}
	struct st_checkpoint ck;

	if (st_checkpoint_open(&ck, mc->checkpoint_dir, err, errsz) < 0)
		return -1;
	for (int i = 0; i < ck.nfiles; i++) {
		const struct st_file *f = &ck.files[i];
		const char *base = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
		char head[512];

		snprintf(head, sizeof head, "%s:%zu:", base, f->size);
		content_hash_update(&h, head, strlen(head));
		content_hash_update(&h, f->map, f->size);
		*bytes += f->size;
	}
	st_checkpoint_close(&ck);
	content_hash_final(&h, hex);
	snprintf(out, MODEL_HASH_LEN + 1, "st64x4:%s", hex);
	return 0;
}

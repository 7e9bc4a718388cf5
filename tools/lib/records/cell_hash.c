/* tools/lib/records/cell_hash.c: a cell's config_hash, SHA-256 over its canonical
 * configuration, and the fields at which two configurations differ. */
#include "cell_hash.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* --- SHA-256 (FIPS 180-4) ------------------------------------------------- */

static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n)
{
	return x >> n | x << (32 - n);
}

/* One 64-byte block into the state h. */
static void sha256_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], s[8];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(s, h, sizeof s);
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = s[7] + (ror(s[4], 6) ^ ror(s[4], 11) ^ ror(s[4], 25)) + ((s[4] & s[5]) ^ (~s[4] & s[6])) +
		              sha256_k[i] + w[i];
		uint32_t t2 = (ror(s[0], 2) ^ ror(s[0], 13) ^ ror(s[0], 22)) + ((s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]));
		memmove(s + 1, s, 7 * sizeof *s);
		s[4] += t1;
		s[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		h[i] += s[i];
}

void sha256(unsigned char digest[32], const void *data, size_t n)
{
	uint32_t h[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	const unsigned char *p = data;
	unsigned char tail[128] = { 0 };
	size_t rest = n % 64, tail_len = rest < 56 ? 64 : 128;
	uint64_t bits = (uint64_t)n * 8;

	for (size_t i = 0; i + 64 <= n; i += 64)
		sha256_block(h, p + i);
	/* The last bytes, a 1 bit, zeros, and the length in bits, big-endian. */
	memcpy(tail, p + (n - rest), rest);
	tail[rest] = 0x80;
	for (int i = 0; i < 8; i++)
		tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
	for (size_t i = 0; i < tail_len; i += 64)
		sha256_block(h, tail + i);
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 4; j++)
			digest[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

/* --- the canonical configuration ------------------------------------------ */

static int by_key(const void *a, const void *b)
{
	return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Re-links every object's members in key order, depth first. */
static void sort_keys(cJSON *o)
{
	cJSON **kids, *k;
	size_t n = 0, i = 0;

	if (cJSON_IsArray(o)) {
		cJSON_ArrayForEach(k, o)
			sort_keys(k);
		return;
	}
	if (!cJSON_IsObject(o))
		return;
	cJSON_ArrayForEach(k, o)
		n++;
	if (n == 0)
		return;
	kids = xcalloc(n, sizeof *kids);
	cJSON_ArrayForEach(k, o) {
		sort_keys(k);
		kids[i++] = k;
	}
	if (n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(kids, n, sizeof *kids, by_key);
	for (i = 0; i < n; i++) {
		kids[i]->prev = i > 0 ? kids[i - 1] : kids[n - 1]; /* cJSON: the head's prev is the tail */
		kids[i]->next = i + 1 < n ? kids[i + 1] : NULL;
	}
	o->child = kids[0];
	free(kids);
}

cJSON *cell_config_json(const struct cell *c)
{
	cJSON *o = cell_to_json(c), *model, *hardware;

	if (o == NULL)
		die(EXIT_RUNTIME, "out of memory");
	/* Names and places: renaming a spec or moving its output directory
	 * measures nothing new. */
	cJSON_DeleteItemFromObjectCaseSensitive(o, "spec_id");
	cJSON_DeleteItemFromObjectCaseSensitive(o, "output_dir");
	/* The host a plan is checked against changes no measurement. */
	hardware = cJSON_GetObjectItemCaseSensitive(o, "hardware");
	if (hardware)
		cJSON_DeleteItemFromObjectCaseSensitive(hardware, "host_ram_gb");
	model = cJSON_GetObjectItemCaseSensitive(o, "model");
	if (model)
		cJSON_DeleteItemFromObjectCaseSensitive(model, "display_name");
	/* Only blockwise reads the poros section (block size, prefetch): a
	 * change there measures no other method anew. */
	if (c->method != METHOD_POROS)
		cJSON_DeleteItemFromObjectCaseSensitive(o, "poros");
	sort_keys(o);
	return o;
}

void cell_config_hash(char out[CELL_HASH_LEN + 1], const struct cell *c)
{
	cJSON *o = cell_config_json(c);
	char *text = cJSON_PrintUnformatted(o);
	unsigned char d[32];

	if (text == NULL)
		die(EXIT_RUNTIME, "out of memory");
	sha256(d, text, strlen(text));
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", d[i]);
	free(text);
	cJSON_Delete(o);
}

/* --- differences ---------------------------------------------------------- */

static void diff_add(char *out, size_t outsz, int *n, const char *path)
{
	size_t len = strlen(out);

	if (len + 1 < outsz)
		snprintf(out + len, outsz - len, "%s%s", *n ? ", " : "", path);
	(*n)++;
}

static void diff_walk(char *out, size_t outsz, int *n, const char *prefix, const cJSON *a, const cJSON *b)
{
	const cJSON *k;

	if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
		cJSON_ArrayForEach(k, a) {
			char *path = *prefix ? xasprintf("%s.%s", prefix, k->string) : xstrdup(k->string);
			const cJSON *other = cJSON_GetObjectItemCaseSensitive(b, k->string);
			if (other == NULL)
				diff_add(out, outsz, n, path);
			else
				diff_walk(out, outsz, n, path, k, other);
			free(path);
		}
		cJSON_ArrayForEach(k, b)
			if (cJSON_GetObjectItemCaseSensitive(a, k->string) == NULL) {
				char *path = *prefix ? xasprintf("%s.%s", prefix, k->string) : xstrdup(k->string);
				diff_add(out, outsz, n, path);
				free(path);
			}
		return;
	}
	if (!cJSON_Compare(a, b, 1))
		diff_add(out, outsz, n, *prefix ? prefix : "(the whole cell)");
}

int cell_config_diff(char *out, size_t outsz, const cJSON *a, const cJSON *b)
{
	int n = 0;

	if (outsz > 0)
		out[0] = '\0';
	diff_walk(out, outsz, &n, "", a, b);
	return n;
}

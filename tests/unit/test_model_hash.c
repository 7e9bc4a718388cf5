/* tests/unit/test_model_hash.c: the content digest that identifies a base
 * model: the same bytes give the same digest however they are fed in,
 * any changed byte or length gives another, and the value itself is
 * pinned (a change would make every checkpoint's model another). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/poros-train/model_hash.h"
#include "test_common.h"

#define EMPTY_DIGEST "ab023b609d4bd6c2f689297fea8aacd8fb94d4b54119f322126148843cacccc8"
#define POROS_DIGEST "ac6be903fbc61bcf9cc466c4000346712f598aa6a51959d5b6d8ed674f0f07e2"

static void digest(char out[65], const void *data, size_t len)
{
	struct content_hash h;

	content_hash_init(&h);
	content_hash_update(&h, data, len);
	content_hash_final(&h, out);
}

int main(void)
{
	enum { N = 1000 };
	unsigned char *buf = malloc(N);
	char whole[65], pieces[65], other[65];
	struct content_hash h;

	for (int i = 0; i < N; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	digest(whole, buf, N);
	CHECK(strlen(whole) == 64);
	/* fed in uneven pieces, across the 32-byte stripes */
	for (size_t step = 1; step < 70; step += 7) {
		content_hash_init(&h);
		for (size_t off = 0; off < N; off += step)
			content_hash_update(&h, buf + off, off + step <= N ? step : N - off);
		content_hash_final(&h, pieces);
		CHECKF(strcmp(whole, pieces) == 0, "pieces of %zu: %s, whole: %s", step, pieces, whole);
	}
	/* one bit anywhere, in a stripe or in the tail */
	for (size_t at = 0; at < N; at += 97) {
		buf[at] ^= 1;
		digest(other, buf, N);
		CHECKF(strcmp(whole, other) != 0, "bit at %zu does not change the digest", at);
		buf[at] ^= 1;
	}
	/* the length counts: a zero byte more is another content */
	digest(other, "ab", 2);
	digest(pieces, "ab\0", 3);
	CHECK(strcmp(other, pieces) != 0);
	/* the pinned value of the empty content and of "poros" */
	digest(other, "", 0);
	digest(pieces, "poros", 5);
	CHECKF(strcmp(other, EMPTY_DIGEST) == 0, "empty: %s", other);
	CHECKF(strcmp(pieces, POROS_DIGEST) == 0, "poros: %s", pieces);
	/* a file: its size, a colon, its bytes (what model_hash has always fed) */
	{
		char path[] = "/tmp/test_model_hash.XXXXXX", why[256] = "";
		int fd = mkstemp(path);
		FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
		size_t bytes = 0;

		CHECK(f != NULL && fwrite(buf, 1, N, f) == N && fclose(f) == 0);
		content_hash_init(&h);
		CHECKF(content_hash_file(&h, path, &bytes, why, sizeof why) == 0, "%s", why);
		content_hash_final(&h, pieces);
		content_hash_init(&h);
		content_hash_update(&h, "1000:", 5);
		content_hash_update(&h, buf, N);
		content_hash_final(&h, other);
		CHECKF(strcmp(pieces, other) == 0 && bytes == N, "file: %s, bytes: %s (%zu)", pieces, other, bytes);
		unlink(path);
		CHECK(content_hash_file(&h, path, &bytes, why, sizeof why) < 0 && strstr(why, path) != NULL);
		CHECK(content_hash_file(&h, "/tmp", &bytes, why, sizeof why) < 0 && strstr(why, "not a regular file"));
	}
	free(buf);
	return test_verdict("test_model_hash");
}

/* tests/fuzz/fuzz_safetensors.c: the safetensors reader.  The input is a
 * whole .safetensors file; st_open must refuse it with a message or accept
 * a header whose every tensor lies inside the file, and every accepted
 * tensor must read (or be refused) without touching memory outside it. */
#include "fuzz_common.h"

#include "model/model.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct st_file f;
	const char *path = fuzz_write_file("t.safetensors", data, size);
	err[0] = '\0';
	if (st_open(&f, path, err, sizeof err) != 0) {
		if (err[0] == '\0')
			abort();
		return 0;
	}
	for (int i = 0; i < f.n; i++) {
		const struct st_tensor *t = &f.t[i];
		if (t->offset > f.size - f.data_start || t->nbytes > f.size - f.data_start - t->offset) {
			fprintf(stderr, "tensor %s lies outside the file\n", t->name);
			abort();
		}
		if (st_find(&f, t->name) == NULL) {
			fprintf(stderr, "tensor %s not found by name\n", t->name);
			abort();
		}
		long long n = st_numel(t);
		if (n < 0 || n > (1 << 20))
			continue;
		float *out = malloc((size_t)(n ? n : 1) * sizeof *out);
		uint16_t *half = malloc((size_t)(n ? n : 1) * sizeof *half);
		(void)st_read_f32(&f, t, out, (size_t)n, err, sizeof err);
		(void)st_read_bf16(&f, t, half, (size_t)n, err, sizeof err);
		/* A wrong element count must be refused, not over-read. */
		(void)st_read_f32(&f, t, out, (size_t)n / 2, err, sizeof err);
		free(out);
		free(half);
	}
	st_close(&f);
	return 0;
}

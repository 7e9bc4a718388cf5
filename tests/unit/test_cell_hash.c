/* tests/unit/test_cell_hash.c: SHA-256 against the FIPS 180-4 examples,
 * and a cell's config_hash: what changes it, what does not, and the
 * fields two configurations differ in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

static const char *const CELL_TEXT =
	"{\"schema\":\"poros.cell/1\",\"cell_id\":\"poros_tiny_qwen2_nf4\",\"spec_id\":\"unit\","
	"\"method\":\"poros\",\"precision\":\"nf4\","
	"\"model\":{\"model_id\":\"poros/tiny-qwen2\",\"display_name\":\"tiny\",\"param_count_b\":null,"
	"\"arch\":\"tiny_qwen2\"},"
	"\"hardware\":{\"gpu_name\":null,\"vram_gb\":null,\"pcie_gen\":null},"
	"\"training\":{\"steps\":4,\"seq_len\":64,\"batch_size\":1,\"gradient_accumulation_steps\":2,"
	"\"warmup_steps\":1,\"dataset\":\"synthetic\",\"seed\":42,\"learning_rate\":0.0002,"
	"\"lr_schedule\":\"constant\",\"weight_decay\":0.0,\"max_grad_norm\":1.0,\"timeout_s\":3600},"
	"\"lora\":{\"rank\":8,\"alpha\":16,\"dropout\":0.0,\"target_modules\":[\"q_proj\",\"v_proj\"]},"
	"\"poros\":{\"block_size\":2,\"enable_prefetch\":true},"
	"\"output_dir\":\"out/unit\",\"tokens_per_step\":128}";

static void hex(char out[65], const unsigned char d[32])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256(void)
{
	static const struct {
		const char *msg;
		const char *want;
	} cases[] = {
		{ "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
		{ "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
	};
	unsigned char d[32];
	char got[65], *million = xmalloc(1000000);

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		sha256(d, cases[i].msg, strlen(cases[i].msg));
		hex(got, d);
		CHECKF(strcmp(got, cases[i].want) == 0, "sha256(\"%s\") = %s, want %s", cases[i].msg, got, cases[i].want);
	}
	/* a million "a": many blocks, and a length past one 32-bit word of bits */
	memset(million, 'a', 1000000);
	sha256(d, million, 1000000);
	hex(got, d);
	CHECKF(strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0, "sha256(1e6 x a) = %s",
	       got);
	free(million);
}

/* The cell of CELL_TEXT with one value replaced (path "a.b" or "a"; NULL: none). */
static void cell_with(struct cell *c, const char *path, const char *json_value)
{
	cJSON *o = cJSON_Parse(CELL_TEXT);
	char err[256];

	if (path)
		json_put_path(o, path, cJSON_Parse(json_value));
	if (cell_from_json(c, o, err, sizeof err) < 0) {
		fprintf(stderr, "FAILED: %s = %s: %s\n", path, json_value, err);
		failures++;
		exit(1);
	}
	cJSON_Delete(o);
}

static void hash_of(char out[CELL_HASH_LEN + 1], const char *path, const char *json_value)
{
	struct cell c;

	cell_with(&c, path, json_value);
	cell_config_hash(out, &c);
	cell_free(&c);
}

static void test_config_hash(void)
{
	char base[CELL_HASH_LEN + 1], h[CELL_HASH_LEN + 1];
	static const char *const same[][2] = {
		{ "spec_id", "\"renamed\"" }, { "output_dir", "\"elsewhere\"" }, { "model.display_name", "\"Other\"" },
	};
	static const char *const changed[][2] = {
		{ "training.steps", "8" }, { "training.warmup_steps", "2" }, { "lora.rank", "16" },
		{ "training.seed", "7" }, { "poros.enable_prefetch", "false" }, { "hardware.vram_gb", "24" },
		{ "lora.target_modules", "[\"q_proj\"]" }, { "training.gradient_checkpointing", "true" },
	};

	hash_of(base, NULL, NULL);
	CHECK(strlen(base) == CELL_HASH_LEN && strncmp(base, "sha256:", 7) == 0);
	/* the same cell, the same hash, every time */
	hash_of(h, NULL, NULL);
	CHECK(strcmp(h, base) == 0);
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
		hash_of(h, same[i][0], same[i][1]);
		CHECKF(strcmp(h, base) == 0, "%s = %s changed the hash", same[i][0], same[i][1]);
	}
	for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
		hash_of(h, changed[i][0], changed[i][1]);
		CHECKF(strcmp(h, base) != 0, "%s = %s left the hash as it was", changed[i][0], changed[i][1]);
	}
}

/* The poros section is the poros method's alone: another block size is
 * another measurement of a poros cell, the same one of any other method's. */
static void test_config_hash_per_method(void)
{
	static const char *const others[] = { "resident", "unsloth", "peft", "accelerate_offload" };
	char base[CELL_HASH_LEN + 1], h[CELL_HASH_LEN + 1], id[64], method[64];

	hash_of(base, NULL, NULL);
	hash_of(h, "poros.block_size", "7");
	CHECKF(strcmp(h, base) != 0, "poros.block_size left a poros cell's hash as it was");
	for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
		struct cell c;
		cJSON *o = cJSON_Parse(CELL_TEXT);
		char err[256];

		snprintf(method, sizeof method, "\"%s\"", others[i]);
		snprintf(id, sizeof id, "\"%s_tiny_qwen2_nf4\"", others[i]);
		json_put_path(o, "method", cJSON_Parse(method));
		json_put_path(o, "cell_id", cJSON_Parse(id));
		if (cell_from_json(&c, o, err, sizeof err) < 0) {
			fprintf(stderr, "FAILED: %s cell: %s\n", others[i], err);
			exit(1);
		}
		cell_config_hash(base, &c);
		c.poros.block_size = 7;
		c.poros.enable_prefetch = !c.poros.enable_prefetch;
		cell_config_hash(h, &c);
		CHECKF(strcmp(h, base) == 0, "poros.* changed a %s cell's hash", others[i]);
		c.training.steps++;
		cell_config_hash(h, &c);
		CHECKF(strcmp(h, base) != 0, "training.steps left a %s cell's hash as it was", others[i]);
		cell_free(&c);
		cJSON_Delete(o);
	}
}

static void test_canonical_and_diff(void)
{
	struct cell a, b;
	cJSON *ja, *jb;
	char *text, diff[256];
	int n;

	cell_with(&a, NULL, NULL);
	cell_with(&b, "training.steps", "8");
	ja = cell_config_json(&a);
	jb = cell_config_json(&b);
	text = cJSON_PrintUnformatted(ja);
	/* keys sorted at every level, names and places left out */
	CHECKF(strncmp(text, "{\"cell_id\":\"poros_tiny_qwen2_nf4\",\"hardware\":{\"gpu_name\":null,\"pcie_gen\":null,", 76) == 0,
	       "canonical form starts %.80s", text);
	CHECK(strstr(text, "spec_id") == NULL && strstr(text, "output_dir") == NULL && strstr(text, "display_name") == NULL);
	CHECK(strstr(text, "\"lora\":{\"alpha\":16,\"dropout\":0,\"rank\":8,\"target_modules\":[\"q_proj\",\"v_proj\"]}") != NULL);
	n = cell_config_diff(diff, sizeof diff, ja, jb);
	CHECKF(n == 1 && strcmp(diff, "training.steps") == 0, "diff %d \"%s\"", n, diff);
	n = cell_config_diff(diff, sizeof diff, ja, ja);
	CHECK(n == 0 && diff[0] == '\0');
	free(text);
	cJSON_Delete(ja);
	cJSON_Delete(jb);
	cell_free(&a);
	cell_free(&b);
}

int main(void)
{
	set_progname("test_cell_hash");
	test_sha256();
	test_config_hash();
	test_config_hash_per_method();
	test_canonical_and_diff();
	return test_verdict("test_cell_hash");
}

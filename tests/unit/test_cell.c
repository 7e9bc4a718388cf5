/* tests/unit/test_cell.c: the cell schema: round trip through JSON, and
 * every way cell_from_json must refuse a cell (naming the field). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "util/util.h"
#include "test_common.h"

/* The cell of docs/schemas.md, built by hand. */
static void example_cell(struct cell *c)
{
	memset(c, 0, sizeof *c);
	c->cell_id = xstrdup("poros_qwen2_5_32b_nf4");
	c->spec_id = xstrdup("qwen2_5_32b_3090");
	c->method = METHOD_POROS;
	c->precision = PRECISION_NF4;
	c->model.model_id = xstrdup("Qwen/Qwen2.5-32B");
	c->model.display_name = xstrdup("Qwen2.5 32B");
	c->model.param_count_b = 32.8;
	c->model.arch = xstrdup("qwen2_5_32b");
	c->hardware.gpu_name = xstrdup("RTX 3090");
	c->hardware.vram_gb = 24;
	c->hardware.pcie_gen = 4;
	c->training.steps = 20;
	c->training.seq_len = 512;
	c->training.batch_size = 1;
	c->training.gradient_accumulation_steps = 8;
	c->training.warmup_steps = 3;
	c->training.dataset = xstrdup("synthetic");
	c->training.seed = 42;
	c->training.learning_rate = 2e-4;
	c->training.lr_schedule = LR_CONSTANT;
	c->training.weight_decay = 0.0;
	c->training.max_grad_norm = 1.0;
	c->training.timeout_s = 3600;
	c->training.passes = 1;
	c->lora.rank = 16;
	c->lora.alpha = 32;
	c->lora.dropout = 0.05;
	c->lora.target_mask = 0x7f;
	c->lora.n_targets = 7;
	c->poros.block_size = 4;
	c->poros.enable_prefetch = 1;
	c->output_dir = xstrdup("out/qwen2_5_32b_3090");
	c->tokens_per_step = 4096;
}

/* The exact text of the example in docs/schemas.md (whitespace removed),
 * with training.gradient_checkpointing, which cell_to_json always writes. */
static const char doc_example[] =
	"{\"schema\":\"poros.cell/1\",\"cell_id\":\"poros_qwen2_5_32b_nf4\",\"spec_id\":\"qwen2_5_32b_3090\","
	"\"method\":\"poros\",\"precision\":\"nf4\","
	"\"model\":{\"model_id\":\"Qwen/Qwen2.5-32B\",\"display_name\":\"Qwen2.5 32B\",\"param_count_b\":32.8,\"arch\":\"qwen2_5_32b\"},"
	"\"hardware\":{\"gpu_name\":\"RTX 3090\",\"vram_gb\":24,\"pcie_gen\":4},"
	"\"training\":{\"steps\":20,\"seq_len\":512,\"batch_size\":1,\"gradient_accumulation_steps\":8,\"warmup_steps\":3,"
	"\"dataset\":\"synthetic\",\"seed\":42,\"learning_rate\":0.0002,\"lr_schedule\":\"constant\","
	"\"weight_decay\":0,\"max_grad_norm\":1,\"timeout_s\":3600,\"gradient_checkpointing\":false,"
	"\"lr_warmup_steps\":0,\"passes\":1},"
	"\"lora\":{\"rank\":16,\"alpha\":32,\"dropout\":0.05,"
	"\"target_modules\":[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\",\"gate_proj\",\"up_proj\",\"down_proj\"]},"
	"\"poros\":{\"block_size\":4,\"enable_prefetch\":true},"
	"\"output_dir\":\"out/qwen2_5_32b_3090\",\"tokens_per_step\":4096}";

static void test_round_trip(void)
{
	struct cell c, back, copy;
	char err[256] = "";
	cJSON *j, *j2;
	char *s1, *s2;

	example_cell(&c);
	CHECK(cell_validate(&c, err, sizeof err) == 0);
	j = cell_to_json(&c);
	CHECK(j != NULL);
	s1 = cJSON_PrintUnformatted(j);
	CHECK(strcmp(s1, doc_example) == 0);
	if (strcmp(s1, doc_example) != 0)
		fprintf(stderr, "  got:  %s\n  want: %s\n", s1, doc_example);

	CHECK(cell_from_json(&back, j, err, sizeof err) == 0);
	if (*err)
		fprintf(stderr, "  err: %s\n", err);
	CHECK(strcmp(back.cell_id, "poros_qwen2_5_32b_nf4") == 0);
	CHECK(strcmp(back.model.model_id, "Qwen/Qwen2.5-32B") == 0);
	CHECK(back.model.param_count_b == 32.8);
	CHECK(back.hardware.vram_gb == 24 && back.hardware.pcie_gen == 4);
	CHECK(back.training.steps == 20 && back.training.seq_len == 512);
	CHECK(back.training.gradient_accumulation_steps == 8 && back.training.warmup_steps == 3);
	CHECK(back.training.seed == 42 && back.training.learning_rate == 2e-4);
	CHECK(back.training.lr_schedule == LR_CONSTANT && back.training.timeout_s == 3600);
	CHECK(back.training.gradient_checkpointing == 0);
	CHECK(back.lora.rank == 16 && back.lora.alpha == 32 && back.lora.dropout == 0.05);
	CHECK(back.lora.target_mask == 0x7f && back.lora.n_targets == 7);
	CHECK(back.poros.block_size == 4 && back.poros.enable_prefetch == 1);
	CHECK(back.tokens_per_step == 4096);
	CHECK(strcmp(back.output_dir, "out/qwen2_5_32b_3090") == 0);

	j2 = cell_to_json(&back);
	s2 = cJSON_PrintUnformatted(j2);
	CHECK(strcmp(s1, s2) == 0);

	/* A copy owns its strings: freeing the original leaves it intact. */
	cell_copy(&copy, &back);
	cell_free(&back);
	CHECK(back.cell_id == NULL);
	CHECK(strcmp(copy.model.arch, "qwen2_5_32b") == 0 && copy.training.steps == 20);

	/* A subset of targets, in any order, comes back in canonical order. */
	copy.lora.target_mask = 1u << 6 | 1u << 0;
	copy.lora.n_targets = 2;
	cJSON_Delete(j2);
	j2 = cell_to_json(&copy);
	{
		const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(j2, "lora"), "target_modules");

		CHECK(cJSON_GetArraySize(t) == 2);
		CHECK(strcmp(cJSON_GetArrayItem(t, 0)->valuestring, "q_proj") == 0);
		CHECK(strcmp(cJSON_GetArrayItem(t, 1)->valuestring, "down_proj") == 0);
	}
	cJSON_Delete(j);
	cJSON_Delete(j2);
	cJSON_free(s1);
	cJSON_free(s2);
	cell_free(&c);
	cell_free(&copy);
}

/* Parses text (the example with one change), expects cell_from_json to
 * refuse it with an error containing want. */
static void expect_reject_text(int line, const char *text, const char *want)
{
	struct cell c;
	char err[256] = "";
	cJSON *j = cJSON_Parse(text);

	if (j == NULL) {
		fprintf(stderr, "%s:%d: test JSON does not parse\n", __FILE__, line);
		failures++;
		return;
	}
	if (cell_from_json(&c, j, err, sizeof err) == 0) {
		fprintf(stderr, "%s:%d: accepted, expected \"%s\"\n", __FILE__, line, want);
		failures++;
		cell_free(&c);
	} else if (strstr(err, want) == NULL) {
		fprintf(stderr, "%s:%d: error \"%s\" does not contain \"%s\"\n", __FILE__, line, err, want);
		failures++;
	} else {
		/* A refused cell holds nothing to free. */
		CHECK(c.cell_id == NULL && c.model.model_id == NULL && c.output_dir == NULL);
	}
	cJSON_Delete(j);
}

/* The text of doc_example with the first from replaced by to (malloc'd). */
static char *example_edited(const char *from, const char *to)
{
	const char *at = strstr(doc_example, from);

	if (at == NULL)
		return NULL;
	return xasprintf("%.*s%s%s", (int)(at - doc_example), doc_example, to, at + strlen(from));
}

/* The example with the first occurrence of from replaced by to. */
static void expect_reject_edit(int line, const char *from, const char *to, const char *want)
{
	char *text = example_edited(from, to);

	if (text == NULL) {
		fprintf(stderr, "%s:%d: \"%s\" is not in the example\n", __FILE__, line, from);
		failures++;
		return;
	}
	expect_reject_text(line, text, want);
	free(text);
}

#define REJECT(from, to, want) expect_reject_edit(__LINE__, from, to, want)

static void test_rejections(void)
{
	/* structure */
	expect_reject_text(__LINE__, "[1,2]", "cell: expected an object, got an array");
	REJECT("\"schema\":\"poros.cell/1\"", "\"schema\":\"poros.cell/2\"", "schema: expected \"poros.cell/1\"");
	REJECT("\"spec_id\":\"qwen2_5_32b_3090\",", "", "spec_id: missing");
	REJECT("\"steps\":20,", "", "training.steps: missing");
	REJECT("\"steps\":20,", "\"steps\":20,\"steps\":21,", "training.steps: duplicate field");
	REJECT("\"steps\":20,", "\"steps\":20,\"stepz\":20,", "training.stepz: unknown field");
	REJECT("\"tokens_per_step\":4096", "\"tokens_per_step\":4096,\"extra\":1", "extra: unknown field");
	/* types */
	REJECT("\"steps\":20", "\"steps\":\"ten\"", "training.steps: expected a number, got a string");
	REJECT("\"steps\":20", "\"steps\":null", "training.steps: expected a number, got null");
	REJECT("\"model_id\":\"Qwen/Qwen2.5-32B\"", "\"model_id\":7", "model.model_id: expected a string, got a number");
	REJECT("\"enable_prefetch\":true", "\"enable_prefetch\":1", "poros.enable_prefetch: expected true or false");
	REJECT("\"passes\":1", "\"passes\":0", "training.passes: must be at least 1, got 0");
	REJECT("\"passes\":1", "\"passes\":2.5", "training.passes: must be a whole number, got 2.5");
	REJECT("\"lr_warmup_steps\":0", "\"lr_warmup_steps\":-1", "training.lr_warmup_steps: must be at least 0, got -1");
	REJECT("\"gradient_checkpointing\":false", "\"gradient_checkpointing\":\"yes\"",
	       "training.gradient_checkpointing: expected true or false, got a string");
	REJECT("\"gradient_checkpointing\":false", "\"gradient_checkpointing\":0",
	       "training.gradient_checkpointing: expected true or false, got a number");
	REJECT("\"gradient_checkpointing\":false", "\"gradient_checkpointing\":null",
	       "training.gradient_checkpointing: expected true or false, got null");
	REJECT("\"gradient_checkpointing\":false", "\"gradient_checkpointing\":false,\"gradient_checkpointing\":true",
	       "training.gradient_checkpointing: duplicate field");
	REJECT("\"target_modules\":[", "\"target_modules\":[3,", "lora.target_modules[0]: expected a string");
	/* numbers */
	REJECT("\"learning_rate\":0.0002", "\"learning_rate\":1e309", "training.learning_rate: must be a finite number");
	REJECT("\"weight_decay\":0", "\"weight_decay\":-0.1", "training.weight_decay: must be at least 0, got -0.1");
	REJECT("\"seq_len\":512", "\"seq_len\":2000000", "training.seq_len: must be at most 1048576, got 2000000");
	REJECT("\"steps\":20", "\"steps\":2.5", "training.steps: must be a whole number, got 2.5");
	REJECT("\"steps\":20", "\"steps\":0", "training.steps: must be at least 1, got 0");
	REJECT("\"rank\":16", "\"rank\":0", "lora.rank: must be at least 1, got 0");
	REJECT("\"dropout\":0.05", "\"dropout\":1", "lora.dropout: must be less than 1, got 1");
	REJECT("\"alpha\":32", "\"alpha\":0", "lora.alpha: must be greater than 0, got 0");
	REJECT("\"block_size\":4", "\"block_size\":0", "poros.block_size: must be at least 1, got 0");
	REJECT("\"seed\":42", "\"seed\":4294967296", "training.seed: must be at most 4294967295");
	REJECT("\"vram_gb\":24", "\"vram_gb\":-24", "hardware.vram_gb: must be at least 0");
	REJECT("\"pcie_gen\":4", "\"pcie_gen\":99", "hardware.pcie_gen: must be at most 7, got 99");
	REJECT("\"timeout_s\":3600", "\"timeout_s\":1e12", "training.timeout_s: must be at most 604800");
	/* names */
	REJECT("\"method\":\"poros\"", "\"method\":\"porous\"", "method: unknown method \"porous\" (expected one of: poros, resident, unsloth, peft, accelerate_offload)");
	REJECT("\"precision\":\"nf4\"", "\"precision\":\"fp8\"", "precision: unknown precision \"fp8\"");
	REJECT("\"lr_schedule\":\"constant\"", "\"lr_schedule\":\"step\"", "training.lr_schedule: unknown schedule \"step\"");
	REJECT("\"q_proj\",", "\"qkv_proj\",", "lora.target_modules[0]: unknown module \"qkv_proj\"");
	REJECT("\"k_proj\",", "\"q_proj\",", "lora.target_modules[1]: \"q_proj\" is listed twice");
	REJECT("[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\",\"gate_proj\",\"up_proj\",\"down_proj\"]", "[]",
	       "lora.target_modules: must not be empty");
	/* strings */
	REJECT("\"spec_id\":\"qwen2_5_32b_3090\"", "\"spec_id\":\"../x\"", "spec_id: not a safe name");
	REJECT("\"output_dir\":\"out/qwen2_5_32b_3090\"", "\"output_dir\":\"out/../../etc\"", "output_dir: has a \"..\" component");
	REJECT("\"output_dir\":\"out/qwen2_5_32b_3090\"", "\"output_dir\":\"\"", "output_dir: must not be empty");
	REJECT("\"display_name\":\"Qwen2.5 32B\"", "\"display_name\":\"a\\nb\"", "model.display_name: contains a control character");
	REJECT("\"gpu_name\":\"RTX 3090\"", "\"gpu_name\":\"\xff\"", "hardware.gpu_name: not valid UTF-8");
	REJECT("\"arch\":\"qwen2_5_32b\"", "\"arch\":\"Qwen\"", "model.arch: must be 1 to 128 of [a-z0-9_]");
	/* consistency */
	REJECT("\"cell_id\":\"poros_qwen2_5_32b_nf4\"", "\"cell_id\":\"poros_qwen2_5_32b_bf16\"",
	       "cell_id: \"poros_qwen2_5_32b_bf16\" does not match method, arch and precision (\"poros_qwen2_5_32b_nf4\")");
	REJECT("\"tokens_per_step\":4096", "\"tokens_per_step\":4095", "tokens_per_step: 4095 is not batch_size x seq_len x gradient_accumulation_steps (4096)");
	REJECT("\"warmup_steps\":3", "\"warmup_steps\":20", "training.warmup_steps: must be less than training.steps (20), got 20");
}

/* NaN and infinity cannot be written in JSON text, but a cJSON built in
 * memory can hold them; the reader must still refuse. */
static void test_non_finite(void)
{
	const double bad[] = { NAN, INFINITY, -INFINITY };
	struct cell c;
	char err[256];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cJSON *j = cJSON_Parse(doc_example);

		cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "lora"), "alpha"), bad[i]);
		CHECK(cell_from_json(&c, j, err, sizeof err) == -1);
		CHECK(strcmp(err, "lora.alpha: must be a finite number") == 0);
		cJSON_Delete(j);
	}
}

static void test_wrong_section_type(void)
{
	cJSON *j = cJSON_Parse(doc_example);
	struct cell c;
	char err[256];

	cJSON_ReplaceItemInObject(j, "model", cJSON_CreateArray());
	CHECK(cell_from_json(&c, j, err, sizeof err) == -1);
	CHECK(strcmp(err, "model: expected an object, got an array") == 0);
	cJSON_Delete(j);
}

/* Reads text as a cell; the JSON it writes back in *back_text. */
static int read_text(const char *text, struct cell *c, char **back_text, char *err, size_t errsz)
{
	cJSON *j = cJSON_Parse(text), *again;

	*back_text = NULL;
	if (j == NULL || cell_from_json(c, j, err, errsz) < 0) {
		cJSON_Delete(j);
		return -1;
	}
	again = cell_to_json(c);
	*back_text = cJSON_PrintUnformatted(again);
	cJSON_Delete(again);
	cJSON_Delete(j);
	return 0;
}

/* training.gradient_checkpointing: written always (last in training),
 * read when present, 0 when absent (cells from before it existed). */
static void test_gradient_checkpointing(void)
{
	const char *old_key = ",\"gradient_checkpointing\":false";
	char *on = example_edited("\"gradient_checkpointing\":false", "\"gradient_checkpointing\":true");
	char *absent = example_edited(old_key, "");
	char *back = NULL, err[256] = "";
	struct cell c, copy;

	CHECK(on != NULL && absent != NULL);
	if (!on || !absent)
		goto out;

	/* true survives a round trip, and cell_copy keeps it. */
	CHECKF(read_text(on, &c, &back, err, sizeof err) == 0, "true refused: %s", err);
	CHECK(c.training.gradient_checkpointing == 1);
	CHECKF(back && strcmp(back, on) == 0, "true wrote back\n  %s\nnot\n  %s", back ? back : "(nothing)", on);
	cell_copy(&copy, &c);
	cell_free(&c);
	CHECK(copy.training.gradient_checkpointing == 1);
	cell_free(&copy);
	cJSON_free(back);

	/* Absent reads as false, and is then written (as false). */
	CHECKF(read_text(absent, &c, &back, err, sizeof err) == 0, "absent refused: %s", err);
	CHECK(c.training.gradient_checkpointing == 0);
	CHECKF(back && strcmp(back, doc_example) == 0, "absent wrote back\n  %s\nnot\n  %s",
	       back ? back : "(nothing)", doc_example);
	CHECK(back && strstr(back, "\"timeout_s\":3600,\"gradient_checkpointing\":false,") != NULL);
	cell_free(&c);
	cJSON_free(back);

	/* lr_warmup_steps and passes are optional too: absent, 0 and 1. */
	{
		char *old = example_edited(",\"lr_warmup_steps\":0,\"passes\":1", "");
		char *set = example_edited("\"lr_warmup_steps\":0,\"passes\":1", "\"lr_warmup_steps\":5,\"passes\":3");

		CHECKF(old && read_text(old, &c, &back, err, sizeof err) == 0, "no passes refused: %s", err);
		CHECK(c.training.passes == 1 && c.training.lr_warmup_steps == 0);
		CHECK(back && strcmp(back, doc_example) == 0);
		cell_free(&c);
		cJSON_free(back);
		CHECKF(set && read_text(set, &c, &back, err, sizeof err) == 0, "passes 3 refused: %s", err);
		CHECK(c.training.passes == 3 && c.training.lr_warmup_steps == 5);
		cell_free(&c);
		cJSON_free(back);
		free(old);
		free(set);
	}

	/* In memory, only 0 and 1 are valid. */
	example_cell(&c);
	c.training.gradient_checkpointing = 2;
	CHECK(cell_validate(&c, err, sizeof err) == -1);
	CHECKF(strcmp(err, "training.gradient_checkpointing: must be 0 or 1") == 0, "got \"%s\"", err);
	c.training.gradient_checkpointing = 1;
	CHECK(cell_validate(&c, err, sizeof err) == 0);
	cell_free(&c);
out:
	free(on);
	free(absent);
}

static void test_bounds(void)
{
	char err[128];
	const struct cell_bound *b = cell_bound_find("training.steps");

	CHECK(b != NULL && b->min == 1 && b->max == 1000000 && b->integer);
	CHECK(cell_bound_find("training.nope") == NULL);
	CHECK(cell_bound_check(b, "training.steps", 5, err, sizeof err) == 0);
	CHECK(cell_bound_check(b, "x.steps", 1000001, err, sizeof err) == -1);
	CHECK(strcmp(err, "x.steps: must be at most 1000000, got 1000001") == 0);
	b = cell_bound_find("training.learning_rate");
	CHECK(cell_bound_check(b, "lr", 0, err, sizeof err) == -1 && strcmp(err, "lr: must be greater than 0, got 0") == 0);
	CHECK(cell_bound_check(b, "lr", 1, err, sizeof err) == 0);
}

static void test_names_and_text(void)
{
	CHECK(method_from_name("accelerate_offload") == METHOD_ACCELERATE_OFFLOAD);
	CHECK(method_from_name("Poros") == -1 && method_from_name(NULL) == -1);
	CHECK(precision_from_name("bf16") == PRECISION_BF16);
	CHECK(lr_schedule_from_name("cosine") == LR_COSINE);
	CHECK(lora_module_from_name("down_proj") == 6 && lora_module_from_name("lm_head") == -1);

	CHECK(utf8_valid_prefix("abc", 3) == 3);
	CHECK(utf8_valid_prefix("h\xc3\xa9llo", 6) == 6);
	CHECK(utf8_valid_prefix("\xf0\x9f\x99\x82", 4) == 4);    /* U+1F642 */
	CHECK(utf8_valid_prefix("ab\xc0\x80", 4) == 2);          /* overlong NUL */
	CHECK(utf8_valid_prefix("\xe0\x80\xaf", 3) == 0);        /* overlong '/' */
	CHECK(utf8_valid_prefix("x\xed\xa0\x80", 4) == 1);       /* a surrogate */
	CHECK(utf8_valid_prefix("\xf4\x90\x80\x80", 4) == 0);    /* above U+10FFFF */
	CHECK(utf8_valid_prefix("ok\xc3", 3) == 2);              /* cut short */
	CHECK(utf8_valid_prefix("\x80", 1) == 0);                /* a lone continuation */

	CHECK(cell_output_dir_problem("out/tiny") == NULL);
	CHECK(cell_output_dir_problem("/abs/out/tiny") == NULL);
	CHECK(cell_output_dir_problem("out/..x/y") == NULL);
	CHECK(cell_output_dir_problem("a/../b") != NULL);
	CHECK(cell_output_dir_problem("..") != NULL);
	CHECK(cell_output_dir_problem("out/..") != NULL);
	CHECK(cell_output_dir_problem("") != NULL);
	CHECK(cell_output_dir_problem(NULL) != NULL);
	CHECK(cell_output_dir_problem("out/\tx") != NULL);

	{
		char *id = cell_make_id(METHOD_ACCELERATE_OFFLOAD, "qwen3_32b", PRECISION_BF16);

		CHECK(strcmp(id, "accelerate_offload_qwen3_32b_bf16") == 0);
		free(id);
	}
}

/* Text for field path as a flag gives it: 0, or -1 with err. */
static int parse_as_flag(struct cell *c, const char *path, const char *text, char *err, size_t errsz)
{
	const struct cell_field *f = cell_field_find(path);

	if (f == NULL) {
		snprintf(err, errsz, "no row %s", path);
		return -2;
	}
	return cell_field_parse(c, f, f->flag ? f->flag : path, text, err, errsz);
}

/* The table's defaults, and its fields set from a flag's text. */
static void test_defaults_and_flags(void)
{
	struct cell c;
	char err[256] = "";

	cell_defaults(&c);
	CHECK(c.method == METHOD_POROS && c.precision == PRECISION_NF4);
	CHECK(c.training.steps == 10 && c.training.seq_len == 128 && c.training.batch_size == 1 &&
	      c.training.gradient_accumulation_steps == 1 && c.training.warmup_steps == 0 && c.tokens_per_step == 128);
	CHECK(c.training.dataset && strcmp(c.training.dataset, "synthetic") == 0 && c.training.tokenizer == NULL &&
	      c.training.eval_dataset == NULL && c.cell_id == NULL && c.output_dir == NULL);
	CHECK(c.training.seed == 42 && c.training.learning_rate == 2e-4 && c.training.lr_schedule == LR_CONSTANT &&
	      c.training.weight_decay == 0 && c.training.max_grad_norm == 1 && c.training.timeout_s == 3600);
	CHECK(c.training.gradient_checkpointing == 0 && c.training.lr_warmup_steps == 0 && c.training.passes == 1 &&
	      c.training.eval_every == 0 && c.training.train_on == 0);
	CHECK(c.lora.rank == 16 && c.lora.alpha == 32 && c.lora.dropout == 0.05 && c.lora.target_mask == 127 &&
	      c.lora.n_targets == 7 && c.poros.block_size == 4 && c.poros.enable_prefetch == 1);

	/* a flag's range is the cell field's: the seed stops at 2^32 - 1 */
	CHECK(parse_as_flag(&c, "training.seed", "5000000000", err, sizeof err) == -1);
	CHECKF(strcmp(err, "--seed: must be at most 4294967295, got 5000000000") == 0, "got \"%s\"", err);
	CHECK(parse_as_flag(&c, "training.seed", "4294967295", err, sizeof err) == 0 && c.training.seed == 4294967295ULL);
	CHECK(parse_as_flag(&c, "training.steps", "1e3", err, sizeof err) == -1 &&
	      strcmp(err, "--steps: not a number: 1e3") == 0);
	CHECK(parse_as_flag(&c, "training.steps", " 5", err, sizeof err) == -1);
	CHECK(parse_as_flag(&c, "training.steps", "99999999999999999999", err, sizeof err) == -1 &&
	      strcmp(err, "--steps: too large: 99999999999999999999") == 0);
	CHECK(parse_as_flag(&c, "training.steps", "0", err, sizeof err) == -1 &&
	      strcmp(err, "--steps: must be at least 1, got 0") == 0);
	CHECK(parse_as_flag(&c, "training.steps", "7", err, sizeof err) == 0 && c.training.steps == 7);
	CHECK(parse_as_flag(&c, "lora.alpha", "0", err, sizeof err) == -1 &&
	      strcmp(err, "--alpha: must be greater than 0, got 0") == 0);
	CHECK(parse_as_flag(&c, "training.learning_rate", "inf", err, sizeof err) == -1 &&
	      strcmp(err, "--lr: must be a finite number") == 0);
	CHECK(parse_as_flag(&c, "lora.dropout", "0.1", err, sizeof err) == 0 && c.lora.dropout == 0.1);
	CHECK(parse_as_flag(&c, "training.dataset", "", err, sizeof err) == -1 &&
	      strcmp(err, "--dataset: must not be empty") == 0);
	CHECK(parse_as_flag(&c, "training.dataset", "d.jsonl", err, sizeof err) == 0 &&
	      strcmp(c.training.dataset, "d.jsonl") == 0);
	CHECK(parse_as_flag(&c, "training.lr_schedule", "cosine", err, sizeof err) == 0 &&
	      c.training.lr_schedule == LR_COSINE);
	CHECK(parse_as_flag(&c, "precision", "fp8", err, sizeof err) == -1 &&
	      strcmp(err, "--precision: unknown value \"fp8\" (expected one of: nf4, bf16)") == 0);
	CHECK(parse_as_flag(&c, "training.train_on", "all", err, sizeof err) == 0 && c.training.train_on == 2);
	CHECK(parse_as_flag(&c, "training.gradient_checkpointing", "on", err, sizeof err) == 0 &&
	      c.training.gradient_checkpointing == 1);
	CHECK(parse_as_flag(&c, "training.gradient_checkpointing", "yes", err, sizeof err) == -1);
	CHECK(parse_as_flag(&c, "poros.enable_prefetch", "1", err, sizeof err) == 0 && c.poros.enable_prefetch == 0);
	CHECK(parse_as_flag(&c, "lora.target_modules", "q_proj,v_proj", err, sizeof err) == 0 &&
	      c.lora.target_mask == 5 && c.lora.n_targets == 2);
	CHECK(parse_as_flag(&c, "lora.target_modules", "q_proj,qkv", err, sizeof err) == -1 &&
	      strstr(err, "--targets: unknown module \"qkv\"") == err);
	CHECK(parse_as_flag(&c, "lora.target_modules", ",", err, sizeof err) == -1 &&
	      strcmp(err, "--targets: names no module") == 0);
	CHECK(c.lora.target_mask == 5); /* a refused value leaves the field as it was */
	cell_free(&c);
}

int main(void)
{
	test_round_trip();
	test_rejections();
	test_non_finite();
	test_wrong_section_type();
	test_gradient_checkpointing();
	test_bounds();
	test_names_and_text();
	test_defaults_and_flags();
	return test_verdict("test_cell");
}

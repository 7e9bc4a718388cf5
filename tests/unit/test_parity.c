/* tests/unit/test_parity.c: the parity record (tools/lib/records/parity.c): JSON
 * round trip, nulls, and every rejection naming its field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "records/records.h"
#include "test_common.h"

static const char full[] =
	"{\"schema\":\"poros.parity/1\",\"run_a\":\"a\",\"run_b\":\"b\",\"arch\":\"tiny_qwen2\",\"precision\":\"nf4\","
	"\"steps_compared\":6,\"loss_max_abs_delta\":0.125,\"loss_max_step\":3,\"adapter_max_abs_delta\":1.75,"
	"\"adapter_max_tensor\":\"t1\",\"adapter_max_index\":5,\"nonfinite_mismatches\":0,"
	"\"tensors\":[{\"name\":\"t0\",\"max_abs_delta\":0,\"max_index\":null,\"n_different\":0},"
	"{\"name\":\"t1\",\"max_abs_delta\":1.75,\"max_index\":5,\"n_different\":1}],\"bitwise_exact\":false}";

static void test_round_trip(void)
{
	struct parity p;
	char err[256] = "";
	cJSON *in = cJSON_Parse(full), *out;
	char *text;

	CHECK(in != NULL);
	CHECK(parity_from_json(&p, in, err, sizeof err) == 0);
	CHECK(strcmp(p.run_a, "a") == 0 && strcmp(p.arch, "tiny_qwen2") == 0 && strcmp(p.precision, "nf4") == 0);
	CHECK(p.steps_compared == 6 && p.loss_max_step == 3 && p.loss_max_abs_delta == 0.125);
	CHECK(p.adapter_max_abs_delta == 1.75 && strcmp(p.adapter_max_tensor, "t1") == 0 && p.adapter_max_index == 5);
	CHECK(p.n_tensors == 2 && p.tensors[0].max_index == -1 && p.tensors[1].n_different == 1);
	CHECK(p.bitwise_exact == 0 && p.nonfinite_mismatches == 0);
	/* to_json writes back exactly what was read: same keys, same order */
	out = parity_to_json(&p);
	text = cJSON_PrintUnformatted(out);
	CHECK(text != NULL && strcmp(text, full) == 0);
	if (text && strcmp(text, full) != 0)
		fprintf(stderr, "got:  %s\nwant: %s\n", text, full);
	free(text);
	cJSON_Delete(out);
	cJSON_Delete(in);
	parity_free(&p);
}

static void test_nulls(void)
{
	struct parity p;
	char err[256] = "";
	cJSON *out;
	char *text;

	parity_init(&p);
	out = parity_to_json(&p);
	text = cJSON_PrintUnformatted(out);
	CHECK(strcmp(text, "{\"schema\":\"poros.parity/1\",\"run_a\":null,\"run_b\":null,\"arch\":null,\"precision\":null,"
	                   "\"steps_compared\":null,\"loss_max_abs_delta\":null,\"loss_max_step\":null,"
	                   "\"adapter_max_abs_delta\":null,\"adapter_max_tensor\":null,\"adapter_max_index\":null,"
	                   "\"nonfinite_mismatches\":null,\"tensors\":[],\"bitwise_exact\":null}") == 0);
	/* and it reads back as all "not measured" */
	CHECK(parity_from_json(&p, out, err, sizeof err) == 0);
	CHECK(isnan(p.loss_max_abs_delta) && p.steps_compared == -1 && p.bitwise_exact == -1 && p.arch == NULL);
	parity_free(&p);
	free(text);
	cJSON_Delete(out);
}

/* An older record without the labels, nonfinite_mismatches or per-tensor details still reads. */
static void test_minimal_record(void)
{
	struct parity p;
	char err[256] = "";
	cJSON *in = cJSON_Parse("{\"schema\":\"poros.parity/1\",\"run_a\":\"x\",\"run_b\":\"y\",\"steps_compared\":6,"
	                        "\"loss_max_abs_delta\":0.0,\"loss_max_step\":null,\"adapter_max_abs_delta\":0.0,"
	                        "\"adapter_max_tensor\":null,\"adapter_max_index\":null,"
	                        "\"tensors\":[{\"name\":\"t\",\"max_abs_delta\":0.0}],\"bitwise_exact\":true}");

	CHECK(parity_from_json(&p, in, err, sizeof err) == 0);
	CHECK(p.arch == NULL && p.nonfinite_mismatches == -1 && p.n_tensors == 1 && p.tensors[0].n_different == -1);
	CHECK(p.bitwise_exact == 1);
	parity_free(&p);
	cJSON_Delete(in);
}

/* Replaces "key":value in the full record with "key":repl (repl NULL: drops the key). */
static void expect_reject(const char *key, const char *repl, const char *want)
{
	struct parity p;
	char err[256] = "";
	cJSON *in = cJSON_Parse(full);

	if (repl == NULL)
		cJSON_DeleteItemFromObjectCaseSensitive(in, key);
	else
		cJSON_ReplaceItemInObjectCaseSensitive(in, key, cJSON_Parse(repl));
	CHECK(parity_from_json(&p, in, err, sizeof err) < 0);
	if (strcmp(err, want) != 0) {
		fprintf(stderr, "%s=%s: got \"%s\", want \"%s\"\n", key, repl ? repl : "(absent)", err, want);
		failures++;
	}
	cJSON_Delete(in);
}

static void test_rejections(void)
{
	struct parity p;
	char err[256] = "";
	cJSON *in;

	expect_reject("schema", "\"poros.parity/2\"", "schema: expected \"poros.parity/1\"");
	expect_reject("run_a", "3", "run_a: expected a string or null");
	expect_reject("run_b", NULL, "run_b: missing");
	expect_reject("steps_compared", "1.5", "steps_compared: expected an integer >= 0");
	expect_reject("steps_compared", "-1", "steps_compared: expected an integer >= 0");
	expect_reject("loss_max_abs_delta", "-0.5", "loss_max_abs_delta: must be >= 0");
	expect_reject("loss_max_abs_delta", "\"0\"", "loss_max_abs_delta: not a number");
	expect_reject("adapter_max_index", "true", "adapter_max_index: expected an integer or null");
	expect_reject("bitwise_exact", "1", "bitwise_exact: expected true, false or null");
	expect_reject("tensors", "{}", "tensors: expected an array or null");
	expect_reject("tensors", "[{\"name\":\"\",\"max_abs_delta\":0}]", "tensors[0].name: expected a non-empty string");
	expect_reject("tensors", "[{\"name\":\"t\",\"max_abs_delta\":0},{\"name\":\"u\",\"max_abs_delta\":0,\"x\":1}]",
	              "tensors[1].unknown field \"x\"");
	expect_reject("tensors", "[3]", "tensors[0]: expected an object");

	in = cJSON_Parse(full);
	cJSON_AddNumberToObject(in, "surprise", 1);
	CHECK(parity_from_json(&p, in, err, sizeof err) < 0 && strcmp(err, "unknown field \"surprise\"") == 0);
	cJSON_Delete(in);
	/* cJSON keeps a duplicate key; the record would be ambiguous */
	in = cJSON_Parse(full);
	cJSON_AddNumberToObject(in, "steps_compared", 7);
	CHECK(parity_from_json(&p, in, err, sizeof err) < 0 && strcmp(err, "steps_compared: duplicate field") == 0);
	cJSON_Delete(in);
	in = cJSON_Parse("[1]");
	CHECK(parity_from_json(&p, in, err, sizeof err) < 0 && strcmp(err, "not a JSON object") == 0);
	cJSON_Delete(in);
}

int main(void)
{
	test_round_trip();
	test_nulls();
	test_minimal_record();
	test_rejections();
	return test_verdict("test_parity");
}

/* tests/fuzz/fuzz_template.c: a chat template (what a downloaded model's
 * chat_template.jinja brings) parsed and rendered over a conversation.
 * Either step may refuse it, with a "LINE:COL: " message; none may crash,
 * recurse without bound or run past its budgets (libFuzzer's -timeout and
 * -rss_limit_mb catch a budget that does not hold).  What renders is
 * rendered twice: the same text both times. */
#include "fuzz_common.h"

#include "text/text.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char context[] =
	"{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi \\u00e9\"},"
	"{\"role\":\"assistant\",\"content\":\"<think>x</think>ok\"},{\"role\":\"user\",\"content\":\"\"}],"
	"\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,\"n\":9223372036854775807,"
	"\"tools\":[{\"name\":\"f\",\"parameters\":{\"a\":[1,2.5,null,false]}}]}";

/* "LINE:COL: what" with LINE and COL from 1 */
static int positioned(const char *err)
{
	int line = 0, col = 0, used = 0;

	return sscanf(err, "%d:%d: %n", &line, &col, &used) == 2 && line >= 1 && col >= 1 && used > 0 && err[used];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512] = "";
	struct jinja_template *t = NULL;
	struct jinja_output a, b;
	struct tm day = { .tm_year = 124, .tm_mon = 6, .tm_mday = 26, .tm_wday = 5, .tm_yday = 207 };
	cJSON *vars = cJSON_Parse(context);

	if (jinja_parse(&t, (const char *)data, size, err, sizeof err) < 0) {
		if (t != NULL || !positioned(err))
			abort();
		cJSON_Delete(vars);
		return 0;
	}
	if (jinja_render(&a, t, vars, 1, &day, err, sizeof err) < 0) {
		if (!positioned(err))
			abort();
	} else {
		if (jinja_render(&b, t, vars, 1, &day, err, sizeof err) < 0 || a.len != b.len ||
		    memcmp(a.text, b.text, a.len) != 0 || memcmp(a.origin, b.origin, a.len * sizeof *a.origin) != 0)
			abort();
		jinja_output_free(&b);
	}
	jinja_output_free(&a);
	jinja_free(t);
	cJSON_Delete(vars);
	return 0;
}

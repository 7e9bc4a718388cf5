/* tests/unit/test_jinja.c: tools/lib/text/jinja against what jinja2 renders
 * (tests/fixtures/jinja/cases.jsonl, written by make_jinja_cases.py), the
 * provenance of content bytes, and the refusals.  Run from the repository
 * root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "text/text.h"
#include "util/util.h"
#include "test_common.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* Renders src with vars (JSON text); the output, or NULL with err. */
static char *render(const char *src, const char *vars_json, int taint, struct jinja_output *out, char *err,
		    size_t errsz)
{
	struct jinja_template *t;
	cJSON *vars = cJSON_Parse(vars_json);
	int rc;

	memset(out, 0, sizeof *out);
	if (jinja_parse(&t, src, strlen(src), err, errsz) < 0) {
		cJSON_Delete(vars);
		return NULL;
	}
	rc = jinja_render(out, t, vars, taint, NULL, err, errsz);
	jinja_free(t);
	cJSON_Delete(vars);
	return rc < 0 ? NULL : out->text;
}

/* A budget case's template: "template", or "prefix" + "times" x "repeat"
 * + "suffix" (a big template kept small in the file). */
static char *budget_template(const cJSON *c)
{
	const cJSON *t = cJSON_GetObjectItem(c, "template");
	const char *pre, *rep, *suf;
	int times;
	size_t n = 0;
	char *s;

	if (t)
		return xstrdup(t->valuestring);
	pre = cJSON_GetObjectItem(c, "prefix")->valuestring;
	rep = cJSON_GetObjectItem(c, "repeat")->valuestring;
	suf = cJSON_GetObjectItem(c, "suffix")->valuestring;
	times = cJSON_GetObjectItem(c, "times")->valueint;
	s = xmalloc(strlen(pre) + (size_t)times * strlen(rep) + strlen(suf) + 1);
	n += (size_t)sprintf(s, "%s", pre);
	for (int i = 0; i < times; i++)
		n += (size_t)sprintf(s + n, "%s", rep);
	sprintf(s + n, "%s", suf);
	return s;
}

static double seconds_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* tests/fixtures/jinja/budgets.jsonl: every budget and every integer
 * operation past 64 bits fails with its exact message, in bounded time and
 * memory (the sanitizers' slower runs and their own memory aside). */
static void test_budgets(void)
{
	size_t len;
	char *buf = read_whole_file("tests/fixtures/jinja/budgets.jsonl", &len), *line, *save = NULL;
	int n = 0;
	struct rusage ru;
	long before;

	CHECK(buf != NULL);
	if (buf == NULL)
		return;
	/* what the cases add to the process's peak: the binary's own libraries
	 * (CUDA's, in a CUDA build) are mapped before main */
	getrusage(RUSAGE_SELF, &ru);
	before = ru.ru_maxrss;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		cJSON *c = cJSON_Parse(line);
		const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
		const cJSON *want = cJSON_GetObjectItem(c, "expected"), *want_err = cJSON_GetObjectItem(c, "error");
		char *src = budget_template(c), err[512] = "";
		struct jinja_output out;
		double t0 = seconds_now();
		char *got = render(src, "{}", 0, &out, err, sizeof err);
		double took = seconds_now() - t0;

		if (want_err)
			CHECKF(got == NULL && strstr(err, want_err->valuestring), "%s: want the error \"%s\", got %s%s", name,
			       want_err->valuestring, got ? "output " : "error ", got ? got : err);
		else
			CHECKF(got && strcmp(got, want->valuestring) == 0, "%s:\n  want \"%s\"\n  got  \"%.200s\"", name,
			       want->valuestring, got ? got : err);
		CHECKF(took < (SANITIZED ? 20.0 : 1.0), "%s: took %.2f s", name, took);
		jinja_output_free(&out);
		free(src);
		cJSON_Delete(c);
		n++;
	}
	CHECKF(n >= 25, "only %d budget cases read", n);
	getrusage(RUSAGE_SELF, &ru);
	CHECKF(SANITIZED || ru.ru_maxrss - before < 256 * 1024, "peak memory %ld KiB over the %ld KiB before the cases",
	       ru.ru_maxrss - before, before);
	free(buf);
}

static void test_cases(void)
{
	size_t len;
	char *buf = read_whole_file("tests/fixtures/jinja/cases.jsonl", &len), *line, *save = NULL;
	int n = 0;

	CHECK(buf != NULL);
	if (buf == NULL)
		return;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		cJSON *c = cJSON_Parse(line);
		const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
		const char *src = cJSON_GetObjectItem(c, "template")->valuestring;
		const cJSON *want = cJSON_GetObjectItem(c, "expected"), *want_err = cJSON_GetObjectItem(c, "error");
		char *vars = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "vars")), err[512] = "";
		struct jinja_output out;
		char *got = render(src, vars, 0, &out, err, sizeof err);

		if (want_err)
			CHECKF(got == NULL && strstr(err, want_err->valuestring), "%s: want the error \"%s\", got %s%s", name,
			       want_err->valuestring, got ? "output " : "error ", got ? got : err);
		else
			CHECKF(got && strcmp(got, want->valuestring) == 0, "%s:\n  want \"%s\"\n  got  \"%s\"", name,
			       want->valuestring, got ? got : err);
		jinja_output_free(&out);
		free(vars);
		cJSON_Delete(c);
		n++;
	}
	CHECKF(n >= 25, "only %d cases read", n);
	free(buf);
}

/* The origin of each output byte: a digit per byte, '.' for template text. */
static void origins(const struct jinja_output *o, char *s)
{
	for (size_t i = 0; i < o->len; i++)
		s[i] = o->origin[i] ? (char)('0' + o->origin[i]) : '.';
	s[o->len] = '\0';
}

static void test_provenance(void)
{
	static const char *const msgs =
		"{\"messages\":[{\"role\":\"user\",\"content\":\"  hi \"},{\"role\":\"assistant\",\"content\":\"<think>r</think>ok\"},"
		"{\"role\":\"assistant\",\"content\":\"\"}],\"bos\":\"B\"}";
	struct jinja_output o;
	char err[512], org[256];

	/* trim, concatenation and literals */
	CHECK(render("{{ bos }}{% for m in messages %}[{{ m.content | trim + '|' }}]{% endfor %}", msgs, 1, &o, err,
		     sizeof err));
	CHECKF(strcmp(o.text, "B[hi|][<think>r</think>ok|][|]") == 0, "text %s", o.text);
	origins(&o, org);
	CHECKF(strcmp(org, "..11...222222222222222222.....") == 0, "origins %s", org);
	/* the empty content keeps its place */
	CHECKF(o.n_anchor == 1 && o.anchor_pos[0] == 28 && o.anchor_origin[0] == 3, "anchors %zu", o.n_anchor);
	jinja_output_free(&o);

	/* split and strip: Qwen3's reasoning extraction */
	CHECK(render("{% set c = messages[1].content %}{{ c.split('</think>')[-1].lstrip('\\n') }}/"
		     "{{ c.split('</think>')[0].split('<think>')[-1] }}/{{ c[::-1] }}", msgs, 1, &o, err, sizeof err));
	CHECKF(strcmp(o.text, "ok/r/ko>kniht/<r>kniht<") == 0, "text %s", o.text);
	origins(&o, org);
	CHECKF(strcmp(org, "22.2.222222222222222222") == 0, "origins %s", org);
	jinja_output_free(&o);

	/* only content is followed, not the role; without taint nothing is */
	CHECK(render("{{ messages[0].role }}{{ messages[0].content }}", msgs, 1, &o, err, sizeof err));
	origins(&o, org);
	CHECKF(strcmp(org, "....11111") == 0, "origins %s", org);
	jinja_output_free(&o);
	CHECK(render("{{ messages[0].content }}", msgs, 0, &o, err, sizeof err));
	origins(&o, org);
	CHECKF(strcmp(org, ".....") == 0, "origins %s", org);
	jinja_output_free(&o);
}

static void expect_refused(int line, const char *src, const char *want)
{
	struct jinja_output o;
	char err[512] = "";

	if (render(src, "{\"s\":\"x\",\"ms\":[]}", 0, &o, err, sizeof err) != NULL || strstr(err, want) == NULL) {
		fprintf(stderr, "%s:%d: %s: error \"%s\", want one saying \"%s\"\n", __FILE__, line, src, err, want);
		failures++;
	}
	jinja_output_free(&o);
}

static void test_refusals(void)
{
	expect_refused(__LINE__, "ab{% macro m() %}x{% endmacro %}", "1:6: unsupported tag \"macro\"");
	expect_refused(__LINE__, "{{ s | wordcount }}", "1:8: unsupported filter \"wordcount\"");
	expect_refused(__LINE__, "{{ s.zfill(3) }}", "unsupported method \"zfill\" of a string");
	expect_refused(__LINE__, "\n{{ s is sameas }}", "2:9: unsupported test \"sameas\"");
	expect_refused(__LINE__, "{{ nope.attr }}", "undefined value has no attribute \"attr\"");
	expect_refused(__LINE__, "{% set x %}y{% endset %}", "block assignments");
	expect_refused(__LINE__, "{% if s %}x", "missing {% endif %}");
	expect_refused(__LINE__, "{% for x in ms %}x{% endif %}", "unexpected {% endif %}");
	expect_refused(__LINE__, "{{ s + 1 }}", "unsupported operand types for +: string and integer");
	expect_refused(__LINE__, "{{ ms.append(1) }}", "unsupported method \"append\" of a list");
	expect_refused(__LINE__, "{{ 'É' | lower }}", "non-ASCII");
	expect_refused(__LINE__, "{{ raise_exception('no ' ~ s) }}", "template raised: no x");
	expect_refused(__LINE__, "{{ 'abc }}", "unterminated string literal");
	expect_refused(__LINE__, "{% set ns = 1 %}{% set ns.a = 2 %}", "only of a namespace()");
	expect_refused(__LINE__, "{{ strftime_now() }}", "strftime_now needs a string");
}

/* src rendered at the day ymd, into buf; NULL with err */
static char *render_at(const char *src, const char *ymd, char *buf, size_t n, char *err, size_t errsz)
{
	struct jinja_template *t;
	struct jinja_output o;
	struct tm day;
	cJSON *vars = cJSON_CreateObject();
	int rc = -1;

	CHECK(jinja_parse_date(&day, ymd, err, errsz) == 0);
	if (jinja_parse(&t, src, strlen(src), err, errsz) == 0) {
		rc = jinja_render(&o, t, vars, 0, &day, err, errsz);
		jinja_free(t);
	}
	cJSON_Delete(vars);
	if (rc < 0)
		return NULL;
	snprintf(buf, n, "%s", o.text);
	jinja_output_free(&o);
	return buf;
}

static void test_strftime(void)
{
	struct tm day;
	char buf[256], err[256] = "";

	/* no date fixed: refused by name, never today's */
	expect_refused(__LINE__, "{{ strftime_now('%d %b %Y') }}", "1:16: strftime_now: the template asks for today's date");
	expect_refused(__LINE__, "{{ strftime_now('%d') }}", "--chat-date YYYY-MM-DD");
	/* Llama-3.2's format, and every directive, as Python's strftime in the C locale */
	CHECKF(render_at("{{ strftime_now('%d %b %Y') }}", "2024-07-26", buf, sizeof buf, err, sizeof err) &&
	       strcmp(buf, "26 Jul 2024") == 0, "got %s", err[0] ? err : buf);
	CHECKF(render_at("{{ strftime_now('%a %A %b %h %B|%d %-d %e|%m %-m %y %Y %j|%H:%M:%S %I %p %%') }}", "2024-02-05",
			 buf, sizeof buf, err, sizeof err) &&
	       strcmp(buf, "Mon Monday Feb Feb February|05 5  5|02 2 24 2024 036|00:00:00 12 AM %") == 0, "got %s",
	       err[0] ? err : buf);
	CHECK(render_at("{{ strftime_now('%A') }}", "1970-01-01", buf, sizeof buf, err, sizeof err) &&
	      strcmp(buf, "Thursday") == 0);
	CHECK(render_at("{{ strftime_now('%A %j') }}", "2000-12-31", buf, sizeof buf, err, sizeof err) &&
	      strcmp(buf, "Sunday 366") == 0);
	CHECK(render_at("{{ strftime_now('%Z') }}", "2024-07-26", buf, sizeof buf, err, sizeof err) == NULL &&
	      strstr(err, "unsupported directive \"%Z\"") != NULL);
	/* dates: real calendar days only */
	CHECK(jinja_parse_date(&day, "2000-02-29", err, sizeof err) == 0 && day.tm_wday == 2 && day.tm_yday == 59);
	CHECK(jinja_parse_date(&day, "1900-02-29", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "2023-02-29", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "2024-13-01", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "2024-7-26", err, sizeof err) < 0 && strstr(err, "not a date YYYY-MM-DD") != NULL);
	CHECK(jinja_parse_date(&day, "2024-07-26x", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "today", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "2024-07- 6", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "+024-07-26", err, sizeof err) < 0);
	CHECK(jinja_parse_date(&day, "0999-07-26", err, sizeof err) < 0);
}

int main(void)
{
	test_cases();
	test_budgets();
	test_provenance();
	test_refusals();
	test_strftime();
	return test_verdict("test_jinja");
}

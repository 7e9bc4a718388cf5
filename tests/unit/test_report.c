/* tests/unit/test_report.c: the report helpers (tools/lib/records/report_*.c):
 * timestamps, escaping, number formats, fits-on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "test_common.h"

static void expect_str(const char *what, const char *got, const char *want)
{
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "%s: got \"%s\", want \"%s\"\n", what, got, want);
		failures++;
	}
}

static void test_iso(void)
{
	double t = 0;

	CHECK(iso_utc_parse("1970-01-01T00:00:00Z", &t) == 0 && t == 0);
	CHECK(iso_utc_parse("2026-11-29T15:21:41Z", &t) == 0 && t == 1795965701.0);
	CHECK(iso_utc_parse("2026-11-29T15:21:41.25Z", &t) == 0 && t == 1795965701.25);
	CHECK(iso_utc_parse("2026-11-29T15:21:41", &t) < 0);       /* no zone */
	CHECK(iso_utc_parse("2026-11-29T15:21:41+01:00", &t) < 0); /* only UTC */
	CHECK(iso_utc_parse("2026-11-29 15:21:41Z", &t) < 0);
	CHECK(iso_utc_parse("2026-13-29T15:21:41Z", &t) < 0);
	CHECK(iso_utc_parse("2026-11-29T15:21:41.Z", &t) < 0);
	CHECK(iso_utc_parse("2026-11-29T15:21:41Zjunk", &t) < 0);
	CHECK(iso_utc_parse("", &t) < 0);
	CHECK(iso_utc_parse(NULL, &t) < 0);
}

static void test_html(void)
{
	struct sbuf b;

	sb_init(&b);
	sb_html(&b, "<script>alert('x' & \"y\")</script> https://e.org\x01");
	expect_str("sb_html", b.s,
	           "&lt;script&gt;alert(&#39;x&#39; &amp; &quot;y&quot;)&lt;&#47;script&gt; https:&#47;&#47;e.org ");
	sb_html(&b, NULL);
	CHECK(strstr(b.s, "//") == NULL);
	sb_free(&b);
}

static void test_md(void)
{
	struct sbuf b;

	sb_init(&b);
	sb_md(&b, "a|b *c* _d_ `e` [f](g) <h> & i\nj\\k");
	expect_str("sb_md", b.s, "a\\|b \\*c\\* \\_d\\_ \\`e\\` \\[f\\](g) &lt;h&gt; &amp; i j\\\\k");
	sb_free(&b);
}

static void test_sbuf_grows(void)
{
	struct sbuf b;

	sb_init(&b);
	for (int i = 0; i < 10000; i++)
		sb_printf(&b, "%04d,", i % 10000);
	CHECK(b.len == 50000 && strlen(b.s) == 50000 && strncmp(b.s + 49995, "9999,", 5) == 0);
	sb_free(&b);
}

static void test_numbers(void)
{
	char buf[32];

	expect_str("nan", fmt_num(buf, sizeof buf, NAN), "--");
	expect_str("0", fmt_num(buf, sizeof buf, 0), "0");
	expect_str("2694.7", fmt_num(buf, sizeof buf, 2694.7), "2695");
	expect_str("12.34", fmt_num(buf, sizeof buf, 12.34), "12.3");
	expect_str("1.5", fmt_num(buf, sizeof buf, 1.5), "1.50");
	expect_str("0.0123", fmt_num(buf, sizeof buf, 0.01234), "0.0123");
	expect_str("-0.25", fmt_num(buf, sizeof buf, -0.25), "-0.25");
	expect_str("tiny", fmt_num(buf, sizeof buf, 1.19e-7), "1.19e-07");
	expect_str("mib nan", fmt_mib(buf, sizeof buf, NAN), "--");
	expect_str("mib small", fmt_mib(buf, sizeof buf, 812), "812 MiB");
	expect_str("mib big", fmt_mib(buf, sizeof buf, 7012.4), "6.85 GiB");
}

static void test_fits_on(void)
{
	CHECK(fits_on_gb(NAN) == -1);
	CHECK(fits_on_gb(0) == 8);
	CHECK(fits_on_gb(8191.9) == 8);
	CHECK(fits_on_gb(8192) == 12);   /* a peak of exactly the card does not fit */
	CHECK(fits_on_gb(24575) == 24);
	CHECK(fits_on_gb(81919) == 80);
	CHECK(fits_on_gb(144383) == 141);
	CHECK(fits_on_gb(144384) == 0);  /* above every card */
}

/* The map behind results_add and the report's lookups: every key found
 * after many inserts and rehashes, a replaced value wins, absent is -1. */
static void test_strmap(void)
{
	struct strmap m;
	char key[32];
	int bad = 0;

	strmap_init(&m);
	CHECK(strmap_get(&m, "x") == -1);
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "cell_%d", i);
		strmap_put(&m, key, i);
	}
	strmap_put(&m, "cell_17", -17);
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "cell_%d", i);
		bad += strmap_get(&m, key) != (i == 17 ? -17 : i);
	}
	CHECK(bad == 0 && m.n == 5000 && m.nslots > 2 * m.n);
	CHECK(strmap_get(&m, "cell_5000") == -1 && strmap_get(&m, "") == -1);
	strmap_free(&m);
	CHECK(m.n == 0 && strmap_get(&m, "cell_1") == -1);
}

int main(void)
{
	test_strmap();
	test_iso();
	test_html();
	test_md();
	test_sbuf_grows();
	test_numbers();
	test_fits_on();
	return test_verdict("test_report");
}

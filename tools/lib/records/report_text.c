/* tools/lib/records/report_text.c: a string builder, HTML and Markdown escaping,
 * and the number formats of the reports. */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

void sb_init(struct sbuf *b)
{
	b->s = xmalloc(256);
	b->s[0] = '\0';
	b->len = 0;
	b->cap = 256;
}

void sb_free(struct sbuf *b)
{
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
}

static void sb_reserve(struct sbuf *b, size_t more)
{
	if (b->len + more + 1 <= b->cap)
		return;
	while (b->len + more + 1 > b->cap)
		b->cap *= 2;
	b->s = xrealloc(b->s, b->cap);
}

void sb_putn(struct sbuf *b, const char *s, size_t n)
{
	sb_reserve(b, n);
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void sb_puts(struct sbuf *b, const char *s)
{
	sb_putn(b, s, strlen(s));
}

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		die(EXIT_RUNTIME, "formatting failed");
	sb_reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* s through escape: what a writer puts for a character other than itself
 * (a NULL: the character, or a space for any other control character). */
static void sb_escape(struct sbuf *b, const char *s, const char *(*escape)(char c, char tmp[3]))
{
	char tmp[3];

	if (s == NULL)
		return;
	for (; *s; s++) {
		const char *e = escape(*s, tmp);
		if (e)
			sb_puts(b, e);
		else if ((unsigned char)*s < 0x20)
			sb_putn(b, " ", 1); /* control characters have no place in a page */
		else
			sb_putn(b, s, 1);
	}
}

static const char *html_escape(char c, char tmp[3])
{
	(void)tmp;
	switch (c) {
	case '&': return "&amp;";
	case '<': return "&lt;";
	case '>': return "&gt;";
	case '"': return "&quot;";
	case '\'': return "&#39;";
	case '/': return "&#47;";
	case '\n': return "\n";
	case '\t': return "\t";
	default: return NULL;
	}
}

static const char *md_escape(char c, char tmp[3])
{
	switch (c) {
	case '&': return "&amp;";
	case '<': return "&lt;";
	case '>': return "&gt;";
	case '\n': case '\r': case '\t': return " ";
	case '\\': case '|': case '`': case '*': case '_': case '[': case ']': case '~': case '#':
	case '!':
		tmp[0] = '\\', tmp[1] = c, tmp[2] = '\0';
		return tmp;
	default: return NULL;
	}
}

void sb_html(struct sbuf *b, const char *s)
{
	sb_escape(b, s, html_escape);
}

void sb_md(struct sbuf *b, const char *s)
{
	sb_escape(b, s, md_escape);
}

const char *fmt_num(char *buf, size_t n, double v)
{
	double a = fabs(v);

	if (isnan(v))
		snprintf(buf, n, "--");
	else if (isinf(v))
		snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
	else if (a >= 100)
		snprintf(buf, n, "%.0f", v);
	else if (a >= 10)
		snprintf(buf, n, "%.1f", v);
	else if (a >= 1)
		snprintf(buf, n, "%.2f", v);
	else if (a >= 0.0001)
		snprintf(buf, n, "%.3g", v);
	else if (a == 0)
		snprintf(buf, n, "0");
	else
		snprintf(buf, n, "%.2e", v);
	return buf;
}

const char *fmt_mib(char *buf, size_t n, double mib)
{
	char num[32];

	if (isnan(mib))
		snprintf(buf, n, "--");
	else if (mib < 1024)
		snprintf(buf, n, "%s MiB", fmt_num(num, sizeof num, mib));
	else
		snprintf(buf, n, "%s GiB", fmt_num(num, sizeof num, mib / 1024));
	return buf;
}

int fits_on_gb(double peak_mib)
{
	/* Common card sizes; marketing "GB" is close enough to GiB for this (an
	 * RTX 3090 has 24576 MiB, an A100 80 GB 81920 MiB). */
	static const int cards[] = { 8, 12, 16, 24, 40, 48, 80, 141 };

	if (isnan(peak_mib))
		return -1;
	for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++)
		if (peak_mib < cards[i] * 1024.0)
			return cards[i];
	return 0;
}

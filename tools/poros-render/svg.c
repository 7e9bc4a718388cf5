/* tools/poros-render/svg.c: horizontal bar charts as inline SVG (no
 * script, no external reference), one bar per cell of a model. */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "records/records.h"

enum {
	CHART_W = 560,
	LABEL_W = 170,  /* left: "method precision" */
	VALUE_W = 80,   /* right of the longest bar: its value */
	ROW_H = 24,
	BAR_H = 14,
	TOP = 22,       /* room for the reference line's label */
	AXIS_H = 26,
};

const char *precision_color(const char *precision)
{
	if (strcmp(precision, "nf4") == 0)
		return "#0969da";
	if (strcmp(precision, "bf16") == 0)
		return "#8250df";
	return "#57606a";
}

/* A round step for about four grid lines up to max. */
static double nice_step(double max)
{
	double raw = max / 4, mag = pow(10, floor(log10(raw))), norm = raw / mag;

	if (norm <= 1)
		return mag;
	if (norm <= 2)
		return 2 * mag;
	if (norm <= 2.5)
		return 2.5 * mag;
	if (norm <= 5)
		return 5 * mag;
	return 10 * mag;
}

static double axis_max(const struct bar *bars, int n, double ref)
{
	double max = isnan(ref) ? 0 : ref;

	for (int i = 0; i < n; i++) {
		if (!isnan(bars[i].value) && bars[i].value > max)
			max = bars[i].value;
		if (!isnan(bars[i].hi) && bars[i].hi > max)
			max = bars[i].hi;
	}
	if (!(max > 0))
		return 1;
	return ceil(max / nice_step(max) - 1e-9) * nice_step(max);
}

/* A tick label: every tick of an axis with the decimals its step needs
 * (0, 0.5, 1.0, 1.5; 0, 25, 50), never exponent notation. */
static const char *fmt_tick(char *buf, size_t n, double v, double step)
{
	int decimals = 0;

	while (decimals < 8 && fabs(step * pow(10, decimals) - round(step * pow(10, decimals))) > 1e-6)
		decimals++;
	snprintf(buf, n, "%.*f", decimals, fabs(v) < step * 1e-9 ? 0.0 : v);
	return buf;
}

static void grid(struct sbuf *b, double max, int plot_w, int y0, int y1, const char *unit)
{
	double step = nice_step(max);
	char num[32];

	for (int k = 0; k * step <= max * (1 + 1e-9); k++) {
		double v = k * step, x = LABEL_W + v / max * plot_w;
		sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d1d9e0\"/>\n", x, y0, x, y1);
		sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%s</text>\n", x, y1 + 14,
		          fmt_tick(num, sizeof num, v, step));
	}
	sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" class=\"tick\">", CHART_W - 4, y1 + 14);
	sb_html(b, unit);
	sb_puts(b, "</text>\n");
}

static void bar_row(struct sbuf *b, const struct bar *bar, int i, double max, int plot_w, const char *unit)
{
	int y = TOP + i * ROW_H;
	char num[32], lo[32], hi[32];

	sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", LABEL_W - 8, y + BAR_H - 2);
	sb_html(b, bar->method);
	sb_puts(b, " ");
	sb_html(b, bar->precision);
	sb_puts(b, "</text>\n");
	if (isnan(bar->value)) {
		/* Nothing measured: say why instead of drawing a zero-length bar. */
		sb_printf(b, "<text x=\"%d\" y=\"%d\" class=\"none\">", LABEL_W + 4, y + BAR_H - 2);
		sb_html(b, bar->status);
		sb_puts(b, ": not measured</text>\n");
		return;
	}
	double w = bar->value / max * plot_w;
	sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>", LABEL_W, y,
	          w < 1 ? 1 : w, BAR_H, precision_color(bar->precision));
	sb_html(b, bar->method);
	sb_puts(b, " ");
	sb_html(b, bar->precision);
	sb_printf(b, ": %s ", fmt_num(num, sizeof num, bar->value));
	sb_html(b, unit);
	sb_puts(b, "</title></rect>\n");
	if (!isnan(bar->lo) && !isnan(bar->hi)) {
		double x0 = LABEL_W + bar->lo / max * plot_w, x1 = LABEL_W + bar->hi / max * plot_w;
		int yc = y + BAR_H / 2;
		sb_printf(b, "<path d=\"M%.1f %dH%.1fM%.1f %dV%dM%.1f %dV%d\" stroke=\"#1f2328\" fill=\"none\">"
		             "<title>range %s to %s</title></path>\n",
		          x0, yc, x1, x0, yc - 4, yc + 4, x1, yc - 4, yc + 4, fmt_num(lo, sizeof lo, bar->lo),
		          fmt_num(hi, sizeof hi, bar->hi));
		if (x1 > LABEL_W + w)
			w = x1 - LABEL_W;
	}
	sb_printf(b, "<text x=\"%.1f\" y=\"%d\">%s</text>\n", LABEL_W + w + 6, y + BAR_H - 2,
	          fmt_num(num, sizeof num, bar->value));
}

void svg_bar_chart(struct sbuf *b, const char *caption, const struct bar *bars, int n, const char *unit,
                   double ref, const char *ref_label)
{
	int plot_w = CHART_W - LABEL_W - VALUE_W;
	int height = TOP + n * ROW_H + AXIS_H;
	int y1 = TOP + n * ROW_H;
	double max = axis_max(bars, n, ref);

	sb_printf(b, "<svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
	          CHART_W, height, CHART_W, height);
	sb_html(b, caption);
	sb_puts(b, "\">\n<title>");
	sb_html(b, caption);
	sb_puts(b, "</title>\n");
	grid(b, max, plot_w, TOP - 4, y1, unit);
	for (int i = 0; i < n; i++)
		bar_row(b, &bars[i], i, max, plot_w, unit);
	if (!isnan(ref) && ref > 0) {
		double x = LABEL_W + ref / max * plot_w;
		sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#cf222e\" "
		             "stroke-dasharray=\"4 3\"/>\n", x, TOP - 6, x, y1);
		sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" class=\"ref\">", x, TOP - 9);
		sb_html(b, ref_label);
		sb_puts(b, "</text>\n");
	}
	sb_puts(b, "</svg>\n");
}

/* --- loss curves ------------------------------------------------------------ */

enum { LINE_W = 560, LINE_H = 260, PAD_L = 56, PAD_R = 12, PAD_T = 12, PAD_B = 40 };

/* Each method its colour; precision its dash. */
const char *method_color(const char *method)
{
	static const char *const colors[] = { "#0969da", "#1a7f37", "#bc4c00", "#8250df", "#cf222e" };
	int m = method_from_name(method);

	return m >= 0 && m < (int)(sizeof colors / sizeof colors[0]) ? colors[m] : "#57606a";
}

/* The axis from lo to hi, widened to whole steps; *step set. */
static void axis_range(double *lo, double *hi, double *step)
{
	double span = *hi - *lo;

	if (!(span > 0)) {
		span = fabs(*hi) > 0 ? fabs(*hi) * 0.1 : 1;
		*lo -= span / 2;
		*hi += span / 2;
	}
	*step = nice_step(*hi - *lo);
	*lo = floor(*lo / *step + 1e-9) * *step;
	*hi = ceil(*hi / *step - 1e-9) * *step;
}

void svg_line_chart(struct sbuf *b, const char *caption, const struct series *s, int n, const char *x_label,
                    const char *y_label)
{
	double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY, xstep, ystep;
	int pw = LINE_W - PAD_L - PAD_R, ph = LINE_H - PAD_T - PAD_B;
	char num[32];

	for (int i = 0; i < n; i++)
		for (int k = 0; k < s[i].n; k++) {
			xlo = fmin(xlo, s[i].x[k]);
			xhi = fmax(xhi, s[i].x[k]);
			ylo = fmin(ylo, s[i].y[k]);
			yhi = fmax(yhi, s[i].y[k]);
		}
	if (!isfinite(xlo) || !isfinite(ylo))
		return;
	axis_range(&xlo, &xhi, &xstep);
	axis_range(&ylo, &yhi, &ystep);
	sb_printf(b, "<svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
	          LINE_W, LINE_H, LINE_W, LINE_H);
	sb_html(b, caption);
	sb_puts(b, "\">\n<title>");
	sb_html(b, caption);
	sb_puts(b, "</title>\n");
	for (int k = 0; ylo + k * ystep <= yhi * (1 + 1e-12) + 1e-12; k++) {
		double v = ylo + k * ystep, y = PAD_T + ph - (v - ylo) / (yhi - ylo) * ph;

		sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#d1d9e0\"/>\n", PAD_L, y,
		          PAD_L + pw, y);
		sb_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n", PAD_L - 4, y + 4,
		          fmt_tick(num, sizeof num, v, ystep));
	}
	for (int k = 0; xlo + k * xstep <= xhi * (1 + 1e-12) + 1e-12; k++) {
		double v = xlo + k * xstep, x = PAD_L + (v - xlo) / (xhi - xlo) * pw;

		sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%s</text>\n", x,
		          PAD_T + ph + 14, fmt_tick(num, sizeof num, v, xstep));
	}
	sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">", PAD_L + pw / 2, LINE_H - 6);
	sb_html(b, x_label);
	sb_printf(b, "</text>\n<text x=\"12\" y=\"%d\" text-anchor=\"middle\" class=\"tick\" "
	             "transform=\"rotate(-90 12 %d)\">", PAD_T + ph / 2, PAD_T + ph / 2);
	sb_html(b, y_label);
	sb_puts(b, "</text>\n");
	for (int i = 0; i < n; i++) {
		if (s[i].points) { /* evaluated on some steps only: a dot each */
			sb_printf(b, "<g class=\"dots\" fill=\"%s\"><title>", method_color(s[i].method));
			sb_html(b, s[i].method);
			sb_puts(b, " ");
			sb_html(b, s[i].precision);
			sb_puts(b, " ");
			sb_html(b, s[i].points);
			sb_puts(b, "</title>\n");
			for (int k = 0; k < s[i].n; k++)
				sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n",
				          PAD_L + (s[i].x[k] - xlo) / (xhi - xlo) * pw, PAD_T + ph - (s[i].y[k] - ylo) / (yhi - ylo) * ph);
			sb_puts(b, "</g>\n");
			continue;
		}
		sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"",
		          method_color(s[i].method), strcmp(s[i].precision, "nf4") == 0 ? "" : " stroke-dasharray=\"5 3\"");
		for (int k = 0; k < s[i].n; k++)
			sb_printf(b, "%s%.1f,%.1f", k ? " " : "", PAD_L + (s[i].x[k] - xlo) / (xhi - xlo) * pw,
			          PAD_T + ph - (s[i].y[k] - ylo) / (yhi - ylo) * ph);
		sb_puts(b, "\"><title>");
		sb_html(b, s[i].method);
		sb_puts(b, " ");
		sb_html(b, s[i].precision);
		sb_puts(b, "</title></polyline>\n");
	}
	sb_puts(b, "</svg>\n");
}

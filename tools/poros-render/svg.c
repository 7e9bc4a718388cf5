/* tools/poros-render/svg.c: horizontal bar charts as inline SVG (no
 * script, no external reference), one bar per cell of a model. */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
	CHART_W = 720,
	LABEL_W = 210,  /* left: "method precision" */
	VALUE_W = 110,  /* right of the longest bar: its value */
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

static void grid(struct sbuf *b, double max, int plot_w, int y0, int y1, const char *unit)
{
	double step = nice_step(max);
	char num[32];

	for (double v = 0; v <= max * (1 + 1e-9); v += step) {
		double x = LABEL_W + v / max * plot_w;
		sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d1d9e0\"/>\n", x, y0, x, y1);
		sb_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%s</text>\n", x, y1 + 14,
		          fmt_num(num, sizeof num, v));
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

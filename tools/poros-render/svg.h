/* tools/poros-render/svg.h: inline SVG bar charts. */
#ifndef POROS_RENDER_SVG_H
#define POROS_RENDER_SVG_H

#include "records/records.h"

struct bar {
	const char *method, *precision;  /* the label; precision picks the colour */
	const char *status;              /* shown when value is NaN */
	double value;                    /* NaN: not measured */
	double lo, hi;                   /* a range drawn over the bar; NaN: none */
};

/* The colour of a precision's bars (and of its legend swatch). */
const char *precision_color(const char *precision);

/* One bar per entry; ref (NaN: none) is drawn as a dashed line labelled
 * ref_label, e.g. the spec's card memory on a VRAM chart.  Every string
 * is HTML-escaped. */
void svg_bar_chart(struct sbuf *b, const char *caption, const struct bar *bars, int n, const char *unit,
                   double ref, const char *ref_label);

/* One line of a line chart: a cell's losses by step. */
struct series {
	const char *method, *precision;  /* colour by method, dashed unless nf4 */
	const double *x, *y;
	int n;
	const char *points;              /* non-NULL: dots, not a line, titled with this (e.g. "eval_loss") */
};

const char *method_color(const char *method);

/* Every series on shared axes, ticks at round steps; nothing when no
 * series has a point.  Strings HTML-escaped. */
void svg_line_chart(struct sbuf *b, const char *caption, const struct series *s, int n, const char *x_label,
                    const char *y_label);

#endif

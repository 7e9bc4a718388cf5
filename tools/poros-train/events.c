/* tools/poros-train/events.c: the event row's keys, one row each, and the
 * events.jsonl line written by them. */
#include "events.h"

#include <math.h>
#include <stdio.h>

#define BOTH (EW_TRAIN | EW_ARMS)

/* A new key is a row here, an enum member in events.h, a property in
 * share/poros/schema/event.schema.json and an ".It Li" item in
 * man/poros-events.5's key list, each in this order (test_record_schema
 * checks). */
const struct event_field event_fields[EV_COUNT] = {
	[EV_STEP] = { "step", EK_INT, "%lld", 0, BOTH, NULL },
	/* 9 significant digits of a float: poros-parity compares the bits */
	[EV_LOSS] = { "loss", EK_NUM, "%.9g", EF_NULLABLE | EF_FLOAT, BOTH, NULL },
	[EV_LR] = { "lr", EK_NUM, "%.9g", EF_NULLABLE, BOTH, NULL },
	[EV_GRAD_NORM] = { "grad_norm", EK_NUM, "%.9g", EF_NULLABLE, BOTH, NULL },
	[EV_STEP_S] = { "step_s", EK_NUM, "%.6f", 0, BOTH, "s" },
	[EV_TOKENS] = { "tokens", EK_INT, "%lld", 0, BOTH, NULL },
	[EV_TOKENS_SUPERVISED] = { "tokens_supervised", EK_INT, "%lld", 0, BOTH, NULL },
	[EV_EPOCH] = { "epoch", EK_NUM, "%.4f", EF_NULLABLE, BOTH, NULL },
	[EV_VRAM_ALLOC_MB] = { "vram_alloc_mb", EK_NUM, "%.1f", 0, BOTH, "MiB" },
	[EV_VRAM_PEAK_MB] = { "vram_peak_mb", EK_NUM, "%.1f", 0, BOTH, "MiB" },
	/* the arms copy nothing they can time: null there */
	[EV_H2D_BYTES] = { "h2d_bytes", EK_INT, "%lld", EF_NULLABLE, BOTH, "bytes" },
	[EV_H2D_S] = { "h2d_s", EK_NUM, "%.6f", EF_NULLABLE, BOTH, "s" },
	[EV_COMPUTE_S] = { "compute_s", EK_NUM, "%.6f", EF_NULLABLE, BOTH, "s" },
	[EV_COPY_HIDDEN_FRAC] = { "copy_hidden_frac", EK_NUM, "%.4f", EF_NULLABLE, BOTH, NULL },
	[EV_EVAL_LOSS] = { "eval_loss", EK_NUM, "%.9g", EF_NULLABLE | EF_FLOAT | EF_EVAL, EW_TRAIN, NULL },
	[EV_EVAL_TOKENS] = { "eval_tokens", EK_INT, "%lld", EF_EVAL, EW_TRAIN, NULL },
	[EV_PROFILE] = { "profile", EK_RAW, "%s", EF_PROFILE, EW_TRAIN, NULL },
};

/* Appends to line at *at, never past n. */
#define PUT(...)                                                              \
	do {                                                                  \
		if (*at < n)                                                  \
			*at += (size_t)snprintf(line + *at, n - *at, __VA_ARGS__); \
	} while (0)

static void put_value(char *line, size_t n, size_t *at, const struct event_field *f, double v, const char *raw)
{
	if (f->kind == EK_RAW)
		PUT(f->format, raw);
	else if ((f->flags & EF_NULLABLE) && !isfinite(v))
		PUT("null");
	else if (f->kind == EK_INT)
		PUT(f->format, (long long)v);
	else
		PUT(f->format, (f->flags & EF_FLOAT) ? (double)(float)v : v);
}

void event_line(char *line, size_t n, const struct event_row *r)
{
	size_t pos = 0, *at = &pos;

	PUT("{");
	for (int k = 0; k < EV_COUNT; k++) {
		const struct event_field *f = &event_fields[k];

		if (((f->flags & EF_EVAL) && !r->evaluated) || ((f->flags & EF_PROFILE) && !*r->profile))
			continue;
		PUT("%s\"%s\":", k ? "," : "", f->key);
		put_value(line, n, at, f, r->v[k], r->profile);
	}
	PUT("}\n");
}

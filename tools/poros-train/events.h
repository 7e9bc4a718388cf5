/* tools/poros-train/events.h: the event row, one line of events.jsonl per
 * optimizer step: the table of its keys (events.c) and the line made by
 * it.  share/poros/schema/event.schema.json documents the row and
 * tests/unit/test_record_schema.c holds it to the table; the Python arms
 * write the schema's required keys (armlib.py). */
#ifndef POROS_TRAIN_EVENTS_H
#define POROS_TRAIN_EVENTS_H

#include <stddef.h>

/* The keys, in the order they are written. */
enum event_key {
	EV_STEP, EV_LOSS, EV_LR, EV_GRAD_NORM, EV_STEP_S, EV_TOKENS, EV_TOKENS_SUPERVISED, EV_EPOCH,
	EV_VRAM_ALLOC_MB, EV_VRAM_PEAK_MB, EV_H2D_BYTES, EV_H2D_S, EV_COMPUTE_S, EV_COPY_HIDDEN_FRAC,
	EV_EVAL_LOSS, EV_EVAL_TOKENS, EV_PROFILE, EV_COUNT
};
enum event_kind { EK_INT, EK_NUM, EK_RAW /* JSON text as given: the profile object */ };
enum {
	EF_NULLABLE = 1, /* null when not finite (and a Python arm may write null) */
	EF_FLOAT = 2,    /* a float's value: rounded to float, then %.9g round-trips its bits */
	EF_EVAL = 4,     /* only on a step with an evaluation after it */
	EF_PROFILE = 8,  /* only with POROS_PROFILE */
};
enum { EW_TRAIN = 1, EW_ARMS = 2 }; /* poros-train, the Python arms */

struct event_field {
	const char *key;
	enum event_kind kind;
	const char *format;  /* printf of the value: "%lld" for EK_INT, a double's otherwise */
	unsigned flags;      /* EF_* */
	unsigned writers;    /* EW_* */
	const char *unit;    /* "s", "MiB", "bytes"; NULL: none */
};
extern const struct event_field event_fields[EV_COUNT];

/* One step's values by key (EK_INT ones whole numbers below 2^53). */
struct event_row {
	double v[EV_COUNT];
	const char *profile;  /* "" when not profiling */
	int evaluated;        /* EV_EVAL_* are written */
};

/* The JSON line of r, "\n"-terminated, into line (truncated at n). */
void event_line(char *line, size_t n, const struct event_row *r);

#endif

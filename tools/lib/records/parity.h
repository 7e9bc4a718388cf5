/* tools/lib/records/parity.h: the parity record, what poros-parity found when it
 * compared two training runs.  The one definition of its JSON schema
 * ("poros.parity/1", documented in man/poros-parity.1 and
 * share/poros/schema/parity.schema.json): poros-parity writes it, the
 * driver appends it to parity.jsonl, poros-render reads it.
 *
 * "Not measured" is null in JSON; in C it is NaN for a double, -1 for a
 * step, count or index and NULL for a string. */
#ifndef POROS_PARITY_H
#define POROS_PARITY_H

#include <stddef.h>
#include <cjson/cJSON.h>

#define PARITY_SCHEMA "poros.parity/1"

struct parity_tensor {
	char *name;              /* PEFT key */
	double max_abs_delta;    /* over pairs where both values are finite */
	long long max_index;     /* row-major element of the max; -1 when no element differs in value */
	long long n_different;   /* elements whose bits differ */
};

struct parity {
	char *run_a, *run_b;     /* the run directories as given */
	char *arch, *precision;  /* optional labels of the pair (the driver sets them) */
	long steps_compared;
	double loss_max_abs_delta;
	long loss_max_step;      /* step of the largest loss delta; -1 when none differs */
	double adapter_max_abs_delta;
	char *adapter_max_tensor;   /* tensor of the largest delta (or of the first bit difference) */
	long long adapter_max_index;
	long long nonfinite_mismatches; /* pairs (losses or weights) where one side is NaN/inf and the bits differ */
	int n_tensors;
	struct parity_tensor *tensors;
	int bitwise_exact;       /* 1 true, 0 false, -1 null */
};

/* How a key of the record is held: its C type and what null is there. */
enum parity_kind {
	PK_CONST,     /* "schema" */
	PK_STR,       /* char *; NULL is null */
	PK_STEP,      /* long, >= 0; -1 is null */
	PK_COUNT,     /* long long, >= 0; -1 is null */
	PK_DELTA,     /* double, finite and >= 0; NaN is null */
	PK_TENSORS,   /* n_tensors, tensors; written [] when none, read null as none */
	PK_FLAG,      /* int, a boolean; -1 is null */
};
enum { PF_LATER = 1 }; /* added later: absent in older records reads as null (else a missing key is refused) */

/* One row per key of poros.parity/1, in the order parity_to_json writes
 * them; parity_from_json reads by it, and tests/unit/test_record_schema.c
 * holds share/poros/schema/parity.schema.json to it. */
struct parity_field {
	const char *key;
	enum parity_kind kind;
	size_t offset;                 /* in struct parity */
	unsigned flags;                /* PF_* */
};
extern const struct parity_field parity_fields[];
extern const int parity_field_count;

/* Every field null, no tensors. */
void parity_init(struct parity *p);
void parity_free(struct parity *p);

/* The JSON object, every key present, in a stable order. */
cJSON *parity_to_json(const struct parity *p);
/* Reads and validates a parity object.  Returns 0, or -1 with err set to a
 * one-line reason naming the field ("tensors[2].max_abs_delta: not a number"). */
int parity_from_json(struct parity *p, const cJSON *obj, char *err, size_t errsz);

#endif

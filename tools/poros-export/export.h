/* tools/poros-export/export.h: merging a PEFT LoRA adapter into its base
 * checkpoint and writing the result as a bf16 Hugging Face checkpoint. */
#ifndef POROS_EXPORT_H
#define POROS_EXPORT_H

#include <stddef.h>
#include <stdio.h>

#define EXPORT_SYNOPSIS \
	"usage: poros-export --base DIR --adapter DIR --out DIR [--max-shard-size SIZE] [--force]\n"

struct export_opts {
	const char *base;          /* checkpoint directory (or a model id in the local HF cache) */
	const char *adapter;       /* PEFT adapter directory */
	const char *out;           /* the directory to create */
	long long max_shard_size;  /* bytes of tensor data per shard */
	int force;                 /* replace a non-empty --out */
	const char *configs_dir;   /* configs/models, to name a synthetic shape; may be NULL */
};

/* "5GB" (10^9), "5GiB" (2^30), "500MB", "1KiB", a plain byte count; as
 * transformers' max_shard_size reads them.  0, or -1 and *why. */
int export_parse_size(const char *s, long long *out, const char **why);

/* Does the export and prints one summary line (JSON) on summary.  Returns
 * an exit code; when it is not 0, err holds the one-line message. */
int export_run(const struct export_opts *o, FILE *summary, char *err, size_t errsz);

#endif

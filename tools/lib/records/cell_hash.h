/* tools/lib/records/cell_hash.h: a cell's identity by content.  Two cells with
 * the same config_hash measure the same thing; a changed field that can
 * change a measurement changes the hash.  What a cell is called and where
 * it is written (spec_id, model.display_name, output_dir) are left out,
 * and so is what the cell's method does not read (the poros section, but
 * for the poros method). */
#ifndef POROS_CELL_HASH_H
#define POROS_CELL_HASH_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "cell.h"

/* "sha256:" and 64 hex digits. */
#define CELL_HASH_LEN (7 + 64)

/* The canonical configuration: the cell's JSON without the fields above,
 * every object's keys sorted (byte order); the caller deletes it. */
cJSON *cell_config_json(const struct cell *c);
/* SHA-256 of cell_config_json printed compact, as "sha256:<hex>". */
void cell_config_hash(char out[CELL_HASH_LEN + 1], const struct cell *c);
/* Appends to out (comma separated) the dotted paths at which two canonical
 * configurations differ ("training.seq_len, lora.rank"); returns how many. */
int cell_config_diff(char *out, size_t outsz, const cJSON *a, const cJSON *b);

/* SHA-256 of data[0..n) (FIPS 180-4). */
void sha256(unsigned char digest[32], const void *data, size_t n);

#endif

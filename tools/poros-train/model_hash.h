/* tools/poros-train/model_hash.h: the base model identified by content.
 *
 * A checkpoint directory: "st64x4:" and 64 hex digits over config.json's
 * bytes, then, for each safetensors file the weights load from (in
 * st_checkpoint_open's order), its name, its size and every byte.
 * Synthetic weights: "synthetic:" and the same digest over the
 * configs/models file's bytes and the seed, which together define them.
 * The digest (model_hash.c) is a fast non-cryptographic one: it tells
 * models apart, it is not a defence against a forger. */
#ifndef POROS_TRAIN_MODEL_HASH_H
#define POROS_TRAIN_MODEL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define MODEL_HASH_LEN (10 + 64)

/* The digest of len bytes (4 lanes of 64 bits), streaming. */
struct content_hash {
	uint64_t lane[4];
	unsigned char tail[32];
	size_t tail_len;
	uint64_t total;
};
void content_hash_init(struct content_hash *h);
void content_hash_update(struct content_hash *h, const void *data, size_t len);
/* 64 hex digits and a NUL into out */
void content_hash_final(struct content_hash *h, char out[65]);

/* A file's size ("%lld:") and then its bytes into h, read in chunks;
 * *bytes grows by its size.  0, or -1 with err naming the file (also
 * when it is not a regular file, or changed size while it was read). */
int content_hash_file(struct content_hash *h, const char *path, size_t *bytes, char *err, size_t errsz);

/* out: the model's identity (see above); *bytes: how many bytes were
 * hashed.  0, or -1 with err naming the file. */
int model_hash(char out[MODEL_HASH_LEN + 1], size_t *bytes, const struct model_config *mc, unsigned long long seed,
               char *err, size_t errsz);

#endif

/* tools/poros-expand/train_config.h: a fine-tune config (man 5
 * poros-train-config) read into poros-train's argument vector. */
#ifndef POROS_EXPAND_TRAIN_CONFIG_H
#define POROS_EXPAND_TRAIN_CONFIG_H

/* Prints poros-train's arguments for the config in file, one per line
 * (no value holds a newline: control characters are refused), each key
 * as its option.  Any problem ends the program with exit 2 and one line
 * "FILE:LINE:COL: what", before anything is printed. */
void train_config_print_argv(const char *file);
/* "bench-spec" or "train-config", by the document's top-level keys;
 * neither ends the program with exit 2. */
const char *config_kind(const char *file);

#endif

/* tools/lib/records/cell_int.h: what the cell's table (cell.c) and the code that
 * reads, writes and checks a struct cell by it (cell_io.c) share. */
#ifndef POROS_CELL_INT_H
#define POROS_CELL_INT_H

#include <stddef.h>

int name_index(const char *const *names, int n, const char *s); /* its index in names, or -1 */
int is_slug(const char *s);  /* [a-z0-9_], 1 to 128 bytes */
/* 0, or -1 with err naming path and what is wrong with s (cell_text_problem) */
int check_text(const char *path, const char *s, size_t max, char *err, size_t errsz);

#endif

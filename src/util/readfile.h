/* Whole-file reads, gzip-transparent (zlib reads plain files unchanged). */
#ifndef KVPROBE_READFILE_H
#define KVPROBE_READFILE_H

#include <stddef.h>

/* malloc'd, NUL-terminated contents and their length; NULL on failure (errno set where the
 * system gives one). */
char *kvp_read_file(const char *path, size_t *len);

#endif

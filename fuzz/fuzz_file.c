/* cgrad fuzz targets: an input as a file (see fuzz/fuzz.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz/fuzz.h"

int cg_fuzz_mem_path(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("cg_fuzz", 0);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

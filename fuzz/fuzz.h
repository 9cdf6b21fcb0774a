/* cgrad fuzz targets: shared declarations.
 *
 * Each fuzz/fuzz_<target>.c defines LLVMFuzzerTestOneInput. Built with
 * clang -fsanitize=fuzzer (meson -Dfuzz=true, scripts/fuzz.sh) it is a
 * libFuzzer binary; in the normal build fuzz/regress.c supplies a main()
 * that feeds it every file of fuzz/corpus/<target>/ and
 * fuzz/crashes/<target>/ (meson test suite 'fuzz').
 *
 * The contract every target checks: an input is either rejected with a
 * recorded error message or accepted and then fully usable. A crash, a
 * sanitizer report, a leak, or a rejection without a message (abort) is a
 * bug. */
#ifndef CG_FUZZ_H
#define CG_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a file, for loaders that take a path: an in-memory file
 * (memfd) whose name "/proc/self/fd/N" goes into path (cap bytes). Returns
 * its descriptor (close it when done), or -1 when the environment cannot
 * make one (not the input's fault). fuzz/fuzz_file.c. */
int cg_fuzz_mem_path(const uint8_t *data, size_t size, char *path, size_t cap);

/* abort() with a note on stderr: the input broke an invariant. */
#define CG_FUZZ_CHECK(cond)                                                                    \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif

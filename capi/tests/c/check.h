/* Shared helpers of tmpi's C test suite. */
#ifndef TMPI_TEST_CHECK_H
#define TMPI_TEST_CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            int r_;                                                              \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                  \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", r_, __FILE__,  \
                    __LINE__, #cond);                                            \
            fflush(stderr);                                                      \
            MPI_Abort(MPI_COMM_WORLD, 2);                                        \
        }                                                                        \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS)

static inline void report_ok(const char *name) {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) {
        printf("%s: OK\n", name);
        fflush(stdout);
    }
}
#endif

/* Shared helpers of tmpi's C test suite. */
#ifndef TMPI_TEST_CHECK_H
#define TMPI_TEST_CHECK_H
#include <mpi.h>
#include <pthread.h>
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

/* MPI_Init_thread with MPI_THREAD_MULTIPLE (checked); the world's rank and size. */
static inline void init_multiple(int *argc, char ***argv, int *rank, int *size) {
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
}

/* Runs f on n threads (n <= 16), thread t getting a pointer to t, and joins them. */
static inline void run_threads(int n, void *(*f)(void *)) {
    static int ids[16];
    pthread_t th[16];
    CHECK(n <= 16);
    for (int t = 0; t < n; t++) {
        ids[t] = t;
        CHECK(pthread_create(&th[t], NULL, f, &ids[t]) == 0);
    }
    for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
}
#endif

/* A 16 MiB strided vector (every other double of a 32 MiB array) sent and
 * received with the vector type, then received as contiguous doubles.
 * Prints each rank's peak-RSS growth over the two transfers
 * ("rss_delta_kib rank=R N"): with per-fragment packing it stays far below
 * the message size; with mpi_pack_per_fragment=0 the whole-message
 * temporary shows up in it. 2 ranks.
 *
 * VECTOR16_REPS=N (environment) turns it into a benchmark: N timed
 * vector sends rank 0 -> 1, printed as "vector16_ms rep=i T". */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <sys/resource.h>

static long maxrss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

int main(int argc, char **argv) {
    int rank, size, i;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size == 2);
    const long n = 2L * 1024 * 1024; /* doubles sent: 16 MiB */
    double *a = malloc(2 * n * sizeof(double));
    double *c = malloc(n * sizeof(double));
    CHECK(a && c);
    for (i = 0; i < 2 * n; i++) a[i] = rank == 0 ? (i % 2 ? -1.0 : (double)(i / 2)) : -7.0;
    for (i = 0; i < n; i++) c[i] = -7.0;
    MPI_Datatype vec, small;
    OK(MPI_Type_vector((int)n, 1, 2, MPI_DOUBLE, &vec));
    OK(MPI_Type_commit(&vec));
    OK(MPI_Type_vector((int)(n / 16), 1, 2, MPI_DOUBLE, &small));
    OK(MPI_Type_commit(&small));

    const char *reps_s = getenv("VECTOR16_REPS");
    if (reps_s) {
        int reps = atoi(reps_s);
        for (i = -1; i < reps; i++) { /* one warm-up */
            OK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            if (rank == 0) OK(MPI_Send(a, 1, vec, 1, 9, MPI_COMM_WORLD));
            else OK(MPI_Recv(a, 1, vec, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Barrier(MPI_COMM_WORLD));
            if (rank == 0 && i >= 0) printf("vector16_ms rep=%d %.3f\n", i, (MPI_Wtime() - t0) * 1e3);
        }
        fflush(stdout);
        OK(MPI_Finalize());
        return 0;
    }

    /* Warm-up (1 MiB): the transports' buffers are touched before the
     * measurement. */
    if (rank == 0) OK(MPI_Send(a, 1, small, 1, 1, MPI_COMM_WORLD));
    else OK(MPI_Recv(a, 1, small, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    if (rank == 1) {
        for (i = 0; i < n / 16; i++) CHECK(a[2 * i] == (double)i && a[2 * i + 1] == -7.0);
        for (i = 0; i < 2 * n; i++) a[i] = -7.0;
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    long before = maxrss_kib();

    /* Vector to vector. */
    if (rank == 0) OK(MPI_Send(a, 1, vec, 1, 2, MPI_COMM_WORLD));
    else {
        MPI_Status st;
        int cnt;
        OK(MPI_Recv(a, 1, vec, 0, 2, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_DOUBLE, &cnt));
        CHECK(cnt == n);
        for (i = 0; i < n; i++) CHECK(a[2 * i] == (double)i && a[2 * i + 1] == -7.0);
    }
    /* Vector to contiguous. */
    if (rank == 0) OK(MPI_Send(a, 1, vec, 1, 3, MPI_COMM_WORLD));
    else {
        OK(MPI_Recv(c, (int)n, MPI_DOUBLE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < n; i++) CHECK(c[i] == (double)i);
    }
    /* Contiguous to vector, through a non-blocking receive. */
    if (rank == 0) {
        for (i = 0; i < n; i++) c[i] = 0.5 * i;
        OK(MPI_Send(c, (int)n, MPI_DOUBLE, 1, 4, MPI_COMM_WORLD));
    } else {
        MPI_Request r;
        for (i = 0; i < 2 * n; i++) a[i] = -7.0;
        OK(MPI_Irecv(a, 1, vec, 0, 4, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        for (i = 0; i < n; i++) CHECK(a[2 * i] == 0.5 * i && a[2 * i + 1] == -7.0);
    }
    long after = maxrss_kib();
    printf("rss_delta_kib rank=%d %ld\n", rank, after - before);
    fflush(stdout);
    /* Buffered send of a vector (1 MiB): copied packed into the attached
     * buffer, received as contiguous. */
    {
        int bsz = (int)(n / 16 * sizeof(double)) + MPI_BSEND_OVERHEAD, bsz2;
        void *bb = malloc(bsz), *bb2;
        CHECK(bb);
        OK(MPI_Buffer_attach(bb, bsz));
        if (rank == 0) {
            for (i = 0; i < 2 * n; i++) a[i] = i % 2 ? -1.0 : 3.0 * (i / 2);
            OK(MPI_Bsend(a, 1, small, 1, 5, MPI_COMM_WORLD));
            for (i = 0; i < 2 * n; i++) a[i] = -2.0; /* the copy was taken */
        } else {
            OK(MPI_Recv(c, (int)(n / 16), MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (i = 0; i < n / 16; i++) CHECK(c[i] == 3.0 * i);
        }
        OK(MPI_Buffer_detach(&bb2, &bsz2));
        CHECK(bb2 == bb && bsz2 == bsz);
        free(bb);
    }
    OK(MPI_Type_free(&vec));
    OK(MPI_Type_free(&small));
    free(a);
    free(c);
    report_ok("vector16");
    OK(MPI_Finalize());
    return 0;
}

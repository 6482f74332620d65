/* Collective latency benchmark, the same measurement as `coll-check bench`
 * (comm/src/selftest.rs): per operation and size, a warm-up of
 * min(iters, 50) calls, then 5 timed loops of `iters` calls separated by a
 * barrier; rank 0 prints the median loop's time per call in microseconds.
 * iters = clamp(200e6 / (bytes * ranks + 20000), 5, 2000).
 * COLL_BENCH_OPS=bcast,allreduce and COLL_BENCH_SIZES=65536,1048576
 * restrict a run, as for coll-check.
 * Build: mpicc.openmpi -O2 coll_bench.c -o coll_bench.ompi (or mpicc.mpich). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Whether `item` is in the comma-separated list of environment variable
 * `var` (an unset or empty variable selects everything). */
static int picked(const char *var, const char *item) {
    const char *v = getenv(var);
    if (!v || !*v) return 1;
    size_t n = strlen(item);
    for (const char *q = v; *q;) {
        const char *e = strchr(q, ',');
        size_t len = e ? (size_t)(e - q) : strlen(q);
        if (len == n && !strncmp(q, item, n)) return 1;
        if (!e) break;
        q = e + 1;
    }
    return 0;
}

static void op(const char *name, size_t n, char *s, char *o, int p, int me) {
    if (!strcmp(name, "barrier")) MPI_Barrier(MPI_COMM_WORLD);
    else if (!strcmp(name, "bcast")) MPI_Bcast(s, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    else if (!strcmp(name, "allreduce"))
        MPI_Allreduce(s, o, (int)(n / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(name, "reduce"))
        MPI_Reduce(s, o, (int)(n / 8), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    else if (!strcmp(name, "allgather"))
        MPI_Allgather(s, (int)n, MPI_BYTE, o, (int)n, MPI_BYTE, MPI_COMM_WORLD);
    else if (!strcmp(name, "alltoall")) {
        size_t blk = (n > (size_t)p ? n : (size_t)p) / p;
        MPI_Alltoall(s, (int)blk, MPI_BYTE, o, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    }
    (void)me;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int p, me;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    const char *names[] = {"barrier", "bcast", "allreduce", "reduce", "allgather", "alltoall"};
    size_t sizes[] = {8, 1024, 64 * 1024, 1024 * 1024};
    char *s = calloc(1 << 20, 1), *o = calloc((size_t)p << 20, 1);
    for (int k = 0; k < 6; k++)
        for (int z = 0; z < 4; z++) {
            size_t n = sizes[z];
            if (!strcmp(names[k], "barrier") && n != 8) continue;
            char nbuf[32];
            snprintf(nbuf, sizeof nbuf, "%zu", n);
            if (!picked("COLL_BENCH_OPS", names[k]) || !picked("COLL_BENCH_SIZES", nbuf)) continue;
            long iters = 200000000L / (long)(n * p + 20000);
            if (iters < 5) iters = 5;
            if (iters > 2000) iters = 2000;
            for (long i = 0; i < (iters < 50 ? iters : 50); i++) op(names[k], n, s, o, p, me);
            double runs[5];
            for (int r = 0; r < 5; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t = MPI_Wtime();
                for (long i = 0; i < iters; i++) op(names[k], n, s, o, p, me);
                runs[r] = (MPI_Wtime() - t) * 1e6 / iters;
            }
            qsort(runs, 5, sizeof runs[0], cmp);
            if (me == 0) printf("bench %s %d ranks %zu B: %.2f us\n", names[k], p, n, runs[2]);
        }
    free(s);
    free(o);
    MPI_Finalize();
    return 0;
}

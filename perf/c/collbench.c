/* collbench: latency of barrier, bcast, allreduce (sum of doubles),
 * reduce, allgather and alltoall for a few sizes, osu style (median of
 * 5 timed loops, max over ranks). Plain MPI: builds with tmpi's mpicc,
 * mpicc.openmpi and mpicc.mpich alike.
 *
 *   collbench [--csv]    output: "op,bytes,us" lines with --csv
 *
 * COLL_BENCH_OPS=allreduce,bcast restricts a run to those operations;
 * COLL_BENCH_SIZES=4096,65536 replaces the sizes (default 8, 1024,
 * 65536, 1048576; at most 16, each at most 1 MiB); COLL_BENCH_ITERS_X=N multiplies
 * every loop's iteration count (longer runs for perf record).
 * COLL_BENCH_FRESH=1 rewrites the send buffer before every call (the root's
 * for bcast, every rank's otherwise), as an application's fresh data would
 * be, and times the calls alone: by default every call sends the same
 * unchanged buffer, which a library reading it in place finds in cache. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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

/* Writes the part of `sb` that call `i` of `op` sends (COLL_BENCH_FRESH). */
static void refill(const char *op, int bytes, char *sb, int rank, int size, int i) {
    if (!strcmp(op, "bcast") && rank != 0) return;
    if (!strcmp(op, "barrier")) return;
    size_t n = !strcmp(op, "alltoall") ? (size_t)bytes * size : (size_t)bytes;
    double *d = (double *)sb;
    size_t k, nd = n / 8;
    for (k = 0; k < nd; k++) d[k] = (double)(i + rank) + (double)k;
    for (k = nd * 8; k < n; k++) sb[k] = (char)(i + rank + k);
}

static double timed(const char *op, int bytes, char *sb, char *rb, int iters) {
    int rank, size, i, r;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int nd = bytes / 8 > 0 ? bytes / 8 : 1;
    int fresh = getenv("COLL_BENCH_FRESH") && atoi(getenv("COLL_BENCH_FRESH")) > 0;
    double runs[5];
    for (r = 0; r < 5; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), calls = 0;
        for (i = 0; i < iters; i++) {
            double c0 = 0;
            if (fresh) {
                refill(op, bytes, sb, rank, size, i);
                c0 = MPI_Wtime();
            }
            if (!strcmp(op, "barrier")) MPI_Barrier(MPI_COMM_WORLD);
            else if (!strcmp(op, "bcast")) MPI_Bcast(sb, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
            else if (!strcmp(op, "allreduce")) MPI_Allreduce(sb, rb, nd, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(op, "reduce")) MPI_Reduce(sb, rb, nd, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            else if (!strcmp(op, "allgather")) MPI_Allgather(sb, bytes, MPI_BYTE, rb, bytes, MPI_BYTE, MPI_COMM_WORLD);
            else if (!strcmp(op, "alltoall")) MPI_Alltoall(sb, bytes, MPI_BYTE, rb, bytes, MPI_BYTE, MPI_COMM_WORLD);
            if (fresh) calls += MPI_Wtime() - c0;
        }
        double t = (fresh ? calls : MPI_Wtime() - t0) / iters * 1e6, m;
        MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        runs[r] = m;
    }
    qsort(runs, 5, sizeof runs[0], cmp);
    return runs[2];
}

int main(int argc, char **argv) {
    int rank, size, csv = argc > 1 && !strcmp(argv[1], "--csv");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *ops[] = {"barrier", "bcast", "allreduce", "reduce", "allgather", "alltoall"};
    int sizes[16] = {8, 1024, 65536, 1048576};
    unsigned nsizes = 4;
    const char *sv = getenv("COLL_BENCH_SIZES");
    if (sv && *sv) {
        nsizes = 0;
        for (const char *q = sv; *q && nsizes < 16;) {
            long v = strtol(q, NULL, 10);
            if (v > 0 && v <= 1048576) sizes[nsizes++] = (int)v;
            const char *e = strchr(q, ',');
            if (!e) break;
            q = e + 1;
        }
    }
    size_t cap = (size_t)1048576 * size;
    char *sb = calloc(cap, 1), *rb = calloc(cap, 1);
    /* Written, as an application's buffers are (and as the OSU benchmarks
       do): pages calloc gives and nobody wrote are the kernel's shared zero
       page, which stays in cache for every reader (a 1 MiB alltoall at 8
       ranks read 3.7 ms in both libraries that way, 5.8 with written
       buffers) and takes vmsplice's slow pinning path (docs/coll.md,
       "Spliced single copy"). */
    memset(sb, 1 + rank % 255, cap);
    memset(rb, 0, cap);
    unsigned o, s;
    for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        for (s = 0; s < nsizes; s++) {
            if (!strcmp(ops[o], "barrier") && s > 0) break;
            if (!picked("COLL_BENCH_OPS", ops[o])) continue;
            int iters = sizes[s] <= 1024 ? 2000 : sizes[s] <= 65536 ? 200 : 20;
            if (getenv("COLL_BENCH_ITERS_X")) iters *= atoi(getenv("COLL_BENCH_ITERS_X")) > 0 ? atoi(getenv("COLL_BENCH_ITERS_X")) : 1;
            timed(ops[o], sizes[s], sb, rb, iters / 10 + 1);
            double us = timed(ops[o], sizes[s], sb, rb, iters);
            if (rank == 0) {
                if (csv) printf("%s,%d,%.3f\n", ops[o], sizes[s], us);
                else printf("%-10s %8d B %10.2f us\n", ops[o], sizes[s], us);
            }
        }
    }
    free(sb);
    free(rb);
    MPI_Finalize();
    return 0;
}

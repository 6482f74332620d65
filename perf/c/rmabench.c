/* One-sided latency and bandwidth (osu_put_latency / osu_get_latency /
 * osu_fop_latency style), the same source for tmpi, Open MPI and MPICH:
 *
 *   rmabench [--min B] [--max B] [--iters N] [--modes LIST] [--info KEY=VALUE] [--csv]
 *
 * Two ranks; rank 0 is the origin, rank 1 the target (which waits in
 * MPI_Barrier, i.e. inside MPI, during each measurement). The window is
 * MPI_Win_allocate'd. Modes, one line per size each:
 *   put-flush  lock_all once; per iteration MPI_Put + MPI_Win_flush
 *   get-flush  lock_all once; per iteration MPI_Get + MPI_Win_flush
 *   put-fence  per iteration MPI_Put + MPI_Win_fence (both ranks)
 *   put-lock   per iteration MPI_Win_lock (shared) + MPI_Put + MPI_Win_unlock
 *   put-pscw   per iteration MPI_Win_start + MPI_Put + MPI_Win_complete at
 *              the origin, MPI_Win_post + MPI_Win_wait at the target
 *   acc-flush  lock_all; per iteration MPI_Accumulate (MPI_SUM of the size's
 *              int64 elements; sizes from 8 bytes) + MPI_Win_flush
 *   acc-excl   as acc-flush under one exclusive MPI_Win_lock of the target
 *   put-bw     lock_all; a window of 32 MPI_Put then one flush (MB/s)
 *   fop        lock_all; MPI_Fetch_and_op (8-byte MPI_SUM) + flush
 * Latencies are microseconds per iteration at the origin. --modes runs
 * only the modes of the comma-separated LIST (all by default), e.g. for
 * counting instructions per call under callgrind. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, csv;
static const char *modes;

/* Whether mode m runs (--modes). */
static int want(const char *m) {
    if (!modes) return 1;
    size_t n = strlen(m);
    for (const char *p = modes; (p = strstr(p, m)) != NULL; p += n)
        if ((p == modes || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

static void report(const char *mode, size_t n, double v) {
    if (rank != 0) return;
    if (csv) printf("%s,%zu,%.3f\n", mode, n, v);
    else printf("%-10s %10zu %12.3f\n", mode, n, v);
    fflush(stdout);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t min = 1, max = 1 << 20;
    int iters = 0;
    MPI_Info info = MPI_INFO_NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc) min = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--modes") && i + 1 < argc) modes = argv[++i];
        else if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--info") && i + 1 < argc && strchr(argv[i + 1], '=')) {
            /* A window info hint, e.g. acc_single_intrinsic=true. */
            char *kv = argv[++i], *eq = strchr(kv, '=');
            *eq = 0;
            if (info == MPI_INFO_NULL) MPI_Info_create(&info);
            MPI_Info_set(info, kv, eq + 1);
        } else {
            if (rank == 0) fprintf(stderr, "usage: rmabench [--min B] [--max B] [--iters N] [--modes LIST] [--info KEY=VALUE] [--csv]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "rmabench: needs 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    enum { WINDOW = 32 };
    char *base, *local = malloc(max ? max : 1);
    memset(local, 'a', max ? max : 1);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(max * WINDOW + 64), 1, info, MPI_COMM_WORLD, &base, &win);
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    if (rank == 0 && !csv) printf("# rmabench (origin rank 0, target rank 1)\n# %-8s %10s %12s\n", "mode", "size", "us or MB/s");
    for (size_t n = min; n <= max; n *= 2) {
        int it = iters ? iters : (n <= 8192 ? 2000 : 200);
        int warm = it / 10;
        double t0 = 0, t;
        /* put-flush and get-flush */
        for (int m = 0; m < 2; m++) {
            if (!want(m == 0 ? "put-flush" : "get-flush")) continue;
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                MPI_Win_lock_all(0, win);
                for (int i = 0; i < warm + it; i++) {
                    if (i == warm) t0 = MPI_Wtime();
                    if (m == 0) MPI_Put(local, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win);
                    else MPI_Get(local, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win);
                    MPI_Win_flush(1, win);
                }
                t = MPI_Wtime() - t0;
                MPI_Win_unlock_all(win);
                report(m == 0 ? "put-flush" : "get-flush", n, t * 1e6 / it);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        /* put-fence */
        if (want("put-fence")) {
            MPI_Win_fence(0, win);
            for (int i = 0; i < warm + it; i++) {
                if (i == warm) t0 = MPI_Wtime();
                if (rank == 0) MPI_Put(local, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win);
                MPI_Win_fence(0, win);
            }
            t = MPI_Wtime() - t0;
            report("put-fence", n, t * 1e6 / it);
        }
        /* put-lock */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && want("put-lock")) {
            for (int i = 0; i < warm + it; i++) {
                if (i == warm) t0 = MPI_Wtime();
                MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
                MPI_Put(local, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win);
                MPI_Win_unlock(1, win);
            }
            t = MPI_Wtime() - t0;
            report("put-lock", n, t * 1e6 / it);
        }
        /* put-pscw */
        MPI_Barrier(MPI_COMM_WORLD);
        if (want("put-pscw")) {
            MPI_Group world, peer;
            MPI_Comm_group(MPI_COMM_WORLD, &world);
            int other = 1 - rank;
            MPI_Group_incl(world, 1, &other, &peer);
            for (int i = 0; i < warm + it; i++) {
                if (i == warm) t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Win_start(peer, 0, win);
                    MPI_Put(local, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win);
                    MPI_Win_complete(win);
                } else {
                    MPI_Win_post(peer, 0, win);
                    MPI_Win_wait(win);
                }
            }
            t = MPI_Wtime() - t0;
            if (rank == 0) report("put-pscw", n, t * 1e6 / it);
            MPI_Group_free(&peer);
            MPI_Group_free(&world);
        }
        /* acc-flush */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && n >= 8 && want("acc-flush")) {
            int k = (int)(n / 8);
            MPI_Win_lock_all(0, win);
            for (int i = 0; i < warm + it; i++) {
                if (i == warm) t0 = MPI_Wtime();
                MPI_Accumulate(local, k, MPI_INT64_T, 1, 0, k, MPI_INT64_T, MPI_SUM, win);
                MPI_Win_flush(1, win);
            }
            t = MPI_Wtime() - t0;
            MPI_Win_unlock_all(win);
            report("acc-flush", n, t * 1e6 / it);
        }
        /* acc-excl */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && n >= 8 && want("acc-excl")) {
            int k = (int)(n / 8);
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            for (int i = 0; i < warm + it; i++) {
                if (i == warm) t0 = MPI_Wtime();
                MPI_Accumulate(local, k, MPI_INT64_T, 1, 0, k, MPI_INT64_T, MPI_SUM, win);
                MPI_Win_flush(1, win);
            }
            t = MPI_Wtime() - t0;
            MPI_Win_unlock(1, win);
            report("acc-excl", n, t * 1e6 / it);
        }
        /* put-bw */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && want("put-bw")) {
            int bit = n <= 8192 ? it / 10 : it / 4;
            if (bit < 4) bit = 4;
            MPI_Win_lock_all(0, win);
            for (int i = 0; i < 2 + bit; i++) {
                if (i == 2) t0 = MPI_Wtime();
                for (int w = 0; w < WINDOW; w++)
                    MPI_Put(local, (int)n, MPI_BYTE, 1, (MPI_Aint)(w * n), (int)n, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            t = MPI_Wtime() - t0;
            MPI_Win_unlock_all(win);
            report("put-bw", n, (double)n * WINDOW * bit / t / 1e6);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* fop */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && want("fop")) {
        int it = iters ? iters : 2000, warm = it / 10;
        int64_t one = 1, old = 0;
        double t0 = 0;
        MPI_Win_lock_all(0, win);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 1, 0, MPI_SUM, win);
            MPI_Win_flush(1, win);
        }
        double t = MPI_Wtime() - t0;
        MPI_Win_unlock_all(win);
        report("fop", 8, t * 1e6 / it);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(local);
    MPI_Finalize();
    return 0;
}

/* p2pbench: plain MPI ping-pong and bandwidth, the same measurements as
 * `tmpi-bench pingpong|bw` (osu_latency / osu_bw style), for Open MPI and
 * MPICH side by side with tmpi.
 *
 *   p2pbench pingpong|bw [--csv] [--max BYTES] [--iters N]
 *
 * Output: a table, or with --csv lines "size,latency_us" / "size,mb_per_s".
 * Build: mpicc.openmpi -O2 -o p2pbench-ompi p2pbench.c (see Makefile). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static void lat_iters(size_t n, int *warm, int *iters) {
    if (n <= 8192) { *warm = 1000; *iters = 10000; }
    else if (n <= (1u << 20)) { *warm = 100; *iters = 1000; }
    else { *warm = 10; *iters = 100; }
}

int main(int argc, char **argv) {
    int rank, size, csv = 0, force_iters = 0;
    size_t max = 4u << 20, min = 0;
    const char *mode;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || (strcmp(argv[1], "pingpong") && strcmp(argv[1], "bw"))) {
        if (rank == 0) fprintf(stderr, "usage: p2pbench pingpong|bw [--csv] [--min BYTES] [--max BYTES] [--iters N]\n");
        MPI_Finalize();
        return 2;
    }
    mode = argv[1];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = 1;
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) min = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) force_iters = atoi(argv[++i]);
    }
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "p2pbench: needs 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    char *sbuf = malloc(max ? max : 1);
    char *rbuf = malloc((max ? max : 1) * (strcmp(mode, "bw") ? 1 : WINDOW));
    memset(sbuf, 'a', max);
    if (!strcmp(mode, "pingpong")) {
        if (rank == 0 && !csv) printf("# p2pbench pingpong (one-way latency)\n# %-10s %14s\n", "Size", "Latency (us)");
        for (size_t n = min; n <= max; n = n ? n * 2 : 1) {
            int warm, iters;
            lat_iters(n, &warm, &iters);
            if (force_iters) iters = force_iters;
            double t0 = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < warm + iters; i++) {
                if (i == warm) t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(sbuf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(rbuf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
            if (rank == 0) {
                if (csv) printf("%zu,%.3f\n", n, us);
                else printf("  %-10zu %14.2f\n", n, us);
            }
        }
    } else {
        MPI_Request reqs[WINDOW];
        char ack[4] = {0};
        if (rank == 0 && !csv) printf("# p2pbench bw (window %d)\n# %-10s %16s\n", WINDOW, "Size", "Bandwidth (MB/s)");
        for (size_t n = min ? min : 1; n <= max; n *= 2) {
            int warm = n <= 8192 ? 10 : 2, iters = n <= 8192 ? 100 : 20;
            if (force_iters) iters = force_iters;
            double t0 = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < warm + iters; i++) {
                if (i == warm) t0 = MPI_Wtime();
                if (rank == 0) {
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Isend(sbuf, (int)n, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
                    MPI_Recv(ack, 4, MPI_BYTE, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    /* One buffer per window slot, like tmpi-bench. */
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Irecv(rbuf + (size_t)w * n, (int)n, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
                    MPI_Send(ack, 4, MPI_BYTE, 0, 101, MPI_COMM_WORLD);
                }
            }
            double mbs = (double)n * WINDOW * iters / (MPI_Wtime() - t0) / 1e6;
            if (rank == 0) {
                if (csv) printf("%zu,%.1f\n", n, mbs);
                else printf("  %-10zu %16.1f\n", n, mbs);
            }
        }
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}

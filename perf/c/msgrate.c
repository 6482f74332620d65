/* Windowed message rate (osu_mbw_mr style), the same source for tmpi, Open
 * MPI and MPICH:
 *
 *   msgrate [--min BYTES] [--max BYTES] [--iters N] [--window W] [--csv]
 *
 * The first half of the ranks send, the second half receive: rank i pairs
 * with rank i + size/2. Per iteration a sender starts W MPI_Isend of the
 * size and waits for them (MPI_Waitall), the receiver pre-posts W
 * MPI_Irecv and waits for them, then sends a zero-byte reply that the
 * sender receives before its next window (so a window never overruns the
 * receiver's posted receives). Reported: messages per second over all
 * pairs (every sender's messages over the slowest sender's time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t min = 1, max = 8192;
    int iters = 0, window = 64, csv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc) min = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) window = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv")) csv = 1;
        else {
            if (rank == 0)
                fprintf(stderr, "usage: msgrate [--min B] [--max B] [--iters N] [--window W] [--csv]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (size < 2 || size % 2 || window < 1) {
        if (rank == 0) fprintf(stderr, "msgrate: needs an even number of ranks and window >= 1\n");
        MPI_Finalize();
        return 2;
    }
    int pairs = size / 2, sender = rank < pairs;
    int peer = sender ? rank + pairs : rank - pairs;
    char *buf = malloc((max ? max : 1) * (size_t)window);
    memset(buf, 'a', (max ? max : 1) * (size_t)window);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)window);
    if (rank == 0 && !csv)
        printf("# msgrate (window %d, %d pair%s)\n# %-10s %16s\n", window, pairs, pairs > 1 ? "s" : "",
               "Size", "Messages/s");
    for (size_t n = min; n <= max; n = n ? n * 2 : 1) {
        int it = iters ? iters : (n <= 1024 ? 2000 : 500);
        int warm = it / 10;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (sender) {
                for (int w = 0; w < window; w++)
                    MPI_Isend(buf + (size_t)w * n, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int w = 0; w < window; w++)
                    MPI_Irecv(buf + (size_t)w * n, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                MPI_Send(NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0, slowest = 0;
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double rate = (double)pairs * it * window / slowest;
            if (csv) printf("%zu,%.0f\n", n, rate);
            else printf("%-12zu %16.0f\n", n, rate);
            fflush(stdout);
        }
    }
    free(reqs);
    free(buf);
    MPI_Finalize();
    return 0;
}

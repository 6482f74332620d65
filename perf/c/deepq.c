/* deepq: ping-pong latency behind a deep matching queue (issue 11).
 *
 *   deepq posted|unexpected [--iters N] D...
 *
 * posted:     each of the 2 ranks pre-posts D receives from its peer on
 *             tags that never match (1000+i), then times a 0-byte
 *             ping-pong on tag 1; every ping-pong receive is matched
 *             behind the D posted receives. The D receives are completed
 *             at the end by D 0-byte sends (no MPI_Cancel needed).
 * unexpected: rank 1 sends D 0-byte messages (tags 1000+i) that rank 0
 *             has not posted, a barrier makes sure they have arrived, then
 *             the ping-pong on tag 1: rank 0's receive searches past the D
 *             unexpected messages. Rank 0 drains them at the end.
 *
 * Output: lines "mode,D,one_way_us" (median of 5 timed loops).
 * Plain MPI: builds with tmpi's mpicc, mpicc.openmpi and mpicc.mpich. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pingpong(int rank, int iters) {
    char c = 0;
    double t[5];
    for (int k = 0; k < 5; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (rank == 0) {
                MPI_Send(&c, 0, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(&c, 0, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(&c, 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(&c, 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        t[k] = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
    }
    qsort(t, 5, sizeof t[0], cmp);
    return t[2];
}

int main(int argc, char **argv) {
    int rank, size, iters = 200, posted;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3 || size != 2 || (strcmp(argv[1], "posted") && strcmp(argv[1], "unexpected"))) {
        if (rank == 0) fprintf(stderr, "usage (2 ranks): deepq posted|unexpected [--iters N] D...\n");
        MPI_Finalize();
        return 2;
    }
    posted = !strcmp(argv[1], "posted");
    int peer = 1 - rank;
    char c = 0;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--iters") && a + 1 < argc) {
            iters = atoi(argv[++a]);
            continue;
        }
        int d = atoi(argv[a]);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)(d ? d : 1));
        if (posted) {
            for (int i = 0; i < d; i++)
                MPI_Irecv(&c, 0, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD, &reqs[i]);
        } else if (rank == 1) {
            for (int i = 0; i < d; i++)
                MPI_Isend(&c, 0, MPI_BYTE, 0, 1000 + i, MPI_COMM_WORLD, &reqs[i]);
        }
        if (!posted) {
            /* all D messages at rank 0 (unexpected) before the ping-pong */
            if (rank == 1) MPI_Waitall(d, reqs, MPI_STATUSES_IGNORE);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                int flag = 0;
                MPI_Status st;
                if (d > 0) /* the last one is there (ordered channel) */
                    while (!flag) MPI_Iprobe(1, 1000 + d - 1, MPI_COMM_WORLD, &flag, &st);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double us = pingpong(rank, iters);
        if (posted) {
            for (int i = 0; i < d; i++) MPI_Send(&c, 0, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD);
            MPI_Waitall(d, reqs, MPI_STATUSES_IGNORE);
        } else if (rank == 0) {
            for (int i = 0; i < d; i++)
                MPI_Recv(&c, 0, MPI_BYTE, 1, 1000 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        free(reqs);
        if (rank == 0) printf("%s,%d,%.3f\n", argv[1], d, us);
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}

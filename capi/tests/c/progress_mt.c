/* MPI_THREAD_MULTIPLE with non-blocking collectives: while one thread of
 * every rank runs a point-to-point ping-pong with its partner (blocking
 * MPI_Send / MPI_Recv, whose waiting rounds also advance the process's
 * outstanding collectives), the main thread runs MPI_Iallreduce + MPI_Wait
 * and MPI_Ibcast + an MPI_Test loop on the same communicator. The two
 * threads drive the same requests at once; every result is checked. */
#include "check.h"
#include <pthread.h>

enum { PINGS = 2000, ROUNDS = 300, BIG = 16384 };
static int rank, size;

static void *pingpong(void *arg) {
    int partner = rank ^ 1, i, v;
    (void)arg;
    if (partner >= size) return NULL;
    for (i = 0; i < PINGS; i++) {
        if (rank % 2 == 0) {
            OK(MPI_Send(&i, 1, MPI_INT, partner, 21, MPI_COMM_WORLD));
            OK(MPI_Recv(&v, 1, MPI_INT, partner, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Recv(&v, 1, MPI_INT, partner, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Send(&v, 1, MPI_INT, partner, 21, MPI_COMM_WORLD));
        }
        CHECK(v == i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided, k, i;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *big = malloc(sizeof(int) * BIG);
    CHECK(big != NULL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, pingpong, NULL) == 0);
    for (k = 0; k < ROUNDS; k++) {
        MPI_Request r;
        int x = rank + k, sum = -1, flag = 0;
        OK(MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(sum == size * (size - 1) / 2 + size * k);
        int root = k % size, n = (k % 3 == 0) ? BIG : 3;
        for (i = 0; i < n; i++) big[i] = rank == root ? i * 7 + k : -1;
        OK(MPI_Ibcast(big, n, MPI_INT, root, MPI_COMM_WORLD, &r));
        while (!flag) OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        for (i = 0; i < n; i++) CHECK(big[i] == i * 7 + k);
    }
    CHECK(pthread_join(t, NULL) == 0);
    free(big);
    report_ok("progress_mt");
    MPI_Finalize();
    return 0;
}

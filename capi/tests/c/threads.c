/* MPI_THREAD_MULTIPLE: a thread blocked in MPI_Recv must not keep other
 * threads out of the library (the pml holds its lock across polling rounds
 * only when calls are serialized, i.e. below MPI_THREAD_MULTIPLE). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <pthread.h>
#include <time.h>

static void pause_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

enum { N = 2000 };
static int rank, size;

static void *recv_self(void *arg) {
    int *v = arg;
    OK(MPI_Recv(v, 1, MPI_INT, rank, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return NULL;
}

static void *recv_prev(void *arg) {
    long *sum = arg;
    int prev = (rank + size - 1) % size, i, v;
    MPI_Status st;
    for (i = 0; i < N; i++) {
        OK(MPI_Recv(&v, 1, MPI_INT, prev, 12, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == prev && v == prev * N + i); /* in order */
        *sum += v;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided, q, v = -1, i;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    OK(MPI_Query_thread(&q));
    CHECK(q == MPI_THREAD_MULTIPLE);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));

    /* A receive from oneself, blocked in another thread while this one
     * sends: deadlocks if the waiting thread keeps the library locked. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, recv_self, &v) == 0);
    pause_ms(20);
    int x = 1000 + rank;
    OK(MPI_Send(&x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(v == 1000 + rank);

    /* A ring: each rank's receiving thread waits on its predecessor while
     * the main thread sends to its successor. */
    long sum = 0;
    CHECK(pthread_create(&t, NULL, recv_prev, &sum) == 0);
    pause_ms(10);
    int next = (rank + 1) % size;
    for (i = 0; i < N; i++) {
        int m = rank * N + i;
        OK(MPI_Send(&m, 1, MPI_INT, next, 12, MPI_COMM_WORLD));
    }
    CHECK(pthread_join(t, NULL) == 0);
    int prev = (rank + size - 1) % size;
    CHECK(sum == (long)prev * N * N + (long)N * (N - 1) / 2);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    report_ok("threads");
    OK(MPI_Finalize());
    return 0;
}

#define _DEFAULT_SOURCE
/* Communicator constructors on two threads of each process at once
 * (MPI_THREAD_MULTIPLE), in different orders on different ranks, and a dup
 * of MPI_COMM_SELF under a user lock meanwhile (MPICH's threads/comm
 * ctxdup, comm_dup_deadlock, comm_create_threads). Before, a process lock
 * serialised the constructors and these deadlocked. */
#include <pthread.h>
#include <unistd.h>
#include "check.h"

#define THREADS 2
#define ITERS 20
static MPI_Comm comms[THREADS];
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;
static int rank, size;

static void *work(void *arg) {
    int t = *(int *)arg;
    for (int i = 0; i < ITERS; i++) {
        /* rank t's thread t starts late: the threads' order differs by rank */
        if (t == rank % THREADS && i == 0) usleep(200000);
        MPI_Comm self_dup, d, s;
        pthread_mutex_lock(&user_lock);
        OK(MPI_Comm_dup(MPI_COMM_SELF, &self_dup));
        pthread_mutex_unlock(&user_lock);
        OK(MPI_Comm_free(&self_dup));
        OK(MPI_Comm_dup(comms[t], &d));
        OK(MPI_Comm_split(comms[t], rank % 2, -rank, &s));
        int sum = 0, one = 1;
        OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, d));
        CHECK(sum == size);
        OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, s));
        CHECK(sum == size / 2 + (rank % 2 == 0 ? size % 2 : 0));
        OK(MPI_Comm_free(&s));
        OK(MPI_Comm_free(&d));
    }
    return NULL;
}

int main(int argc, char **argv) {
    init_multiple(&argc, &argv, &rank, &size);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
    run_threads(THREADS, work);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_free(&comms[t]));
    report_ok("comm_threads");
    MPI_Finalize();
    return 0;
}

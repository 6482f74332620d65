/* Requests started and completed on two threads of each process at once
 * (MPI_THREAD_MULTIPLE): thread 0 runs non-blocking collectives (their
 * requests are taken out of the handle table while tested) and
 * MPI_Testall/MPI_Request_get_status on them; thread 1 runs point-to-point
 * exchanges with fresh requests meanwhile. Before, a tested collective's
 * handle was free between taking it out and putting it back: the other
 * thread's new request could get the same handle and the put-back
 * overwrote it (MPICH's threads/comm/idup_nb: "invalid request handle"). */
#include "check.h"

#define ITERS 3000
static MPI_Comm comms[2];
static int rank, size;

static void *collectives(void *arg) {
    (void)arg;
    MPI_Comm c = comms[0];
    for (int i = 0; i < ITERS; i++) {
        int one = i, sum = -1, root = i % size, b = rank == root ? i : -1;
        MPI_Request r[2];
        OK(MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c, &r[0]));
        OK(MPI_Ibcast(&b, 1, MPI_INT, root, c, &r[1]));
        if (i % 3 == 0) {
            int flag = 0;
            while (!flag) OK(MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE));
        } else if (i % 3 == 1) {
            int flag = 0;
            while (!flag) OK(MPI_Request_get_status(r[0], &flag, MPI_STATUS_IGNORE));
            OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        } else {
            OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
            OK(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
        }
        CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);
        CHECK(sum == i * size);
        CHECK(b == i);
    }
    return NULL;
}

static void *exchanges(void *arg) {
    (void)arg;
    MPI_Comm c = comms[1];
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int i = 0; i < ITERS; i++) {
        int out[4] = {rank, i, rank * i, -rank}, in[4] = {-1, -1, -1, -1};
        MPI_Request r[2];
        OK(MPI_Irecv(in, 4, MPI_INT, left, i % 7, c, &r[0]));
        OK(MPI_Isend(out, 4, MPI_INT, right, i % 7, c, &r[1]));
        OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(in[0] == left && in[1] == i && in[2] == left * i && in[3] == -left);
    }
    return NULL;
}

static void *work(void *arg) {
    return *(int *)arg == 0 ? collectives(NULL) : exchanges(NULL);
}

int main(int argc, char **argv) {
    init_multiple(&argc, &argv, &rank, &size);
    for (int t = 0; t < 2; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
    run_threads(2, work);
    for (int t = 0; t < 2; t++) OK(MPI_Comm_free(&comms[t]));
    report_ok("request_threads");
    MPI_Finalize();
    return 0;
}

#define _DEFAULT_SOURCE
/* MPI_Intercomm_create on four threads of each process at once, every
 * thread with the same tag on a peer communicator of its own (legal: the
 * tag only has to be unique on its peer communicator), as MPICH's
 * threads/comm/idup_comm_gen does. Each thread splits its own duplicate of
 * MPI_COMM_WORLD in two halves (which half a rank is in depends on the
 * thread) and joins them. Before, every call agreed on its union over
 * MPI_COMM_WORLD under the user's tag, so the threads' agreements crossed:
 * the job hung, or a shared-memory segment of one thread's agreement was
 * opened by another's after it was gone. Each inter-communicator is then
 * used: every rank sends its thread number and rank to each remote rank
 * and checks what it gets from each. */
#include <stdlib.h>
#include <unistd.h>
#include "check.h"

#define THREADS 4
#define ITERS 8
static int rank, size;
static MPI_Comm peers[THREADS];

static void *work(void *arg) {
    int t = *(int *)arg;
    MPI_Comm peer = peers[t];
    for (int i = 0; i < ITERS; i++) {
        /* Threads start their calls in a different order on each rank. */
        usleep((unsigned)(((t + rank + i) % THREADS) * 2000));
        int color = ((rank + t) % size) < size / 2;
        MPI_Comm local, inter;
        OK(MPI_Comm_split(peer, color, rank, &local));
        /* Leaders: the lowest peer rank of each half. */
        int remote_leader = -1;
        for (int r = 0; r < size; r++) {
            if ((((r + t) % size) < size / 2) != color) {
                remote_leader = r;
                break;
            }
        }
        OK(MPI_Intercomm_create(local, 0, peer, remote_leader, 99, &inter));
        int rsize, lsize;
        OK(MPI_Comm_remote_size(inter, &rsize));
        OK(MPI_Comm_size(inter, &lsize));
        CHECK(lsize + rsize == size);
        int me[2] = {t, rank};
        int *got = malloc(sizeof(int) * 2 * (size_t)rsize);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)rsize);
        for (int r = 0; r < rsize; r++) {
            OK(MPI_Irecv(got + 2 * r, 2, MPI_INT, r, 7, inter, &reqs[r]));
            OK(MPI_Isend(me, 2, MPI_INT, r, 7, inter, &reqs[rsize + r]));
        }
        OK(MPI_Waitall(2 * rsize, reqs, MPI_STATUSES_IGNORE));
        for (int r = 0; r < rsize; r++) {
            CHECK(got[2 * r] == t);
            int w = got[2 * r + 1];
            CHECK(w >= 0 && w < size && ((((w + t) % size) < size / 2) != color));
        }
        free(got);
        free(reqs);
        OK(MPI_Comm_free(&inter));
        OK(MPI_Comm_free(&local));
    }
    return NULL;
}

int main(int argc, char **argv) {
    init_multiple(&argc, &argv, &rank, &size);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &peers[t]));
    run_threads(THREADS, work);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_free(&peers[t]));
    report_ok("intercomm_threads");
    MPI_Finalize();
    return 0;
}

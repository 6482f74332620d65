/* One-sided calls from several threads of each process
 * (MPI_THREAD_MULTIPLE), through the C layer's per-thread window cache:
 *
 * 1. four threads per rank, under one lock_all, fetch_and_op (MPI_SUM)
 *    a counter at rank 0, and put/get their own slots at every rank,
 *    switching between two windows every iteration (each switch replaces
 *    the thread's cached window): no update lost, every slot right;
 * 2. a thread that used a window (cached it) while the main thread frees
 *    it: its next call with the freed handle is MPI_ERR_WIN, not the
 *    freed window; after a new window is made, the same thread's put and
 *    fetch_and_op reach the new window. */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t */
#include "check.h"

#define THREADS 4
#define ITERS 500
#define SLOTS (THREADS * 2)

static int rank, size;
static MPI_Win wins[2];
static long *bases[2];

static void *ops(void *arg) {
    int t = *(int *)arg;
    for (int i = 0; i < ITERS; i++) {
        MPI_Win w = wins[i % 2];
        long one = 1, old = -1;
        OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, w));
        OK(MPI_Win_flush(0, w));
        CHECK(old >= 0);
        int target = (rank + i) % size;
        long v = (long)rank * 1000000 + t * 10000 + i, got = -1;
        MPI_Aint slot = 1 + rank * SLOTS + t * 2 + i % 2;
        OK(MPI_Put(&v, 1, MPI_LONG, target, slot, 1, MPI_LONG, w));
        OK(MPI_Win_flush(target, w));
        OK(MPI_Get(&got, 1, MPI_LONG, target, slot, 1, MPI_LONG, w));
        OK(MPI_Win_flush_local(target, w));
        CHECK(got == v);
    }
    return NULL;
}

static pthread_barrier_t step;
static MPI_Win stale, fresh;
static long *fresh_base;

static void *late_user(void *arg) {
    (void)arg;
    long v = 7, old = -1;
    /* Use (and cache) the window, then let the main thread free it. */
    OK(MPI_Put(&v, 1, MPI_LONG, rank, 0, 1, MPI_LONG, stale));
    OK(MPI_Win_flush(rank, stale));
    pthread_barrier_wait(&step); /* main frees `stale` and makes `fresh` */
    pthread_barrier_wait(&step);
    int rc = MPI_Win_flush(rank, stale), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_WIN);
    rc = MPI_Put(&v, 1, MPI_LONG, rank, 0, 1, MPI_LONG, stale);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_WIN);
    /* The new window is found, though the thread held the old one. */
    v = 100 + rank;
    OK(MPI_Put(&v, 1, MPI_LONG, rank, 1, 1, MPI_LONG, fresh));
    OK(MPI_Win_flush(rank, fresh));
    long one = 1;
    OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, fresh));
    OK(MPI_Win_flush(0, fresh));
    CHECK(old >= 0 && old < size);
    return NULL;
}

int main(int argc, char **argv) {
    init_multiple(&argc, &argv, &rank, &size);
    MPI_Aint n = 1 + (MPI_Aint)size * SLOTS;
    for (int k = 0; k < 2; k++) {
        OK(MPI_Win_allocate(n * (MPI_Aint)sizeof(long), sizeof(long), MPI_INFO_NULL,
                            MPI_COMM_WORLD, &bases[k], &wins[k]));
        for (MPI_Aint j = 0; j < n; j++) bases[k][j] = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 2; k++) OK(MPI_Win_lock_all(0, wins[k]));
    run_threads(THREADS, ops);
    for (int k = 0; k < 2; k++) OK(MPI_Win_unlock_all(wins[k]));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        for (int k = 0; k < 2; k++) CHECK(bases[k][0] == (long)size * THREADS * ITERS / 2);
    /* Each slot was last written at the last iteration of its parity. */
    for (int r = 0; r < size; r++)
        for (int t = 0; t < THREADS; t++)
            for (int p = 0; p < 2; p++) {
                int last = -1;
                for (int i = 0; i < ITERS; i++)
                    if (i % 2 == p && (r + i) % size == rank) last = i;
                long want = last < 0 ? 0 : (long)r * 1000000 + t * 10000 + last;
                CHECK(bases[p][1 + r * SLOTS + t * 2 + p] == want);
            }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 2; k++) OK(MPI_Win_free(&wins[k]));

    /* A thread's cached window freed by another thread. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    long *b;
    OK(MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &b,
                        &stale));
    OK(MPI_Win_lock_all(0, stale));
    pthread_barrier_init(&step, NULL, 2);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, late_user, NULL) == 0);
    pthread_barrier_wait(&step);
    OK(MPI_Win_unlock_all(stale));
    MPI_Win old = stale;
    OK(MPI_Win_free(&old));
    CHECK(old == MPI_WIN_NULL);
    OK(MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                        &fresh_base, &fresh));
    fresh_base[0] = fresh_base[1] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock_all(0, fresh));
    pthread_barrier_wait(&step);
    pthread_join(th, NULL);
    OK(MPI_Win_unlock_all(fresh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(fresh_base[1] == 100 + rank);
    if (rank == 0) CHECK(fresh_base[0] == size);
    OK(MPI_Win_free(&fresh));
    pthread_barrier_destroy(&step);
    report_ok("rma_threads");
    MPI_Finalize();
    return 0;
}

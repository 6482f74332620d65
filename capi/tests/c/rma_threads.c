/* One-sided calls from several threads of each process
 * (MPI_THREAD_MULTIPLE), through the C layer's per-thread window cache:
 *
 * 1. four threads per rank, under one lock_all, fetch_and_op (MPI_SUM)
 *    a counter at rank 0, and put/get their own slots at every rank,
 *    switching between two windows every iteration (each switch replaces
 *    the thread's cached window): no update lost, every slot right;
 * 2. results under concurrent flushes: four threads per rank, each with
 *    its own counter at every rank, fetch_and_op (+1), get,
 *    compare_and_swap, get_accumulate (NO_OP) and Rget it, each followed
 *    by a flush, flush_all, flush_local or flush_local_all (in turn) while
 *    the other threads flush the same targets: every result is exactly the
 *    counter's count so far (a flush that returned before the result
 *    arrived leaves the -1 the buffer was set to);
 * 3. a thread that used a window (cached it) while the main thread frees
 *    it: its next call with the freed handle is MPI_ERR_WIN, not the
 *    freed window; after a new window is made, the same thread's put and
 *    fetch_and_op reach the new window;
 * 4. four threads per rank accumulate into one target under an exclusive
 *    lock their process holds (osc rdma skips the accumulate lock there:
 *    its threads must still not interleave their read-modify-writes): no
 *    update lost. */
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

#define FLUSH_ITERS 300
static MPI_Win cwin;

/* Completes what the thread issued to `target`, by flush kind `k`. */
static void sync_by(int k, int target) {
    switch (k % 4) {
    case 0: OK(MPI_Win_flush(target, cwin)); break;
    case 1: OK(MPI_Win_flush_all(cwin)); break;
    case 2: OK(MPI_Win_flush_local(target, cwin)); break;
    default: OK(MPI_Win_flush_local_all(cwin)); break;
    }
}

static void *results(void *arg) {
    int t = *(int *)arg;
    long count[64] = {0};
    MPI_Aint slot = rank * THREADS + t;
    for (int i = 0; i < FLUSH_ITERS; i++) {
        int target = (rank + 1 + i) % size;
        long one = 1, old = -1, got = -1, cas = -1, ga = -1, rg = -1;
        OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, target, slot, MPI_SUM, cwin));
        sync_by(i, target);
        CHECK(old == count[target]);
        count[target]++;
        OK(MPI_Get(&got, 1, MPI_LONG, target, slot, 1, MPI_LONG, cwin));
        sync_by(i + 1, target);
        CHECK(got == count[target]);
        long same = count[target];
        OK(MPI_Compare_and_swap(&same, &same, &cas, MPI_LONG, target, slot, cwin));
        sync_by(i + 2, target);
        CHECK(cas == count[target]);
        OK(MPI_Get_accumulate(NULL, 0, MPI_LONG, &ga, 1, MPI_LONG, target, slot, 1, MPI_LONG,
                              MPI_NO_OP, cwin));
        sync_by(i + 3, target);
        CHECK(ga == count[target]);
        MPI_Request rq;
        OK(MPI_Rget(&rg, 1, MPI_LONG, target, slot, 1, MPI_LONG, cwin, &rq));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(rg == count[target]);
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

#define EXCL_ITERS 100
static MPI_Win ewin;

static void *exclusive_acc(void *arg) {
    (void)arg;
    long one = 1, ones[3] = {1, 1, 1};
    for (int i = 0; i < EXCL_ITERS; i++) {
        long old = -1;
        OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, ewin));
        OK(MPI_Accumulate(ones, 3, MPI_LONG, 0, 1, 3, MPI_LONG, MPI_SUM, ewin));
        OK(MPI_Win_flush(0, ewin));
        CHECK(old >= 0);
    }
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

    /* Results under concurrent flushes. */
    CHECK(size <= 64);
    long *cbase;
    OK(MPI_Win_allocate((MPI_Aint)size * THREADS * sizeof(long), sizeof(long), MPI_INFO_NULL,
                        MPI_COMM_WORLD, &cbase, &cwin));
    for (int j = 0; j < size * THREADS; j++) cbase[j] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock_all(0, cwin));
    run_threads(THREADS, results);
    OK(MPI_Win_unlock_all(cwin));
    MPI_Barrier(MPI_COMM_WORLD);
    /* Rank r's thread t counted at this rank once per iteration aimed here. */
    for (int r = 0; r < size; r++) {
        long want = 0;
        for (int i = 0; i < FLUSH_ITERS; i++)
            if ((r + 1 + i) % size == rank) want++;
        for (int t = 0; t < THREADS; t++) CHECK(cbase[r * THREADS + t] == want);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_free(&cwin));

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

    /* Threads accumulating under their process's exclusive lock. */
    long *ebase;
    OK(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &ebase,
                        &ewin));
    for (int j = 0; j < 4; j++) ebase[j] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, ewin));
    run_threads(THREADS, exclusive_acc);
    OK(MPI_Win_unlock(0, ewin));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, ewin));
        long want = (long)size * THREADS * EXCL_ITERS;
        for (int j = 0; j < 4; j++) CHECK(ebase[j] == want);
        OK(MPI_Win_unlock(0, ewin));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_free(&ewin));
    report_ok("rma_threads");
    MPI_Finalize();
    return 0;
}

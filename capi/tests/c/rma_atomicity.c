/* Concurrent accumulate-class operations from every rank on the same
 * locations, in one shared passive epoch (lock_all), each followed by a
 * flush: what must hold is atomicity element by element (MPI-3.1 11.7.1),
 * so no update may be lost and no fetched value seen twice.
 *   - counter at rank 0: MPI_Fetch_and_op(MPI_SUM, 1) by everyone; the
 *     old values of all ranks, gathered, are exactly 0..size*N-1;
 *   - the same counter is summed into, concurrently, by MPI_Accumulate of
 *     3 longs (counter plus two neighbours) every few iterations;
 *   - a second counter at the last rank incremented by a compare-and-swap
 *     loop;
 *   - MPI_Get_accumulate(MPI_NO_OP) reads of the first counter never go
 *     backwards.
 * Over osc rdma this is the accumulate lock taken by NIC atomics (every
 * rank's target included: its own lock through the NIC's loopback).
 * Then again on a window created with the info acc_single_intrinsic=true
 * (every operation one 8-byte element: the accumulates are single longs;
 * osc rdma then does each as NIC atomics alone), adding concurrent
 * MPI_MAX fetch-and-ops (a compare-swap loop there) on a third word. */
#include "check.h"

#define N 200
#define ACC_EVERY 5

/* One round on a window created with `info`; `single`: every operation
 * is on one element (acc_single_intrinsic). */
static void round_on(MPI_Info info, int single) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long *w;
    MPI_Win win;
    OK(MPI_Win_allocate(4 * sizeof(long), sizeof(long), info, MPI_COMM_WORLD, &w, &win));
    for (int i = 0; i < 4; i++) w[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);

    long *seen = malloc(N * sizeof(long));
    CHECK(seen);
    const long one = 1, ones[3] = {1, 1, 1};
    long last_read = -1;
    int accs = 0, last = size - 1;
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i < N; i++) {
        OK(MPI_Fetch_and_op(&one, &seen[i], MPI_LONG, 0, 0, MPI_SUM, win));
        OK(MPI_Win_flush(0, win));
        if (i % ACC_EVERY == 0) {
            if (single) {
                OK(MPI_Accumulate(ones, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
            } else {
                OK(MPI_Accumulate(ones, 3, MPI_LONG, 0, 0, 3, MPI_LONG, MPI_SUM, win));
            }
            OK(MPI_Win_flush(0, win));
            accs++;
        }
        if (single) {
            long v = (long)i * size + rank, old;
            OK(MPI_Fetch_and_op(&v, &old, MPI_LONG, 0, 2, MPI_MAX, win));
            OK(MPI_Win_flush(0, win));
            CHECK(old < (long)N * size);
        }
        long now;
        OK(MPI_Get_accumulate(NULL, 0, MPI_LONG, &now, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_NO_OP,
                              win));
        OK(MPI_Win_flush(0, win));
        CHECK(now > last_read);
        last_read = now;
        long expect = 0, found;
        for (;;) {
            long next = expect + 1;
            OK(MPI_Compare_and_swap(&next, &expect, &found, MPI_LONG, last, 3, win));
            OK(MPI_Win_flush(last, win));
            if (found == expect) break;
            expect = found;
        }
    }
    OK(MPI_Win_unlock_all(win));
    MPI_Barrier(MPI_COMM_WORLD);

    /* Every fetch saw a distinct value: gathered and sorted they are the
     * counter's history, with the accumulates' additions in between. */
    long *all = rank == 0 ? malloc((size_t)size * N * sizeof(long)) : NULL;
    OK(MPI_Gather(seen, N, MPI_LONG, all, N, MPI_LONG, 0, MPI_COMM_WORLD));
    int total_accs = 0;
    OK(MPI_Reduce(&accs, &total_accs, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        long total = (long)size * N;
        CHECK(w[0] == total + total_accs);
        if (single) {
            CHECK(w[1] == 0 && w[2] == total - 1);
        } else {
            CHECK(w[1] == total_accs && w[2] == total_accs);
        }
        char *hit = calloc((size_t)(total + total_accs), 1);
        CHECK(hit);
        for (long k = 0; k < total; k++) {
            long v = all[k];
            CHECK(v >= 0 && v < total + total_accs);
            CHECK(!hit[v]);
            hit[v] = 1;
        }
        free(hit);
        free(all);
    }
    if (rank == last) CHECK(w[3] == (long)size * N);
    free(seen);
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    round_on(MPI_INFO_NULL, 0);
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "acc_single_intrinsic", "true"));
    round_on(info, 1);
    OK(MPI_Info_free(&info));
    report_ok("rma_atomicity");
    MPI_Finalize();
    return 0;
}

/* Passive-target one-sided communication (osc pt2pt): a target that waits
 * in MPI_Barrier serves the lock epochs aimed at it; exclusive-lock
 * contention on one counter loses no update; concurrent accumulates and
 * fetch-and-ops from every rank to one target; compare-and-swap; shared
 * locks, lock_all, flush, flush_local and MPI_Win_sync; the request-based
 * operations; accumulates under exclusive locks mixed with lock_all ones. */
#include "check.h"

#define ITERS 50

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    long *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                        &win));
    for (int i = 0; i < 8; i++) mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- 1. rank 0 waits in MPI_Barrier (a blocking collective) while
     * the others lock it, put and unlock: it must serve them from there. */
    if (rank != 0) {
        long x = 1000 + rank;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Put(&x, 1, MPI_LONG, 0, rank % 8, 1, MPI_LONG, win));
        OK(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        for (int r = 1; r < size && r < 8; r++) CHECK(mem[r] == 1000 + r);
        OK(MPI_Win_unlock(0, win));
        for (int i = 0; i < 8; i++) mem[i] = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- 2. lock contention: read-modify-write of one counter under an
     * exclusive lock, ITERS times from every rank (rank 0 too: it locks
     * itself). A lock that let two holders in loses increments. */
    for (int k = 0; k < ITERS; k++) {
        long c = -1;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get(&c, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
        OK(MPI_Win_flush(0, win));
        c += 1;
        OK(MPI_Put(&c, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
        OK(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Win_sync(win));
        CHECK(mem[0] == (long)ITERS * size);
        OK(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- 3. lock_all: concurrent accumulates and fetch-and-ops from all
     * ranks to rank 0's slots 1 and 2; every fetched value distinct. */
    long *seen = calloc((size_t)ITERS * size, sizeof(long));
    OK(MPI_Win_lock_all(0, win));
    for (int k = 0; k < ITERS; k++) {
        long one = 1, old = -1;
        OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win));
        OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 2, MPI_SUM, win));
        OK(MPI_Win_flush_local(0, win));
        CHECK(old >= 0 && old < (long)ITERS * size);
        seen[k] = old;
    }
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_unlock_all(win));
    /* Every fetched value is distinct across ranks: gather them at 0. */
    long *all = calloc((size_t)ITERS * size, sizeof(long));
    MPI_Gather(seen, ITERS, MPI_LONG, all, ITERS, MPI_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(mem[1] == (long)ITERS * size);
        CHECK(mem[2] == (long)ITERS * size);
        char *hit = calloc((size_t)ITERS * size, 1);
        for (int i = 0; i < ITERS * size; i++) {
            CHECK(!hit[all[i]]);
            hit[all[i]] = 1;
        }
        free(hit);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- 4. compare-and-swap: every rank tries to claim slot 3 of the
     * last rank (initially -1); exactly one succeeds. */
    int last = size - 1;
    if (rank == last) mem[3] = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    long mine = rank, expect = -1, prev = -2;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win));
    OK(MPI_Compare_and_swap(&mine, &expect, &prev, MPI_LONG, last, 3, win));
    OK(MPI_Win_unlock(last, win));
    int won = prev == -1, winners = 0;
    CHECK(prev == -1 || (prev >= 0 && prev < size));
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1);
    long owner = -5;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win));
    OK(MPI_Get(&owner, 1, MPI_LONG, last, 3, 1, MPI_LONG, win));
    OK(MPI_Win_unlock(last, win));
    CHECK(owner >= 0 && owner < size);
    if (won) CHECK(owner == rank);

    /* ---- 5. get_accumulate with MPI_REPLACE swaps atomically: a token
     * passed through slot 4 of rank 0 is seen exactly once. */
    if (rank == 0) mem[4] = 12345;
    MPI_Barrier(MPI_COMM_WORLD);
    long nothing = 0, got = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Get_accumulate(&nothing, 1, MPI_LONG, &got, 1, MPI_LONG, 0, 4, 1, MPI_LONG,
                          MPI_REPLACE, win));
    OK(MPI_Win_unlock(0, win));
    int have = got == 12345, holders = 0;
    CHECK(got == 12345 || got == 0);
    MPI_Allreduce(&have, &holders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(holders == 1);

    /* ---- 6. request-based operations in a lock_all epoch: MPI_Rput and
     * MPI_Raccumulate to the next rank, MPI_Rget and MPI_Rget_accumulate
     * back, each completed with MPI_Wait / MPI_Waitall. */
    int next = (rank + 1) % size;
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock_all(0, win));
    MPI_Request rq[2];
    long pv = 500 + rank, av = 3, gv = -1, gav = -1;
    OK(MPI_Rput(&pv, 1, MPI_LONG, next, 5, 1, MPI_LONG, win, &rq[0]));
    OK(MPI_Raccumulate(&av, 1, MPI_LONG, next, 6, 1, MPI_LONG, MPI_SUM, win, &rq[1]));
    OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    /* Complete requests free their origin buffers: what the target gets
     * is what they held at the call. */
    pv = -7;
    av = -7;
    OK(MPI_Win_flush(next, win));
    av = 3;
    OK(MPI_Rget(&gv, 1, MPI_LONG, next, 5, 1, MPI_LONG, win, &rq[0]));
    OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
    CHECK(gv == 500 + rank);
    OK(MPI_Rget_accumulate(&av, 1, MPI_LONG, &gav, 1, MPI_LONG, next, 6, 1, MPI_LONG, MPI_SUM,
                           win, &rq[1]));
    OK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
    CHECK(gav == 3);
    OK(MPI_Win_unlock_all(win));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(mem[5] == 500 + (rank + size - 1) % size && mem[6] == 6);

    /* ---- 7. a rank that polls with MPI_Win_sync on one window still
     * serves requests for its other windows (mpi4py.util.sync's spin
     * loop): rank 0 locks rank 1 on a second window and sets a flag there,
     * which rank 1 waits for while syncing only the first window. */
    if (size >= 2) {
        int *flag;
        MPI_Win fw;
        OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &flag, &fw));
        *flag = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            int one = 1;
            OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, fw));
            OK(MPI_Put(&one, 1, MPI_INT, 1, 0, 1, MPI_INT, fw));
            OK(MPI_Win_unlock(1, fw));
        } else if (rank == 1) {
            OK(MPI_Win_lock_all(0, win));
            while (*(volatile int *)flag == 0) OK(MPI_Win_sync(win));
            OK(MPI_Win_unlock_all(win));
        }
        MPI_Barrier(MPI_COMM_WORLD);
        OK(MPI_Win_free(&fw));
    }

    /* ---- 8. accumulates under an exclusive lock (osc rdma skips the
     * accumulate lock there) mixed with accumulates under lock_all (which
     * take it): even ranks lock rank 0 exclusively for each round, odd
     * ranks hold lock_all; every round a fetch-and-op +1 on slot 0 and a
     * 3-element accumulate {1,2,3} on slots 1..3. No update is lost and
     * every fetched value is distinct. */
    {
        long *acc;
        MPI_Win aw;
        OK(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &acc,
                            &aw));
        for (int i = 0; i < 4; i++) acc[i] = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        long three[3] = {1, 2, 3}, one = 1;
        int exclusive = rank % 2 == 0;
        if (!exclusive) OK(MPI_Win_lock_all(0, aw));
        for (int k = 0; k < ITERS; k++) {
            long old = -1;
            if (exclusive) OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, aw));
            OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, aw));
            OK(MPI_Accumulate(three, 3, MPI_LONG, 0, 1, 3, MPI_LONG, MPI_SUM, aw));
            if (exclusive)
                OK(MPI_Win_unlock(0, aw));
            else
                OK(MPI_Win_flush(0, aw));
            CHECK(old >= 0 && old < (long)ITERS * size);
            seen[k] = old;
        }
        if (!exclusive) OK(MPI_Win_unlock_all(aw));
        MPI_Gather(seen, ITERS, MPI_LONG, all, ITERS, MPI_LONG, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, aw));
            OK(MPI_Win_sync(aw));
            long n = (long)ITERS * size;
            CHECK(acc[0] == n && acc[1] == n && acc[2] == 2 * n && acc[3] == 3 * n);
            OK(MPI_Win_unlock(0, aw));
            char *hit = calloc((size_t)n, 1);
            for (long i = 0; i < n; i++) {
                CHECK(!hit[all[i]]);
                hit[all[i]] = 1;
            }
            free(hit);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        OK(MPI_Win_free(&aw));
    }

    OK(MPI_Win_free(&win));
    free(seen);
    free(all);
    report_ok("rma_passive");
    MPI_Finalize();
    return 0;
}

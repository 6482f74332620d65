/* One-sided operations on MPI_Win_allocate windows of ranks sharing a
 * node, which the sm component serves by loads and stores in a shared
 * segment:
 * - a target busy in pure computation (spinning on a flag in its own
 *   window memory, no MPI call) is reached by passive-target get, put,
 *   fetch_and_op and accumulate from every other rank: the flag it waits
 *   for is set by those accumulates. pt2pt cannot do this (its targets
 *   apply requests only inside MPI calls): the target gives up after 20 s
 *   (or the seconds given as the first argument) and the check fails;
 * - concurrent fetch_and_ops and accumulates from all ranks under
 *   lock_all: no update lost, every fetched value distinct;
 * - exclusive-lock contention: get, flush, put of one counter by every
 *   rank, no increment lost;
 * - compare_and_swap from every rank: exactly one winner;
 * - derived datatypes on both sides for put, get, accumulate and
 *   get_accumulate, and a target type of one block off its start;
 * - PSCW rounds in a ring (one ended by MPI_Win_test) and fence epochs. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "check.h"

enum { W_FLAG = 0, W_DATA = 1, W_COUNT = 2, W_CAS = 3, W_EXCL = 4, W_SLOTS = 8 };
enum { VEC = 80, RING = 200, FENCE = 220, WORDS = 256 };
enum { K = 100 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 64);
    double patience = argc > 1 ? atof(argv[1]) : 20.0;

    int *mem;
    MPI_Win win;
    OK(MPI_Win_allocate((MPI_Aint)(WORDS + size) * sizeof(int), sizeof(int), MPI_INFO_NULL,
                        MPI_COMM_WORLD, &mem, &win));
    for (int i = 0; i < WORDS + size; i++) mem[i] = 0;
    mem[W_DATA] = 4242;
    mem[W_CAS] = -1;
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- A target computing outside MPI is reached by every origin. */
    if (rank == 0) {
        volatile int *flag = &mem[W_FLAG];
        double t0 = now();
        while (*flag < size - 1 && now() - t0 < patience) {
        }
        CHECK(*flag == size - 1);
        /* The origins' puts and fetch_and_ops, done while this rank spun. */
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        for (int r = 1; r < size; r++) CHECK(mem[W_SLOTS + r] == 1000 + r);
        CHECK(mem[W_COUNT] == size - 1);
        OK(MPI_Win_unlock(0, win));
    } else {
        int got = 0, one = 1, old = -1, v = 1000 + rank;
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        OK(MPI_Get(&got, 1, MPI_INT, 0, W_DATA, 1, MPI_INT, win));
        OK(MPI_Fetch_and_op(&one, &old, MPI_INT, 0, W_COUNT, MPI_SUM, win));
        OK(MPI_Put(&v, 1, MPI_INT, 0, W_SLOTS + rank, 1, MPI_INT, win));
        OK(MPI_Win_flush(0, win));
        CHECK(got == 4242);
        CHECK(old >= 0 && old < size - 1);
        OK(MPI_Accumulate(&one, 1, MPI_INT, 0, W_FLAG, 1, MPI_INT, MPI_SUM, win));
        OK(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* ---- Concurrent fetch_and_ops and accumulates from every rank. */
    int fetched[K];
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i < K; i++) {
        int one = 1, two = 2;
        OK(MPI_Fetch_and_op(&one, &fetched[i], MPI_INT, 0, W_COUNT, MPI_SUM, win));
        OK(MPI_Accumulate(&two, 1, MPI_INT, (rank + i) % size, W_EXCL + 1, 1, MPI_INT, MPI_SUM,
                          win));
    }
    OK(MPI_Win_unlock_all(win));
    int *all = rank == 0 ? malloc(sizeof(int) * K * size) : NULL;
    MPI_Gather(fetched, K, MPI_INT, all, K, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(mem[W_COUNT] == size - 1 + K * size);
        qsort(all, (size_t)K * size, sizeof(int), cmp_int);
        for (int i = 0; i < K * size; i++) CHECK(all[i] == size - 1 + i);
        free(all);
    }
    int acc_total = 0, mine = mem[W_EXCL + 1];
    MPI_Allreduce(&mine, &acc_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(acc_total == 2 * K * size);

    /* ---- Exclusive-lock contention: read, flush, write one counter. */
    for (int i = 0; i < K; i++) {
        int c = -1;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, size - 1, 0, win));
        OK(MPI_Get(&c, 1, MPI_INT, size - 1, W_EXCL, 1, MPI_INT, win));
        OK(MPI_Win_flush(size - 1, win));
        c++;
        OK(MPI_Put(&c, 1, MPI_INT, size - 1, W_EXCL, 1, MPI_INT, win));
        OK(MPI_Win_unlock(size - 1, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
        CHECK(mem[W_EXCL] == K * size);
        OK(MPI_Win_unlock(rank, win));
    }

    /* ---- Compare-and-swap: one winner. */
    int want = rank, cmp = -1, was = -2;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Compare_and_swap(&want, &cmp, &was, MPI_INT, 0, W_CAS, win));
    OK(MPI_Win_unlock(0, win));
    int won = was == -1, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1);
    int winner = won ? rank : -1, w = -1;
    MPI_Allreduce(&winner, &w, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(was == -1 || was == w);
    if (rank == 0) CHECK(mem[W_CAS] == w);

    /* ---- Derived datatypes on both sides. Origin: every other int of 16
     * (a vector); target: blocks of 2 ints every 4 (8 ints in 4 blocks). */
    MPI_Datatype every2, pairs;
    MPI_Type_vector(8, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    MPI_Type_vector(4, 2, 4, MPI_INT, &pairs);
    MPI_Type_commit(&pairs);
    int src[16], back[16], res[16];
    for (int i = 0; i < 16; i++) src[i] = (i % 2 == 0) ? 100 * rank + i / 2 : -7;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(src, 1, every2, right, VEC, 1, pairs, win));
    OK(MPI_Win_fence(0, win));
    /* My window holds the left neighbour's 8 values at 0,1,4,5,8,9,12,13. */
    for (int b = 0; b < 4; b++)
        for (int j = 0; j < 2; j++) CHECK(mem[VEC + 4 * b + j] == 100 * left + 2 * b + j);
    for (int i = 0; i < 16; i++) back[i] = -1;
    OK(MPI_Get(back, 1, every2, right, VEC, 1, pairs, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 16; i++) CHECK(back[i] == (i % 2 == 0 ? 100 * rank + i / 2 : -1));
    /* Accumulate through both types, then get_accumulate (NO_OP reads). */
    OK(MPI_Accumulate(src, 1, every2, right, VEC, 1, pairs, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 16; i++) res[i] = -1;
    OK(MPI_Get_accumulate(NULL, 0, MPI_INT, res, 1, every2, right, VEC, 1, pairs, MPI_NO_OP,
                          win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 16; i++) CHECK(res[i] == (i % 2 == 0 ? 2 * (100 * rank + i / 2) : -1));
    /* A target type of one block away from its start: the block's offset
     * counts (a get of 2 ints at 4 and 5). */
    MPI_Datatype shifted;
    int blen = 2, bdisp = 4, two[2] = {-1, -1};
    MPI_Type_indexed(1, &blen, &bdisp, MPI_INT, &shifted);
    MPI_Type_commit(&shifted);
    OK(MPI_Get(two, 2, MPI_INT, right, VEC, 1, shifted, win));
    OK(MPI_Win_fence(0, win));
    CHECK(two[0] == 2 * (100 * rank + 2) && two[1] == 2 * (100 * rank + 3));
    MPI_Type_free(&shifted);
    MPI_Type_free(&every2);
    MPI_Type_free(&pairs);

    /* ---- PSCW in a ring: expose to the left neighbour, access the right. */
    MPI_Group world, gl, gr;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &gl);
    MPI_Group_incl(world, 1, &right, &gr);
    for (int round = 1; round <= 3 && size > 1; round++) {
        OK(MPI_Win_post(gl, 0, win));
        OK(MPI_Win_start(gr, 0, win));
        int v = round * 1000 + rank, one = 1;
        OK(MPI_Put(&v, 1, MPI_INT, right, RING, 1, MPI_INT, win));
        OK(MPI_Accumulate(&one, 1, MPI_INT, right, RING + 1, 1, MPI_INT, MPI_SUM, win));
        OK(MPI_Win_complete(win));
        if (round == 2) {
            int flag = 0;
            while (!flag) OK(MPI_Win_test(win, &flag));
        } else {
            OK(MPI_Win_wait(win));
        }
        CHECK(mem[RING] == round * 1000 + left);
        CHECK(mem[RING + 1] == round);
    }
    MPI_Group_free(&gl);
    MPI_Group_free(&gr);
    MPI_Group_free(&world);

    /* ---- Fence: every rank puts its rank into every other rank's slot. */
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
    for (int r = 0; r < size; r++) {
        int v = 7000 + rank;
        OK(MPI_Put(&v, 1, MPI_INT, r, FENCE + rank, 1, MPI_INT, win));
    }
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    for (int r = 0; r < size; r++) CHECK(mem[FENCE + r] == 7000 + r);

    OK(MPI_Win_free(&win));
    report_ok("rma_sm");
    MPI_Finalize();
    return 0;
}

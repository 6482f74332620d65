/* One-sided communication in fence epochs (osc pt2pt): put, get and
 * accumulate between every pair of ranks with checked data, derived
 * datatypes on both sides, every predefined op, MPI_REPLACE and MPI_NO_OP,
 * long double and complex accumulates, window attributes, group and name. */
#include "check.h"
#include <complex.h>
#include <stddef.h>

#define N 16

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* ---- MPI_Win_create over user memory: a row of N ints per rank. */
    int *mem = calloc((size_t)N * size, sizeof(int));
    MPI_Win win;
    OK(MPI_Win_create(mem, (MPI_Aint)N * size * sizeof(int), sizeof(int), MPI_INFO_NULL,
                      MPI_COMM_WORLD, &win));

    /* Attributes, group, name. */
    void *base;
    MPI_Aint *wsize;
    int *unit, *flavor, *model, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && base == mem);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag));
    CHECK(flag && *wsize == (MPI_Aint)N * size * (MPI_Aint)sizeof(int));
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
    CHECK(flag && *unit == (int)sizeof(int));
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_CREATE);
    OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    CHECK(flag && *model == MPI_WIN_UNIFIED);
    MPI_Group wg, worldg;
    int cmp;
    OK(MPI_Win_get_group(win, &wg));
    MPI_Comm_group(MPI_COMM_WORLD, &worldg);
    MPI_Group_compare(wg, worldg, &cmp);
    CHECK(cmp == MPI_IDENT);
    MPI_Group_free(&wg);
    MPI_Group_free(&worldg);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Win_set_name(win, "rows"));
    OK(MPI_Win_get_name(win, name, &len));
    CHECK(len == 4 && strcmp(name, "rows") == 0);

    /* ---- put: rank r writes r*100+i into slot r of every rank's row. */
    OK(MPI_Win_fence(0, win));
    int src[N];
    for (int i = 0; i < N; i++) src[i] = rank * 100 + i;
    for (int t = 0; t < size; t++)
        OK(MPI_Put(src, N, MPI_INT, t, (MPI_Aint)rank * N, N, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++) CHECK(mem[r * N + i] == r * 100 + i);

    /* ---- get: read the next rank's whole window. */
    int *got = calloc((size_t)N * size, sizeof(int));
    int next = (rank + 1) % size;
    OK(MPI_Get(got, N * size, MPI_INT, next, 0, N * size, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++) CHECK(got[r * N + i] == r * 100 + i);

    /* ---- derived types: contiguous origin data lands strided at the
     * target (a vector of stride 2 over slot `rank`, odd positions), read
     * back into a vector on the origin side. */
    MPI_Datatype vec;
    MPI_Type_vector(N / 2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int odd[N / 2];
    for (int i = 0; i < N / 2; i++) odd[i] = -(rank * 1000 + i);
    OK(MPI_Put(odd, N / 2, MPI_INT, next, (MPI_Aint)rank * N + 1, 1, vec, win));
    OK(MPI_Win_fence(0, win));
    int prev = (rank + size - 1) % size;
    for (int i = 0; i < N / 2; i++) {
        CHECK(mem[prev * N + 2 * i] == prev * 100 + 2 * i); /* untouched */
        CHECK(mem[prev * N + 2 * i + 1] == -(prev * 1000 + i)); /* strided put */
    }
    int back[N];
    for (int i = 0; i < N; i++) back[i] = 7;
    OK(MPI_Get(back, 1, vec, next, (MPI_Aint)rank * N + 1, 1, vec, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < N / 2; i++) {
        CHECK(back[2 * i] == -(rank * 1000 + i));
        CHECK(back[2 * i + 1] == 7);
    }
    MPI_Type_free(&vec);

    /* ---- accumulate from every rank into rank 0's slot 0 row: SUM. */
    for (int i = 0; i < N * size; i++) mem[i] = 0;
    OK(MPI_Win_fence(0, win));
    int ones[N];
    for (int i = 0; i < N; i++) ones[i] = rank + i;
    for (int k = 0; k < 5; k++)
        OK(MPI_Accumulate(ones, N, MPI_INT, 0, 0, N, MPI_INT, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    if (rank == 0) {
        int ranks_sum = size * (size - 1) / 2;
        for (int i = 0; i < N; i++) CHECK(mem[i] == 5 * (ranks_sum + size * i));
    }

    /* ---- every predefined op on int, one slot each, from every rank. */
    MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_LOR,
                    MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_REPLACE};
    int nops = (int)(sizeof ops / sizeof ops[0]);
    int init[] = {-5, 1000, 0, 1, 1, 0, 0, -1, 0, 0, 42};
    OK(MPI_Win_fence(0, win));
    if (rank == 0)
        for (int k = 0; k < nops; k++) mem[k] = init[k];
    OK(MPI_Win_fence(0, win));
    int v = rank + 2; /* 2, 3, ... */
    for (int k = 0; k < nops; k++) {
        int x = (ops[k] == MPI_REPLACE) ? 77 : v;
        OK(MPI_Accumulate(&x, 1, MPI_INT, 0, k, 1, MPI_INT, ops[k], win));
    }
    OK(MPI_Win_fence(0, win));
    if (rank == 0) {
        int mx = -5, mn = 1000, sum = 0, prod = 1, land = 1, lor = 0, lxor = 0, band = -1,
            bor = 0, bxor = 0;
        for (int r = 0; r < size; r++) {
            int x = r + 2;
            mx = x > mx ? x : mx;
            mn = x < mn ? x : mn;
            sum += x;
            prod *= x;
            land = land && x;
            lor = lor || x;
            lxor = (!lxor) != (!x);
            band &= x;
            bor |= x;
            bxor ^= x;
        }
        int want[] = {mx, mn, sum, prod, land, lor, lxor, band, bor, bxor, 77};
        for (int k = 0; k < nops; k++) {
            if (mem[k] != want[k]) fprintf(stderr, "op %d: %d != %d\n", k, mem[k], want[k]);
            CHECK(mem[k] == want[k]);
        }
    }

    /* ---- MAXLOC on MPI_2INT and SUM on double, in an allocated window. */
    MPI_Win w2;
    double *dmem;
    OK(MPI_Win_allocate(4 * sizeof(double), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &dmem, &w2));
    OK(MPI_Win_get_attr(w2, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    dmem[0] = 0.5;
    int *pair = (int *)&dmem[1];
    pair[0] = -1;
    pair[1] = -1;
    OK(MPI_Win_fence(0, w2));
    double d = 0.25 * (rank + 1);
    OK(MPI_Accumulate(&d, 1, MPI_DOUBLE, 0, 0, 1, MPI_DOUBLE, MPI_SUM, w2));
    int mine[2] = {rank % 2, rank}; /* value, index: max value 1, smallest index 1 */
    OK(MPI_Accumulate(mine, 1, MPI_2INT, 0, sizeof(double), 1, MPI_2INT, MPI_MAXLOC, w2));
    OK(MPI_Win_fence(0, w2));
    if (rank == 0) {
        CHECK(dmem[0] == 0.5 + 0.25 * size * (size + 1) / 2);
        CHECK(pair[0] == (size > 1 ? 1 : 0) && pair[1] == (size > 1 ? 1 : 0));
    }
    /* get_accumulate with MPI_NO_OP reads atomically; fetch_and_op adds. */
    double old = -1;
    OK(MPI_Get_accumulate(NULL, 0, MPI_DOUBLE, &old, 1, MPI_DOUBLE, 0, 0, 1, MPI_DOUBLE,
                          MPI_NO_OP, w2));
    OK(MPI_Win_fence(0, w2));
    CHECK(old == 0.5 + 0.25 * size * (size + 1) / 2);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w2));
    OK(MPI_Win_free(&w2));
    CHECK(w2 == MPI_WIN_NULL);

    /* ---- the C types Rust has no arithmetic for (C kernels): long
     * double SUM, double complex PROD, MPI_LONG_DOUBLE_INT MAXLOC. */
    struct ldi {
        long double v;
        int i;
    };
    struct wide {
        long double sum;
        double _Complex prod;
        struct ldi loc;
    } *wm;
    MPI_Win w3;
    OK(MPI_Win_allocate(sizeof *wm, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &wm, &w3));
    wm->sum = 0.5L;
    wm->prod = 1.0;
    wm->loc.v = -1.0L;
    wm->loc.i = -1;
    OK(MPI_Win_fence(0, w3));
    long double ld = 1.0L / 3 * (rank + 1);
    double _Complex z = (rank % 2) ? 2.0 : 1.0 * _Complex_I; /* i, 2, i, 2, ... */
    struct ldi me = {(long double)(rank % 3), rank};
    OK(MPI_Accumulate(&ld, 1, MPI_LONG_DOUBLE, 0, offsetof(struct wide, sum), 1,
                      MPI_LONG_DOUBLE, MPI_SUM, w3));
    OK(MPI_Accumulate(&z, 1, MPI_C_DOUBLE_COMPLEX, 0, offsetof(struct wide, prod), 1,
                      MPI_C_DOUBLE_COMPLEX, MPI_PROD, w3));
    OK(MPI_Accumulate(&me, 1, MPI_LONG_DOUBLE_INT, 0, offsetof(struct wide, loc), 1,
                      MPI_LONG_DOUBLE_INT, MPI_MAXLOC, w3));
    OK(MPI_Win_fence(0, w3));
    if (rank == 0) {
        long double want = 0.5L;
        double _Complex zp = 1.0;
        for (int r = 0; r < size; r++) {
            want += 1.0L / 3 * (r + 1);
            zp *= (r % 2) ? 2.0 : 1.0 * _Complex_I;
        }
        long double diff = wm->sum - want;
        CHECK(diff < 1e-15L && diff > -1e-15L);
        CHECK(wm->prod == zp);
        int maxv = size >= 3 ? 2 : size - 1;
        CHECK(wm->loc.v == (long double)maxv && wm->loc.i == maxv);
    }
    OK(MPI_Win_free(&w3));

    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL);
    free(mem);
    free(got);
    report_ok("rma_fence");
    MPI_Finalize();
    return 0;
}

/* Puts and gets between every pair of ranks (self included) with
 * contiguous and derived datatypes on either side, under every
 * synchronisation mode (fence, PSCW, exclusive lock, shared lock with
 * flush, lock_all with flush_local_all and flush_all, exclusive lock with
 * MPI_MODE_NOCHECK), on an MPI_Win_create and an MPI_Win_allocate window.
 * Origin o writes into its own slot of each target's window; every target
 * checks its window against what MPI_Pack/MPI_Unpack say the put means,
 * then each origin gets its data back through the same types and checks
 * it. Written for osc rdma (one RDMA operation per contiguous target run)
 * and passes with every osc component. */
#include "check.h"

/* Ints per origin's slot in a window. */
#define SLOT 80000
#define MODES 6
#define SHAPES 4

static int pattern(int o, int t, int mode, int shape, int i) {
    return (o + 1) * 1000003 + t * 10007 + mode * 1009 + shape * 101 + i;
}

struct shape {
    MPI_Datatype ot, tt;
    int ocount, tcount;
};

static MPI_Aint span_ints(MPI_Datatype t, int count) {
    MPI_Aint lb, extent;
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(lb == 0);
    return (extent * count) / (MPI_Aint)sizeof(int);
}

/* The shapes: A contiguous both sides (70 000 ints: several pages);
 * B a vector at the target; C a vector at the origin; D an indexed target
 * type against a vector of another stride at the origin. */
static MPI_Datatype vec, vec2, idx;

static void make_shapes(struct shape *s) {
    MPI_Type_vector(200, 5, 9, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Type_vector(100, 4, 6, MPI_INT, &vec2);
    MPI_Type_commit(&vec2);
    int bl[3] = {3, 1, 4}, dp[3] = {0, 5, 9};
    MPI_Datatype idx0;
    MPI_Type_indexed(3, bl, dp, MPI_INT, &idx0);
    MPI_Type_create_resized(idx0, 0, 13 * sizeof(int), &idx);
    MPI_Type_commit(&idx);
    MPI_Type_free(&idx0);
    s[0] = (struct shape){MPI_INT, MPI_INT, 70000, 70000};
    s[1] = (struct shape){MPI_INT, vec, 1000, 1};
    s[2] = (struct shape){vec, MPI_INT, 1, 1000};
    s[3] = (struct shape){vec2, idx, 1, 50};
}

static void fill(int *buf, MPI_Aint n, int o, int t, int mode, int shape) {
    for (MPI_Aint i = 0; i < n; i++) buf[i] = pattern(o, t, mode, shape, (int)i);
}

/* Packs `count` items of `t` at `buf`; returns a malloc'd buffer and its size. */
static char *pack(const int *buf, int count, MPI_Datatype t, int *len) {
    int n;
    MPI_Pack_size(count, t, MPI_COMM_WORLD, &n);
    char *p = malloc((size_t)n + 1);
    int pos = 0;
    OK(MPI_Pack(buf, count, t, p, n, &pos, MPI_COMM_WORLD));
    *len = pos;
    return p;
}

static void open_epoch(MPI_Win w, int mode, MPI_Group all) {
    switch (mode) {
    case 0: OK(MPI_Win_fence(0, w)); break;
    case 1:
        OK(MPI_Win_post(all, 0, w));
        OK(MPI_Win_start(all, 0, w));
        break;
    case 4: OK(MPI_Win_lock_all(0, w)); break;
    default: break;
    }
}

static void close_epoch(MPI_Win w, int mode, int round) {
    switch (mode) {
    case 0: OK(MPI_Win_fence(0, w)); break;
    case 1:
        OK(MPI_Win_complete(w));
        OK(MPI_Win_wait(w));
        break;
    case 4:
        if (round == 0) {
            OK(MPI_Win_flush_local_all(w));
            OK(MPI_Win_flush_all(w));
        } else {
            OK(MPI_Win_flush_all(w));
        }
        OK(MPI_Win_unlock_all(w));
        break;
    default: break;
    }
}

/* One operation towards `t` inside the mode's epoch (per-target locks
 * around it for modes 2, 3, 5). */
static void one_op(MPI_Win w, int mode, int t, int get, void *buf, const struct shape *s,
                   MPI_Aint disp) {
    if (mode == 2 || mode == 5) OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, mode == 5 ? MPI_MODE_NOCHECK : 0, w));
    if (mode == 3) OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, w));
    if (get)
        OK(MPI_Get(buf, s->ocount, s->ot, t, disp, s->tcount, s->tt, w));
    else
        OK(MPI_Put(buf, s->ocount, s->ot, t, disp, s->tcount, s->tt, w));
    if (mode == 3) OK(MPI_Win_flush(t, w));
    if (mode == 2 || mode == 3 || mode == 5) OK(MPI_Win_unlock(t, w));
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct shape sh[SHAPES];
    make_shapes(sh);
    MPI_Group all;
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    long ops = 0;

    for (int flavor = 0; flavor < 2; flavor++) {
        MPI_Aint wlen = (MPI_Aint)size * SLOT * sizeof(int);
        int *mem = NULL, *own = NULL;
        MPI_Win w;
        if (flavor == 0) {
            own = malloc((size_t)wlen);
            mem = own;
            OK(MPI_Win_create(mem, wlen, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
        } else {
            OK(MPI_Win_allocate(wlen, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w));
        }
        for (int mode = 0; mode < MODES; mode++) {
            for (int k = 0; k < SHAPES; k++) {
                const struct shape *s = &sh[k];
                MPI_Aint on = span_ints(s->ot, s->ocount), tn = span_ints(s->tt, s->tcount);
                CHECK(tn <= SLOT);
                memset(mem, 0, (size_t)wlen);
                MPI_Barrier(MPI_COMM_WORLD);
                /* Puts: origin `rank` into its slot of every target. */
                int **src = malloc(sizeof(int *) * size);
                open_epoch(w, mode, all);
                for (int t = 0; t < size; t++) {
                    src[t] = malloc(sizeof(int) * (size_t)on);
                    fill(src[t], on, rank, t, mode, k);
                    one_op(w, mode, t, 0, src[t], s, (MPI_Aint)rank * SLOT);
                    ops++;
                }
                close_epoch(w, mode, 0);
                MPI_Barrier(MPI_COMM_WORLD);
                /* Every origin's slot here holds its data as the types place it. */
                for (int o = 0; o < size; o++) {
                    int *exp_src = malloc(sizeof(int) * (size_t)on);
                    fill(exp_src, on, o, rank, mode, k);
                    int plen;
                    char *p = pack(exp_src, s->ocount, s->ot, &plen);
                    int *expect = calloc((size_t)SLOT, sizeof(int));
                    int pos = 0;
                    OK(MPI_Unpack(p, plen, &pos, expect, s->tcount, s->tt, MPI_COMM_WORLD));
                    CHECK(memcmp(expect, mem + (size_t)o * SLOT, sizeof(int) * SLOT) == 0);
                    free(expect);
                    free(p);
                    free(exp_src);
                }
                MPI_Barrier(MPI_COMM_WORLD);
                /* Gets: the data comes back through the same types. */
                int **res = malloc(sizeof(int *) * size);
                open_epoch(w, mode, all);
                for (int t = 0; t < size; t++) {
                    res[t] = calloc((size_t)on, sizeof(int));
                    one_op(w, mode, t, 1, res[t], s, (MPI_Aint)rank * SLOT);
                    ops++;
                }
                close_epoch(w, mode, 1);
                for (int t = 0; t < size; t++) {
                    int la, lb;
                    char *a = pack(src[t], s->ocount, s->ot, &la);
                    char *b = pack(res[t], s->ocount, s->ot, &lb);
                    CHECK(la == lb && memcmp(a, b, (size_t)la) == 0);
                    free(a);
                    free(b);
                    free(res[t]);
                    free(src[t]);
                }
                free(res);
                free(src);
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
        OK(MPI_Win_free(&w));
        free(own);
    }
    CHECK(ops == 2L * MODES * SHAPES * 2 * size);
    MPI_Type_free(&vec);
    MPI_Type_free(&vec2);
    MPI_Type_free(&idx);
    MPI_Group_free(&all);
    report_ok("rma_rdma");
    MPI_Finalize();
    return 0;
}

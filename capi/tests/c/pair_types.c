/* MAXLOC / MINLOC on every pair type, including the ones with padding
 * (MPI_DOUBLE_INT and MPI_LONG_INT: 12 bytes of data in 16 of extent;
 * MPI_SHORT_INT: 6 in 8), alone and inside a derived type, in allreduce,
 * reduce to every root, scan and Reduce_local. Before, the padded ones
 * failed with MPI_ERR_COUNT ("24 bytes is not a whole number of
 * MPI_DOUBLE_INT elements"; MPICH's coll12, opmaxloc, opminloc). */
#include "check.h"

struct di { double v; int i; };
struct li { long v; int i; };
struct si { short v; int i; };
struct fi { float v; int i; };
struct ii { int v; int i; };

#define N 5

/* Rank r's value for item k: the maximum moves from rank to rank with k and
 * every item has a tie between two ranks (the lower index must win). */
static long val(int r, int k, int size) {
    long x = (r * 7 + k * 3) % size;
    return x == size - 1 || x == size - 2 ? size : x;
}

/* The MAXLOC (op 0) or MINLOC (op 1) of item k over ranks 0..upto-1: the
 * value, and the lowest rank holding it in *at. */
static long best_of(int op, int upto, int k, int size, int *at) {
    long best = val(0, k, size);
    *at = 0;
    for (int r = 1; r < upto; r++) {
        long x = val(r, k, size);
        if (op ? x < best : x > best) {
            best = x;
            *at = r;
        }
    }
    return best;
}

#define RUN(T, DT, VT)                                                                 \
    do {                                                                               \
        T in[N], out[N], pad[N];                                                       \
        for (int k = 0; k < N; k++) {                                                  \
            memset(&in[k], 0x5a, sizeof in[k]);                                        \
            in[k].v = (VT)val(rank, k, size);                                          \
            in[k].i = rank;                                                            \
        }                                                                              \
        for (int op = 0; op < 2; op++) {                                               \
            MPI_Op o = op ? MPI_MINLOC : MPI_MAXLOC;                                   \
            /* expected: over ranks 0..upto-1 */                                       \
            for (int mode = 0; mode < 3; mode++) {                                     \
                memset(out, 0, sizeof out);                                            \
                int upto = size;                                                       \
                if (mode == 0) {                                                       \
                    OK(MPI_Allreduce(in, out, N, DT, o, MPI_COMM_WORLD));              \
                } else if (mode == 1) {                                                \
                    OK(MPI_Scan(in, out, N, DT, o, MPI_COMM_WORLD));                   \
                    upto = rank + 1;                                                   \
                } else {                                                               \
                    memcpy(out, in, sizeof in);                                        \
                    OK(MPI_Allreduce(MPI_IN_PLACE, out, N, DT, o, MPI_COMM_WORLD));    \
                }                                                                      \
                for (int k = 0; k < N; k++) {                                          \
                    int at;                                                            \
                    long best = best_of(op, upto, k, size, &at);                       \
                    CHECK(out[k].v == (VT)best && out[k].i == at);                     \
                }                                                                      \
            }                                                                          \
            for (int root = 0; root < size; root++) {                                  \
                memset(out, 0, sizeof out);                                            \
                OK(MPI_Reduce(in, out, N, DT, o, root, MPI_COMM_WORLD));               \
                if (rank == root)                                                      \
                    for (int k = 0; k < N; k++) {                                      \
                        int at;                                                        \
                        long best = best_of(op, size, k, size, &at);                   \
                        CHECK(out[k].v == (VT)best && out[k].i == at);                 \
                    }                                                                  \
            }                                                                          \
        }                                                                              \
        /* Reduce_local: inout = in MAXLOC inout, item by item. */                     \
        for (int k = 0; k < N; k++) {                                                  \
            pad[k] = in[k];                                                            \
            pad[k].v = (VT)(k % 2 ? 100 : -100);                                       \
            pad[k].i = 99;                                                             \
        }                                                                              \
        OK(MPI_Reduce_local(in, pad, N, DT, MPI_MAXLOC));                              \
        for (int k = 0; k < N; k++)                                                    \
            CHECK(k % 2 ? (pad[k].v == 100 && pad[k].i == 99)                          \
                        : (pad[k].v == in[k].v && pad[k].i == in[k].i));               \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    RUN(struct di, MPI_DOUBLE_INT, double);
    RUN(struct li, MPI_LONG_INT, long);
    RUN(struct si, MPI_SHORT_INT, short);
    RUN(struct fi, MPI_FLOAT_INT, float);
    RUN(struct ii, MPI_2INT, int);

    /* A derived type of two MPI_DOUBLE_INT (extent 32). */
    MPI_Datatype two;
    OK(MPI_Type_contiguous(2, MPI_DOUBLE_INT, &two));
    OK(MPI_Type_commit(&two));
    struct di a[4], b[4];
    for (int k = 0; k < 4; k++) {
        a[k].v = (double)val(rank, k, size);
        a[k].i = rank;
    }
    OK(MPI_Allreduce(a, b, 2, two, MPI_MAXLOC, MPI_COMM_WORLD));
    for (int k = 0; k < 4; k++) {
        int at;
        long best = best_of(0, size, k, size, &at);
        CHECK(b[k].v == (double)best && b[k].i == at);
    }
    OK(MPI_Type_free(&two));
    report_ok("pair_types");
    MPI_Finalize();
    return 0;
}

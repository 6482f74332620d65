/* User ops over derived datatypes: the function sees the caller's datatype
 * handle, counts of the caller's items and buffers in the datatype's own
 * layout (MPI-4.0 6.9.5), whatever algorithm runs and however it splits the
 * vector. Before, it got counts of ints and MPI_INT: a 3x3 matrix product
 * over MPI_Type_contiguous(9, MPI_INT) (MPICH's allred4) wrote nine times
 * past its buffers and glibc aborted in free().
 *
 * - matmul: non-commutative product of 3x3 rotation matrices, contiguous
 *   type of 9 ints; every rank's contribution is a different permutation,
 *   so the result names the order the ranks were combined in.
 * - pairsum: commutative sum over a vector type with a gap (2 doubles 2
 *   apart: items of 16 bytes of data in 24 of extent, then resized to 32);
 *   the gaps of the receive buffer must be left alone.
 * Counts up to 20 000 items (sm's chunked allreduce and tuned's segmented
 * algorithms on 320 KiB), blocking and not, in place and not, reduce to every
 * root, scan, exscan, reduce_scatter_block and MPI_Reduce_local. */
#include "check.h"

static MPI_Datatype mat_t, pair_t;
static int calls_bad_type, calls_bad_count;
static int max_count;

/* The permutation matrix of rank r: entries in C order. */
static void perm(int r, int m[9]) {
    static const int p[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    memset(m, 0, 9 * sizeof(int));
    for (int i = 0; i < 3; i++) m[i * 3 + p[r % 6][i]] = 1;
}

/* inout = in x inout (in on the left: the lower ranks' product). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    if (*dt != mat_t) calls_bad_type++;
    if (*len < 0 || *len > max_count) calls_bad_count++;
    const int *a = in;
    int *b = inout;
    for (int n = 0; n < *len; n++, a += 9, b += 9) {
        int c[9];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                int s = 0;
                for (int k = 0; k < 3; k++) s += a[i * 3 + k] * b[k * 3 + j];
                c[i * 3 + j] = s;
            }
        memcpy(b, c, sizeof c);
    }
}

/* Items of pair_t: doubles at offsets 0 and 16, 32 bytes apart. */
static void pairsum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    if (*dt != pair_t) calls_bad_type++;
    if (*len < 0 || *len > max_count) calls_bad_count++;
    char *a = in, *b = inout;
    for (int n = 0; n < *len; n++, a += 32, b += 32) {
        ((double *)b)[0] += ((double *)a)[0];
        ((double *)b)[2] += ((double *)a)[2];
    }
}

/* The product of the permutations of ranks lo..hi-1 (identity if empty),
 * for item i (each item multiplies a rotation of the ranks' matrices). */
static void expect_mat(int lo, int hi, int i, int out[9]) {
    int acc[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    for (int r = lo; r < hi; r++) {
        int m[9], c[9];
        perm(r + i, m);
        for (int x = 0; x < 3; x++)
            for (int y = 0; y < 3; y++) {
                int s = 0;
                for (int k = 0; k < 3; k++) s += acc[x * 3 + k] * m[k * 3 + y];
                c[x * 3 + y] = s;
            }
        memcpy(acc, c, sizeof c);
    }
    memcpy(out, acc, sizeof acc);
}

static void fill_mat(int rank, int n, int *v) {
    for (int i = 0; i < n; i++) perm(rank + i, v + 9 * i);
}

static void check_mat(int lo, int hi, int n, const int *v) {
    for (int i = 0; i < n; i++) {
        int e[9];
        expect_mat(lo, hi, i, e);
        CHECK(memcmp(e, v + 9 * i, sizeof e) == 0);
    }
}

/* pair_t buffers: 4 doubles per item, [0] and [2] data, [1] and [3] gaps. */
static void fill_pair(int rank, int n, double *v, double gap) {
    for (int i = 0; i < n; i++) {
        v[4 * i] = rank + i;
        v[4 * i + 1] = gap;
        v[4 * i + 2] = 1000.0 * rank - i;
        v[4 * i + 3] = gap;
    }
}

static void check_pair(int lo, int hi, int n, const double *v, double gap) {
    for (int i = 0; i < n; i++) {
        double s0 = 0, s2 = 0;
        for (int r = lo; r < hi; r++) {
            s0 += r + i;
            s2 += 1000.0 * r - i;
        }
        CHECK(v[4 * i] == s0 && v[4 * i + 2] == s2);
        CHECK(v[4 * i + 1] == gap && v[4 * i + 3] == gap);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_Type_contiguous(9, MPI_INT, &mat_t));
    OK(MPI_Type_commit(&mat_t));
    MPI_Datatype v;
    OK(MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &v));
    OK(MPI_Type_create_resized(v, 0, 32, &pair_t));
    OK(MPI_Type_commit(&pair_t));
    OK(MPI_Type_free(&v));
    MPI_Op mat_op, pair_op;
    OK(MPI_Op_create(matmul, 0, &mat_op));
    OK(MPI_Op_create(pairsum, 1, &pair_op));
    int commute = -1;
    OK(MPI_Op_commutative(mat_op, &commute));
    CHECK(commute == 0);
    OK(MPI_Op_commutative(pair_op, &commute));
    CHECK(commute == 1);

    const int counts[] = {1, 2, 7, 100, 3000, 20000};
    for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        max_count = n;
        int *ms = malloc(9 * sizeof(int) * n), *mr = malloc(9 * sizeof(int) * n);
        double *ps = malloc(32 * (size_t)n), *pr = malloc(32 * (size_t)n);
        CHECK(ms && mr && ps && pr);

        fill_mat(rank, n, ms);
        OK(MPI_Allreduce(ms, mr, n, mat_t, mat_op, MPI_COMM_WORLD));
        check_mat(0, size, n, mr);
        fill_mat(rank, n, mr);
        OK(MPI_Allreduce(MPI_IN_PLACE, mr, n, mat_t, mat_op, MPI_COMM_WORLD));
        check_mat(0, size, n, mr);

        fill_pair(rank, n, ps, -1.0);
        fill_pair(-1, n, pr, 7.5);
        OK(MPI_Allreduce(ps, pr, n, pair_t, pair_op, MPI_COMM_WORLD));
        check_pair(0, size, n, pr, 7.5);
        fill_pair(rank, n, pr, 3.25);
        OK(MPI_Allreduce(MPI_IN_PLACE, pr, n, pair_t, pair_op, MPI_COMM_WORLD));
        check_pair(0, size, n, pr, 3.25);

        for (int root = 0; root < size; root++) {
            fill_mat(rank, n, ms);
            memset(mr, 0, 9 * sizeof(int) * n);
            OK(MPI_Reduce(ms, mr, n, mat_t, mat_op, root, MPI_COMM_WORLD));
            if (rank == root) check_mat(0, size, n, mr);
            fill_pair(rank, n, ps, -1.0);
            fill_pair(-1, n, pr, 9.0);
            OK(MPI_Reduce(ps, pr, n, pair_t, pair_op, root, MPI_COMM_WORLD));
            if (rank == root) check_pair(0, size, n, pr, 9.0);
        }

        fill_mat(rank, n, ms);
        OK(MPI_Scan(ms, mr, n, mat_t, mat_op, MPI_COMM_WORLD));
        check_mat(0, rank + 1, n, mr);
        OK(MPI_Exscan(ms, mr, n, mat_t, mat_op, MPI_COMM_WORLD));
        if (rank > 0) check_mat(0, rank, n, mr);
        fill_pair(rank, n, ps, -1.0);
        fill_pair(-1, n, pr, 2.0);
        OK(MPI_Scan(ps, pr, n, pair_t, pair_op, MPI_COMM_WORLD));
        check_pair(0, rank + 1, n, pr, 2.0);

        MPI_Request rq[2];
        fill_mat(rank, n, ms);
        fill_pair(rank, n, ps, -1.0);
        fill_pair(-1, n, pr, 4.0);
        OK(MPI_Iallreduce(ms, mr, n, mat_t, mat_op, MPI_COMM_WORLD, &rq[0]));
        OK(MPI_Iallreduce(ps, pr, n, pair_t, pair_op, MPI_COMM_WORLD, &rq[1]));
        OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        check_mat(0, size, n, mr);
        check_pair(0, size, n, pr, 4.0);

        free(ms);
        free(mr);
        free(ps);
        free(pr);
    }

    /* reduce_scatter_block: 3 items per rank. */
    {
        int per = 3, n = per * size;
        max_count = n;
        int *ms = malloc(9 * sizeof(int) * n), mr[27];
        fill_mat(rank, n, ms);
        OK(MPI_Reduce_scatter_block(ms, mr, per, mat_t, mat_op, MPI_COMM_WORLD));
        for (int i = 0; i < per; i++) {
            int e[9];
            expect_mat(0, size, rank * per + i, e);
            CHECK(memcmp(e, mr + 9 * i, sizeof e) == 0);
        }
        free(ms);
    }

    /* MPI_Reduce_local: inout = in op inout, gaps untouched. */
    {
        max_count = 5;
        double a[20], b[20];
        fill_pair(2, 5, a, -1.0);
        fill_pair(1, 5, b, 6.0);
        OK(MPI_Reduce_local(a, b, 5, pair_t, pair_op));
        check_pair(1, 3, 5, b, 6.0);
        int ma[18], mb[18];
        fill_mat(1, 2, ma);
        fill_mat(2, 2, mb);
        OK(MPI_Reduce_local(ma, mb, 2, mat_t, mat_op));
        check_mat(1, 3, 2, mb);
    }

    /* A predefined op still needs a type of one predefined element. */
    {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        double a[4] = {0}, b[4] = {0};
        int e = MPI_Allreduce(a, b, 1, pair_t, MPI_MAXLOC, MPI_COMM_WORLD);
        int cls = MPI_SUCCESS;
        MPI_Error_class(e, &cls);
        CHECK(cls == MPI_ERR_TYPE || cls == MPI_ERR_OP);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }

    CHECK(calls_bad_type == 0);
    CHECK(calls_bad_count == 0);
    OK(MPI_Op_free(&mat_op));
    OK(MPI_Op_free(&pair_op));
    OK(MPI_Type_free(&mat_t));
    OK(MPI_Type_free(&pair_t));
    report_ok("user_op_types");
    MPI_Finalize();
    return 0;
}

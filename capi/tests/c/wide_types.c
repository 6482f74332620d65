/* Predefined ops on long double, the C complex types and
 * MPI_LONG_DOUBLE_INT (before: MPI_ERR_TYPE, "MPI_SUM needs a datatype made
 * of one predefined type"; MPICH's opsum, opprod, opmax, opmin, opminloc),
 * in allreduce, reduce, scan and Reduce_local, counts from 1 to 3000. The
 * long double sum keeps what a double sum would round away. */
#include <complex.h>
#include <float.h>
#include "check.h"

struct ldi { long double v; int i; };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int counts[] = {1, 7, 3000};
    for (unsigned c = 0; c < 3; c++) {
        int n = counts[c];
        long double *ld = malloc(sizeof(long double) * n), *lo = malloc(sizeof(long double) * n);
        double complex *dc = malloc(sizeof(double complex) * n), *dco = malloc(sizeof(double complex) * n);
        float complex *fc = malloc(sizeof(float complex) * n), *fco = malloc(sizeof(float complex) * n);
        long double complex *lc = malloc(sizeof(long double complex) * n), *lco = malloc(sizeof(long double complex) * n);
        struct ldi *pi = malloc(sizeof(struct ldi) * n), *po = malloc(sizeof(struct ldi) * n);
        /* 1 on rank 0, 2^-62 on the others: a double sum rounds them away;
         * in long double (64-bit mantissa) every order of the sum is exact */
        for (int k = 0; k < n; k++) ld[k] = rank == 0 ? 1.0L : 0x1p-62L;
        OK(MPI_Allreduce(ld, lo, n, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) CHECK(lo[k] == 1.0L + (size - 1) * 0x1p-62L);
        if (LDBL_MANT_DIG > 53 && size > 1) CHECK(lo[0] != 1.0L);
        for (int k = 0; k < n; k++) ld[k] = (long double)(rank + 1) * (k % 3 + 1);
        OK(MPI_Allreduce(ld, lo, n, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) CHECK(lo[k] == (long double)size * (k % 3 + 1));
        OK(MPI_Reduce(ld, lo, n, MPI_LONG_DOUBLE, MPI_MIN, size - 1, MPI_COMM_WORLD));
        if (rank == size - 1) for (int k = 0; k < n; k++) CHECK(lo[k] == (long double)(k % 3 + 1));
        OK(MPI_Scan(ld, lo, n, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) {
            long double e = 1;
            for (int r = 0; r <= rank; r++) e *= (long double)(r + 1) * (k % 3 + 1);
            CHECK(lo[k] == e);
        }

        /* complex: rank r contributes (r + 1) + i for every item */
        for (int k = 0; k < n; k++) {
            dc[k] = (rank + 1) + 1.0 * I * (k % 2);
            fc[k] = (rank + 1) + 1.0f * I;
            lc[k] = (rank + 1) + 2.0L * I;
        }
        OK(MPI_Allreduce(dc, dco, n, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        OK(MPI_Allreduce(fc, fco, n, MPI_C_FLOAT_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
        OK(MPI_Allreduce(lc, lco, n, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        float complex fe = 1;
        for (int r = 0; r < size; r++) fe *= (r + 1) + 1.0f * I;
        for (int k = 0; k < n; k++) {
            /* small Gaussian integers: every order of the products is exact */
            CHECK(dco[k] == size * (size + 1) / 2.0 + 1.0 * I * (size * (k % 2)));
            CHECK(fco[k] == fe);
            CHECK(lco[k] == size * (size + 1) / 2.0L + 2.0L * I * size);
        }

        /* MPI_LONG_DOUBLE_INT: the maximum moves with the item, ties take
         * the lower rank */
        for (int k = 0; k < n; k++) {
            pi[k].v = (long double)((rank + k) % size == 0 ? 5 : rank % 2);
            pi[k].i = rank;
        }
        OK(MPI_Allreduce(pi, po, n, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) {
            int at = (size - k % size) % size;
            CHECK(po[k].v == 5.0L && po[k].i == at);
        }
        OK(MPI_Allreduce(pi, po, n, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) {
            long double best = 99;
            int at = -1;
            for (int r = 0; r < size; r++) {
                long double v = (r + k) % size == 0 ? 5 : r % 2;
                if (v < best) { best = v; at = r; }
            }
            CHECK(po[k].v == best && po[k].i == at);
        }
        free(ld); free(lo); free(dc); free(dco); free(fc); free(fco); free(lc); free(lco); free(pi); free(po);
    }

    /* Reduce_local, and ops that do not apply. */
    long double a[2] = {1.5L, 2.5L}, b[2] = {0.25L, 4.0L};
    OK(MPI_Reduce_local(a, b, 2, MPI_LONG_DOUBLE, MPI_SUM));
    CHECK(b[0] == 1.75L && b[1] == 6.5L);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    double complex x = 1, y;
    int e = MPI_Allreduce(&x, &y, 1, MPI_C_DOUBLE_COMPLEX, MPI_MAX, MPI_COMM_WORLD), cls;
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_OP);
    e = MPI_Allreduce(a, b, 1, MPI_LONG_DOUBLE, MPI_BAND, MPI_COMM_WORLD);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_OP);
    report_ok("wide_types");
    MPI_Finalize();
    return 0;
}

/* Predefined reductions on the C types Rust has no arithmetic for:
 * long double (MAX, MIN, SUM, PROD), the C complex types (SUM, PROD) and
 * MPI_LONG_DOUBLE_INT (MAXLOC, MINLOC). Items are packed and may be
 * unaligned: every item is copied in and out with memcpy. Computes
 * inout[i] = in[i] op inout[i] for n items, as MPI's user functions do.
 * Called from capi/src/wide_ops.rs, which checks kind, op and lengths. */
#include <complex.h>
#include <stddef.h>
#include <string.h>

enum { K_LDOUBLE = 0, K_FCOMPLEX = 1, K_DCOMPLEX = 2, K_LDCOMPLEX = 3, K_LDOUBLE_INT = 4 };
enum { O_MAX = 0, O_MIN = 1, O_SUM = 2, O_PROD = 3, O_MAXLOC = 4, O_MINLOC = 5 };

#define FOLD(T, SZ, EXPR)                                                   \
    for (size_t i = 0; i < n; i++) {                                        \
        T a, b;                                                             \
        memcpy(&a, in + i * (SZ), sizeof a);                                \
        memcpy(&b, inout + i * (SZ), sizeof b);                             \
        b = (EXPR);                                                         \
        memcpy(inout + i * (SZ), &b, sizeof b);                             \
    }

/* Returns 0, or -1 for a kind/op pair that does not apply. */
int tmpi_wide_op(int kind, int op, const unsigned char *in, unsigned char *inout, size_t n) {
    switch (kind) {
    case K_LDOUBLE:
        switch (op) {
        case O_MAX: FOLD(long double, sizeof(long double), a > b ? a : b); return 0;
        case O_MIN: FOLD(long double, sizeof(long double), a < b ? a : b); return 0;
        case O_SUM: FOLD(long double, sizeof(long double), a + b); return 0;
        case O_PROD: FOLD(long double, sizeof(long double), a * b); return 0;
        }
        return -1;
    case K_FCOMPLEX:
        if (op == O_SUM) { FOLD(float complex, sizeof(float complex), a + b); return 0; }
        if (op == O_PROD) { FOLD(float complex, sizeof(float complex), a * b); return 0; }
        return -1;
    case K_DCOMPLEX:
        if (op == O_SUM) { FOLD(double complex, sizeof(double complex), a + b); return 0; }
        if (op == O_PROD) { FOLD(double complex, sizeof(double complex), a * b); return 0; }
        return -1;
    case K_LDCOMPLEX:
        if (op == O_SUM) { FOLD(long double complex, sizeof(long double complex), a + b); return 0; }
        if (op == O_PROD) { FOLD(long double complex, sizeof(long double complex), a * b); return 0; }
        return -1;
    case K_LDOUBLE_INT:
        if (op != O_MAXLOC && op != O_MINLOC) return -1;
        /* packed: the long double's 16 bytes, then the int */
        for (size_t i = 0; i < n; i++) {
            const size_t sz = sizeof(long double) + sizeof(int);
            long double av, bv;
            int ai, bi;
            memcpy(&av, in + i * sz, sizeof av);
            memcpy(&ai, in + i * sz + sizeof av, sizeof ai);
            memcpy(&bv, inout + i * sz, sizeof bv);
            memcpy(&bi, inout + i * sz + sizeof bv, sizeof bi);
            int better = op == O_MAXLOC ? av > bv : av < bv;
            if (better || (av == bv && ai < bi)) {
                bv = av;
                bi = ai;
            }
            memcpy(inout + i * sz, &bv, sizeof bv);
            memcpy(inout + i * sz + sizeof bv, &bi, sizeof bi);
        }
        return 0;
    }
    return -1;
}

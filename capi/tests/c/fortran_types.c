/* The Fortran and C++ named types from C: sizes, extents, names, envelopes,
 * pack/unpack, allreduce with every op class on every type (checked values),
 * MINLOC/MAXLOC on the Fortran pair types, the op/type pairs MPI-4.0 §6.9.2
 * does not define (MPI_ERR_OP), the absent optional types, the f90
 * constructors and MPI_Type_get_value_index. */
#include <complex.h>
#include <stdbool.h>
#include <stdint.h>
#include "check.h"

static int rank, size;

static void named(MPI_Datatype t, const char *name, int sz) {
    int s, ni, na, nd, comb, len;
    MPI_Aint lb, ext;
    char buf[MPI_MAX_OBJECT_NAME];
    CHECK(t != MPI_DATATYPE_NULL);
    OK(MPI_Type_size(t, &s));
    CHECK(s == sz);
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(lb == 0 && ext == sz);
    OK(MPI_Type_get_name(t, buf, &len));
    if (strcmp(buf, name) != 0) fprintf(stderr, "%s named %s\n", name, buf);
    CHECK(strcmp(buf, name) == 0 && len == (int)strlen(name));
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nd == 0);
    /* pack then unpack two items gives them back */
    unsigned char in[64], out[64], packed[128];
    for (int k = 0; k < 2 * sz; k++) in[k] = (unsigned char)(k * 7 + 1);
    int psz, pos = 0;
    OK(MPI_Pack_size(2, t, MPI_COMM_WORLD, &psz));
    CHECK(psz >= 2 * sz && psz <= (int)sizeof packed);
    OK(MPI_Pack(in, 2, t, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK(pos == 2 * sz);
    pos = 0;
    memset(out, 0, sizeof out);
    OK(MPI_Unpack(packed, sizeof packed, &pos, out, 2, t, MPI_COMM_WORLD));
    CHECK(memcmp(in, out, 2 * sz) == 0);
}

/* The error class of an allreduce of one item of t with op. */
static int reduce_class(MPI_Datatype t, MPI_Op op) {
    unsigned char in[64] = {0}, out[64];
    int e = MPI_Allreduce(in, out, 1, t, op, MPI_COMM_WORLD), cls;
    MPI_Error_class(e, &cls);
    return cls;
}

/* Integer types of n bytes: MAX, MIN, SUM, PROD, BAND, BOR, BXOR; rank r
 * contributes r + 2. */
#define INT_OPS(T, dt)                                                            \
    do {                                                                          \
        T v[3], o[3];                                                             \
        for (int k = 0; k < 3; k++) v[k] = (T)(rank + 2 + k);                     \
        T emax = (T)(size + 1), emin = 2, esum = 0, eprod = 1, eand = (T)-1,      \
          eor = 0, exor = 0;                                                      \
        for (int r = 0; r < size; r++) {                                          \
            esum += (T)(r + 2); eprod *= (T)(r + 2); eand &= (T)(r + 2);          \
            eor |= (T)(r + 2); exor ^= (T)(r + 2);                                \
        }                                                                         \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_MAX, MPI_COMM_WORLD));                  \
        CHECK(o[0] == emax && o[2] == (T)(emax + 2));                             \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_MIN, MPI_COMM_WORLD));                  \
        CHECK(o[0] == emin);                                                      \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_SUM, MPI_COMM_WORLD));                  \
        CHECK(o[0] == esum);                                                      \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_PROD, MPI_COMM_WORLD));                 \
        CHECK(o[0] == eprod);                                                     \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_BAND, MPI_COMM_WORLD));                 \
        CHECK(o[0] == eand);                                                      \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_BOR, MPI_COMM_WORLD));                  \
        CHECK(o[0] == eor);                                                       \
        OK(MPI_Allreduce(v, o, 3, dt, MPI_BXOR, MPI_COMM_WORLD));                 \
        CHECK(o[0] == exor);                                                      \
        CHECK(reduce_class(dt, MPI_LAND) == MPI_ERR_OP);                          \
        CHECK(reduce_class(dt, MPI_MAXLOC) == MPI_ERR_OP);                        \
    } while (0)

#define REAL_OPS(T, dt)                                                           \
    do {                                                                          \
        T v[2] = {(T)(rank + 1) * 0.5, (T)-(rank + 1)}, o[2];                     \
        T esum = 0, eprod = 1;                                                    \
        for (int r = 0; r < size; r++) { esum += (T)(r + 1) * 0.5; eprod *= (T)(r + 1) * 0.5; } \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_MAX, MPI_COMM_WORLD));                  \
        CHECK(o[0] == (T)size * 0.5 && o[1] == -1);                               \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_MIN, MPI_COMM_WORLD));                  \
        CHECK(o[0] == 0.5 && o[1] == (T)-size);                                   \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_SUM, MPI_COMM_WORLD));                  \
        CHECK(o[0] == esum);                                                      \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_PROD, MPI_COMM_WORLD));                 \
        CHECK(o[0] == eprod);                                                     \
        CHECK(reduce_class(dt, MPI_LAND) == MPI_ERR_OP);                          \
        CHECK(reduce_class(dt, MPI_BAND) == MPI_ERR_OP);                          \
    } while (0)

/* Logical types: v[0] true on rank 0 only, v[1] on the even ranks; a true
 * input is any nonzero value (3, 5) when there is something to reduce (one
 * rank's result is its input as is); results are 1/0. */
#define LOGICAL_OPS(T, dt)                                                        \
    do {                                                                          \
        T v[2] = {(T)(rank == 0 ? (size > 1 ? 3 : 1) : 0),                        \
                  (T)(rank % 2 ? 0 : (size > 1 ? 5 : 1))}, o[2];                  \
        int all1 = size == 1, any2 = 1, x1 = 1, x2 = 0;                           \
        for (int r = 1; r < size; r++) x2 ^= (r % 2 == 0);                        \
        x2 ^= 1;                                                                  \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_LAND, MPI_COMM_WORLD));                 \
        CHECK(o[0] == (T)all1 && o[1] == (T)(size == 1));                         \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_LOR, MPI_COMM_WORLD));                  \
        CHECK(o[0] == 1 && o[1] == (T)any2);                                      \
        OK(MPI_Allreduce(v, o, 2, dt, MPI_LXOR, MPI_COMM_WORLD));                 \
        CHECK(o[0] == (T)x1 && o[1] == (T)x2);                                    \
        CHECK(reduce_class(dt, MPI_SUM) == MPI_ERR_OP);                           \
        CHECK(reduce_class(dt, MPI_BOR) == MPI_ERR_OP);                           \
    } while (0)

#define COMPLEX_OPS(T, dt)                                                        \
    do {                                                                          \
        T v = (T)(rank + 1) + (T)1 * I, o, esum = 0, eprod = 1;                   \
        for (int r = 0; r < size; r++) { esum += (T)(r + 1) + (T)1 * I; eprod *= (T)(r + 1) + (T)1 * I; } \
        OK(MPI_Allreduce(&v, &o, 1, dt, MPI_SUM, MPI_COMM_WORLD));                \
        CHECK(o == esum);                                                         \
        OK(MPI_Allreduce(&v, &o, 1, dt, MPI_PROD, MPI_COMM_WORLD));               \
        CHECK(o == eprod);                                                        \
        CHECK(reduce_class(dt, MPI_MAX) == MPI_ERR_OP);                           \
        CHECK(reduce_class(dt, MPI_LAND) == MPI_ERR_OP);                          \
    } while (0)

#define PAIR_OPS(T, dt)                                                           \
    do {                                                                          \
        /* value (rank % 2), index rank: MAXLOC takes the lowest odd rank */     \
        T v[2] = {(T)(rank % 2), (T)rank}, o[2];                                  \
        OK(MPI_Allreduce(v, o, 1, dt, MPI_MAXLOC, MPI_COMM_WORLD));               \
        CHECK(o[0] == (T)(size > 1) && o[1] == (T)(size > 1 ? 1 : 0));            \
        OK(MPI_Allreduce(v, o, 1, dt, MPI_MINLOC, MPI_COMM_WORLD));               \
        CHECK(o[0] == 0 && o[1] == 0);                                            \
        CHECK(reduce_class(dt, MPI_SUM) == MPI_ERR_OP);                           \
    } while (0)

static void f90(void) {
    MPI_Datatype t, t2;
    int s, ni, na, nd, comb, ints[2];
    MPI_Aint addrs[1];
    MPI_Datatype types[1];
    const int ranges[][2] = {{2, 1}, {4, 2}, {9, 4}, {18, 8}};
    for (int k = 0; k < 4; k++) {
        OK(MPI_Type_create_f90_integer(ranges[k][0], &t));
        OK(MPI_Type_size(t, &s));
        CHECK(s == ranges[k][1]);
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_F90_INTEGER && ni == 1 && na == 0 && nd == 0);
        OK(MPI_Type_get_contents(t, 1, 0, 0, ints, addrs, types));
        CHECK(ints[0] == ranges[k][0]);
        OK(MPI_Type_create_f90_integer(ranges[k][0], &t2));
        CHECK(t2 == t);
    }
    OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t));
    OK(MPI_Type_size(t, &s));
    CHECK(s == 4);
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_REAL && ni == 2 && na == 0 && nd == 0);
    OK(MPI_Type_get_contents(t, 2, 0, 0, ints, addrs, types));
    CHECK(ints[0] == 6 && ints[1] == MPI_UNDEFINED);
    /* usable in a reduction as a REAL*4 */
    float fv = (float)rank, fo;
    OK(MPI_Allreduce(&fv, &fo, 1, t, MPI_MAX, MPI_COMM_WORLD));
    CHECK(fo == (float)(size - 1));
    OK(MPI_Type_create_f90_real(15, 300, &t));
    OK(MPI_Type_size(t, &s));
    CHECK(s == 8);
    OK(MPI_Type_create_f90_complex(10, MPI_UNDEFINED, &t));
    OK(MPI_Type_size(t, &s));
    CHECK(s == 16);
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_COMPLEX && ni == 2);
    OK(MPI_Type_create_f90_complex(3, 20, &t));
    OK(MPI_Type_size(t, &s));
    CHECK(s == 8);
    /* predefined: not freed */
    t2 = t;
    CHECK(MPI_Type_free(&t2) != MPI_SUCCESS);
    /* impossible ranges */
    int cls;
    MPI_Error_class(MPI_Type_create_f90_integer(100, &t), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Error_class(MPI_Type_create_f90_real(40, MPI_UNDEFINED, &t), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Error_class(MPI_Type_create_f90_complex(MPI_UNDEFINED, 5000, &t), &cls);
    CHECK(cls == MPI_ERR_ARG);
    MPI_Error_class(MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &t), &cls);
    CHECK(cls == MPI_ERR_ARG);
}

static void value_index(void) {
    const MPI_Datatype v[] = {MPI_FLOAT, MPI_DOUBLE, MPI_LONG, MPI_INT, MPI_SHORT,
                              MPI_LONG_DOUBLE, MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION};
    const MPI_Datatype i[] = {MPI_INT, MPI_INT, MPI_INT, MPI_INT, MPI_INT, MPI_INT,
                              MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION};
    const MPI_Datatype p[] = {MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT,
                              MPI_SHORT_INT, MPI_LONG_DOUBLE_INT, MPI_2INTEGER, MPI_2REAL,
                              MPI_2DOUBLE_PRECISION};
    MPI_Datatype t;
    for (int k = 0; k < 9; k++) {
        OK(MPI_Type_get_value_index(v[k], i[k], &t));
        CHECK(t == p[k]);
    }
    OK(MPI_Type_get_value_index(MPI_CHAR, MPI_INT, &t));
    CHECK(t == MPI_DATATYPE_NULL);
    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_LONG, &t));
    CHECK(t == MPI_DATATYPE_NULL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    named(MPI_INTEGER, "MPI_INTEGER", 4);
    named(MPI_REAL, "MPI_REAL", 4);
    named(MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION", 8);
    named(MPI_LOGICAL, "MPI_LOGICAL", 4);
    named(MPI_COMPLEX, "MPI_COMPLEX", 8);
    named(MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", 16);
    named(MPI_CHARACTER, "MPI_CHARACTER", 1);
    named(MPI_2INTEGER, "MPI_2INTEGER", 8);
    named(MPI_2REAL, "MPI_2REAL", 8);
    named(MPI_2DOUBLE_PRECISION, "MPI_2DOUBLE_PRECISION", 16);
    named(MPI_INTEGER1, "MPI_INTEGER1", 1);
    named(MPI_INTEGER2, "MPI_INTEGER2", 2);
    named(MPI_INTEGER4, "MPI_INTEGER4", 4);
    named(MPI_INTEGER8, "MPI_INTEGER8", 8);
    named(MPI_REAL4, "MPI_REAL4", 4);
    named(MPI_REAL8, "MPI_REAL8", 8);
    named(MPI_COMPLEX8, "MPI_COMPLEX8", 8);
    named(MPI_COMPLEX16, "MPI_COMPLEX16", 16);
    named(MPI_LOGICAL1, "MPI_LOGICAL1", 1);
    named(MPI_LOGICAL2, "MPI_LOGICAL2", 2);
    named(MPI_LOGICAL4, "MPI_LOGICAL4", 4);
    named(MPI_LOGICAL8, "MPI_LOGICAL8", 8);
    named(MPI_CXX_BOOL, "MPI_CXX_BOOL", sizeof(bool));
    named(MPI_CXX_FLOAT_COMPLEX, "MPI_CXX_FLOAT_COMPLEX", sizeof(float complex));
    named(MPI_CXX_DOUBLE_COMPLEX, "MPI_CXX_DOUBLE_COMPLEX", sizeof(double complex));
    named(MPI_CXX_LONG_DOUBLE_COMPLEX, "MPI_CXX_LONG_DOUBLE_COMPLEX",
          sizeof(long double complex));

    /* absent optional types are MPI_DATATYPE_NULL: using one is MPI_ERR_TYPE */
    CHECK(MPI_INTEGER16 == MPI_DATATYPE_NULL && MPI_REAL2 == MPI_DATATYPE_NULL &&
          MPI_REAL16 == MPI_DATATYPE_NULL && MPI_COMPLEX4 == MPI_DATATYPE_NULL &&
          MPI_COMPLEX32 == MPI_DATATYPE_NULL);
    int s, cls;
    MPI_Error_class(MPI_Type_size(MPI_REAL16, &s), &cls);
    CHECK(cls == MPI_ERR_TYPE);

    INT_OPS(int32_t, MPI_INTEGER);
    INT_OPS(int8_t, MPI_INTEGER1);
    INT_OPS(int16_t, MPI_INTEGER2);
    INT_OPS(int32_t, MPI_INTEGER4);
    INT_OPS(int64_t, MPI_INTEGER8);
    REAL_OPS(float, MPI_REAL);
    REAL_OPS(double, MPI_DOUBLE_PRECISION);
    REAL_OPS(float, MPI_REAL4);
    REAL_OPS(double, MPI_REAL8);
    LOGICAL_OPS(int32_t, MPI_LOGICAL);
    LOGICAL_OPS(int8_t, MPI_LOGICAL1);
    LOGICAL_OPS(int16_t, MPI_LOGICAL2);
    LOGICAL_OPS(int32_t, MPI_LOGICAL4);
    LOGICAL_OPS(int64_t, MPI_LOGICAL8);
    LOGICAL_OPS(bool, MPI_CXX_BOOL);
    COMPLEX_OPS(float complex, MPI_COMPLEX);
    COMPLEX_OPS(double complex, MPI_DOUBLE_COMPLEX);
    COMPLEX_OPS(float complex, MPI_COMPLEX8);
    COMPLEX_OPS(double complex, MPI_COMPLEX16);
    COMPLEX_OPS(float complex, MPI_CXX_FLOAT_COMPLEX);
    COMPLEX_OPS(double complex, MPI_CXX_DOUBLE_COMPLEX);
    COMPLEX_OPS(long double complex, MPI_CXX_LONG_DOUBLE_COMPLEX);
    PAIR_OPS(int32_t, MPI_2INTEGER);
    PAIR_OPS(float, MPI_2REAL);
    PAIR_OPS(double, MPI_2DOUBLE_PRECISION);
    CHECK(reduce_class(MPI_CHARACTER, MPI_MAX) == MPI_ERR_OP);
    CHECK(reduce_class(MPI_CHARACTER, MPI_BOR) == MPI_ERR_OP);

    /* a derived type of MPI_INTEGER reduces as its elements; the class rule
     * holds there too */
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(2, MPI_INTEGER, &pair));
    OK(MPI_Type_commit(&pair));
    int32_t iv[4] = {rank, -rank, 1, 2}, io[4];
    OK(MPI_Allreduce(iv, io, 2, pair, MPI_MAX, MPI_COMM_WORLD));
    CHECK(io[0] == size - 1 && io[1] == 0 && io[2] == 1 && io[3] == 2);
    CHECK(reduce_class(pair, MPI_LOR) == MPI_ERR_OP);
    OK(MPI_Type_free(&pair));

    /* reduce and scan go through the same binding */
    int32_t one = rank + 1, acc;
    OK(MPI_Scan(&one, &acc, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD));
    CHECK(acc == (rank + 1) * (rank + 2) / 2);
    OK(MPI_Reduce(&one, &acc, 1, MPI_INTEGER, MPI_PROD, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        int32_t f = 1;
        for (int r = 1; r <= size; r++) f *= r;
        CHECK(acc == f);
    }
    int32_t lv = rank % 2, lo;
    OK(MPI_Reduce_local(&lv, &lo, 1, MPI_LOGICAL, MPI_LOR));
    MPI_Error_class(MPI_Reduce_local(&lv, &lo, 1, MPI_LOGICAL, MPI_SUM), &cls);
    CHECK(cls == MPI_ERR_OP);

    /* Fortran status constants match MPI_Status's fields */
    CHECK(MPI_F_STATUS_SIZE * (int)sizeof(MPI_Fint) == (int)sizeof(MPI_Status));
    MPI_Status st;
    st.MPI_SOURCE = 3;
    st.MPI_TAG = 4;
    st.MPI_ERROR = 5;
    MPI_Fint fs[MPI_F_STATUS_SIZE];
    OK(MPI_Status_c2f(&st, fs));
    CHECK(fs[MPI_F_SOURCE] == 3 && fs[MPI_F_TAG] == 4 && fs[MPI_F_ERROR] == 5);
    CHECK(MPI_F_STATUS_IGNORE != NULL && MPI_F_STATUSES_IGNORE != NULL);

    f90();
    value_index();
    report_ok("fortran_types");
    MPI_Finalize();
    return 0;
}

/* Derived datatypes: a vector and a struct sent, received as contiguous;
 * sizes, extents, names, envelope/contents, pack/unpack, resized, indexed. */
#include "check.h"
#include <stddef.h>

struct particle { double x; int id; char tag; };

int main(int argc, char **argv) {
    int rank, size, i, j;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);

    /* Predefined sizes and names. */
    int s;
    OK(MPI_Type_size(MPI_DOUBLE, &s)); CHECK(s == 8);
    OK(MPI_Type_size(MPI_DOUBLE_INT, &s)); CHECK(s == 12);
    MPI_Aint lb, ext;
    OK(MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &ext)); CHECK(lb == 0 && ext == 16);
    char name[MPI_MAX_OBJECT_NAME]; int len;
    OK(MPI_Type_get_name(MPI_INT, name, &len)); CHECK(strcmp(name, "MPI_INT") == 0 && len == 7);

    /* Vector: column of a 10x8 matrix. */
    MPI_Datatype col;
    OK(MPI_Type_vector(10, 1, 8, MPI_DOUBLE, &col));
    OK(MPI_Type_commit(&col));
    OK(MPI_Type_size(col, &s)); CHECK(s == 80);
    OK(MPI_Type_get_extent(col, &lb, &ext)); CHECK(lb == 0 && ext == (9 * 8 + 1) * 8);
    OK(MPI_Type_get_true_extent(col, &lb, &ext)); CHECK(lb == 0 && ext == 73 * 8);
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(col, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1);
    int ints[3]; MPI_Aint addrs[1]; MPI_Datatype types[1];
    OK(MPI_Type_get_contents(col, 3, 0, 1, ints, addrs, types));
    CHECK(ints[0] == 10 && ints[1] == 1 && ints[2] == 8 && types[0] == MPI_DOUBLE);
    OK(MPI_Type_set_name(col, "column"));
    OK(MPI_Type_get_name(col, name, &len)); CHECK(strcmp(name, "column") == 0);

    double m[10][8];
    for (i = 0; i < 10; i++) for (j = 0; j < 8; j++) m[i][j] = i * 10 + j + rank * 1000;
    if (rank == 0) {
        OK(MPI_Send(&m[0][3], 1, col, 1, 1, MPI_COMM_WORLD));
    } else if (rank == 1) {
        double c[10]; MPI_Status st; int cnt;
        OK(MPI_Recv(c, 10, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_DOUBLE, &cnt)); CHECK(cnt == 10);
        OK(MPI_Get_count(&st, col, &cnt)); CHECK(cnt == 1);
        for (i = 0; i < 10; i++) CHECK(c[i] == i * 10 + 3);
        /* And back: contiguous into a strided receive. */
        OK(MPI_Send(c, 10, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD));
    }
    /* A freed active request of a staged (non-contiguous) send still
     * delivers its data. */
    if (rank == 0) {
        MPI_Request fr;
        OK(MPI_Isend(&m[0][1], 1, col, 1, 9, MPI_COMM_WORLD, &fr));
        OK(MPI_Request_free(&fr));
        CHECK(fr == MPI_REQUEST_NULL);
    } else if (rank == 1) {
        double c[10];
        OK(MPI_Recv(c, 10, MPI_DOUBLE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 10; i++) CHECK(c[i] == i * 10 + 1);
    }
    if (rank == 0) {
        double t[10][8];
        memset(t, 0, sizeof t);
        OK(MPI_Recv(&t[0][5], 1, col, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 10; i++) for (j = 0; j < 8; j++) CHECK(t[i][j] == (j == 5 ? i * 10 + 3 : 0));
    }

    /* Struct with padding: 3 particles as a struct type, received as bytes. */
    MPI_Datatype pt;
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3];
    struct particle ps[3];
    MPI_Aint base;
    OK(MPI_Get_address(&ps[0], &base));
    OK(MPI_Get_address(&ps[0].x, &disp[0]));
    OK(MPI_Get_address(&ps[0].id, &disp[1]));
    OK(MPI_Get_address(&ps[0].tag, &disp[2]));
    for (i = 0; i < 3; i++) disp[i] = MPI_Aint_diff(disp[i], base);
    MPI_Datatype tys[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR};
    OK(MPI_Type_create_struct(3, bl, disp, tys, &pt));
    OK(MPI_Type_commit(&pt));
    OK(MPI_Type_size(pt, &s)); CHECK(s == 13);
    OK(MPI_Type_get_extent(pt, &lb, &ext)); CHECK(lb == 0 && ext == (MPI_Aint)sizeof(struct particle));
    for (i = 0; i < 3; i++) { ps[i].x = i + 0.25; ps[i].id = 100 + i; ps[i].tag = 'A' + i; }
    if (rank == 0) {
        OK(MPI_Send(ps, 3, pt, 1, 3, MPI_COMM_WORLD));
    } else if (rank == 1) {
        unsigned char raw[39]; MPI_Status st; int cnt;
        OK(MPI_Recv(raw, 39, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &cnt)); CHECK(cnt == 39);
        OK(MPI_Get_elements(&st, pt, &cnt)); CHECK(cnt == 9);
        for (i = 0; i < 3; i++) {
            double x; int id; char tg;
            memcpy(&x, raw + 13 * i, 8); memcpy(&id, raw + 13 * i + 8, 4); tg = (char)raw[13 * i + 12];
            CHECK(x == i + 0.25 && id == 100 + i && tg == 'A' + i);
        }
    }

    /* Pack / unpack through a struct and an indexed type. */
    {
        char buf[256]; int pos = 0, psz;
        OK(MPI_Pack_size(3, pt, MPI_COMM_WORLD, &psz)); CHECK(psz == 39);
        OK(MPI_Pack(ps, 3, pt, buf, sizeof buf, &pos, MPI_COMM_WORLD)); CHECK(pos == 39);
        int k = 42;
        OK(MPI_Pack(&k, 1, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD)); CHECK(pos == 43);
        struct particle q[3]; int k2; memset(q, 0, sizeof q);
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, q, 3, pt, MPI_COMM_WORLD));
        OK(MPI_Unpack(buf, sizeof buf, &pos, &k2, 1, MPI_INT, MPI_COMM_WORLD));
        CHECK(k2 == 42 && q[2].id == 102 && q[1].tag == 'B' && q[0].x == 0.25);

        int blens[3] = {2, 1, 3}, displs[3] = {0, 4, 7};
        MPI_Datatype ix;
        OK(MPI_Type_indexed(3, blens, displs, MPI_INT, &ix));
        OK(MPI_Type_commit(&ix));
        OK(MPI_Type_size(ix, &s)); CHECK(s == 24);
        int src[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, dst[6];
        pos = 0;
        OK(MPI_Pack(src, 1, ix, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, dst, 6, MPI_INT, MPI_COMM_WORLD));
        CHECK(dst[0] == 0 && dst[1] == 1 && dst[2] == 4 && dst[3] == 7 && dst[4] == 8 && dst[5] == 9);
        OK(MPI_Type_free(&ix)); CHECK(ix == MPI_DATATYPE_NULL);

        /* Resized + contiguous + dup. */
        MPI_Datatype rs, ct, dp;
        OK(MPI_Type_create_resized(MPI_INT, 0, 12, &rs));
        OK(MPI_Type_contiguous(3, rs, &ct));
        OK(MPI_Type_commit(&ct));
        OK(MPI_Type_size(ct, &s)); CHECK(s == 12);
        OK(MPI_Type_get_extent(ct, &lb, &ext)); CHECK(ext == 36);
        OK(MPI_Type_dup(ct, &dp));
        OK(MPI_Type_get_envelope(dp, &ni, &na, &nd, &comb)); CHECK(comb == MPI_COMBINER_DUP);
        OK(MPI_Type_free(&dp)); OK(MPI_Type_free(&ct)); OK(MPI_Type_free(&rs));
    }
    /* Subarray: 2x3 block at (1,1) of a 4x5 array, C and Fortran order. */
    {
        int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1}, a[20], out[6], pos = 0;
        char buf[64];
        MPI_Datatype sa;
        for (i = 0; i < 20; i++) a[i] = i;
        OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sa));
        OK(MPI_Type_commit(&sa));
        OK(MPI_Type_size(sa, &s)); CHECK(s == 24);
        OK(MPI_Type_get_extent(sa, &lb, &ext)); CHECK(lb == 0 && ext == 80);
        OK(MPI_Pack(a, 1, sa, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, out, 6, MPI_INT, MPI_COMM_WORLD));
        CHECK(out[0] == 6 && out[1] == 7 && out[2] == 8 && out[3] == 11 && out[4] == 12 && out[5] == 13);
        OK(MPI_Type_free(&sa));
        /* Fortran: first index fastest; sizes {4,5}: element (i,j) at i + 4j. */
        OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &sa));
        OK(MPI_Type_commit(&sa));
        pos = 0;
        OK(MPI_Pack(a, 1, sa, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, out, 6, MPI_INT, MPI_COMM_WORLD));
        CHECK(out[0] == 5 && out[1] == 6 && out[2] == 9 && out[3] == 10 && out[4] == 13 && out[5] == 14);
        OK(MPI_Type_free(&sa));
    }
    /* Darray: process 1 of 3 (block: 10 elements in blocks of 4, it owns
     * 4..7; cyclic(2): 2, 3, 8, 9), and process 4 of a 2x3 grid holding
     * a 4x6 array by blocks in Fortran order (rows 2-3, columns 2-3:
     * elements 10, 11, 14, 15, first index fastest). */
    {
        int g1[1] = {10}, blk[1] = {MPI_DISTRIBUTE_BLOCK}, cyc[1] = {MPI_DISTRIBUTE_CYCLIC};
        int dflt[1] = {MPI_DISTRIBUTE_DFLT_DARG}, two[1] = {2}, p3[1] = {3}, a[24], out[4];
        int pos, k, combiner, ni, na, nt;
        char buf[64];
        MPI_Datatype da;
        for (i = 0; i < 24; i++) a[i] = i;
        OK(MPI_Type_create_darray(3, 1, 1, g1, blk, dflt, p3, MPI_ORDER_C, MPI_INT, &da));
        OK(MPI_Type_commit(&da));
        OK(MPI_Type_size(da, &s)); CHECK(s == 16);
        OK(MPI_Type_get_extent(da, &lb, &ext)); CHECK(lb == 0 && ext == 40);
        pos = 0;
        OK(MPI_Pack(a, 1, da, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, out, 4, MPI_INT, MPI_COMM_WORLD));
        for (k = 0; k < 4; k++) CHECK(out[k] == 4 + k);
        OK(MPI_Type_get_envelope(da, &ni, &na, &nt, &combiner));
        CHECK(combiner == MPI_COMBINER_DARRAY && ni == 4 * 1 + 4 && na == 0 && nt == 1);
        OK(MPI_Type_free(&da));
        OK(MPI_Type_create_darray(3, 1, 1, g1, cyc, two, p3, MPI_ORDER_C, MPI_INT, &da));
        OK(MPI_Type_commit(&da));
        pos = 0;
        OK(MPI_Pack(a, 1, da, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, out, 4, MPI_INT, MPI_COMM_WORLD));
        CHECK(out[0] == 2 && out[1] == 3 && out[2] == 8 && out[3] == 9);
        OK(MPI_Type_free(&da));
        int g2[2] = {4, 6}, b2[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK};
        int d2[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, p2[2] = {2, 3};
        OK(MPI_Type_create_darray(6, 4, 2, g2, b2, d2, p2, MPI_ORDER_FORTRAN, MPI_INT, &da));
        OK(MPI_Type_commit(&da));
        OK(MPI_Type_get_extent(da, &lb, &ext)); CHECK(ext == 96);
        pos = 0;
        OK(MPI_Pack(a, 1, da, buf, sizeof buf, &pos, MPI_COMM_WORLD));
        pos = 0;
        OK(MPI_Unpack(buf, sizeof buf, &pos, out, 4, MPI_INT, MPI_COMM_WORLD));
        CHECK(out[0] == 10 && out[1] == 11 && out[2] == 14 && out[3] == 15);
        OK(MPI_Type_free(&da));
        /* A block too small for the grid is an argument error. */
        int cls;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Error_class(MPI_Type_create_darray(3, 0, 1, g1, blk, two, p3, MPI_ORDER_C, MPI_INT,
                                               &da), &cls);
        CHECK(cls == MPI_ERR_ARG);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    /* Get_elements of a partial item counts its primitives in type-map
     * order: a struct of 1 int and 256 chars receiving 4 + 16 bytes holds
     * 17 elements (MPICH's getpartelm); 4 + 17 bytes 18; Status_set_elements
     * sets the bytes of that many primitives. */
    {
        MPI_Datatype st_t, tps[2] = {MPI_INT, MPI_CHAR};
        int bl[2] = {1, 256};
        MPI_Aint off[2] = {0, sizeof(int)};
        OK(MPI_Type_create_struct(2, bl, off, tps, &st_t));
        OK(MPI_Type_commit(&st_t));
        MPI_Status fake;
        int e, c2;
        OK(MPI_Status_set_elements(&fake, MPI_BYTE, 20));
        OK(MPI_Get_elements(&fake, st_t, &e)); CHECK(e == 17);
        OK(MPI_Get_count(&fake, st_t, &c2)); CHECK(c2 == MPI_UNDEFINED);
        OK(MPI_Status_set_elements(&fake, MPI_BYTE, 21));
        OK(MPI_Get_elements(&fake, st_t, &e)); CHECK(e == 18);
        OK(MPI_Status_set_elements(&fake, MPI_BYTE, 2));
        OK(MPI_Get_elements(&fake, st_t, &e)); CHECK(e == MPI_UNDEFINED);
        OK(MPI_Status_set_elements(&fake, st_t, 257 + 3));
        OK(MPI_Get_elements(&fake, MPI_BYTE, &e)); CHECK(e == 260 + 4 + 2);
        OK(MPI_Type_free(&st_t));
    }
    OK(MPI_Type_free(&pt));
    OK(MPI_Type_free(&col));
    report_ok("datatypes");
    OK(MPI_Finalize());
    return 0;
}

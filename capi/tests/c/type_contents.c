/* MPI_Type_get_contents returns new handles for derived inner datatypes
 * (the caller frees them, MPI-4.0 5.1.13): freeing them leaves the
 * user's own handles and the outer type working, and they stay valid
 * after the user freed the inner type itself. Predefined inner types come
 * back as they are. One rank. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype pair, vec, got[2];
    int ni, na, nd, comb, is[4], sz;
    MPI_Aint as[2];
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_vector(3, 1, 2, pair, &vec));
    OK(MPI_Type_commit(&vec));

    OK(MPI_Type_get_envelope(vec, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1);
    OK(MPI_Type_get_contents(vec, ni, na, nd, is, as, got));
    CHECK(is[0] == 3 && is[1] == 1 && is[2] == 2);
    CHECK(got[0] != pair);
    OK(MPI_Type_size(got[0], &sz));
    CHECK(sz == 2 * (int)sizeof(int));
    OK(MPI_Type_free(&got[0]));
    /* The user's handle and the outer type still work. */
    OK(MPI_Type_size(pair, &sz));
    CHECK(sz == 2 * (int)sizeof(int));
    OK(MPI_Type_size(vec, &sz));
    CHECK(sz == 6 * (int)sizeof(int));

    /* The inner type freed by the user: the contents still give it. */
    OK(MPI_Type_free(&pair));
    OK(MPI_Type_get_contents(vec, ni, na, nd, is, as, got));
    OK(MPI_Type_get_envelope(got[0], &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_CONTIGUOUS && ni == 1 && nd == 1);
    MPI_Datatype leaf;
    OK(MPI_Type_get_contents(got[0], ni, na, nd, is, as, &leaf));
    CHECK(is[0] == 2 && leaf == MPI_INT);
    OK(MPI_Type_free(&got[0]));

    /* A struct of a derived and a predefined type. */
    MPI_Datatype dup, st, types[2];
    OK(MPI_Type_dup(MPI_DOUBLE, &dup));
    types[0] = dup, types[1] = MPI_CHAR;
    int bl[2] = {1, 3};
    MPI_Aint disp[2] = {0, 8};
    OK(MPI_Type_create_struct(2, bl, disp, types, &st));
    OK(MPI_Type_get_envelope(st, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_STRUCT && nd == 2);
    OK(MPI_Type_get_contents(st, ni, na, nd, is, as, got));
    CHECK(got[0] != dup && got[1] == MPI_CHAR);
    OK(MPI_Type_free(&got[0]));
    OK(MPI_Type_size(dup, &sz));
    CHECK(sz == (int)sizeof(double));
    OK(MPI_Type_free(&dup));
    OK(MPI_Type_free(&st));

    /* The outer type still moves data. */
    int src[12], dst[12];
    for (int i = 0; i < 12; i++) src[i] = i, dst[i] = -1;
    OK(MPI_Sendrecv(src, 1, vec, 0, 0, dst, 1, vec, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < 12; i++) CHECK(dst[i] == ((i % 4) < 2 ? i : -1));
    OK(MPI_Type_free(&vec));
    report_ok("type_contents");
    MPI_Finalize();
    return 0;
}

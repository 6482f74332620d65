/* Attributes on datatypes: set/get/delete with delete callbacks (a failing
 * one keeps the value and fails the call), copies through MPI_Type_dup's
 * copy callbacks (a failing one fails the dup with MPI_DATATYPE_NULL),
 * delete callbacks on MPI_Type_free in the order set, attributes on a
 * predefined type. */
#include "check.h"

static int deletes, fail_delete, order[4], norder;

static int copy_plus(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)k, (void)extra;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int copy_fail(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)k, (void)extra, (void)in, (void)out;
    *flag = 1;
    return MPI_ERR_OTHER;
}

static int del(MPI_Datatype t, int k, void *v, void *extra) {
    (void)t, (void)v, (void)extra;
    deletes++;
    if (norder < 4) order[norder++] = k;
    return fail_delete ? MPI_ERR_OTHER : MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int k1, k2, kf, flag;
    void *v;
    MPI_Datatype t, d;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_create_keyval(copy_plus, del, &k1, NULL));
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, del, &k2, NULL));
    OK(MPI_Type_get_attr(t, k1, &v, &flag));
    CHECK(!flag);
    OK(MPI_Type_set_attr(t, k2, (void *)20));
    OK(MPI_Type_set_attr(t, k1, (void *)10));
    OK(MPI_Type_get_attr(t, k1, &v, &flag));
    CHECK(flag && v == (void *)10);
    /* Replacing runs the old value's delete callback. */
    OK(MPI_Type_set_attr(t, k1, (void *)11));
    CHECK(deletes == 1);
    /* Dup: k1 copied through its callback, k2 (null copy) not. */
    OK(MPI_Type_dup(t, &d));
    OK(MPI_Type_get_attr(d, k1, &v, &flag));
    CHECK(flag && v == (void *)12);
    OK(MPI_Type_get_attr(d, k2, &v, &flag));
    CHECK(!flag);
    /* A failing delete callback fails the call and keeps the value. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    fail_delete = 1;
    CHECK(MPI_Type_delete_attr(d, k1) != MPI_SUCCESS);
    OK(MPI_Type_get_attr(d, k1, &v, &flag));
    CHECK(flag && v == (void *)12);
    fail_delete = 0;
    OK(MPI_Type_delete_attr(d, k1));
    OK(MPI_Type_get_attr(d, k1, &v, &flag));
    CHECK(!flag);
    OK(MPI_Type_free(&d));
    /* A failing copy callback fails the dup. */
    OK(MPI_Type_create_keyval(copy_fail, MPI_TYPE_NULL_DELETE_FN, &kf, NULL));
    OK(MPI_Type_set_attr(t, kf, (void *)1));
    d = MPI_INT;
    CHECK(MPI_Type_dup(t, &d) != MPI_SUCCESS);
    CHECK(d == MPI_DATATYPE_NULL);
    OK(MPI_Type_delete_attr(t, kf));
    /* Free runs the delete callbacks in the order the values were set. */
    deletes = norder = 0;
    OK(MPI_Type_free(&t));
    CHECK(deletes == 2 && order[0] == k2 && order[1] == k1);
    /* Predefined types take attributes too. */
    OK(MPI_Type_set_attr(MPI_DOUBLE, k2, (void *)5));
    OK(MPI_Type_get_attr(MPI_DOUBLE, k2, &v, &flag));
    CHECK(flag && v == (void *)5);
    OK(MPI_Type_delete_attr(MPI_DOUBLE, k2));
    /* Bad handles are errors. */
    int cls;
    MPI_Error_class(MPI_Type_set_attr(MPI_DOUBLE, 12345, NULL), &cls);
    CHECK(cls == MPI_ERR_KEYVAL);
    OK(MPI_Type_free_keyval(&k1));
    CHECK(k1 == MPI_KEYVAL_INVALID);
    OK(MPI_Type_free_keyval(&k2));
    OK(MPI_Type_free_keyval(&kf));
    report_ok("type_attrs");
    MPI_Finalize();
    return 0;
}

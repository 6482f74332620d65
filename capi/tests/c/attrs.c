/* Attribute callbacks' results and MPI_COMM_SELF's attributes at
 * MPI_Finalize (MPICH's attrerr, attrend, attrend2):
 * - a delete callback that fails makes MPI_Comm_set_attr (replacing) and
 *   MPI_Comm_delete_attr fail, and the attribute keeps its old value;
 * - a copy callback that fails makes MPI_Comm_dup fail, with the
 *   callback's own code when it is one MPI knows (a user class and a user
 *   code from MPI_Add_error_class/code: MPICH's errors/comm/userdup);
 * - MPI_Finalize first deletes MPI_COMM_SELF's attributes, last set first,
 *   while MPI_Finalized still says no. */
#include "check.h"

static int fail_delete = 1, fail_copy = 1, copy_rc = MPI_ERR_OTHER;
static int order[4], deleted;

static int copy_fn(MPI_Comm c, int k, void *x, void *in, void *out, int *flag) {
    (void)c; (void)k; (void)x;
    *(void **)out = in;
    *flag = 1;
    return fail_copy ? copy_rc : MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int k, void *v, void *x) {
    (void)c; (void)k; (void)v; (void)x;
    return fail_delete ? MPI_ERR_OTHER : MPI_SUCCESS;
}

static int self_delete(MPI_Comm c, int k, void *v, void *x) {
    (void)k; (void)x;
    int fin = 1;
    MPI_Finalized(&fin);
    if (c != MPI_COMM_SELF || fin || deleted >= 4) return MPI_ERR_OTHER;
    order[deleted++] = (int)(long)v;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm d, d2;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN));
    int key, flag;
    void *got;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, NULL));
    OK(MPI_Comm_set_attr(d, key, (void *)1L));
    CHECK(MPI_Comm_set_attr(d, key, (void *)2L) != MPI_SUCCESS);
    OK(MPI_Comm_get_attr(d, key, &got, &flag));
    CHECK(flag && got == (void *)1L);
    CHECK(MPI_Comm_delete_attr(d, key) != MPI_SUCCESS);
    OK(MPI_Comm_get_attr(d, key, &got, &flag));
    CHECK(flag && got == (void *)1L);
    d2 = MPI_COMM_NULL;
    CHECK(MPI_Comm_dup(d, &d2) != MPI_SUCCESS);
    int uclass, ucode, cls, len;
    char msg[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&uclass));
    OK(MPI_Add_error_code(uclass, &ucode));
    OK(MPI_Add_error_string(uclass, "my class"));
    copy_rc = uclass;
    int rc = MPI_Comm_dup(d, &d2);
    OK(MPI_Error_class(rc, &cls));
    OK(MPI_Error_string(rc, msg, &len));
    CHECK(cls == uclass && strcmp(msg, "my class") == 0);
    copy_rc = ucode;
    rc = MPI_Comm_dup(d, &d2);
    OK(MPI_Error_class(rc, &cls));
    CHECK(rc == ucode && cls == uclass);
    fail_copy = 0;
    OK(MPI_Comm_dup(d, &d2));
    OK(MPI_Comm_get_attr(d2, key, &got, &flag));
    CHECK(flag && got == (void *)1L);
    fail_delete = 0;
    OK(MPI_Comm_set_attr(d, key, (void *)3L));
    OK(MPI_Comm_get_attr(d, key, &got, &flag));
    CHECK(flag && got == (void *)3L);
    OK(MPI_Comm_delete_attr(d, key));
    OK(MPI_Comm_get_attr(d, key, &got, &flag));
    CHECK(!flag);
    OK(MPI_Comm_free(&d2));
    OK(MPI_Comm_free(&d));
    OK(MPI_Comm_free_keyval(&key));

    /* Four keyvals set on MPI_COMM_SELF in the order 2, 0, 3, 1 (not the
     * keyvals' order), the second one set twice (moves it last). */
    int k[4];
    for (int i = 0; i < 4; i++) OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &k[i], NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[2], (void *)2L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[0], (void *)0L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[3], (void *)3L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[1], (void *)1L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[0], (void *)0L)); /* replaced: deleted once now */
    CHECK(deleted == 1 && order[0] == 0);
    deleted = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    /* last set first: 0, 1, 3, 2 */
    if (deleted != 4 || order[0] != 0 || order[1] != 1 || order[2] != 3 || order[3] != 2) {
        fprintf(stderr, "rank %d: COMM_SELF attributes deleted %d: %d %d %d %d\n", rank, deleted,
                order[0], order[1], order[2], order[3]);
        return 1;
    }
    if (rank == 0) printf("attrs: OK\n");
    return 0;
}

/* Errors under MPI_ERRORS_RETURN: each bad-argument class, error strings,
 * user error handlers and codes, unsupported functions, attributes, info. */
#include "check.h"

static int handler_calls = 0, handler_code = 0;
static void on_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

static void expect(int rc, int cls_expected, const char *what) {
    int cls = -1;
    MPI_Error_class(rc, &cls);
    if (cls != cls_expected) {
        char s[MPI_MAX_ERROR_STRING]; int l;
        MPI_Error_string(rc, s, &l);
        fprintf(stderr, "%s: expected class %d, got %d (%s)\n", what, cls_expected, cls, s);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

int main(int argc, char **argv) {
    int rank, size, x = 0;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh)); CHECK(eh == MPI_ERRORS_ARE_FATAL);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    expect(MPI_Send(&x, 1, MPI_INT, 0, 0, 12345), MPI_ERR_COMM, "bad comm");
    expect(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "bad rank");
    expect(MPI_Send(&x, 1, MPI_INT, 0, -7, MPI_COMM_WORLD), MPI_ERR_TAG, "bad tag");
    expect(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT, "bad count");
    expect(MPI_Send(&x, 1, 9999, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "bad type");
    expect(MPI_Send(NULL, 4, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "NULL buffer");
    expect(MPI_Recv(&x, 1, MPI_INT, -5, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK, "bad source");
    expect(MPI_Bcast(&x, 1, MPI_INT, size + 3, MPI_COMM_WORLD), MPI_ERR_ROOT, "bad root");
    int y = 0;
    expect(MPI_Allreduce(&x, &y, 1, MPI_INT, 4242, MPI_COMM_WORLD), MPI_ERR_OP, "bad op");
    MPI_Request bad = 31337;
    expect(MPI_Wait(&bad, MPI_STATUS_IGNORE), MPI_ERR_REQUEST, "bad request");
    int gs;
    expect(MPI_Group_size(777, &gs), MPI_ERR_GROUP, "bad group");
    MPI_Datatype v;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &v));
    expect(MPI_Send(&x, 1, v, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "uncommitted type");
    OK(MPI_Type_free(&v));
    int dims[2] = {0, 0};
    expect(MPI_Dims_create(-1, 2, dims), MPI_ERR_DIMS, "bad dims");
    expect(MPI_Cart_rank(MPI_COMM_WORLD, dims, &x), MPI_ERR_TOPOLOGY, "no topology");
    MPI_Info info;
    expect(MPI_Info_get_nkeys(4711, &x), MPI_ERR_INFO, "bad info");
    expect(MPI_Comm_free(&(MPI_Comm){MPI_COMM_WORLD}), MPI_ERR_COMM, "free world");
    MPI_Win win;
    expect(MPI_Win_create(&x, -4, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win), MPI_ERR_SIZE, "negative window size");
    MPI_File fh;
    expect(MPI_File_open(MPI_COMM_WORLD, "x", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_UNSUPPORTED_OPERATION, "I/O");

    /* Strings. */
    char s[MPI_MAX_ERROR_STRING]; int len;
    OK(MPI_Error_string(MPI_ERR_TRUNCATE, s, &len));
    CHECK(len > 0 && strstr(s, "truncated") != NULL);
    int cls;
    CHECK(MPI_Error_class(-77, &cls) != MPI_SUCCESS);

    /* User classes and codes; MPI_LASTUSEDCODE is at least
     * MPI_ERR_LASTCODE and follows them (MPICH's baseattr2). */
    int myclass, mycode, *last, lflag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &lflag));
    CHECK(lflag && *last >= MPI_ERR_LASTCODE && MPI_ERR_LASTCODE >= MPI_ERR_UNSUPPORTED_OPERATION);
    OK(MPI_Add_error_class(&myclass));
    OK(MPI_Add_error_code(myclass, &mycode));
    CHECK(myclass > MPI_ERR_LASTCODE && mycode > MPI_ERR_LASTCODE);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &lflag));
    CHECK(*last >= mycode && *last >= myclass);
    /* No string set yet: an empty one, not an error (MPICH's errstring2). */
    s[0] = 'x';
    OK(MPI_Error_string(myclass, s, &len)); CHECK(len == 0 && s[0] == 0);
    OK(MPI_Error_string(mycode, s, &len)); CHECK(len == 0 && s[0] == 0);
    OK(MPI_Add_error_string(mycode, "my very own error"));
    OK(MPI_Error_class(mycode, &cls)); CHECK(cls == myclass);
    OK(MPI_Error_string(mycode, s, &len)); CHECK(strcmp(s, "my very own error") == 0);

    /* A user handler is called with the code, and the call returns it. */
    MPI_Errhandler mine;
    OK(MPI_Comm_create_errhandler(on_error, &mine));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, mine));
    int rc = MPI_Send(&x, 1, MPI_INT, 0, -1, MPI_COMM_WORLD);
    CHECK(handler_calls == 1 && handler_code == rc);
    OK(MPI_Comm_call_errhandler(MPI_COMM_WORLD, mycode));
    CHECK(handler_calls == 2 && handler_code == mycode);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&mine));

    /* Attributes. */
    int *tagub, flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagub, &flag));
    CHECK(flag && *tagub >= 32767);
    int kv;
    OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &kv, NULL));
    static int payload = 99;
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, kv, &payload));
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    int *pv;
    OK(MPI_Comm_get_attr(d, kv, &pv, &flag)); CHECK(flag && pv == &payload && *pv == 99);
    OK(MPI_Comm_delete_attr(d, kv));
    OK(MPI_Comm_get_attr(d, kv, &pv, &flag)); CHECK(!flag);
    OK(MPI_Comm_free(&d));
    OK(MPI_Comm_free_keyval(&kv));

    /* Info objects. */
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "alpha", "1"));
    OK(MPI_Info_set(info, "beta", "two"));
    OK(MPI_Info_set(info, "alpha", "one"));
    int n;
    OK(MPI_Info_get_nkeys(info, &n)); CHECK(n == 2);
    char val[MPI_MAX_INFO_VAL];
    OK(MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL - 1, val, &flag)); CHECK(flag && strcmp(val, "one") == 0);
    char key[MPI_MAX_INFO_KEY + 1];
    OK(MPI_Info_get_nthkey(info, 1, key)); CHECK(strcmp(key, "beta") == 0);
    expect(MPI_Info_delete(info, "gamma"), MPI_ERR_INFO_NOKEY, "missing key");
    MPI_Info dupi;
    OK(MPI_Info_dup(info, &dupi));
    OK(MPI_Info_free(&info)); CHECK(info == MPI_INFO_NULL);
    OK(MPI_Info_get_valuelen(dupi, "beta", &len, &flag)); CHECK(flag && len == 3);
    /* MPI-4.0 MPI_Info_get_string: the size first (buflen 0 writes
     * nothing), then cut to fit, then whole; a missing key leaves buflen. */
    char small[3] = {'x', 'x', 'x'};
    int blen = 0;
    OK(MPI_Info_get_string(dupi, "beta", &blen, small, &flag));
    CHECK(flag && blen == 4 && small[0] == 'x');
    blen = 3;
    OK(MPI_Info_get_string(dupi, "beta", &blen, small, &flag));
    CHECK(flag && blen == 4 && strcmp(small, "tw") == 0);
    blen = MPI_MAX_INFO_VAL;
    OK(MPI_Info_get_string(dupi, "beta", &blen, val, &flag));
    CHECK(flag && blen == 4 && strcmp(val, "two") == 0);
    blen = 17;
    OK(MPI_Info_get_string(dupi, "gamma", &blen, val, &flag));
    CHECK(!flag && blen == 17);
    OK(MPI_Info_free(&dupi));
    /* MPI_INFO_ENV: readable, not modifiable (MPICH's info/infoenv). */
    OK(MPI_Info_get(MPI_INFO_ENV, "maxprocs", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag && atoi(val) == size);
    OK(MPI_Info_get(MPI_INFO_ENV, "command", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag && strstr(val, "errors") != NULL);
    expect(MPI_Info_set(MPI_INFO_ENV, "wdir", "/"), MPI_ERR_INFO, "MPI_INFO_ENV set");
    MPI_Info env = MPI_INFO_ENV;
    expect(MPI_Info_free(&env), MPI_ERR_INFO, "MPI_INFO_ENV free");

    /* Buffers a call must not get (MPICH's errors/coll): MPI_IN_PLACE
     * where it is not allowed (dereferencing it crashed), and the same
     * buffer as input and output of a collective. Local checks: every rank
     * returns before communicating. */
    int in4[4] = {1, 2, 3, 4}, io4[4] = {0, 0, 0, 0};
    OK(MPI_Reduce_local(in4, io4, 4, MPI_INT, MPI_SUM)); CHECK(io4[3] == 4);
    expect(MPI_Reduce_local(MPI_IN_PLACE, io4, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER, "reduce_local in place");
    expect(MPI_Reduce_local(in4, MPI_IN_PLACE, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER, "reduce_local in place out");
    expect(MPI_Reduce_local(io4, io4, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER, "reduce_local aliased");
    expect(MPI_Send(MPI_IN_PLACE, 1, MPI_INT, rank, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "send in place");
    expect(MPI_Allreduce(io4, io4, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, "allreduce aliased");
    expect(MPI_Allgather(io4, 1, MPI_INT, io4, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER, "allgather aliased");
    /* The input at this rank's own block of the output (MPICH's
     * errors/coll/noalias2 and noalias3): every rank finds it, in the
     * blocking and the non-blocking forms. */
    int *ab = calloc(4 * size + 4, sizeof(int)), *cnt = malloc(size * sizeof(int)),
        *dsp = malloc(size * sizeof(int));
    MPI_Datatype ty[64];
    for (int i = 0; i < size; i++) cnt[i] = 1, dsp[i] = 2 * i, ty[i] = MPI_INT;
    MPI_Request rq;
    expect(MPI_Allgather(&ab[rank], 1, MPI_INT, ab, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER, "allgather at own block");
    expect(MPI_Iallgather(&ab[rank], 1, MPI_INT, ab, 1, MPI_INT, MPI_COMM_WORLD, &rq), MPI_ERR_BUFFER, "iallgather at own block");
    expect(MPI_Allgatherv(&ab[2 * rank], 1, MPI_INT, ab, cnt, dsp, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER, "allgatherv at own block");
    expect(MPI_Iallgatherv(&ab[2 * rank], 1, MPI_INT, ab, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &rq), MPI_ERR_BUFFER, "iallgatherv at own block");
    expect(MPI_Alltoallv(ab, cnt, dsp, MPI_INT, ab, cnt, dsp, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER, "alltoallv aliased");
    expect(MPI_Alltoallw(ab, cnt, dsp, ty, ab, cnt, dsp, ty, MPI_COMM_WORLD), MPI_ERR_BUFFER, "alltoallw aliased");
    expect(MPI_Ialltoall(ab, 1, MPI_INT, ab, 1, MPI_INT, MPI_COMM_WORLD, &rq), MPI_ERR_BUFFER, "ialltoall aliased");
    expect(MPI_Reduce_scatter(ab, ab, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, "reduce_scatter aliased");
    expect(MPI_Iallreduce(ab, ab, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq), MPI_ERR_BUFFER, "iallreduce aliased");
    expect(MPI_Iscan(ab, ab, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq), MPI_ERR_BUFFER, "iscan aliased");
    /* Rooted calls: only the root names its buffers, so on one rank. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    OK(MPI_Gather(&ab[2], 2, MPI_INT, ab, 2, MPI_INT, 0, MPI_COMM_SELF));
    expect(MPI_Gatherv(ab, 1, MPI_INT, ab, cnt, dsp, MPI_INT, 0, MPI_COMM_SELF), MPI_ERR_BUFFER, "gatherv aliased");
    expect(MPI_Scatter(ab, 1, MPI_INT, ab, 1, MPI_INT, 0, MPI_COMM_SELF), MPI_ERR_BUFFER, "scatter aliased");
    expect(MPI_Iscatterv(ab, cnt, dsp, MPI_INT, ab, 1, MPI_INT, 0, MPI_COMM_SELF, &rq), MPI_ERR_BUFFER, "iscatterv aliased");
    expect(MPI_Igather(ab, 1, MPI_INT, ab, 1, MPI_INT, 0, MPI_COMM_SELF, &rq), MPI_ERR_BUFFER, "igather aliased");
    /* Legal neighbours: an input next to the blocks, not at its own. */
    OK(MPI_Allgather(&ab[4 * size], 1, MPI_INT, ab, 1, MPI_INT, MPI_COMM_WORLD));
    free(ab);
    free(cnt);
    free(dsp);
    /* ... while empty calls and MPI_IN_PLACE are fine. */
    OK(MPI_Allreduce(io4, io4, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Allreduce(MPI_IN_PLACE, io4, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

    /* A NULL output is what a group constructor reports, even with a range
     * it would refuse (MPICH's group_range_incl_nullarg). */
    MPI_Group wg;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    int bad_range[1][3] = {{size, size + 5, 1}};
    expect(MPI_Group_range_incl(wg, 1, bad_range, NULL), MPI_ERR_ARG, "range_incl NULL out");
    OK(MPI_Group_free(&wg));

    /* Environment queries. */
    char proc[MPI_MAX_PROCESSOR_NAME], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    OK(MPI_Get_processor_name(proc, &len)); CHECK(len > 0);
    OK(MPI_Get_library_version(lib, &len)); CHECK(strncmp(lib, "tmpi", 4) == 0);
    int ver, sub;
    OK(MPI_Get_version(&ver, &sub)); CHECK(ver == 3 && sub == 1);
    double t0 = MPI_Wtime();
    CHECK(MPI_Wtick() > 0 && MPI_Wtime() >= t0);
    void *mem;
    OK(MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &mem));
    memset(mem, 1, 1 << 20);
    OK(MPI_Free_mem(mem));
    CHECK(MPI_Comm_c2f(MPI_COMM_WORLD) == MPI_COMM_WORLD && MPI_Type_f2c(MPI_Type_c2f(MPI_INT)) == MPI_INT);
    int init, fin;
    OK(MPI_Initialized(&init)); OK(MPI_Finalized(&fin)); CHECK(init && !fin);

    report_ok("errors");
    OK(MPI_Finalize());
    OK(MPI_Finalized(&fin)); CHECK(fin);
    return 0;
}

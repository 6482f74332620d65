/* One-sided errors are MPI error classes reported through the window's
 * error handler, never a crash or a hang: epoch misuse, out-of-window
 * targets, datatype and op mismatches, bad ranks, freeing a locked
 * window; a user error handler on a window is called with the window;
 * calls for another flavor of window say so. */
#include "check.h"

static int handler_calls = 0;
static MPI_Win handler_win = MPI_WIN_NULL;

static void on_error(MPI_Win *win, int *code, ...) {
    handler_calls++;
    handler_win = *win;
    (void)code;
}

static int cls(int code) {
    int c;
    MPI_Error_class(code, &c);
    return c;
}

/* Epoch misuse, ranges, types, ops, ranks on `win` (8 ints per rank at
 * `mem`, errors returned): the same classes whichever component serves
 * the window (pt2pt for MPI_Win_create, sm for MPI_Win_allocate on one
 * node). */
static void epoch_and_argument_errors(MPI_Win win, int *mem, int rank, int size) {
    int x = 1, y = 0;
    float f0 = 0;
    int peer = (rank + 1) % size;
    /* Outside any epoch. */
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Get(&y, 1, MPI_INT, peer, 0, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_unlock(peer, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_unlock_all(win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_flush(peer, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_complete(win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_wait(win)) == MPI_ERR_RMA_SYNC);
    MPI_Request rq = MPI_REQUEST_NULL;
    CHECK(cls(MPI_Rput(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, win, &rq)) == MPI_ERR_RMA_SYNC);
    CHECK(rq == MPI_REQUEST_NULL);

    OK(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win));
    CHECK(cls(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win)) == MPI_ERR_RMA_SYNC);
    /* Out of the target's window: 8 ints, displacement unit int. */
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, peer, 8, 1, MPI_INT, win)) == MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, peer, -1, 1, MPI_INT, win)) == MPI_ERR_RMA_RANGE);
    int big[9] = {0};
    CHECK(cls(MPI_Put(big, 9, MPI_INT, peer, 0, 9, MPI_INT, win)) == MPI_ERR_RMA_RANGE);
    /* The last int is in the window, one past it is not, whatever the
     * call (sm checks contiguous operations on its own fast path). */
    OK(MPI_Put(&x, 1, MPI_INT, peer, 7, 1, MPI_INT, win));
    OK(MPI_Get(&y, 1, MPI_INT, peer, 7, 1, MPI_INT, win));
    OK(MPI_Win_flush(peer, win));
    CHECK(y == x);
    CHECK(cls(MPI_Get(&y, 1, MPI_INT, peer, 8, 1, MPI_INT, win)) == MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Get(big, 2, MPI_INT, peer, 7, 2, MPI_INT, win)) == MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Fetch_and_op(&x, &y, MPI_INT, peer, 8, MPI_SUM, win)) == MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Accumulate(&x, 1, MPI_INT, peer, -1, 1, MPI_INT, MPI_SUM, win)) ==
          MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, peer, (MPI_Aint)1 << 62, 1, MPI_INT, win)) ==
          MPI_ERR_RMA_RANGE);
    CHECK(y == x);
    /* A fetch_and_op result of another element type. */
    CHECK(cls(MPI_Get_accumulate(&x, 1, MPI_INT, &f0, 1, MPI_FLOAT, peer, 0, 1, MPI_INT, MPI_SUM,
                                 win)) == MPI_ERR_TYPE);
    /* Origin and target data differ in size / element type. */
    CHECK(cls(MPI_Put(big, 2, MPI_INT, peer, 0, 1, MPI_INT, win)) == MPI_ERR_TYPE);
    float f = 1;
    CHECK(cls(MPI_Accumulate(&f, 1, MPI_FLOAT, peer, 0, 1, MPI_INT, MPI_SUM, win)) ==
          MPI_ERR_TYPE);
    /* An op that does not apply, a user op, a bad rank, a bad lock type. */
    CHECK(cls(MPI_Accumulate(&f, 1, MPI_FLOAT, peer, 0, 1, MPI_FLOAT, MPI_BAND, win)) ==
          MPI_ERR_OP);
    MPI_Op uop;
    MPI_Op_create((MPI_User_function *)on_error, 1, &uop);
    CHECK(cls(MPI_Accumulate(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, uop, win)) == MPI_ERR_OP);
    MPI_Op_free(&uop);
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, size, 0, 1, MPI_INT, win)) == MPI_ERR_RANK);
    CHECK(cls(MPI_Win_lock(12345, peer, 0, win)) == MPI_ERR_ARG);
    /* A window cannot be freed while locked; it stays usable. */
    CHECK(cls(MPI_Win_free(&win)) == MPI_ERR_RMA_SYNC);
    CHECK(win != MPI_WIN_NULL);
    /* A valid put still works after all these errors. */
    x = 100 + rank;
    OK(MPI_Put(&x, 1, MPI_INT, peer, 1, 1, MPI_INT, win));
    OK(MPI_Win_unlock(peer, win));
    /* After the unlock nothing covers the peer (sm checks open passive
     * epochs without its lock: what unlock leaves must say so). */
    CHECK(cls(MPI_Put(&x, 1, MPI_INT, peer, 1, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_flush(peer, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Fetch_and_op(&x, &y, MPI_INT, peer, 0, MPI_SUM, win)) == MPI_ERR_RMA_SYNC);
    /* Likewise after unlock_all; inside it a bad rank is still refused. */
    OK(MPI_Win_lock_all(0, win));
    CHECK(cls(MPI_Win_flush(size, win)) == MPI_ERR_RANK);
    CHECK(cls(MPI_Win_flush_local(-5, win)) == MPI_ERR_RANK);
    CHECK(cls(MPI_Get(&y, 1, MPI_INT, size, 0, 1, MPI_INT, win)) == MPI_ERR_RANK);
    OK(MPI_Win_flush(peer, win));
    OK(MPI_Win_unlock_all(win));
    CHECK(cls(MPI_Win_flush(peer, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Win_flush_local(peer, win)) == MPI_ERR_RMA_SYNC);
    CHECK(cls(MPI_Get(&y, 1, MPI_INT, peer, 0, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    CHECK(mem[1] == 100 + (rank + size - 1) % size);
    OK(MPI_Win_unlock(rank, win));

    /* Compare-and-swap takes predefined integer, logical or byte types. */
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win));
    float fr;
    CHECK(cls(MPI_Compare_and_swap(&f, &f, &fr, MPI_FLOAT, peer, 0, win)) == MPI_ERR_TYPE);
    MPI_Datatype four;
    MPI_Type_contiguous(4, MPI_BYTE, &four);
    MPI_Type_commit(&four);
    CHECK(cls(MPI_Compare_and_swap(&x, &x, &y, four, peer, 0, win)) == MPI_ERR_TYPE);
    CHECK(cls(MPI_Fetch_and_op(&x, &y, four, peer, 0, MPI_SUM, win)) == MPI_ERR_TYPE);
    MPI_Type_free(&four);
    OK(MPI_Win_unlock(peer, win));

    /* A fence followed by no operation opens no epoch: a lock epoch may
     * follow, and after its unlock nothing covers an operation. A lock
     * inside a PSCW access epoch is refused. */
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, peer, MPI_MODE_NOCHECK, win));
    OK(MPI_Win_unlock(peer, win));
    CHECK(cls(MPI_Get(&y, 1, MPI_INT, peer, 0, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(&x, 1, MPI_INT, peer, 2, 1, MPI_INT, win));
    CHECK(cls(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win)) == MPI_ERR_RMA_SYNC);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    MPI_Group wg;
    OK(MPI_Win_get_group(win, &wg));
    OK(MPI_Win_post(wg, 0, win));
    OK(MPI_Win_start(wg, 0, win));
    CHECK(cls(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win)) == MPI_ERR_RMA_SYNC);
    OK(MPI_Win_complete(win));
    OK(MPI_Win_wait(win));
    MPI_Group_free(&wg);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int mem[8] = {0};
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Errhandler eh;
    OK(MPI_Win_get_errhandler(win, &eh));
    CHECK(eh == MPI_ERRORS_ARE_FATAL);
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));

    epoch_and_argument_errors(win, mem, rank, size);

    /* The same on a window of MPI_Win_allocate (the sm component's when
     * the ranks share a node), freed right after. */
    int *amem;
    MPI_Win awin;
    OK(MPI_Win_allocate(8 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &amem,
                        &awin));
    OK(MPI_Win_set_errhandler(awin, MPI_ERRORS_RETURN));
    epoch_and_argument_errors(awin, amem, rank, size);
    OK(MPI_Win_free(&awin));

    int x = 1, flag;
    int peer = (rank + 1) % size;

    /* A user error handler gets the window handle, and stays in force
     * after its handle is freed (MPI keeps it while the window uses it). */
    MPI_Errhandler user;
    OK(MPI_Win_create_errhandler(on_error, &user));
    OK(MPI_Win_set_errhandler(win, user));
    OK(MPI_Errhandler_free(&user));
    CHECK(MPI_Put(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, win) != MPI_SUCCESS);
    CHECK(handler_calls == 1 && handler_win == win);
    OK(MPI_Win_call_errhandler(win, MPI_ERR_OTHER));
    CHECK(handler_calls == 2);
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));

    /* The info keys MPI defines for windows are there. */
    MPI_Info info;
    char val[64];
    OK(MPI_Win_get_info(win, &info));
    OK(MPI_Info_get(info, "accumulate_ordering", sizeof val - 1, val, &flag));
    CHECK(flag && strcmp(val, "rar,raw,war,waw") == 0);
    OK(MPI_Info_get(info, "no_locks", sizeof val - 1, val, &flag));
    CHECK(flag && strcmp(val, "false") == 0);
    MPI_Info_free(&info);

    /* User attributes on a window. */
    int kv;
    void *aval;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &kv, NULL));
    OK(MPI_Win_set_attr(win, kv, &mem[2]));
    OK(MPI_Win_get_attr(win, kv, &aval, &flag));
    CHECK(flag && aval == &mem[2]);
    OK(MPI_Win_delete_attr(win, kv));
    OK(MPI_Win_get_attr(win, kv, &aval, &flag));
    CHECK(!flag);
    OK(MPI_Win_free_keyval(&kv));

    /* A call for another flavor of window: a clear class, no crash. */
    MPI_Aint qsize;
    int qunit;
    void *qbase;
    CHECK(cls(MPI_Win_shared_query(win, 0, &qsize, &qunit, &qbase)) == MPI_ERR_RMA_FLAVOR);

    OK(MPI_Win_free(&win));
    report_ok("rma_errors");
    MPI_Finalize();
    return 0;
}

/* MPI-4.1 calls: status fields get/set, MPI_Request_get_status_any/all/some
 * (requests stay alive), MPI_Remove_error_class/code/string, and buffered
 * sends through a communicator's own buffer, MPI_BUFFER_AUTOMATIC and the
 * flush calls. */
#include "check.h"

static void status_fields(void) {
    MPI_Status st;
    int v;
    OK(MPI_Status_set_source(&st, 7));
    OK(MPI_Status_set_tag(&st, 42));
    OK(MPI_Status_set_error(&st, MPI_ERR_TAG));
    OK(MPI_Status_get_source(&st, &v));
    CHECK(v == 7 && st.MPI_SOURCE == 7);
    OK(MPI_Status_get_tag(&st, &v));
    CHECK(v == 42 && st.MPI_TAG == 42);
    OK(MPI_Status_get_error(&st, &v));
    CHECK(v == MPI_ERR_TAG && st.MPI_ERROR == MPI_ERR_TAG);
}

static void request_status(int rank, int size) {
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    int in = -1, out = rank, idx, flag, outcount, indices[2];
    MPI_Request reqs[2];
    MPI_Status sts[2], st;
    /* A receive whose message is sent only later: pending. */
    OK(MPI_Irecv(&in, 1, MPI_INT, from, 5, MPI_COMM_WORLD, &reqs[0]));
    OK(MPI_Request_get_status_any(1, reqs, &idx, &flag, &st));
    CHECK(flag == 0 && idx == MPI_UNDEFINED && reqs[0] != MPI_REQUEST_NULL);
    OK(MPI_Request_get_status_all(1, reqs, &flag, sts));
    CHECK(flag == 0);
    OK(MPI_Request_get_status_some(1, reqs, &outcount, indices, sts));
    CHECK(outcount == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Isend(&out, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &reqs[1]));
    /* Poll until both completed; the handles stay valid throughout. */
    do {
        OK(MPI_Request_get_status_all(2, reqs, &flag, sts));
    } while (!flag);
    CHECK(reqs[0] != MPI_REQUEST_NULL && reqs[1] != MPI_REQUEST_NULL);
    CHECK(sts[0].MPI_SOURCE == from && sts[0].MPI_TAG == 5);
    OK(MPI_Request_get_status_any(2, reqs, &idx, &flag, &st));
    CHECK(flag == 1 && idx == 0 && st.MPI_SOURCE == from);
    OK(MPI_Request_get_status_some(2, reqs, &outcount, indices, sts));
    CHECK(outcount == 2 && indices[0] == 0 && indices[1] == 1);
    CHECK(in == -1 || in == from); /* not yet read: the wait delivers it */
    OK(MPI_Waitall(2, reqs, sts));
    CHECK(in == from && reqs[0] == MPI_REQUEST_NULL);
    /* Only null requests: none active; the status is the empty one,
     * its error field MPI_SUCCESS included. */
    st.MPI_ERROR = MPI_ERR_OTHER;
    OK(MPI_Request_get_status_any(2, reqs, &idx, &flag, &st));
    CHECK(flag == 1 && idx == MPI_UNDEFINED);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG &&
          st.MPI_ERROR == MPI_SUCCESS);
    OK(MPI_Request_get_status_some(2, reqs, &outcount, indices, sts));
    CHECK(outcount == MPI_UNDEFINED);
    OK(MPI_Request_get_status_all(2, reqs, &flag, sts));
    CHECK(flag == 1);
}

static void remove_errors(void) {
    int cls, code, len, lastused, *attr, flag;
    char s[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&cls));
    OK(MPI_Add_error_code(cls, &code));
    OK(MPI_Add_error_string(code, "a user code"));
    OK(MPI_Error_string(code, s, &len));
    CHECK(strcmp(s, "a user code") == 0);
    /* A predefined class, a class with codes left, a code as a class. */
    CHECK(MPI_Remove_error_class(MPI_ERR_TAG) == MPI_ERR_ARG);
    CHECK(MPI_Remove_error_class(cls) == MPI_ERR_ARG);
    CHECK(MPI_Remove_error_code(cls) == MPI_ERR_ARG);
    CHECK(MPI_Remove_error_class(code) == MPI_ERR_ARG);
    /* A code whose string is still set (MPI-4.1: remove the string first). */
    CHECK(MPI_Remove_error_code(code) == MPI_ERR_ARG);
    OK(MPI_Remove_error_string(code));
    CHECK(MPI_Remove_error_string(code) == MPI_ERR_ARG);
    OK(MPI_Remove_error_code(code));
    CHECK(MPI_Remove_error_code(code) == MPI_ERR_ARG);
    /* A class whose string is still set. */
    OK(MPI_Add_error_string(cls, "a user class"));
    CHECK(MPI_Remove_error_class(cls) == MPI_ERR_ARG);
    OK(MPI_Remove_error_string(cls));
    OK(MPI_Remove_error_class(cls));
    CHECK(MPI_Add_error_code(cls, &code) == MPI_ERR_ARG);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &attr, &flag));
    lastused = *attr;
    CHECK(flag && lastused < cls);
}

static void errors_abort(void) {
    MPI_Comm dup;
    MPI_Errhandler eh;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_ABORT));
    OK(MPI_Comm_get_errhandler(dup, &eh));
    CHECK(eh == MPI_ERRORS_ABORT && eh != MPI_ERRORS_ARE_FATAL && eh != MPI_ERRORS_RETURN);
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Comm_free(&dup));
}

static void buffers(int rank, int size) {
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    int n = 4 * (int)sizeof(int) + MPI_BSEND_OVERHEAD, got, data[4], in[4];
    char *mine = malloc(n);
    void *addr;
    MPI_Comm dup;
    MPI_Request r;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    /* No buffer anywhere: a buffered send fails. */
    CHECK(MPI_Bsend(data, 4, MPI_INT, peer, 1, dup) != MPI_SUCCESS);
    OK(MPI_Comm_attach_buffer(dup, mine, n));
    CHECK(MPI_Comm_attach_buffer(dup, mine, n) == MPI_ERR_BUFFER);
    for (int i = 0; i < 4; i++) data[i] = rank * 10 + i;
    OK(MPI_Bsend(data, 4, MPI_INT, peer, 1, dup));
    data[0] = -1; /* the send has its copy */
    OK(MPI_Recv(in, 4, MPI_INT, from, 1, dup, MPI_STATUS_IGNORE));
    CHECK(in[0] == from * 10 && in[3] == from * 10 + 3);
    OK(MPI_Comm_flush_buffer(dup));
    OK(MPI_Comm_iflush_buffer(dup, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Comm_detach_buffer(dup, &addr, &got));
    CHECK(addr == mine && got == n);
    CHECK(MPI_Comm_detach_buffer(dup, &addr, &got) == MPI_ERR_BUFFER);
    /* The automatic process buffer: any number of buffered sends. */
    OK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    for (int i = 0; i < 50; i++) OK(MPI_Bsend(data, 4, MPI_INT, peer, 2, dup));
    for (int i = 0; i < 50; i++)
        OK(MPI_Recv(in, 4, MPI_INT, from, 2, dup, MPI_STATUS_IGNORE));
    OK(MPI_Buffer_flush());
    OK(MPI_Buffer_iflush(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Buffer_detach(&addr, &got));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && got == 0);
    /* Freeing a communicator detaches its buffer. */
    OK(MPI_Comm_attach_buffer(dup, mine, n));
    OK(MPI_Comm_free(&dup));
    CHECK(MPI_Bsend(data, 4, MPI_INT, peer, 3, MPI_COMM_WORLD) != MPI_SUCCESS);
    free(mine);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    status_fields();
    request_status(rank, size);
    remove_errors();
    errors_abort();
    buffers(rank, size);
    report_ok("mpi41_calls");
    MPI_Finalize();
    return 0;
}

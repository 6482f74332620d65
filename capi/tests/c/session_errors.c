/* MPI-4.0's MPI_ERR_SESSION: every session call on MPI_SESSION_NULL or on
 * a finalised session returns it (no session, so no session error handler
 * runs, and MPI_COMM_WORLD's MPI_ERRORS_ARE_FATAL does not apply either),
 * as mpi4py's test_exceptions.TestExcSessionNull checks; errors on a valid
 * session keep their own classes and go to its handler. */
#include "check.h"

static int handled = 0;
static int handled_code = MPI_SUCCESS;
static void on_error(MPI_Session *s, int *code, ...) {
    (void)s;
    handled++;
    handled_code = *code;
}

/* Every call that takes a session, on session `s`, must return
 * MPI_ERR_SESSION. */
static void all_fail_with_err_session(MPI_Session s) {
    MPI_Session copy = s;
    MPI_Info info = MPI_INFO_NULL;
    MPI_Group g = MPI_GROUP_NULL;
    MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
    char name[MPI_MAX_PSET_NAME_LEN];
    int n = -1, len = (int)sizeof name;

    CHECK(MPI_Session_finalize(&copy) == MPI_ERR_SESSION);
    CHECK(MPI_Session_get_info(s, &info) == MPI_ERR_SESSION);
    CHECK(info == MPI_INFO_NULL);
    CHECK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n) == MPI_ERR_SESSION);
    CHECK(n == -1);
    CHECK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, name) == MPI_ERR_SESSION);
    CHECK(MPI_Session_get_pset_info(s, "mpi://SELF", &info) == MPI_ERR_SESSION);
    CHECK(MPI_Group_from_session_pset(s, "mpi://SELF", &g) == MPI_ERR_SESSION);
    CHECK(g == MPI_GROUP_NULL);
    CHECK(MPI_Session_get_errhandler(s, &eh) == MPI_ERR_SESSION);
    CHECK(MPI_Session_set_errhandler(s, MPI_ERRORS_RETURN) == MPI_ERR_SESSION);
    CHECK(MPI_Session_call_errhandler(s, MPI_ERR_OTHER) == MPI_ERR_SESSION);
}

int main(int argc, char **argv) {
    int rank, size, cls, len, n;
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Session s;
    MPI_Errhandler eh;
    MPI_Group g;
    MPI_Info info;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* The class itself: above MPI-3.1's, below MPI_ERR_LASTCODE, known to
     * MPI_Error_class and MPI_Error_string. */
    CHECK(MPI_ERR_SESSION > MPI_T_ERR_INVALID && MPI_ERR_SESSION <= MPI_ERR_LASTCODE);
    OK(MPI_Error_class(MPI_ERR_SESSION, &cls));
    CHECK(cls == MPI_ERR_SESSION);
    OK(MPI_Error_string(MPI_ERR_SESSION, msg, &len));
    CHECK(strstr(msg, "MPI_ERR_SESSION") != NULL && (int)strlen(msg) == len);

    /* MPI_SESSION_NULL, with MPI_COMM_WORLD's handler still fatal. */
    all_fail_with_err_session(MPI_SESSION_NULL);
    /* A handle no session ever had. */
    all_fail_with_err_session(12345);

    /* A live session: its own errors keep their classes and reach its
     * handler; the session's handler is not called for MPI_ERR_SESSION
     * once the session is gone. */
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    OK(MPI_Session_create_errhandler(on_error, &eh));
    OK(MPI_Session_set_errhandler(s, eh));
    OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    CHECK(n >= 2);
    CHECK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, -1, &len, msg) == MPI_ERR_ARG);
    CHECK(handled == 1 && handled_code == MPI_ERR_ARG);
    CHECK(MPI_Session_get_pset_info(s, "@qerty!#$", &info) == MPI_ERR_ARG);
    CHECK(MPI_Group_from_session_pset(s, "@qerty!#$", &g) == MPI_ERR_ARG);
    CHECK(handled == 3);
    MPI_Session gone = s;
    OK(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL);
    all_fail_with_err_session(gone);
    CHECK(handled == 3);
    OK(MPI_Errhandler_free(&eh));

    /* A NULL pointer to the handle is an argument error, not a session's. */
    CHECK(MPI_Session_finalize(NULL) == MPI_ERR_ARG);

    (void)size;
    report_ok("session_errors");
    MPI_Finalize();
    return 0;
}

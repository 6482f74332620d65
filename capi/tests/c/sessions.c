/* MPI-4.0 sessions without MPI_Init: two sessions, the process sets and
 * their info, groups from them, a communicator from a group with traffic
 * and a collective, an inter-communicator from two groups, a session's
 * error handler, and MPI_Session_finalize ending the runtime. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank = -1;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", world_rank,      \
                    __FILE__, __LINE__, #cond);                                    \
            fflush(stderr);                                                        \
            exit(2);                                                               \
        }                                                                          \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS)

static int handled_code = 0;
static MPI_Session handled_session = MPI_SESSION_NULL;
static void on_error(MPI_Session *s, int *code, ...) {
    handled_session = *s;
    handled_code = *code;
}

int main(void) {
    MPI_Session s1, s2;
    MPI_Info info;
    MPI_Group world, self;
    MPI_Comm comm, self_comm, inter;
    MPI_Errhandler eh;
    int n, len, flag, size, rank, gsize;
    char name[MPI_MAX_PSET_NAME_LEN], val[MPI_MAX_INFO_VAL + 1];

    OK(MPI_Initialized(&flag));
    CHECK(!flag);
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s1));
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "thread_level", "MPI_THREAD_SINGLE"));
    OK(MPI_Session_init(info, MPI_ERRORS_RETURN, &s2));
    OK(MPI_Info_free(&info));
    CHECK(s1 != MPI_SESSION_NULL && s2 != MPI_SESSION_NULL && s1 != s2);
    CHECK(MPI_Session_f2c(MPI_Session_c2f(s1)) == s1);
    /* Sessions are not the world model. */
    OK(MPI_Initialized(&flag));
    CHECK(!flag);

    OK(MPI_Session_get_num_psets(s1, MPI_INFO_NULL, &n));
    CHECK(n >= 2);
    int seen_world = 0, seen_self = 0;
    for (int i = 0; i < n; i++) {
        len = 0;
        OK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len > 1 && len <= MPI_MAX_PSET_NAME_LEN);
        OK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, name));
        CHECK((int)strlen(name) == len - 1);
        seen_world |= strcmp(name, "mpi://WORLD") == 0;
        seen_self |= strcmp(name, "mpi://SELF") == 0;
    }
    CHECK(seen_world && seen_self);
    CHECK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, n, &len, name) != MPI_SUCCESS);

    OK(MPI_Session_get_pset_info(s1, "mpi://WORLD", &info));
    OK(MPI_Info_get(info, "mpi_size", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag);
    size = atoi(val);
    OK(MPI_Info_free(&info));
    OK(MPI_Session_get_pset_info(s1, "mpi://SELF", &info));
    OK(MPI_Info_get(info, "mpi_size", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && atoi(val) == 1);
    OK(MPI_Info_free(&info));
    CHECK(MPI_Session_get_pset_info(s1, "mpi://NOWHERE", &info) != MPI_SUCCESS);

    OK(MPI_Session_get_info(s1, &info));
    OK(MPI_Info_get(info, "thread_level", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && strncmp(val, "MPI_THREAD_", 11) == 0);
    OK(MPI_Info_free(&info));

    /* The world's communicator from the session's group. */
    OK(MPI_Group_from_session_pset(s1, "mpi://WORLD", &world));
    OK(MPI_Group_size(world, &gsize));
    CHECK(gsize == size);
    OK(MPI_Group_rank(world, &world_rank));
    OK(MPI_Comm_create_from_group(world, "org.tmpi.test.world", MPI_INFO_NULL,
                                  MPI_ERRORS_RETURN, &comm));
    OK(MPI_Comm_size(comm, &n));
    OK(MPI_Comm_rank(comm, &rank));
    CHECK(n == size && rank == world_rank);
    int token = rank, got = -1, sum = 0;
    OK(MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % size, 3, &got, 1, MPI_INT,
                    (rank + size - 1) % size, 3, comm, MPI_STATUS_IGNORE));
    CHECK(got == (rank + size - 1) % size);
    OK(MPI_Allreduce(&token, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum == size * (size - 1) / 2);

    /* The session's buffered-mode buffer (MPI-4.1): bsends on its
     * communicator, flushes, detach gives the buffer back; the _c forms;
     * a second attach is MPI_ERR_BUFFER, detach without one too. */
    {
        int bsz = 4096 + MPI_BSEND_OVERHEAD, dsz = 0;
        char *bbuf = malloc((size_t)bsz);
        void *back = NULL;
        MPI_Request fr;
        OK(MPI_Session_attach_buffer(s1, bbuf, bsz));
        CHECK(MPI_Session_attach_buffer(s1, bbuf, bsz) == MPI_ERR_BUFFER);
        OK(MPI_Bsend(&token, 1, MPI_INT, (rank + 1) % size, 4, comm));
        OK(MPI_Recv(&got, 1, MPI_INT, (rank + size - 1) % size, 4, comm, MPI_STATUS_IGNORE));
        CHECK(got == (rank + size - 1) % size);
        OK(MPI_Session_flush_buffer(s1));
        OK(MPI_Session_iflush_buffer(s1, &fr));
        OK(MPI_Wait(&fr, MPI_STATUS_IGNORE));
        OK(MPI_Session_detach_buffer(s1, &back, &dsz));
        CHECK(back == bbuf && dsz == bsz);
        CHECK(MPI_Session_detach_buffer(s1, &back, &dsz) == MPI_ERR_BUFFER);
        MPI_Count csz = 0;
        OK(MPI_Session_attach_buffer_c(s1, bbuf, (MPI_Count)bsz));
        OK(MPI_Session_detach_buffer_c(s1, &back, &csz));
        CHECK(back == bbuf && csz == bsz);
        CHECK(MPI_Session_flush_buffer(MPI_SESSION_NULL) == MPI_ERR_SESSION);
        free(bbuf);
    }

    /* mpi://SELF from the second session. */
    OK(MPI_Group_from_session_pset(s2, "mpi://SELF", &self));
    OK(MPI_Group_size(self, &gsize));
    CHECK(gsize == 1);
    OK(MPI_Comm_create_from_group(self, "org.tmpi.test.self", MPI_INFO_NULL,
                                  MPI_ERRORS_RETURN, &self_comm));
    OK(MPI_Comm_size(self_comm, &n));
    CHECK(n == 1);
    OK(MPI_Allreduce(&token, &got, 1, MPI_INT, MPI_SUM, self_comm));
    CHECK(got == rank);

    /* An inter-communicator between the lower and upper halves. */
    if (size >= 2) {
        MPI_Group low, high;
        int half = size / 2, lrange[1][3] = {{0, half - 1, 1}},
            hrange[1][3] = {{half, size - 1, 1}};
        OK(MPI_Group_range_incl(world, 1, lrange, &low));
        OK(MPI_Group_range_incl(world, 1, hrange, &high));
        int in_low = rank < half;
        OK(MPI_Intercomm_create_from_groups(in_low ? low : high, 0, in_low ? high : low, 0,
                                            "org.tmpi.test.inter", MPI_INFO_NULL,
                                            MPI_ERRORS_RETURN, &inter));
        int lsize, rsize, lrank, is_inter;
        OK(MPI_Comm_test_inter(inter, &is_inter));
        OK(MPI_Comm_size(inter, &lsize));
        OK(MPI_Comm_remote_size(inter, &rsize));
        OK(MPI_Comm_rank(inter, &lrank));
        CHECK(is_inter);
        CHECK(lsize == (in_low ? half : size - half));
        CHECK(rsize == (in_low ? size - half : half));
        /* Each low rank i talks to high rank i (when it exists). */
        int pairs = half < size - half ? half : size - half;
        if (lrank < pairs) {
            int mine = rank, theirs = -1;
            OK(MPI_Sendrecv(&mine, 1, MPI_INT, lrank, 9, &theirs, 1, MPI_INT, lrank, 9, inter,
                            MPI_STATUS_IGNORE));
            CHECK(theirs == (in_low ? rank + half : rank - half));
        }
        OK(MPI_Barrier(inter));
        OK(MPI_Comm_free(&inter));
        OK(MPI_Group_free(&low));
        OK(MPI_Group_free(&high));
    }

    /* The session's error handler: invoked with the session and code. */
    OK(MPI_Session_create_errhandler(on_error, &eh));
    OK(MPI_Session_set_errhandler(s1, eh));
    MPI_Errhandler cur;
    OK(MPI_Session_get_errhandler(s1, &cur));
    CHECK(cur == eh);
    OK(MPI_Session_call_errhandler(s1, MPI_ERR_OTHER));
    CHECK(handled_session == s1 && handled_code == MPI_ERR_OTHER);
    handled_code = 0;
    MPI_Group bad;
    CHECK(MPI_Group_from_session_pset(s1, "mpi://NOWHERE", &bad) == MPI_ERR_ARG);
    CHECK(handled_code == MPI_ERR_ARG);
    OK(MPI_Session_set_errhandler(s1, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&eh));

    OK(MPI_Comm_free(&comm));
    OK(MPI_Comm_free(&self_comm));
    OK(MPI_Group_free(&world));
    OK(MPI_Group_free(&self));
    OK(MPI_Session_finalize(&s1));
    CHECK(s1 == MPI_SESSION_NULL);
    OK(MPI_Session_finalize(&s2));
    if (world_rank == 0) {
        printf("sessions: OK\n");
        fflush(stdout);
    }
    return 0;
}

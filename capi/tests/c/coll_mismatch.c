/* Collective calls that differ across ranks on communicators whose
 * collectives go through sm's segment (one node): the ranks left waiting
 * fail instead of waiting forever (docs/coll.md, "Calls that take
 * different paths"). Under MPI_ERRORS_RETURN, on duplicates of world,
 * which keeps working. */
#include "check.h"

static int cls(int rc) {
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    int rank, size, rc;
    char buf[64] = {0};
    MPI_Comm c1, c2;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c1));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c2));
    OK(MPI_Comm_set_errhandler(c1, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(c2, MPI_ERRORS_RETURN));

    /* Correct calls first (the segments attach). */
    OK(MPI_Bcast(buf, 8, MPI_BYTE, 0, c1));
    OK(MPI_Barrier(c2));

    /* The root's 8 bytes go on the stream ring, the others' 32 on the
     * small ring: the others find the root's call described differently. */
    rc = MPI_Bcast(buf, rank == 0 ? 8 : 32, MPI_BYTE, 0, c1);
    if (rank == 0)
        CHECK(rc == MPI_SUCCESS);
    else
        CHECK(cls(rc) == MPI_ERR_TRUNCATE);
    /* c1's segment is out of step: every later call through it fails,
     * the root's included (it would wait for the others forever). */
    CHECK(cls(MPI_Barrier(c1)) == MPI_ERR_OTHER);

    /* Different operations. */
    rc = rank == 0 ? MPI_Barrier(c2) : MPI_Bcast(buf, 8, MPI_BYTE, 0, c2);
    CHECK(cls(rc) == MPI_ERR_OTHER);

    /* World is another communicator, untouched. */
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    report_ok("coll_mismatch");
    OK(MPI_Finalize());
    return 0;
}

/* The profiling interface (MPI-4.0 chapter 15): this program defines
 * MPI_Send, MPI_Recv, MPI_Allreduce and MPI_Wtime, as a profiling tool
 * linked into it does; each counts its calls and runs the library's
 * function through PMPI_X. The messages and the sum must arrive, the
 * wrappers must see exactly the program's own calls (libmpi's internal
 * work, e.g. inside MPI_Sendrecv, does not come back through them), and
 * PMPI_X called directly works too. */
#include "check.h"

static int sends, recvs, allreduces, wtimes;

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    sends++;
    return PMPI_Send(buf, count, dt, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm, MPI_Status *st) {
    recvs++;
    return PMPI_Recv(buf, count, dt, src, tag, comm, st);
}

int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    allreduces++;
    return PMPI_Allreduce(in, out, count, dt, op, comm);
}

double MPI_Wtime(void) {
    wtimes++;
    return PMPI_Wtime();
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    double t0 = MPI_Wtime();
    CHECK(wtimes == 1 && t0 > 0.0);
    /* A ring: every rank sends to the next and receives from the one
     * before (even ranks send first, so it cannot deadlock). */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, got = -1;
    for (int i = 0; i < 3; i++) {
        if (rank % 2 == 0) {
            OK(MPI_Send(&rank, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
            OK(MPI_Recv(&got, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Recv(&got, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Send(&rank, 1, MPI_INT, next, 7, MPI_COMM_WORLD));
        }
        CHECK(got == prev);
    }
    CHECK(sends == 3 && recvs == 3);
    /* Library-internal traffic does not reach the wrappers. */
    int out = -1;
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, next, 8, &out, 1, MPI_INT, prev, 8, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    CHECK(out == prev);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(sends == 3 && recvs == 3);
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size && allreduces == 1);
    /* PMPI_ called directly: not counted, same result. */
    sum = 0;
    OK(PMPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size && allreduces == 1);
    int r2 = -1;
    OK(PMPI_Comm_rank(MPI_COMM_WORLD, &r2));
    CHECK(r2 == rank);
    CHECK(PMPI_Wtime() >= t0 && wtimes == 1);
    report_ok("pmpi");
    OK(MPI_Finalize());
    return 0;
}

/* Calls after MPI_Finalize: the ones MPI allows there succeed; every other
 * returns an error (MPI_ERRORS_RETURN was set on MPI_COMM_WORLD) and none
 * communicates, also on one rank while its peers have exited. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int failures = 0;

static void expect_error(int rc, const char *what) {
    if (rc == MPI_SUCCESS) {
        fprintf(stderr, "after_finalize: %s succeeded after MPI_Finalize\n", what);
        failures++;
        return;
    }
    int cls = -1;
    if (MPI_Error_class(rc, &cls) != MPI_SUCCESS || cls != MPI_ERR_OTHER) {
        fprintf(stderr, "after_finalize: %s: class %d, expected MPI_ERR_OTHER\n", what, cls);
        failures++;
    }
}

static void expect_ok(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "after_finalize: %s failed after MPI_Finalize (%d)\n", what, rc);
        failures++;
    }
}

int main(int argc, char **argv) {
    int rank = -1, size = 0, flag = 0, v = 0, sv = 0;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int me = rank;
    if (MPI_Finalize() != MPI_SUCCESS)
        return 1;
    int one = 1, sum = 0;
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Info info = MPI_INFO_NULL;
    expect_error(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    expect_error(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    expect_error(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    expect_error(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    expect_error(MPI_Bcast(&one, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    expect_error(MPI_Send(&one, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), "MPI_Send");
    expect_error(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    expect_error(MPI_Type_contiguous(2, MPI_INT, &t), "MPI_Type_contiguous");
    if (sum != 0) {
        fprintf(stderr, "after_finalize: MPI_Allreduce wrote its result\n");
        failures++;
    }
    expect_ok(MPI_Finalized(&flag), "MPI_Finalized");
    if (!flag) {
        fprintf(stderr, "after_finalize: MPI_Finalized says false\n");
        failures++;
    }
    expect_ok(MPI_Initialized(&flag), "MPI_Initialized");
    expect_ok(MPI_Get_version(&v, &sv), "MPI_Get_version");
    expect_ok(MPI_Info_create(&info), "MPI_Info_create");
    expect_ok(MPI_Info_free(&info), "MPI_Info_free");
    if (failures)
        return 1;
    if (me == 0)
        printf("after_finalize: OK\n");
    return 0;
}

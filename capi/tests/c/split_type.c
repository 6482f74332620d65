/* MPI_Comm_split_type: MPI_COMM_TYPE_SHARED (all ranks of this host), the
 * MPI-4.0 MPI_COMM_TYPE_HW_GUIDED with "mpi_hw_resource_type" =
 * "mpi_shared_memory" (the same), with another resource, no key or
 * MPI_INFO_NULL (MPI_COMM_NULL), MPI_COMM_TYPE_HW_UNGUIDED (MPI_COMM_NULL:
 * no finer level known), MPI_UNDEFINED, and a bad type. */
#include "check.h"

static void node_comm(MPI_Comm c, int size, int rank) {
    CHECK(c != MPI_COMM_NULL);
    int s, r, result;
    OK(MPI_Comm_size(c, &s));
    OK(MPI_Comm_rank(c, &r));
    CHECK(s == size && r == rank); /* one host: every rank, key 0 keeps order */
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == size);
    OK(MPI_Comm_compare(c, MPI_COMM_WORLD, &result));
    CHECK(result == MPI_CONGRUENT);
    OK(MPI_Comm_free(&c));
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm c;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c));
    node_comm(c, size, rank);

    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    node_comm(c, size, rank);
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "NUMANode"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Info_free(&info));
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "shmem_topo", "core"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Info_free(&info));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL);

    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, 77, 0, MPI_INFO_NULL, &c), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG);
    report_ok("split_type");
    OK(MPI_Finalize());
    return 0;
}

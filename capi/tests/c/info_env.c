/* MPI-4.0 MPI_Info_create_env: callable before MPI_Init and after
 * MPI_Finalize, the same keys and values each time, and the same as
 * MPI_INFO_ENV's (but for thread_level, unknown before init). */
#include "check.h"

static const char *keys[] = {"command", "argv", "maxprocs", "wdir"};

static void same(MPI_Info a, MPI_Info b, int must_have) {
    for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char va[MPI_MAX_INFO_VAL], vb[MPI_MAX_INFO_VAL];
        int fa = 0, fb = 0, la = MPI_MAX_INFO_VAL, lb = MPI_MAX_INFO_VAL;
        OK(MPI_Info_get_string(a, keys[i], &la, va, &fa));
        OK(MPI_Info_get_string(b, keys[i], &lb, vb, &fb));
        CHECK(fa == fb);
        if (fa)
            CHECK(strcmp(va, vb) == 0 && la == lb);
        if (must_have && i != 1)
            CHECK(fa);
    }
}

int main(int argc, char **argv) {
    MPI_Info before, again, after, late;
    OK(MPI_Info_create_env(argc, argv, &before));
    OK(MPI_Info_create_env(0, NULL, &again)); /* from the command line */
    same(before, again, 1);
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Info_create_env(argc, argv, &after));
    same(before, after, 1);
    same(before, MPI_INFO_ENV, 1);
    char v[MPI_MAX_INFO_VAL];
    int flag = 0, len = MPI_MAX_INFO_VAL;
    OK(MPI_Info_get_string(after, "maxprocs", &len, v, &flag));
    CHECK(flag && atoi(v) == size);
    OK(MPI_Info_get_string(after, "thread_level", &len, v, &flag));
    CHECK(!flag);
    OK(MPI_Info_free(&after));
    report_ok("info_env");
    OK(MPI_Finalize());
    OK(MPI_Info_create_env(argc, argv, &late));
    same(before, late, 1);
    OK(MPI_Info_free(&late));
    OK(MPI_Info_free(&before));
    OK(MPI_Info_free(&again));
    return 0;
}

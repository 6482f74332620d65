/* Window info hints: MPI_Win_get_info reports the keys MPI defines for
 * windows, with the value given at creation or by MPI_Win_set_info (the
 * latest wins) and the defaults otherwise; keys it does not know are
 * ignored; alloc_shared_noncontig only once given. */
#include "check.h"

static void expect(MPI_Win win, const char *key, const char *want) {
    MPI_Info used;
    char val[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    OK(MPI_Win_get_info(win, &used));
    OK(MPI_Info_get(used, key, MPI_MAX_INFO_VAL, val, &flag));
    if (want == NULL) {
        CHECK(!flag);
    } else {
        if (!flag || strcmp(val, want) != 0)
            fprintf(stderr, "key %s: got %s, want %s\n", key, flag ? val : "(none)", want);
        CHECK(flag && strcmp(val, want) == 0);
    }
    OK(MPI_Info_free(&used));
}

static void set(MPI_Win win, const char *key, const char *v) {
    MPI_Info in;
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, key, v));
    OK(MPI_Win_set_info(win, in));
    OK(MPI_Info_free(&in));
}

int main(int argc, char **argv) {
    int *base;
    MPI_Win win;
    MPI_Info in;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "no_locks", "true"));
    OK(MPI_Info_set(in, "tmpi_not_a_window_key", "1"));
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), in, MPI_COMM_WORLD, &base, &win));
    OK(MPI_Info_free(&in));
    expect(win, "no_locks", "true");
    expect(win, "tmpi_not_a_window_key", NULL);
    expect(win, "accumulate_ordering", "rar,raw,war,waw");
    expect(win, "alloc_shared_noncontig", NULL);
    set(win, "accumulate_ordering", "none");
    set(win, "no_locks", "false");
    expect(win, "accumulate_ordering", "none");
    expect(win, "no_locks", "false");
    expect(win, "same_size", "false");
    OK(MPI_Win_free(&win));

    MPI_Comm shm;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm));
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "alloc_shared_noncontig", "true"));
    OK(MPI_Win_allocate_shared(sizeof(int), sizeof(int), in, shm, &base, &win));
    OK(MPI_Info_free(&in));
    expect(win, "alloc_shared_noncontig", "true");
    expect(win, "no_locks", "false");
    OK(MPI_Win_free(&win));
    OK(MPI_Comm_free(&shm));
    report_ok("rma_info");
    OK(MPI_Finalize());
    return 0;
}

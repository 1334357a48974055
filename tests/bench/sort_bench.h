/* spillway-bench's sort case (sort_bench.c): its options and its entry point, the only things
 * bench.c needs to know of it. */
#ifndef SPW_SORT_BENCH_H
#define SPW_SORT_BENCH_H

#include <stdbool.h>

/* getopt_long codes of the sort case's options, and their table entries. */
enum {
    SORT_OPT_DATA = 0x5300, /* --sort-data SIZE: the data sorted (8 x the stores together) */
    SORT_OPT_STORE,         /* --sort-store SIZE: each worker's store (128M) */
    SORT_OPT_BLOCK,         /* --sort-block SIZE: bytes each gen task makes (a store / 8) */
    SORT_OPT_PARTS,         /* --sort-partitions P: partitions (of a quarter of a store) */
};
#define SORT_BENCH_LONGOPTS                                                                        \
    {"sort-data", required_argument, 0, SORT_OPT_DATA},                                            \
        {"sort-store", required_argument, 0, SORT_OPT_STORE},                                      \
        {"sort-block", required_argument, 0, SORT_OPT_BLOCK},                                      \
        {"sort-partitions", required_argument, 0, SORT_OPT_PARTS}
#define SORT_BENCH_USAGE                                                                           \
    "                      [--sort-data SIZE] [--sort-store SIZE] [--sort-block SIZE]\n"         \
    "                      [--sort-partitions P]\n"

/* Takes one of the options above; false, with a message, when its value is bad. */
bool sort_bench_option(int code, const char *arg);

/* Runs the case on a cluster of its own: workers x slots, with the example sort plugin. */
void sort_bench_run(int workers, int slots);

#endif

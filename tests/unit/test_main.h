/* Shared main for cmocka unit binaries: `binary CASE` runs one case (ctest gives each case its
 * own process, as libuv's runner does); no argument runs them all. */
#ifndef SPW_TEST_MAIN_H
#define SPW_TEST_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define SPW_TEST_MAIN(tests)                                                                       \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        if (argc > 1) {                                                                            \
            int found = 0;                                                                         \
            for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)                          \
                found |= strcmp(tests[i].name, argv[1]) == 0;                                      \
            if (!found) {                                                                          \
                fprintf(stderr, "no test case named %s\n", argv[1]);                               \
                return 2;                                                                          \
            }                                                                                      \
            cmocka_set_test_filter(argv[1]);                                                       \
        }                                                                                          \
        return cmocka_run_group_tests(tests, NULL, NULL);                                          \
    }

#endif

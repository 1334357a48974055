/*
 * Corpus replay: the main() a fuzz target links when it is not built with libFuzzer.
 *
 * Every argument is a directory (each regular file in it, in name order, is one input) or a
 * file (one input). Arguments starting with '-' are libFuzzer flags and are ignored, so the
 * same command line works for both builds. Each input is read into a heap block of exactly
 * its size, so the sanitizers see any read past its end, and passed to LLVMFuzzerTestOneInput.
 * The name of the input being run is printed if the process dies (abort or a sanitizer report).
 * Exit status: 0, or 1 if a path is missing or a file cannot be read; a failing input kills the
 * process as it would under libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SPW_SANITIZE
#include <sanitizer/common_interface_defs.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char current[4096]; /* path of the input being run, for the death report */

static void report_current(void)
{
    if (current[0] == '\0')
        return;
    static const char pre[] = "replay: died while running ";
    ssize_t w = write(STDERR_FILENO, pre, sizeof pre - 1);
    w = write(STDERR_FILENO, current, strlen(current));
    w = write(STDERR_FILENO, "\n", 1);
    (void)w;
}

static void on_abort(int sig)
{
    report_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs one file. @return 0, or -1 if it cannot be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    int rc = 0;
    for (;;) {
        if (buf == NULL) {
            fprintf(stderr, "replay: %s: out of memory\n", path);
            rc = -1;
            break;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        cap *= 2;
        uint8_t *nbuf = realloc(buf, cap);
        if (nbuf == NULL)
            free(buf);
        buf = nbuf;
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "replay: %s: read error\n", path);
        rc = -1;
    }
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    /* An exact-size copy: reading one byte past the input must be caught. */
    uint8_t *exact = malloc(len > 0 ? len : 1);
    if (exact == NULL) {
        free(buf);
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    if (len > 0)
        memcpy(exact, buf, len);
    free(buf);
    snprintf(current, sizeof current, "%s", path);
    LLVMFuzzerTestOneInput(exact, len);
    current[0] = '\0';
    free(exact);
    return 0;
}

static int is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int main(int argc, char **argv)
{
    signal(SIGABRT, on_abort);
#ifdef SPW_SANITIZE
    __sanitizer_set_death_callback(report_current);
#endif
    long ran = 0;
    int status = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] == '-')
            continue; /* a libFuzzer flag */
        struct stat st;
        if (stat(arg, &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", arg, strerror(errno));
            status = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(arg) != 0)
                status = 1;
            else
                ran++;
            continue;
        }
        struct dirent **names;
        int n = scandir(arg, &names, NULL, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", arg, strerror(errno));
            status = 1;
            continue;
        }
        long here = 0;
        for (int k = 0; k < n; k++) {
            char path[4096];
            int pl = snprintf(path, sizeof path, "%s/%s", arg, names[k]->d_name);
            if (pl > 0 && (size_t)pl < sizeof path && names[k]->d_name[0] != '.' &&
                is_regular(path)) {
                if (run_file(path) != 0)
                    status = 1;
                else
                    here++;
            }
            free(names[k]);
        }
        free(names);
        printf("replay: %s: %ld inputs\n", arg, here);
        ran += here;
    }
    printf("replay: ran %ld inputs%s\n", ran, status != 0 ? " (with errors)" : "");
    return status;
}

/*
 * driver.c - runs a fuzz harness over every file of a corpus directory,
 * for builds without libFuzzer (the ctest label fuzz-smoke).  With clang
 * and -DIPD_FUZZ=ON the harnesses link against libFuzzer instead.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        if (!d) {
            fprintf(stderr, "cannot open corpus %s\n", argv[i]);
            return 1;
        }
        while ((e = readdir(d))) {
            char path[4096];
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (run_file(path) == 0)
                files++;
        }
        closedir(d);
    }
    /* An empty corpus would make this test pass vacuously. */
    if (!files) {
        fprintf(stderr, "no corpus files found\n");
        return 1;
    }
    printf("%d passed, 0 failed\n", files);
    return 0;
}

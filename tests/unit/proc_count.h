/*
 * proc_count.h - processes on the host by uid, for the suites that check
 * a run leaves none behind (the sandbox suites and the integration
 * harness).
 */
#ifndef IPD_TEST_PROC_COUNT_H
#define IPD_TEST_PROC_COUNT_H

#include <dirent.h>
#include <stdio.h>

/* Processes on the host whose real or effective uid is in [lo, hi]
 * (from /proc/<pid>/status), or -1 when /proc cannot be read. */
static inline int test_count_uids(unsigned lo, unsigned hi)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], line[256];
        FILE *f;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue; /* gone meanwhile */
        while (fgets(line, sizeof(line), f)) {
            unsigned ruid, euid;
            if (sscanf(line, "Uid:\t%u\t%u", &ruid, &euid) == 2) {
                if ((ruid >= lo && ruid <= hi) || (euid >= lo && euid <= hi))
                    n++;
                break;
            }
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

#endif

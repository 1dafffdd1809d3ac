/* qd1.c: N reads at queue depth 1 through libblkio's API, to count the
 * cost of one I/O (scripts/perf-gate.sh runs it under callgrind with two
 * values of N and divides the difference).
 *
 *   qd1 SPEC N MODE     MODE: buf     one 4 KiB buffer (borrowed by mqblk)
 *                             iov     two scattered 2 KiB iovecs (a
 *                                     512-byte block device's)
 *                             readv8  eight scattered 4 KiB iovecs: one
 *                                     vectored bio of eight segments
 *                             read32k one 32 KiB buffer: readv8's bytes in
 *                                     one segment
 *
 * Every completion is checked; the first failure ends the run with status 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <blkio.h>

#define KIB 1024
/* readv8's pages are 8 KiB apart, so no two are contiguous (contiguous
 * iovecs would be gathered into one segment). */
static uint8_t pages[16 * 4 * KIB] __attribute__((aligned(4096)));
static uint8_t a[2 * KIB] __attribute__((aligned(4096))), b[32 * KIB] __attribute__((aligned(4096)));

enum mode { BUF, IOV, READV8, READ32K };

static int parse_mode(const char *s)
{
    static const char *const names[] = {"buf", "iov", "readv8", "read32k"};
    for (int m = 0; m < 4; m++)
        if (strcmp(s, names[m]) == 0)
            return m;
    return -1;
}

int main(int argc, char **argv)
{
    int mode = argc == 4 ? parse_mode(argv[3]) : -1;
    if (mode < 0) {
        fprintf(stderr, "usage: qd1 SPEC N buf|iov|readv8|read32k\n");
        return 2;
    }
    long n = atol(argv[2]);
    struct blkio *bl;
    if (blkio_create("mqblk", &bl) || blkio_set_str(bl, "path", argv[1]) || blkio_connect(bl) || blkio_start(bl)) {
        fprintf(stderr, "setup: %s\n", blkio_get_error_msg());
        return 1;
    }
    struct blkioq *q = blkio_get_queue(bl, 0);
    struct iovec v[2] = {{b, 2 * KIB}, {a, 2 * KIB}};
    struct iovec v8[8];
    for (int i = 0; i < 8; i++)
        v8[i] = (struct iovec){pages + i * 8 * KIB, 4 * KIB};
    struct blkio_completion c;
    for (long i = 0; i < n; i++) {
        uint64_t slot = (uint64_t)(i % 1024);
        /* buf first: its one test is all the loop adds to the gate's count. */
        if (mode == BUF)
            blkioq_read(q, slot * 4 * KIB, b, 4 * KIB, NULL, 0);
        else if (mode == IOV)
            blkioq_readv(q, slot * 4 * KIB, v, 2, NULL, 0);
        else if (mode == READV8)
            blkioq_readv(q, slot * 32 * KIB, v8, 8, NULL, 0);
        else
            blkioq_read(q, slot * 32 * KIB, b, 32 * KIB, NULL, 0);
        if (blkioq_do_io(q, &c, 1, 1, NULL) != 1 || c.ret != 0) {
            fprintf(stderr, "I/O %ld failed: %d %s\n", i, c.ret, c.error_msg ? c.error_msg : "");
            return 1;
        }
    }
    blkio_destroy(&bl);
    return 0;
}

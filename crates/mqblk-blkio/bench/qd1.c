/* qd1.c: N reads at queue depth 1 through libblkio's API, to count the
 * cost of one I/O (run under `perf stat -e instructions:u` with two values
 * of N and divide the difference).
 *
 *   qd1 SPEC N MODE     MODE: buf (one buffer, borrowed by mqblk) or
 *                             iov (two scattered iovecs, bounced)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <blkio.h>

static uint8_t a[2048] __attribute__((aligned(4096))), b[4096] __attribute__((aligned(4096)));

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: qd1 SPEC N buf|iov\n");
        return 2;
    }
    long n = atol(argv[2]);
    int iov = strcmp(argv[3], "iov") == 0;
    struct blkio *bl;
    if (blkio_create("mqblk", &bl) || blkio_set_str(bl, "path", argv[1]) || blkio_connect(bl) || blkio_start(bl)) {
        fprintf(stderr, "setup: %s\n", blkio_get_error_msg());
        return 1;
    }
    struct blkioq *q = blkio_get_queue(bl, 0);
    struct iovec v[2] = {{b, 2048}, {a, 2048}};
    struct blkio_completion c;
    for (long i = 0; i < n; i++) {
        uint64_t off = (uint64_t)(i % 1024) * 4096;
        if (iov)
            blkioq_readv(q, off, v, 2, NULL, 0);
        else
            blkioq_read(q, off, b, 4096, NULL, 0);
        if (blkioq_do_io(q, &c, 1, 1, NULL) != 1 || c.ret != 0) {
            fprintf(stderr, "I/O %ld failed: %d %s\n", i, c.ret, c.error_msg ? c.error_msg : "");
            return 1;
        }
    }
    blkio_destroy(&bl);
    return 0;
}

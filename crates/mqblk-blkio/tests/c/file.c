/* The file driver (io_uring on a regular file): properties that report it
 * truthfully, I/O with the data checked through the file itself, write
 * zeroes with NO_UNMAP (written as zeroes: the driver would punch a hole)
 * and NO_FALLBACK, the completion fd, and a queue filled past its depth. */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>
#include "check.h"

#define BS 4096
static uint8_t wbuf[8 * BS] __attribute__((aligned(BS)));
static uint8_t rbuf[8 * BS] __attribute__((aligned(BS)));

static void expect_ok(struct blkioq *q, void *user_data)
{
    struct blkio_completion c = wait_one(q);
    if (c.user_data != user_data || c.ret != 0) {
        fprintf(stderr, "completion %p ret=%d %s\n", c.user_data, c.ret, c.error_msg ? c.error_msg : "");
        exit(1);
    }
    checks_passed++;
}

int main(void)
{
    char path[] = "/tmp/mqblk-blkio-file-XXXXXX";
    int tmp = mkstemp(path);
    CHECK(tmp >= 0);
    char spec[256];
    snprintf(spec, sizeof(spec), "file:path=%s,size=16m,create=1,direct=1", path);
    struct blkio *b = start_instance(spec, 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    uint64_t u;
    int iv;
    bool bv;
    OK(blkio_get_uint64(b, "capacity", &u));
    CHECK(u == 16 << 20);
    OK(blkio_get_int(b, "request-alignment", &iv));
    CHECK(iv == 4096); /* direct=1: 4096-byte blocks */
    OK(blkio_get_int(b, "buf-alignment", &iv));
    CHECK(iv == 4096);
    OK(blkio_get_bool(b, "supports-poll-queues", &bv));
    CHECK(bv); /* a plain file spec: each queue's client reaps its own ring */
    OK(blkio_get_bool(b, "flush-needed", &bv));

    /* Written through the library, read with pread(2). */
    for (size_t i = 0; i < sizeof(wbuf); i++)
        wbuf[i] = (uint8_t)(i * 13 + 5);
    blkioq_write(q, 3 * BS, wbuf, 8 * BS, (void *)1, BLKIO_REQ_FUA);
    expect_ok(q, (void *)1);
    blkioq_flush(q, (void *)2, 0);
    expect_ok(q, (void *)2);
    static uint8_t direct[8 * BS];
    CHECK(pread(tmp, direct, 8 * BS, 3 * BS) == 8 * BS);
    CHECK(memcmp(direct, wbuf, 8 * BS) == 0);

    /* Written with pwrite(2), read through the library. */
    memset(direct, 0x3c, BS);
    CHECK(pwrite(tmp, direct, BS, 100 * BS) == BS);
    CHECK(fsync(tmp) == 0);
    blkioq_read(q, 100 * BS, rbuf, BS, (void *)3, 0);
    expect_ok(q, (void *)3);
    CHECK(memcmp(rbuf, direct, BS) == 0);

    /* Write zeroes: native, then NO_UNMAP (the fallback), then refused. */
    blkioq_write_zeroes(q, 4 * BS, BS, (void *)4, 0);
    expect_ok(q, (void *)4);
    blkioq_write_zeroes(q, 6 * BS, 2 * BS, (void *)5, BLKIO_REQ_NO_UNMAP);
    expect_ok(q, (void *)5);
    blkioq_write_zeroes(q, 6 * BS, BS, (void *)6, BLKIO_REQ_NO_UNMAP | BLKIO_REQ_NO_FALLBACK);
    struct blkio_completion c = wait_one(q);
    CHECK(c.user_data == (void *)6 && c.ret == -ENOTSUP && strstr(c.error_msg, "NO_FALLBACK"));
    blkioq_read(q, 3 * BS, rbuf, 8 * BS, (void *)7, 0);
    expect_ok(q, (void *)7);
    static const uint8_t zero[2 * BS];
    CHECK(memcmp(rbuf, wbuf, BS) == 0 && memcmp(rbuf + BS, zero, BS) == 0);
    CHECK(memcmp(rbuf + 2 * BS, wbuf + 2 * BS, BS) == 0 && memcmp(rbuf + 3 * BS, zero, 2 * BS) == 0);
    CHECK(memcmp(rbuf + 5 * BS, wbuf + 5 * BS, 3 * BS) == 0);

    /* The completion fd with poll(2). */
    int fd = blkioq_get_completion_fd(q);
    CHECK(fd >= 0);
    blkioq_set_completion_fd_enabled(q, true);
    blkioq_read(q, 0, rbuf, BS, (void *)8, 0);
    CHECK(blkioq_do_io(q, NULL, 0, 0, NULL) == 0);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int got = 0;
    while (!got) {
        CHECK(poll(&pfd, 1, 5000) == 1);
        uint64_t v;
        (void)!read(fd, &v, 8);
        got = blkioq_do_io(q, &c, 0, 1, NULL);
        CHECK(got == 0 || (got == 1 && c.user_data == (void *)8 && c.ret == 0));
    }
    blkio_destroy(&b);

    /* Two queues: a ring each (submit_queues=2 at start), so each queue
     * has a completion fd of its own registered with its ring. */
    snprintf(spec, sizeof(spec), "file:path=%s", path);
    b = start_instance(spec, 2, 0);
    int fd0 = blkioq_get_completion_fd(blkio_get_queue(b, 0));
    int fd1 = blkioq_get_completion_fd(blkio_get_queue(b, 1));
    CHECK(fd0 >= 0 && fd1 >= 0 && fd0 != fd1);
    blkio_destroy(&b);

    /* Naming reap=thread keeps the completion threads: no poll queues. */
    snprintf(spec, sizeof(spec), "file:path=%s,reap=thread", path);
    OK(blkio_create("mqblk", &b));
    OK(blkio_set_str(b, "path", spec));
    OK(blkio_connect(b));
    OK(blkio_get_bool(b, "supports-poll-queues", &bv));
    CHECK(!bv);
    blkio_destroy(&b);
    close(tmp);
    unlink(path);

    /* More requests than a queue holds: the extra one is refused at once. */
    b = start_instance("null:gb=1,irqmode=2,completion_nsec=500000000,hw_queue_depth=1024", 1, 0);
    q = blkio_get_queue(b, 0);
    int n = 0;
    for (;;) {
        blkioq_read(q, 0, rbuf, BS, (void *)(uintptr_t)(n + 1), 0);
        n++;
        struct blkio_completion first;
        int r = blkioq_do_io(q, &first, 0, 1, NULL);
        CHECK(r >= 0);
        if (r == 1) {
            CHECK(first.ret == -EAGAIN && strstr(first.error_msg, "requests in flight"));
            CHECK(first.user_data == (void *)(uintptr_t)n);
            break;
        }
        CHECK(n <= 4096);
    }
    CHECK(n - 1 >= 256); /* at least 256 in flight per queue */
    static struct blkio_completion all[4096];
    CHECK(blkioq_do_io(q, all, n - 1, n - 1, NULL) == n - 1);
    for (int i = 0; i < n - 1; i++)
        CHECK(all[i].ret == 0);
    blkio_destroy(&b);
    DONE();
}

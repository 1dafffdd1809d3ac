/* I/O both ways with the data checked: plain, vectored (contiguous and
 * scattered), write zeroes, discard, flush, FUA, memory regions, a
 * read-only instance, timeouts, and bad arguments answered with errors. */
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include "check.h"

#define BS 4096
static uint8_t wbuf[16 * BS] __attribute__((aligned(BS)));
static uint8_t rbuf[16 * BS] __attribute__((aligned(BS)));

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 12));
}

/* Submits nothing more; waits for one completion and checks its ret. */
static void expect(struct blkioq *q, void *user_data, int ret, const char *needle)
{
    struct blkio_completion c = wait_one(q);
    if (c.user_data != user_data || c.ret != ret || (needle && (!c.error_msg || !strstr(c.error_msg, needle))) ||
        (!needle && c.error_msg)) {
        fprintf(stderr, "completion %p ret=%d msg=%s; wanted %p ret=%d msg~%s\n", c.user_data, c.ret,
                c.error_msg ? c.error_msg : "(null)", user_data, ret, needle ? needle : "(null)");
        exit(1);
    }
    checks_passed++;
}

static void plain_io(struct blkioq *q)
{
    fill(wbuf, 8 * BS, 1);
    blkioq_write(q, 16 * BS, wbuf, 8 * BS, (void *)1, 0);
    expect(q, (void *)1, 0, NULL);
    memset(rbuf, 0, sizeof(rbuf));
    blkioq_read(q, 16 * BS, rbuf, 8 * BS, (void *)2, 0);
    expect(q, (void *)2, 0, NULL);
    CHECK(memcmp(rbuf, wbuf, 8 * BS) == 0);

    /* Larger than max-transfer: split by mqblk, still one completion. */
    fill(wbuf, 16 * BS, 2);
    blkioq_write(q, 64 * BS, wbuf, 16 * BS, (void *)3, BLKIO_REQ_FUA);
    expect(q, (void *)3, 0, NULL);
    blkioq_read(q, 64 * BS, rbuf, 16 * BS, (void *)4, 0);
    expect(q, (void *)4, 0, NULL);
    CHECK(memcmp(rbuf, wbuf, 16 * BS) == 0);

    /* Several in flight at once, reaped together. */
    for (int i = 0; i < 8; i++) {
        fill(wbuf + i * BS, BS, 10 + i);
        blkioq_write(q, (200 + i) * BS, wbuf + i * BS, BS, (void *)(uintptr_t)(100 + i), 0);
    }
    struct blkio_completion cs[8];
    int got = 0;
    unsigned seen = 0;
    while (got < 8) {
        int n = blkioq_do_io(q, cs, 1, 8, NULL);
        CHECK(n >= 1 && n <= 8 - got);
        for (int i = 0; i < n; i++) {
            CHECK(cs[i].ret == 0);
            seen |= 1u << ((uintptr_t)cs[i].user_data - 100);
        }
        got += n;
    }
    CHECK(seen == 0xff);
    blkioq_read(q, 200 * BS, rbuf, 8 * BS, (void *)5, 0);
    expect(q, (void *)5, 0, NULL);
    CHECK(memcmp(rbuf, wbuf, 8 * BS) == 0);
}

static void vectored_io(struct blkioq *q)
{
    /* Scattered segments of different sizes (one vectored bio). */
    static uint8_t a[BS] __attribute__((aligned(BS))), b[3 * BS] __attribute__((aligned(BS))),
        c[2 * BS] __attribute__((aligned(BS)));
    fill(a, BS, 21);
    fill(b, 3 * BS, 22);
    fill(c, 2 * BS, 23);
    struct iovec wv[3] = {{b, 3 * BS}, {a, BS}, {c, 2 * BS}};
    blkioq_writev(q, 300 * BS, wv, 3, (void *)6, 0);
    expect(q, (void *)6, 0, NULL);
    memset(rbuf, 0, sizeof(rbuf));
    blkioq_read(q, 300 * BS, rbuf, 6 * BS, (void *)7, 0);
    expect(q, (void *)7, 0, NULL);
    CHECK(memcmp(rbuf, b, 3 * BS) == 0 && memcmp(rbuf + 3 * BS, a, BS) == 0 && memcmp(rbuf + 4 * BS, c, 2 * BS) == 0);

    /* Read it back scattered the other way round. */
    static uint8_t x[2 * BS] __attribute__((aligned(BS))), y[4 * BS] __attribute__((aligned(BS)));
    memset(x, 0, sizeof(x));
    memset(y, 0, sizeof(y));
    struct iovec rv[2] = {{y, 4 * BS}, {x, 2 * BS}};
    blkioq_readv(q, 300 * BS, rv, 2, (void *)8, 0);
    expect(q, (void *)8, 0, NULL);
    CHECK(memcmp(y, rbuf, 4 * BS) == 0 && memcmp(x, rbuf + 4 * BS, 2 * BS) == 0);

    /* Contiguous segments (one borrowed buffer). */
    fill(wbuf, 4 * BS, 24);
    struct iovec cv[2] = {{wbuf, BS}, {wbuf + BS, 3 * BS}};
    blkioq_writev(q, 400 * BS, cv, 2, (void *)9, BLKIO_REQ_FUA);
    expect(q, (void *)9, 0, NULL);
    memset(rbuf, 0, sizeof(rbuf));
    struct iovec crv[2] = {{rbuf, 2 * BS}, {rbuf + 2 * BS, 2 * BS}};
    blkioq_readv(q, 400 * BS, crv, 2, (void *)10, 0);
    expect(q, (void *)10, 0, NULL);
    CHECK(memcmp(rbuf, wbuf, 4 * BS) == 0);
}

static void other_requests(struct blkioq *q)
{
    fill(wbuf, 4 * BS, 30);
    blkioq_write(q, 500 * BS, wbuf, 4 * BS, (void *)11, 0);
    expect(q, (void *)11, 0, NULL);
    blkioq_write_zeroes(q, 501 * BS, 2 * BS, (void *)12, BLKIO_REQ_NO_UNMAP | BLKIO_REQ_NO_FALLBACK);
    expect(q, (void *)12, 0, NULL);
    blkioq_read(q, 500 * BS, rbuf, 4 * BS, (void *)13, 0);
    expect(q, (void *)13, 0, NULL);
    static const uint8_t zero[2 * BS];
    CHECK(memcmp(rbuf, wbuf, BS) == 0 && memcmp(rbuf + BS, zero, 2 * BS) == 0 &&
          memcmp(rbuf + 3 * BS, wbuf + 3 * BS, BS) == 0);
    blkioq_discard(q, 500 * BS, 4 * BS, (void *)14, 0);
    expect(q, (void *)14, 0, NULL);
    blkioq_read(q, 500 * BS, rbuf, 2 * BS, (void *)15, 0);
    expect(q, (void *)15, 0, NULL);
    CHECK(memcmp(rbuf, zero, 2 * BS) == 0); /* null reads discarded blocks as zeroes */
    blkioq_flush(q, (void *)16, 0);
    expect(q, (void *)16, 0, NULL);
}

static void bad_arguments(struct blkio *b, struct blkioq *q)
{
    uint64_t cap;
    OK(blkio_get_uint64(b, "capacity", &cap));
    blkioq_read(q, 0, NULL, BS, (void *)20, 0);
    expect(q, (void *)20, -EINVAL, "NULL");
    blkioq_read(q, 0, rbuf + 512, BS, (void *)21, 0);
    expect(q, (void *)21, -EINVAL, "buf-alignment=4096");
    blkioq_read(q, 0, rbuf, 512, (void *)22, 0);
    expect(q, (void *)22, -EINVAL, "buf-alignment=4096");
    blkioq_read(q, 512, rbuf, BS, (void *)23, 0);
    expect(q, (void *)23, -EINVAL, "not aligned");
    blkioq_read(q, cap, rbuf, BS, (void *)24, 0);
    expect(q, (void *)24, -EIO, "past the end");
    blkioq_write(q, cap - BS, wbuf, 2 * BS, (void *)25, 0);
    expect(q, (void *)25, -EIO, "past the end");
    blkioq_read(q, 0, rbuf, BS, (void *)26, BLKIO_REQ_FUA);
    expect(q, (void *)26, -EINVAL, "flags 0x1");
    blkioq_write(q, 0, wbuf, BS, (void *)27, 0x80);
    expect(q, (void *)27, -EINVAL, "flags 0x80");
    blkioq_readv(q, 0, NULL, 1, (void *)28, 0);
    expect(q, (void *)28, -EINVAL, "iovec is NULL");
    struct iovec v[2] = {{rbuf, BS}, {rbuf + 3 * BS, 100}};
    blkioq_readv(q, 0, v, 0, (void *)29, 0);
    expect(q, (void *)29, -EINVAL, "iovcnt=0");
    blkioq_readv(q, 0, v, 2, (void *)30, 0);
    expect(q, (void *)30, -EINVAL, "iovec[1]");
    blkioq_discard(q, 0, 100, (void *)31, 0);
    expect(q, (void *)31, -EINVAL, "not aligned");

    /* A NULL queue: nothing queued, a message. */
    blkioq_read(NULL, 0, rbuf, BS, NULL, 0);
    CHECK(strstr(blkio_get_error_msg(), "blkioq pointer is NULL"));
    FAILS(blkioq_do_io(NULL, NULL, 0, 0, NULL), EINVAL, "NULL");

    /* do_io's own arguments. */
    struct blkio_completion c;
    FAILS(blkioq_do_io(q, &c, 1, 1, NULL), EINVAL, "exceeds the 0 requests outstanding");
    FAILS(blkioq_do_io(q, &c, 2, 1, NULL), EINVAL, "min_completions=2");
    FAILS(blkioq_do_io(q, NULL, 0, 1, NULL), EINVAL, "completions is NULL");
    CHECK(blkioq_do_io(q, NULL, 0, 0, NULL) == 0);
    struct timespec bad = {0, 2000000000L};
    blkioq_flush(q, (void *)32, 0);
    FAILS(blkioq_do_io(q, &c, 1, 1, &bad), EINVAL, "timespec");
    expect(q, (void *)32, 0, NULL); /* the flush was kept */
}

static void timeout_keeps_completions(void)
{
    /* Completions 2 s after submission: a 10 ms wait times out (even if
     * this thread is descheduled for a while between submit and wait). */
    struct blkio *b = start_instance("null:gb=1,irqmode=2,completion_nsec=2000000000", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    blkioq_read(q, 0, rbuf, BS, (void *)40, 0);
    struct timespec t = {0, 10 * 1000 * 1000};
    struct blkio_completion c;
    FAILS(blkioq_do_io(q, &c, 1, 1, &t), ETIME, "timed out");
    CHECK(t.tv_sec == 0 && t.tv_nsec == 0); /* time left: none */
    struct timespec t2 = {30, 0};
    CHECK(blkioq_do_io(q, &c, 1, 1, &t2) == 1);
    CHECK(c.user_data == (void *)40 && c.ret == 0);
    CHECK(t2.tv_sec < 30 && (t2.tv_sec > 0 || t2.tv_nsec > 0)); /* elapsed time taken off */
    blkio_destroy(&b);
}

static void mem_regions(struct blkio *b, struct blkioq *q)
{
    struct blkio_mem_region r;
    FAILS(blkio_alloc_mem_region(b, &r, 100), EINVAL, "mem-region-alignment=4096");
    FAILS(blkio_alloc_mem_region(b, NULL, BS), EINVAL, "region is NULL");
    OK(blkio_alloc_mem_region(b, &r, 8 * BS));
    CHECK(r.addr && r.len == 8 * BS && r.iova == 0 && r.fd >= 0 && r.flags == 0);
    OK(blkio_map_mem_region(b, &r));
    FAILS(blkio_map_mem_region(b, &r), EEXIST, "already mapped");
    fill(r.addr, 8 * BS, 50);
    blkioq_write(q, 600 * BS, r.addr, 8 * BS, (void *)51, 0);
    expect(q, (void *)51, 0, NULL);
    memset(rbuf, 0, sizeof(rbuf));
    blkioq_read(q, 600 * BS, rbuf, 8 * BS, (void *)52, 0);
    expect(q, (void *)52, 0, NULL);
    CHECK(memcmp(rbuf, r.addr, 8 * BS) == 0);
    blkio_free_mem_region(b, &r);
    CHECK(strstr(blkio_get_error_msg(), "still mapped"));
    blkio_unmap_mem_region(b, &r);
    blkio_unmap_mem_region(b, &r); /* no effect */
    blkio_free_mem_region(b, &r);

    /* The caller's own memory, mapped. */
    void *mine = mmap(NULL, 4 * BS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mine != MAP_FAILED);
    struct blkio_mem_region m = {.addr = mine, .len = 4 * BS, .fd = -1};
    OK(blkio_map_mem_region(b, &m));
    struct blkio_mem_region overlap = {.addr = (char *)mine + BS, .len = BS, .fd = -1};
    FAILS(blkio_map_mem_region(b, &overlap), EINVAL, "overlaps");
    struct blkio_mem_region misaligned = {.addr = (char *)mine + 1, .len = BS, .fd = -1};
    FAILS(blkio_map_mem_region(b, &misaligned), EINVAL, "mem-region-alignment");
    struct blkio_mem_region iova = {.addr = mine, .len = BS, .iova = 1, .fd = -1};
    FAILS(blkio_map_mem_region(b, &iova), EINVAL, "reserved");
    blkioq_read(q, 600 * BS, mine, 4 * BS, (void *)53, 0);
    expect(q, (void *)53, 0, NULL);
    CHECK(memcmp(mine, rbuf, 4 * BS) == 0);
    blkio_unmap_mem_region(b, &m);
    munmap(mine, 4 * BS);

    /* An empty region (fio maps one for trim-only jobs) maps as a no-op. */
    struct blkio_mem_region empty = {.addr = NULL, .len = 0, .fd = -1};
    OK(blkio_map_mem_region(b, &empty));
    blkio_unmap_mem_region(b, &empty);
    /* So does one at address NULL with a length: fio's trim-only jobs have
     * no buffers, and map max-bs x iodepth bytes at td->orig_buffer, NULL. */
    struct blkio_mem_region unbacked = {.addr = NULL, .len = 16 * BS, .fd = -1};
    OK(blkio_map_mem_region(b, &unbacked));
    blkio_unmap_mem_region(b, &unbacked);

    /* A region left allocated is freed by blkio_destroy (ASan/valgrind). */
    OK(blkio_alloc_mem_region(b, &r, BS));
}

static void read_only(void)
{
    struct blkio *b;
    OK(blkio_create("mqblk", &b));
    OK(blkio_set_str(b, "path", "null:gb=1,memory_backed=1"));
    OK(blkio_set_bool(b, "read-only", true));
    OK(blkio_connect(b));
    FAILS(blkio_set_bool(b, "read-only", false), EBUSY, "only while created");
    OK(blkio_start(b));
    struct blkioq *q = blkio_get_queue(b, 0);
    blkioq_write(q, 0, wbuf, BS, (void *)60, 0);
    expect(q, (void *)60, -EBADF, "read-only");
    blkioq_discard(q, 0, BS, (void *)61, 0);
    expect(q, (void *)61, -EBADF, "read-only");
    blkioq_write_zeroes(q, 0, BS, (void *)62, 0);
    expect(q, (void *)62, -EBADF, "read-only");
    blkioq_read(q, 0, rbuf, BS, (void *)63, 0);
    expect(q, (void *)63, 0, NULL);
    blkioq_flush(q, (void *)64, 0);
    expect(q, (void *)64, 0, NULL);
    blkio_destroy(&b);
}

int main(void)
{
    struct blkio *b = start_instance("null:size=64,bs=4096,memory_backed=1,discard=1", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    CHECK(q != NULL);
    plain_io(q);
    vectored_io(q);
    other_requests(q);
    bad_arguments(b, q);
    mem_regions(b, q);
    blkio_destroy(&b);
    timeout_keeps_completions();
    read_only();
    DONE();
}

/* readv/writev: each iovec array is one vectored bio of the caller's own
 * memory. Data checked byte for byte through round trips of scattered and
 * contiguous iovecs, one and many segments, max-segments (BIO_MAX_VECS)
 * iovecs and one more, zero-length iovecs, iovecs refused with a message
 * naming them, bios split by small queue limits (max_segments,
 * max_sectors, a virt boundary) completing once, several in flight
 * reaped together, errors, and the file driver (O_DIRECT). */
#include <stdint.h>
#include <unistd.h>
#include "check.h"

#define BS 4096
#define MAX_SEGS 256
/* Room for MAX_SEGS + 1 blocks, each used apart from its neighbours. */
static uint8_t pool_w[2 * (MAX_SEGS + 1) * BS] __attribute__((aligned(BS)));
static uint8_t pool_r[2 * (MAX_SEGS + 1) * BS] __attribute__((aligned(BS)));
static uint8_t flat[(MAX_SEGS + 1) * BS] __attribute__((aligned(BS)));

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed * 37 + i * 11 + (i >> 9));
}

static struct blkio_completion expect(struct blkioq *q, void *user_data, int ret, const char *needle)
{
    struct blkio_completion c = wait_one(q);
    if (c.user_data != user_data || c.ret != ret || (needle && (!c.error_msg || !strstr(c.error_msg, needle))) ||
        (!needle && ret == 0 && c.error_msg)) {
        fprintf(stderr, "completion %p ret=%d msg=%s; wanted %p ret=%d msg~%s\n", c.user_data, c.ret,
                c.error_msg ? c.error_msg : "(null)", user_data, ret, needle ? needle : "(null)");
        exit(1);
    }
    checks_passed++;
    return c;
}

/* n iovecs of `len` bytes each, one block apart (never contiguous), in
 * `pool`, in reverse memory order when `reverse`. */
static void scattered(struct iovec *v, int n, uint8_t *pool, size_t len, int reverse)
{
    for (int i = 0; i < n; i++) {
        int slot = reverse ? n - 1 - i : i;
        v[i] = (struct iovec){pool + (size_t)slot * 2 * BS, len};
    }
}

/* The iovecs' bytes, in order, into flat. */
static size_t gather(const struct iovec *v, int n)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(flat + at, v[i].iov_base, v[i].iov_len);
        at += v[i].iov_len;
    }
    return at;
}

/* Writes n scattered segments of len bytes at off, reads them back
 * scattered the other way and with one plain read, and compares. */
static void round_trip(struct blkioq *q, uint64_t off, int n, size_t len, unsigned seed)
{
    static struct iovec wv[MAX_SEGS], rv[MAX_SEGS];
    scattered(wv, n, pool_w, len, 0);
    for (int i = 0; i < n; i++)
        fill(wv[i].iov_base, len, seed + i);
    blkioq_writev(q, off, wv, n, (void *)1, 0);
    expect(q, (void *)1, 0, NULL);
    size_t total = gather(wv, n);

    memset(pool_r, 0, sizeof(pool_r));
    scattered(rv, n, pool_r, len, 1);
    blkioq_readv(q, off, rv, n, (void *)2, 0);
    expect(q, (void *)2, 0, NULL);
    for (int i = 0; i < n; i++)
        CHECK(memcmp(rv[i].iov_base, flat + (size_t)i * len, len) == 0);

    static uint8_t plain[MAX_SEGS * BS] __attribute__((aligned(BS)));
    blkioq_read(q, off, plain, total, (void *)3, 0);
    expect(q, (void *)3, 0, NULL);
    CHECK(memcmp(plain, flat, total) == 0);
}

static void shapes(struct blkio *b, struct blkioq *q)
{
    int segs;
    OK(blkio_get_int(b, "max-segments", &segs));
    CHECK(segs == MAX_SEGS);

    round_trip(q, 0, 1, BS, 1);               /* one segment */
    round_trip(q, 64 * BS, 2, BS, 2);          /* two */
    round_trip(q, 128 * BS, 8, BS, 3);        /* scattered */
    round_trip(q, 1024 * BS, MAX_SEGS, BS, 4); /* max-segments of them */

    /* Contiguous iovecs (one range) and a mix of contiguous runs, zero
     * lengths and gaps: gathered into fewer segments, same bytes. */
    fill(pool_w, 8 * BS, 5);
    struct iovec one_range[4] = {{pool_w, BS}, {pool_w + BS, 2 * BS}, {pool_w + 3 * BS, BS}, {pool_w + 4 * BS, 4 * BS}};
    blkioq_writev(q, 2048 * BS, one_range, 4, (void *)4, BLKIO_REQ_FUA);
    expect(q, (void *)4, 0, NULL);
    struct iovec mixed[6] = {{pool_r + 6 * BS, BS}, {NULL, 0},           {pool_r + 7 * BS, BS},
                             {pool_r, 0},          {pool_r + 2 * BS, 2 * BS}, {pool_r + 9 * BS, 4 * BS}};
    memset(pool_r, 0, 16 * BS);
    blkioq_readv(q, 2048 * BS, mixed, 6, (void *)5, 0);
    expect(q, (void *)5, 0, NULL);
    CHECK(memcmp(pool_r + 6 * BS, pool_w, 2 * BS) == 0);
    CHECK(memcmp(pool_r + 2 * BS, pool_w + 2 * BS, 2 * BS) == 0);
    CHECK(memcmp(pool_r + 9 * BS, pool_w + 4 * BS, 4 * BS) == 0);
}

static void refused(struct blkio *b, struct blkioq *q)
{
    static struct iovec v[MAX_SEGS + 1];
    scattered(v, MAX_SEGS + 1, pool_r, BS, 0);
    blkioq_readv(q, 0, v, MAX_SEGS + 1, (void *)10, 0);
    expect(q, (void *)10, -EINVAL, "iovcnt=257 outside 1..=256 (max-segments)");
    blkioq_writev(q, 0, v, MAX_SEGS + 1, (void *)11, 0);
    expect(q, (void *)11, -EINVAL, "max-segments");

    /* A length the block layer would refuse (not whole blocks) is off
     * buf-alignment, which libblkio's contract forbids: refused, named. */
    struct iovec short_len[3] = {{pool_r, BS}, {pool_r + 2 * BS, BS}, {pool_r + 4 * BS, BS / 2}};
    blkioq_readv(q, 0, short_len, 3, (void *)12, 0);
    expect(q, (void *)12, -EINVAL, "blkioq_readv: iovec[2]: buffer address");
    blkioq_writev(q, 0, short_len, 3, (void *)13, 0);
    expect(q, (void *)13, -EINVAL, "buf-alignment=4096");
    struct iovec off_addr[2] = {{pool_r + 512, BS}, {pool_r + 2 * BS, BS}};
    blkioq_readv(q, 0, off_addr, 2, (void *)14, 0);
    expect(q, (void *)14, -EINVAL, "iovec[0]");
    struct iovec null_addr[2] = {{pool_r, BS}, {NULL, BS}};
    blkioq_readv(q, 0, null_addr, 2, (void *)15, 0);
    expect(q, (void *)15, -EINVAL, "iovec[1]: buffer is NULL");
    struct iovec one_short[1] = {{pool_r, 100}};
    blkioq_readv(q, 0, one_short, 1, (void *)16, 0);
    expect(q, (void *)16, -EINVAL, "iovec[0]");
    struct iovec empty[3] = {{pool_r, 0}, {NULL, 0}, {pool_r + BS, 0}};
    blkioq_readv(q, 0, empty, 3, (void *)17, 0);
    expect(q, (void *)17, -EINVAL, "all of length 0");
    blkioq_readv(q, 0, v, -1, (void *)18, 0);
    expect(q, (void *)18, -EINVAL, "iovcnt=-1");

    /* Refused by the block layer after the iovecs passed: past the end,
     * and an offset off the block size. The queue goes on. */
    uint64_t cap;
    OK(blkio_get_uint64(b, "capacity", &cap));
    blkioq_readv(q, cap - BS, v, 2, (void *)19, 0);
    expect(q, (void *)19, -EIO, "past the end");
    blkioq_writev(q, 512, v, 2, (void *)20, 0);
    expect(q, (void *)20, -EINVAL, "not aligned");
    round_trip(q, 4096 * BS, 4, BS, 6);
}

/* Several vectored requests in flight, reaped together: each completes
 * once, refused ones among them too, and the data is each one's. */
static void in_flight(struct blkioq *q)
{
    enum { N = 8, SEGS = 6 };
    static struct iovec wv[N][SEGS];
    for (int r = 0; r < N; r++) {
        for (int s = 0; s < SEGS; s++) {
            uint8_t *p = pool_w + (size_t)(r * SEGS + s) * 2 * BS;
            fill(p, BS, 100 + r * SEGS + s);
            wv[r][s] = (struct iovec){p, BS};
        }
        blkioq_writev(q, (uint64_t)(5000 + r * SEGS) * BS, wv[r], SEGS, (void *)(uintptr_t)(100 + r), 0);
    }
    struct iovec bad[2] = {{pool_r, BS}, {pool_r + 2 * BS, 3}};
    blkioq_writev(q, 0, bad, 2, (void *)99, 0);
    struct blkio_completion cs[N + 1];
    int got = 0;
    unsigned seen = 0;
    while (got < N + 1) {
        int n = blkioq_do_io(q, cs, 1, N + 1, NULL);
        CHECK(n >= 1 && n <= N + 1 - got);
        for (int i = 0; i < n; i++) {
            uintptr_t id = (uintptr_t)cs[i].user_data;
            if (id == 99) {
                CHECK(cs[i].ret == -EINVAL && strstr(cs[i].error_msg, "iovec[1]"));
                CHECK(!(seen & (1u << N)));
                seen |= 1u << N;
                continue;
            }
            CHECK(id >= 100 && id < 100 + N && cs[i].ret == 0 && !(seen & (1u << (id - 100))));
            seen |= 1u << (id - 100);
        }
        got += n;
    }
    CHECK(seen == (1u << (N + 1)) - 1);
    static struct iovec rv[N][SEGS];
    for (int r = 0; r < N; r++) {
        for (int s = 0; s < SEGS; s++)
            rv[r][s] = (struct iovec){pool_r + (size_t)(r * SEGS + SEGS - 1 - s) * 2 * BS, BS};
        blkioq_readv(q, (uint64_t)(5000 + r * SEGS) * BS, rv[r], SEGS, (void *)(uintptr_t)(200 + r), 0);
    }
    for (got = 0; got < N;) {
        int n = blkioq_do_io(q, cs, 1, N, NULL);
        CHECK(n >= 1);
        for (int i = 0; i < n; i++)
            CHECK(cs[i].ret == 0);
        got += n;
    }
    for (int r = 0; r < N; r++)
        for (int s = 0; s < SEGS; s++)
            CHECK(memcmp(rv[r][s].iov_base, wv[r][s].iov_base, BS) == 0);
}

/* A device whose limits split a vectored bio: it still completes once,
 * with every byte in place. */
static void split(const char *spec, int n, size_t len)
{
    struct blkio *b = start_instance(spec, 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    round_trip(q, 12 * BS, n, len, 40);
    round_trip(q, 0, MAX_SEGS, BS, 41);
    in_flight(q);
    blkio_destroy(&b);
}

/* An I/O error inside a split vectored read: one completion, -EIO. */
static void error_inside(void)
{
    /* Sectors 2048-2055 (bytes 1 MiB to 1 MiB + 4 KiB) fail. */
    struct blkio *b = start_instance("null:size=64,bs=4096,memory_backed=1,irqmode=0,max_segments=4,"
                                     "badblocks=2048-2055",
                                     1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    static struct iovec v[16];
    scattered(v, 16, pool_r, BS, 0);
    blkioq_readv(q, (1 << 20) - 8 * BS, v, 16, (void *)50, 0);
    expect(q, (void *)50, -EIO, "I/O failed");
    blkioq_readv(q, 2 << 20, v, 16, (void *)51, 0);
    expect(q, (void *)51, 0, NULL);
    struct blkio_completion none;
    CHECK(blkioq_do_io(q, &none, 0, 1, NULL) == 0); /* nothing more: each completed once */
    blkio_destroy(&b);
}

/* The file driver (io_uring READV/WRITEV of the physical segments, on an
 * O_DIRECT file): the same round trips, through the file itself too. */
static void file_driver(void)
{
    char path[] = "/tmp/mqblk-blkio-vectored-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    char spec[256];
    snprintf(spec, sizeof(spec), "file:path=%s,size=16m,create=1,direct=1", path);
    struct blkio *b = start_instance(spec, 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    round_trip(q, 3 * BS, 16, BS, 60);
    round_trip(q, 512 * BS, MAX_SEGS, BS, 61);
    static uint8_t direct[16 * BS];
    CHECK(pread(fd, direct, 16 * BS, 3 * BS) == 16 * BS);
    static struct iovec v[16];
    scattered(v, 16, pool_w, BS, 0);
    for (int i = 0; i < 16; i++)
        fill(v[i].iov_base, BS, 60 + i);
    CHECK(gather(v, 16) == 16 * BS && memcmp(direct, flat, 16 * BS) == 0);
    blkio_destroy(&b);
    close(fd);
    unlink(path);
}

int main(void)
{
    struct blkio *b = start_instance("null:size=64,bs=4096,memory_backed=1", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    shapes(b, q);
    refused(b, q);
    in_flight(q);
    blkio_destroy(&b);

    /* Split by physical segments, by max_sectors, by a virt boundary
     * (512-byte segments on a 512-byte device, each a gap), and inline
     * completions (irqmode=0). */
    split("null:size=64,bs=4096,memory_backed=1,max_segments=4", 16, BS);
    split("null:size=64,bs=4096,memory_backed=1,irqmode=0,max_sectors=16,max_segments=4", 16, BS);
    split("null:size=64,bs=512,memory_backed=1,virt_boundary_mask=4095", 32, 1024);
    error_inside();
    file_driver();
    DONE();
}

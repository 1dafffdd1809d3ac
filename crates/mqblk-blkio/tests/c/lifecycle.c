/* Every instance call in its order and out of it: states, properties,
 * queues, and the errors of calls made in the wrong state. */
#include <stddef.h>
#include <stdint.h>
#include "check.h"

/* libblkio 1.5's ABI on LP64: programs built against its header must see
 * the same layouts and values. */
_Static_assert(sizeof(struct blkio_completion) == 32, "blkio_completion size");
_Static_assert(offsetof(struct blkio_completion, error_msg) == 8, "error_msg offset");
_Static_assert(offsetof(struct blkio_completion, ret) == 16, "ret offset");
_Static_assert(sizeof(struct blkio_mem_region) == 40, "blkio_mem_region size");
_Static_assert(offsetof(struct blkio_mem_region, len) == 8, "len offset");
_Static_assert(offsetof(struct blkio_mem_region, iova) == 16, "iova offset");
_Static_assert(offsetof(struct blkio_mem_region, fd_offset) == 24, "fd_offset offset");
_Static_assert(offsetof(struct blkio_mem_region, fd) == 32, "fd offset");
_Static_assert(offsetof(struct blkio_mem_region, flags) == 36, "flags offset");
_Static_assert(sizeof(struct blkio_zone) == 64, "blkio_zone size");
_Static_assert(offsetof(struct blkio_zone, zone_type) == 32, "zone_type offset");
_Static_assert(BLKIO_REQ_FUA == 1 && BLKIO_REQ_NO_UNMAP == 2 && BLKIO_REQ_NO_FALLBACK == 4, "flags");
_Static_assert(BLKIO_ZONE_STATE_READONLY == 0xd && BLKIO_ZONE_STATE_FULL == 0xe, "zone states");

int main(void)
{
    struct blkio *b = (struct blkio *)0x1;
    bool bv;
    int iv;
    uint64_t u;
    char *s;

    /* Create. */
    FAILS(blkio_create("io_uring", &b), ENOENT, "unknown driver");
    CHECK(b == NULL);
    FAILS(blkio_create(NULL, &b), EINVAL, "driver is NULL");
    FAILS(blkio_create("mqblk", NULL), EINVAL, "bp is NULL");
    OK(blkio_create("mqblk", &b));
    CHECK(b != NULL);

    /* Created: driver, path, read-only, can-add-queues. */
    OK(blkio_get_str(b, "driver", &s));
    CHECK(strcmp(s, "mqblk") == 0);
    free(s);
    OK(blkio_get_bool(b, "can-add-queues", &bv));
    CHECK(bv);
    OK(blkio_get_bool(b, "read-only", &bv));
    CHECK(!bv);
    FAILS(blkio_get_uint64(b, "capacity", &u), ENODEV, "once the instance is connected");
    FAILS(blkio_get_int(b, "no-such-property", &iv), ENOENT, "unknown property");
    FAILS(blkio_get_int(b, "read-only", &iv), ENOTTY, "of type bool");
    FAILS(blkio_set_bool(b, "driver", true), ENOTTY, "of type str");
    FAILS(blkio_set_str(b, "driver", "x"), EACCES, "read-only");
    FAILS(blkio_get_bool(b, "read-only", NULL), EINVAL, "NULL");
    FAILS(blkio_get_bool(NULL, "read-only", &bv), EINVAL, "NULL");
    FAILS(blkio_get_bool(b, NULL, &bv), EINVAL, "NULL");
    FAILS(blkio_set_str(b, "read-only", "maybe"), EINVAL, "cannot parse");
    FAILS(blkio_set_int(b, "num-queues", 2), ENODEV, "only while connected");

    /* Out of order: start, queues and regions before connect, connect
     * without path. */
    struct blkio_mem_region r;
    FAILS(blkio_alloc_mem_region(b, &r, 4096), EINVAL, "connect first");
    FAILS(blkio_start(b), EINVAL, "connect first");
    CHECK(blkio_get_queue(b, 0) == NULL);
    CHECK(strstr(blkio_get_error_msg(), "not started"));
    FAILS(blkio_add_queue(b), EINVAL, "not started");
    FAILS(blkio_connect(b), EINVAL, "path");
    OK(blkio_set_str(b, "path", "null:gb=x"));
    FAILS(blkio_connect(b), EINVAL, "gb");
    OK(blkio_set_str(b, "path", "null:size=64,bs=4096,memory_backed=1,discard=1,irqmode=0"));
    OK(blkio_get_str(b, "path", &s));
    CHECK(strcmp(s, "null:size=64,bs=4096,memory_backed=1,discard=1,irqmode=0") == 0);
    free(s);

    /* Connect; then the device's properties report its limits. */
    OK(blkio_connect(b));
    FAILS(blkio_connect(b), EBUSY, "already connected");
    FAILS(blkio_set_str(b, "path", "null:gb=1"), EBUSY, "only while created");
    OK(blkio_get_uint64(b, "capacity", &u));
    CHECK(u == 64ull << 20);
    OK(blkio_get_int(b, "request-alignment", &iv));
    CHECK(iv == 4096);
    OK(blkio_get_int(b, "buf-alignment", &iv));
    CHECK(iv == 4096);
    OK(blkio_get_uint64(b, "mem-region-alignment", &u));
    CHECK(u == 4096);
    OK(blkio_get_int(b, "max-transfer", &iv));
    CHECK(iv == 255 * 512 / 4096 * 4096); /* max_sectors 255, aligned down to bs */
    OK(blkio_get_int(b, "max-segments", &iv));
    CHECK(iv == 256); /* BIO_MAX_VECS: one readv is one bio */
    OK(blkio_get_bool(b, "needs-mem-regions", &bv));
    CHECK(!bv);
    OK(blkio_get_bool(b, "supports-poll-queues", &bv));
    CHECK(bv); /* null's default: poll_queues=1 */
    OK(blkio_get_uint64(b, "max-discard-len", &u));
    CHECK(u > 0);
    OK(blkio_get_int(b, "discard-alignment", &iv));
    CHECK(iv == 4096);
    OK(blkio_get_bool(b, "supports-fua-natively", &bv));
    OK(blkio_get_bool(b, "can-grow", &bv));
    CHECK(!bv);
    OK(blkio_get_int(b, "zoned", &iv));
    CHECK(iv == 0);
    OK(blkio_get_str(b, "capacity", &s)); /* str converts */
    CHECK(strcmp(s, "67108864") == 0);
    free(s);
    OK(blkio_get_int(b, "num-queues", &iv));
    CHECK(iv == 1);
    FAILS(blkio_set_uint64(b, "capacity", 1), EACCES, "read-only");
    FAILS(blkio_set_int(b, "num-queues", -1), EINVAL, "num-queues=-1");
    FAILS(blkio_set_int(b, "num-queues", 100000), EINVAL, "num-queues=100000");
    OK(blkio_set_str(b, "num-queues", "2")); /* str converts */
    OK(blkio_set_int(b, "num-poll-queues", 1));
    OK(blkio_get_int(b, "num-queues", &iv));
    CHECK(iv == 2);

    /* Regions may be allocated once connected; mapped once started. */
    OK(blkio_alloc_mem_region(b, &r, 4096));
    FAILS(blkio_map_mem_region(b, &r), EINVAL, "not started");

    /* Start; queues. */
    OK(blkio_start(b));
    OK(blkio_map_mem_region(b, &r));
    FAILS(blkio_start(b), EBUSY, "already started");
    FAILS(blkio_set_int(b, "num-queues", 1), EBUSY, "only while connected");
    struct blkioq *q0 = blkio_get_queue(b, 0), *q1 = blkio_get_queue(b, 1);
    CHECK(q0 && q1 && q0 != q1);
    CHECK(blkio_get_queue(b, 2) == NULL);
    CHECK(strstr(blkio_get_error_msg(), "no queue 2"));
    CHECK(blkio_get_queue(b, -1) == NULL);
    CHECK(blkio_get_poll_queue(b, 0) != NULL);
    CHECK(blkio_get_poll_queue(b, 1) == NULL);
    CHECK(blkio_add_queue(b) == 2);
    CHECK(blkio_add_poll_queue(b) == 1);
    OK(blkio_remove_queue(b, 0));
    FAILS(blkio_remove_queue(b, 0), ENOENT, "no queue 0");
    CHECK(blkio_get_queue(b, 0) == NULL);
    CHECK(blkio_get_queue(b, 1) == q1); /* indexes do not shift */
    OK(blkio_remove_poll_queue(b, 1));
    FAILS(blkio_remove_poll_queue(b, 1), ENOENT, "no poll queue 1");
    FAILS(blkio_remove_queue(b, 7), ENOENT, "no queue 7");

    /* I/O through the surviving queue still works. */
    static char buf[4096] __attribute__((aligned(4096)));
    blkioq_read(q1, 0, buf, sizeof(buf), (void *)42, 0);
    struct blkio_completion c = wait_one(q1);
    CHECK(c.user_data == (void *)42 && c.ret == 0 && c.error_msg == NULL);
    memset(r.addr, 0x11, 4096);
    blkioq_read(q1, 0, r.addr, 4096, (void *)43, 0); /* never written: zeroes */
    c = wait_one(q1);
    CHECK(c.user_data == (void *)43 && c.ret == 0 && ((char *)r.addr)[4095] == 0);
    /* Destroy unmaps and frees the region, still mapped. */

    /* Destroy clears the pointer; NULL is harmless. */
    blkio_destroy(&b);
    CHECK(b == NULL);
    blkio_destroy(&b);
    blkio_destroy(NULL);

    /* A device without poll queues refuses num-poll-queues at start. */
    OK(blkio_create("mqblk", &b));
    OK(blkio_set_str(b, "path", "null:gb=1,poll_queues=0"));
    OK(blkio_connect(b));
    OK(blkio_get_bool(b, "supports-poll-queues", &bv));
    CHECK(!bv);
    OK(blkio_set_int(b, "num-poll-queues", 1));
    FAILS(blkio_start(b), EINVAL, "no poll queues");
    OK(blkio_set_int(b, "num-poll-queues", 0));
    OK(blkio_start(b));
    FAILS(blkio_add_poll_queue(b), EINVAL, "no poll queues");
    blkio_destroy(&b);
    DONE();
}

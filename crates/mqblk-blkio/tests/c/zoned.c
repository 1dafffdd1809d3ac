/* A zoned null device: properties, zone reports, writes at the write
 * pointer, and every zone operation, one zone and all zones. */
#include <stdint.h>
#include "check.h"

#define BS 4096
#define MB (1024 * 1024ull)
static uint8_t wbuf[4 * BS] __attribute__((aligned(BS)));
static uint8_t rbuf[4 * BS] __attribute__((aligned(BS)));

static int report(struct blkioq *q, uint64_t offset, struct blkio_zone *z, uint32_t nr)
{
    memset(z, 0xff, sizeof(*z) * nr);
    blkioq_report_zones(q, offset, z, nr, (void *)0x5a, 0);
    struct blkio_completion c = wait_one(q);
    CHECK(c.user_data == (void *)0x5a);
    return c.ret;
}

static void zone_op(struct blkioq *q, void (*op)(struct blkioq *, uint64_t, void *, uint32_t), uint64_t off, int ret)
{
    op(q, off, (void *)0x77, 0);
    struct blkio_completion c = wait_one(q);
    CHECK(c.user_data == (void *)0x77);
    if (c.ret != ret) {
        fprintf(stderr, "zone op at %llu: ret %d (%s), wanted %d\n", (unsigned long long)off, c.ret,
                c.error_msg ? c.error_msg : "", ret);
        exit(1);
    }
}

static void all_op(struct blkioq *q, void (*op)(struct blkioq *, void *, uint32_t))
{
    op(q, (void *)0x78, 0);
    struct blkio_completion c = wait_one(q);
    CHECK(c.user_data == (void *)0x78 && c.ret == 0);
}

int main(void)
{
    struct blkio *b = start_instance("null:size=64,bs=4096,zoned=1,zone_size=8,zone_nr_conv=1,memory_backed=1", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    int iv;
    uint64_t u;
    OK(blkio_get_int(b, "zoned", &iv));
    CHECK(iv == 2);
    OK(blkio_get_uint64(b, "zone_size", &u));
    CHECK(u == 8 * MB);
    OK(blkio_get_uint64(b, "nr_zones", &u));
    CHECK(u == 8);
    OK(blkio_get_uint64(b, "nr-zones", &u)); /* libblkio's tests spell it so */
    CHECK(u == 8);
    OK(blkio_get_uint64(b, "zone-size", &u));
    CHECK(u == 8 * MB);
    OK(blkio_get_int(b, "max-open-zones", &iv));
    CHECK(iv == 0); /* no limit */

    struct blkio_zone z[10];
    CHECK(report(q, 0, z, 10) == 8);
    CHECK(z[0].start == 0 && z[0].len == 8 * MB && z[0].zone_type == BLKIO_ZONE_TYPE_CONVENTIONAL);
    for (int i = 1; i < 8; i++) {
        CHECK(z[i].start == i * 8 * MB && z[i].len == 8 * MB && z[i].capacity == 8 * MB);
        CHECK(z[i].zone_type == BLKIO_ZONE_TYPE_SEQWRITE_REQ && z[i].zone_state == BLKIO_ZONE_STATE_EMPTY);
        CHECK(z[i].write_pointer == z[i].start && z[i].reset == 0);
    }
    CHECK(z[8].start == UINT64_MAX); /* untouched past the count */
    CHECK(report(q, 8 * MB + 4096, z, 2) == 2); /* rounded down to its zone */
    CHECK(z[0].start == 8 * MB && z[1].start == 16 * MB);

    /* Writes at the write pointer; a write elsewhere fails. */
    uint64_t z1 = 8 * MB;
    memset(wbuf, 0xab, sizeof(wbuf));
    blkioq_write(q, z1, wbuf, 2 * BS, (void *)1, 0);
    CHECK(wait_one(q).ret == 0);
    blkioq_write(q, z1 + 3 * BS, wbuf, BS, (void *)2, 0);
    struct blkio_completion c = wait_one(q);
    CHECK(c.ret < 0 && c.error_msg != NULL);
    CHECK(report(q, z1, z, 1) == 1);
    CHECK(z[0].write_pointer == z1 + 2 * BS && z[0].zone_state == BLKIO_ZONE_STATE_IMP_OPEN);
    blkioq_read(q, z1, rbuf, 2 * BS, (void *)3, 0);
    CHECK(wait_one(q).ret == 0);
    CHECK(memcmp(rbuf, wbuf, 2 * BS) == 0);

    /* One zone at a time. */
    zone_op(q, blkioq_close_zone, z1, 0);
    CHECK(report(q, z1, z, 1) == 1 && z[0].zone_state == BLKIO_ZONE_STATE_CLOSED);
    zone_op(q, blkioq_open_zone, z1, 0);
    CHECK(report(q, z1, z, 1) == 1 && z[0].zone_state == BLKIO_ZONE_STATE_EXP_OPEN);
    zone_op(q, blkioq_finish_zone, z1, 0);
    CHECK(report(q, z1, z, 1) == 1 && z[0].zone_state == BLKIO_ZONE_STATE_FULL);
    CHECK(z[0].write_pointer == z1 + 8 * MB);
    zone_op(q, blkioq_reset_zone, z1, 0);
    CHECK(report(q, z1, z, 1) == 1 && z[0].zone_state == BLKIO_ZONE_STATE_EMPTY && z[0].write_pointer == z1);
    zone_op(q, blkioq_reset_zone, z1 + 4096, -EINVAL); /* not a zone start */

    /* All zones. */
    for (int i = 2; i <= 4; i++) {
        blkioq_write(q, i * 8 * MB, wbuf, BS, (void *)4, 0);
        CHECK(wait_one(q).ret == 0);
    }
    all_op(q, blkioq_close_all_zones);
    CHECK(report(q, 0, z, 8) == 8);
    for (int i = 2; i <= 4; i++)
        CHECK(z[i].zone_state == BLKIO_ZONE_STATE_CLOSED);
    CHECK(z[5].zone_state == BLKIO_ZONE_STATE_EMPTY);
    all_op(q, blkioq_open_all_zones);
    CHECK(report(q, 0, z, 8) == 8);
    for (int i = 2; i <= 4; i++)
        CHECK(z[i].zone_state == BLKIO_ZONE_STATE_EXP_OPEN);
    CHECK(z[5].zone_state == BLKIO_ZONE_STATE_EMPTY);
    all_op(q, blkioq_finish_all_zones);
    CHECK(report(q, 0, z, 8) == 8);
    for (int i = 2; i <= 4; i++)
        CHECK(z[i].zone_state == BLKIO_ZONE_STATE_FULL);
    CHECK(z[5].zone_state == BLKIO_ZONE_STATE_EMPTY);
    all_op(q, blkioq_reset_all_zones);
    CHECK(report(q, 0, z, 8) == 8);
    for (int i = 1; i < 8; i++)
        CHECK(z[i].zone_state == BLKIO_ZONE_STATE_EMPTY && z[i].write_pointer == z[i].start);

    /* Bad arguments. */
    blkioq_report_zones(q, 0, NULL, 4, (void *)9, 0);
    c = wait_one(q);
    CHECK(c.ret == -EINVAL && strstr(c.error_msg, "zones is NULL"));
    blkioq_report_zones(q, 64 * MB, z, 1, (void *)9, 0);
    CHECK(wait_one(q).ret == -EINVAL);
    blkioq_open_zone(q, z1, (void *)9, 0x4);
    CHECK(wait_one(q).ret == -EINVAL);
    blkio_destroy(&b);

    /* Zone calls on a device that is not zoned. */
    b = start_instance("null:gb=1", 1, 0);
    q = blkio_get_queue(b, 0);
    blkioq_report_zones(q, 0, z, 1, (void *)10, 0);
    c = wait_one(q);
    CHECK(c.ret == -ENOTSUP && c.error_msg);
    blkioq_close_all_zones(q, (void *)11, 0);
    c = wait_one(q);
    CHECK(c.ret == -ENOTSUP && strstr(c.error_msg, "not zoned"));
    blkioq_reset_zone(q, 0, (void *)12, 0);
    CHECK(wait_one(q).ret == -ENOTSUP);
    blkio_destroy(&b);
    DONE();
}

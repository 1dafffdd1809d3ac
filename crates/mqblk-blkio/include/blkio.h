/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * blkio.h: the libblkio 1.5 C interface, implemented by mqblk-blkio over
 * mqblk's user-space block layer (driver "mqblk").
 *
 * Written for mqblk from libblkio's published API description; names,
 * types, constants and structure layouts match libblkio 1.5 so programs
 * built against either header run against either library.
 *
 * Conventions: functions returning int give 0 (or a count) on success and
 * a negative errno on failure; blkio_get_error_msg() then says why (the
 * message belongs to the calling thread). Request functions (blkioq_*)
 * return nothing: a refused request completes with a negative ret.
 * A struct blkioq must be used by one thread at a time.
 */
#ifndef BLKIO_H
#define BLKIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <time.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct blkio;  /* an instance: created, then connected, then started */
struct blkioq; /* one queue of a started instance */

/* Memory holding I/O buffers (iova and flags must be 0; fd may be -1). */
struct blkio_mem_region {
    void *addr;
    size_t len;
    uint64_t iova;
    int64_t fd_offset;
    int fd;
    uint32_t flags;
};

/* One finished request, as blkioq_do_io() hands it back. */
struct blkio_completion {
    void *user_data;       /* as given when the request was queued */
    const char *error_msg; /* NULL, or why it failed (valid until the next do_io on the queue) */
    int ret;               /* 0, a negative errno, or the zone count of a zone report */
    uint8_t reserved_[12];
};

/* Instance life cycle. */
const char *blkio_get_error_msg(void);
int blkio_create(const char *driver, struct blkio **bp);
int blkio_connect(struct blkio *b);
int blkio_start(struct blkio *b);
void blkio_destroy(struct blkio **bp);

/* Properties (see README: "C users" lists the mqblk driver's). */
int blkio_get_bool(struct blkio *b, const char *name, bool *value);
int blkio_get_int(struct blkio *b, const char *name, int *value);
int blkio_get_uint64(struct blkio *b, const char *name, uint64_t *value);
int blkio_get_str(struct blkio *b, const char *name, char **value); /* free(3) *value */
int blkio_set_bool(struct blkio *b, const char *name, bool value);
int blkio_set_int(struct blkio *b, const char *name, int value);
int blkio_set_uint64(struct blkio *b, const char *name, uint64_t value);
int blkio_set_str(struct blkio *b, const char *name, const char *value);

/* Memory regions (after blkio_start()). */
int blkio_alloc_mem_region(struct blkio *b, struct blkio_mem_region *region, size_t len);
void blkio_free_mem_region(struct blkio *b, const struct blkio_mem_region *region);
int blkio_map_mem_region(struct blkio *b, const struct blkio_mem_region *region);
void blkio_unmap_mem_region(struct blkio *b, const struct blkio_mem_region *region);

/* Queues: indexes stay valid when other queues are removed. */
struct blkioq *blkio_get_queue(struct blkio *b, int index);
struct blkioq *blkio_get_poll_queue(struct blkio *b, int index);
int blkio_add_queue(struct blkio *b);
int blkio_add_poll_queue(struct blkio *b);
int blkio_remove_queue(struct blkio *b, int index);
int blkio_remove_poll_queue(struct blkio *b, int index);

/* Request flags. */
enum {
    BLKIO_REQ_FUA = 1 << 0,         /* write through to stable media */
    BLKIO_REQ_NO_UNMAP = 1 << 1,    /* write zeroes keeps the space allocated */
    BLKIO_REQ_NO_FALLBACK = 1 << 2, /* write zeroes fails rather than writing zero buffers */
};

void blkioq_read(struct blkioq *q, uint64_t start, void *buf, size_t len, void *user_data, uint32_t flags);
void blkioq_write(struct blkioq *q, uint64_t start, const void *buf, size_t len, void *user_data, uint32_t flags);
void blkioq_readv(struct blkioq *q, uint64_t start, const struct iovec *iovec, int iovcnt, void *user_data,
                  uint32_t flags);
void blkioq_writev(struct blkioq *q, uint64_t start, struct iovec *iovec, int iovcnt, void *user_data,
                   uint32_t flags);
void blkioq_write_zeroes(struct blkioq *q, uint64_t start, uint64_t len, void *user_data, uint32_t flags);
void blkioq_discard(struct blkioq *q, uint64_t start, uint64_t len, void *user_data, uint32_t flags);
void blkioq_flush(struct blkioq *q, void *user_data, uint32_t flags);

/* Zoned devices: zone types and states (the kernel's numbering). */
enum {
    BLKIO_ZONE_TYPE_CONVENTIONAL = 0x1,
    BLKIO_ZONE_TYPE_SEQWRITE_REQ = 0x2,
    BLKIO_ZONE_TYPE_SEQWRITE_PREF = 0x3,
};

enum {
    BLKIO_ZONE_STATE_EMPTY = 0x1,
    BLKIO_ZONE_STATE_IMP_OPEN = 0x2,
    BLKIO_ZONE_STATE_EXP_OPEN = 0x3,
    BLKIO_ZONE_STATE_CLOSED = 0x4,
    BLKIO_ZONE_STATE_READONLY = 0xD,
    BLKIO_ZONE_STATE_FULL = 0xE,
    BLKIO_ZONE_STATE_OFFLINE = 0xF,
};

/* One zone of a report; every position and size is in bytes. */
struct blkio_zone {
    uint64_t start;
    uint64_t len;
    uint64_t capacity;
    uint64_t write_pointer;
    uint8_t zone_type;
    uint8_t zone_state;
    uint8_t reset;
    uint8_t reserved_[29];
};

void blkioq_report_zones(struct blkioq *q, uint64_t offset, struct blkio_zone *zones, uint32_t nr_zones,
                         void *user_data, uint32_t flags);
void blkioq_close_zone(struct blkioq *q, uint64_t offset, void *user_data, uint32_t flags);
void blkioq_finish_zone(struct blkioq *q, uint64_t offset, void *user_data, uint32_t flags);
void blkioq_open_zone(struct blkioq *q, uint64_t offset, void *user_data, uint32_t flags);
void blkioq_reset_zone(struct blkioq *q, uint64_t offset, void *user_data, uint32_t flags);
void blkioq_close_all_zones(struct blkioq *q, void *user_data, uint32_t flags);
void blkioq_finish_all_zones(struct blkioq *q, void *user_data, uint32_t flags);
void blkioq_open_all_zones(struct blkioq *q, void *user_data, uint32_t flags);
void blkioq_reset_all_zones(struct blkioq *q, void *user_data, uint32_t flags);

/* Submitting and reaping. */
int blkioq_do_io(struct blkioq *q, struct blkio_completion *completions, int min_completions, int max_completions,
                 struct timespec *timeout);
int blkioq_do_io_interruptible(struct blkioq *q, struct blkio_completion *completions, int min_completions,
                               int max_completions, struct timespec *timeout, const sigset_t *sig);
int blkioq_get_completion_fd(struct blkioq *q); /* -1 on a poll queue */
void blkioq_set_completion_fd_enabled(struct blkioq *q, bool enable);

#ifdef __cplusplus
}
#endif

#endif /* BLKIO_H */

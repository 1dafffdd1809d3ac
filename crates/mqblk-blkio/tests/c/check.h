/* check.h: tiny assertion helpers shared by the C tests of mqblk-blkio. */
#ifndef CHECK_H
#define CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blkio.h>

static int checks_passed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, blkio_get_error_msg());                         \
            exit(1);                                                                 \
        }                                                                            \
        checks_passed++;                                                             \
    } while (0)

/* Call returns 0. */
#define OK(call) CHECK((call) == 0)

/* Call fails with -err and leaves a message containing `needle`. */
#define FAILS(call, err, needle)                                                     \
    do {                                                                             \
        int ret_ = (call);                                                           \
        if (ret_ != -(err) || !strstr(blkio_get_error_msg(), (needle))) {            \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d with \"%s\"\n",  \
                    __FILE__, __LINE__, #call, ret_, blkio_get_error_msg(), -(err), \
                    (needle));                                                       \
            exit(1);                                                                 \
        }                                                                            \
        checks_passed++;                                                             \
    } while (0)

#define DONE()                                                  \
    do {                                                        \
        printf("PASS %s: %d checks\n", __FILE__, checks_passed); \
        return 0;                                               \
    } while (0)

/* A started instance over an mqblk spec with the given queue counts. */
static inline struct blkio *start_instance(const char *spec, int nq, int npq)
{
    struct blkio *b;
    OK(blkio_create("mqblk", &b));
    OK(blkio_set_str(b, "path", spec));
    OK(blkio_connect(b));
    OK(blkio_set_int(b, "num-queues", nq));
    OK(blkio_set_int(b, "num-poll-queues", npq));
    OK(blkio_start(b));
    return b;
}

/* Waits for exactly one completion on q and returns it. */
static inline struct blkio_completion wait_one(struct blkioq *q)
{
    struct blkio_completion c;
    memset(&c, 0xee, sizeof(c));
    CHECK(blkioq_do_io(q, &c, 1, 1, NULL) == 1);
    return c;
}

#endif

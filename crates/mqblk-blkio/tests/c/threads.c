/* Queues on different threads at once (as fio's `thread` jobs use them):
 * each thread writes and reads back its own range through its own queue,
 * at queue depth 8, checking every byte; then each thread's data is read
 * through the other queue. */
#include <pthread.h>
#include <stdint.h>
#include "check.h"

#define BS 4096
#define DEPTH 8
#define ROUNDS 200

struct job {
    struct blkioq *q;
    uint64_t base;
    unsigned seed;
    int failed;
};

static void *run(void *arg)
{
    struct job *j = arg;
    static __thread uint8_t w[DEPTH][BS] __attribute__((aligned(BS)));
    static __thread uint8_t r[DEPTH][BS] __attribute__((aligned(BS)));
    struct blkio_completion cs[DEPTH];
    for (int round = 0; round < ROUNDS && !j->failed; round++) {
        for (int i = 0; i < DEPTH; i++) {
            memset(w[i], (int)(j->seed + round * DEPTH + i), BS);
            blkioq_write(j->q, j->base + (uint64_t)((round * DEPTH + i) % 64) * BS, w[i], BS, w[i], 0);
        }
        if (blkioq_do_io(j->q, cs, DEPTH, DEPTH, NULL) != DEPTH)
            j->failed = 1;
        for (int i = 0; i < DEPTH; i++)
            j->failed |= cs[i].ret != 0;
        for (int i = 0; i < DEPTH; i++)
            blkioq_read(j->q, j->base + (uint64_t)((round * DEPTH + i) % 64) * BS, r[i], BS, r[i], 0);
        if (blkioq_do_io(j->q, cs, DEPTH, DEPTH, NULL) != DEPTH)
            j->failed = 1;
        for (int i = 0; i < DEPTH; i++)
            j->failed |= cs[i].ret != 0 || memcmp(r[i], w[i], BS) != 0;
    }
    return NULL;
}

int main(void)
{
    struct blkio *b = start_instance("null:gb=1,memory_backed=1,submit_queues=2", 2, 0);
    struct job jobs[2] = {
        {blkio_get_queue(b, 0), 0, 1, 0},
        {blkio_get_queue(b, 1), 64 * BS, 101, 0},
    };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        OK(pthread_create(&t[i], NULL, run, &jobs[i]));
    for (int i = 0; i < 2; i++)
        OK(pthread_join(t[i], NULL));
    CHECK(!jobs[0].failed && !jobs[1].failed);

    /* Each job's last round, read through the other queue. */
    static uint8_t r[DEPTH * BS] __attribute__((aligned(BS)));
    for (int k = 0; k < 2; k++) {
        struct job *j = &jobs[k];
        uint64_t first = (uint64_t)((ROUNDS - 1) * DEPTH) % 64;
        blkioq_read(jobs[1 - k].q, j->base + first * BS, r, sizeof(r), NULL, 0);
        CHECK(wait_one(jobs[1 - k].q).ret == 0);
        for (int i = 0; i < DEPTH; i++)
            CHECK(r[i * BS] == (uint8_t)(j->seed + (ROUNDS - 1) * DEPTH + i) && r[i * BS + BS - 1] == r[i * BS]);
    }
    blkio_destroy(&b);
    DONE();
}

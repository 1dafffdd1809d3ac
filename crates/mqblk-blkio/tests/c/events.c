/* Completion modes: the completion fd in an epoll loop, poll queues, and
 * blkioq_do_io_interruptible returning -EINTR on a signal. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "check.h"

#define BS 512
#define NR 64
static uint8_t bufs[NR][BS] __attribute__((aligned(4096)));

static void epoll_loop(void)
{
    /* Completions from the softirq thread (irqmode=1) after 50 us. */
    struct blkio *b = start_instance("null:gb=1,memory_backed=1,irqmode=1", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    int fd = blkioq_get_completion_fd(q);
    CHECK(fd >= 0);
    CHECK(blkioq_get_completion_fd(q) == fd); /* the same fd each time */
    CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
    blkioq_set_completion_fd_enabled(q, true);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 7};
    OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));

    for (int i = 0; i < NR; i++) {
        memset(bufs[i], i + 1, BS);
        blkioq_write(q, (uint64_t)i * BS * 3, bufs[i], BS, (void *)(uintptr_t)(i + 1), 0);
    }
    CHECK(blkioq_do_io(q, NULL, 0, 0, NULL) >= 0); /* submit, do not wait */
    int done = 0, wakeups = 0;
    uint8_t seen[NR + 1] = {0};
    struct blkio_completion cs[16];
    while (done < NR) {
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, 5000);
        CHECK(n == 1 && out.data.u32 == 7);
        wakeups++;
        uint64_t v;
        CHECK(read(fd, &v, 8) == 8 || errno == EAGAIN);
        int got;
        while ((got = blkioq_do_io(q, cs, 0, 16, NULL)) > 0) {
            for (int i = 0; i < got; i++) {
                uintptr_t id = (uintptr_t)cs[i].user_data;
                CHECK(id >= 1 && id <= NR && !seen[id] && cs[i].ret == 0);
                seen[id] = 1;
            }
            done += got;
        }
        CHECK(got == 0);
    }
    CHECK(wakeups >= 1);

    /* Read everything back through the same loop. */
    static uint8_t back[NR][BS] __attribute__((aligned(4096)));
    for (int i = 0; i < NR; i++)
        blkioq_read(q, (uint64_t)i * BS * 3, back[i], BS, (void *)(uintptr_t)(i + 1), 0);
    done = 0;
    while (done < NR) {
        struct epoll_event out;
        CHECK(epoll_wait(ep, &out, 1, 5000) == 1);
        uint64_t v;
        (void)!read(fd, &v, 8);
        int got;
        while ((got = blkioq_do_io(q, cs, 0, 16, NULL)) > 0)
            done += got;
    }
    for (int i = 0; i < NR; i++)
        CHECK(memcmp(back[i], bufs[i], BS) == 0);

    /* A request refused at once also wakes the loop. */
    blkioq_read(q, 1, back[0], BS, (void *)99, 0);
    struct epoll_event out;
    CHECK(epoll_wait(ep, &out, 1, 5000) == 1);
    CHECK(blkioq_do_io(q, cs, 0, 16, NULL) == 1 && cs[0].user_data == (void *)99 && cs[0].ret == -EINVAL);
    close(ep);
    blkio_destroy(&b);
}

static void poll_queues(void)
{
    struct blkio *b = start_instance("null:gb=1,memory_backed=1,poll_queues=2", 0, 2);
    CHECK(blkio_get_queue(b, 0) == NULL);
    struct blkioq *p0 = blkio_get_poll_queue(b, 0), *p1 = blkio_get_poll_queue(b, 1);
    CHECK(p0 && p1);
    CHECK(blkioq_get_completion_fd(p0) == -1);
    blkioq_set_completion_fd_enabled(p0, true); /* no effect */
    struct blkio_completion cs[8];
    FAILS(blkioq_do_io_interruptible(p0, cs, 0, 1, NULL, NULL), ENOTSUP, "poll queues");
    for (int i = 0; i < 8; i++) {
        memset(bufs[i], 0x40 + i, BS);
        blkioq_write(i % 2 ? p1 : p0, (uint64_t)i * BS, bufs[i], BS, (void *)(uintptr_t)(i + 1), 0);
    }
    CHECK(blkioq_do_io(p0, cs, 4, 8, NULL) == 4); /* polls until its 4 complete */
    for (int i = 0; i < 4; i++)
        CHECK(cs[i].ret == 0 && ((uintptr_t)cs[i].user_data % 2) == 1);
    /* Application-level polling on the other queue. */
    int got = 0, spins = 0;
    while (got < 4 && spins++ < 1000000) {
        int n = blkioq_do_io(p1, cs + got, 0, 8 - got, NULL);
        CHECK(n >= 0);
        got += n;
    }
    CHECK(got == 4);
    static uint8_t back[8 * BS] __attribute__((aligned(4096)));
    blkioq_read(p1, 0, back, sizeof(back), (void *)77, 0);
    CHECK(blkioq_do_io(p1, cs, 1, 1, NULL) == 1 && cs[0].user_data == (void *)77 && cs[0].ret == 0);
    for (int i = 0; i < 8; i++)
        CHECK(memcmp(back + i * BS, bufs[i], BS) == 0);
    blkio_destroy(&b);
}

static volatile sig_atomic_t got_signal;
static void on_usr1(int sig)
{
    (void)sig;
    got_signal = 1;
}

static void interruptible(void)
{
    struct blkio *b = start_instance("null:gb=1,irqmode=2,completion_nsec=300000000", 1, 0);
    struct blkioq *q = blkio_get_queue(b, 0);
    struct sigaction sa = {.sa_handler = on_usr1};
    OK(sigaction(SIGUSR1, &sa, NULL));
    sigset_t blocked, waitmask;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGUSR1);
    OK(sigprocmask(SIG_BLOCK, &blocked, &waitmask)); /* waitmask: SIGUSR1 let through */
    blkioq_read(q, 0, bufs[0], BS, (void *)5, 0);
    OK(raise(SIGUSR1)); /* pending: blocked */
    CHECK(!got_signal);
    struct blkio_completion c;
    FAILS(blkioq_do_io_interruptible(q, &c, 1, 1, NULL, &waitmask), EINTR, "interrupted");
    CHECK(got_signal); /* delivered under the given mask */
    sigset_t now;
    sigprocmask(SIG_SETMASK, NULL, &now);
    CHECK(sigismember(&now, SIGUSR1)); /* our mask restored */
    /* No signal: it waits for the completion like do_io. */
    CHECK(blkioq_do_io_interruptible(q, &c, 1, 1, NULL, &waitmask) == 1);
    CHECK(c.user_data == (void *)5 && c.ret == 0);
    blkio_destroy(&b);
}

int main(void)
{
    epoll_loop();
    poll_queues();
    interruptible();
    DONE();
}

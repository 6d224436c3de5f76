/* Where forward's CPU time goes on the cpu backend: while a watched call runs, a sampling thread of this library looks
 * every ``period`` of wall time at each thread of the process (its CPU clock, CLOCK_THREAD_CPUTIME of that tid) and
 * signals (SIGPROF, with the CPU time as the signal's value) each thread that ran since it last looked; the signal's
 * handler records the interrupted instruction's address with that weight (in periods of CPU time). A timer over the
 * process's CPU time (ITIMER_PROF) fires only at the kernel's tick (4 ms at HZ=250), too coarse for a short clocked
 * bracket; the thread's clock_nanosleep is a high-resolution timer, so a bracket of a few milliseconds gets samples.
 * Threads started during a call are found on the next look (every thread is listed anew each time), and a thread that
 * blocks the signal shows as CPU time signalled but never recorded (``km_sampler_sent`` against the weights taken).
 * The CPU time of processes this one started and waited for (fork, vfork, a clone of its own: no thread of this
 * process, so no sample and no monitor of this process sees them) is read apart, per take (RUSAGE_CHILDREN).
 * Loaded by verifier/child/sampler.py. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define KM_MAX_SAMPLES 65536
#define KM_MAX_THREADS 2048
#define KM_MAX_WEIGHT 64   /* a sample stands for at most this many periods (a thread the sampler did not see for long) */
#define KM_IDLE_ROUNDS 20  /* rounds off before the sampling thread waits for the next watched call */

static volatile uint64_t km_pcs[KM_MAX_SAMPLES];
static volatile uint32_t km_ws[KM_MAX_SAMPLES];
static volatile long km_count = 0;   /* samples recorded (may exceed the buffer: the rest are counted only) */
static volatile long km_weight = 0;  /* periods of CPU time recorded by the handler */
static volatile long km_sent = 0;    /* periods of CPU time signalled by the sampling thread */
static volatile int km_on = 0;
static long km_child_last = -1;  /* RUSAGE_CHILDREN's CPU time (us) at the last take */
static volatile int km_waiting = 0;
static volatile int km_running = 0;
static long km_period_ns = 500000;
static pid_t km_pid = 0;
static pid_t km_tid = 0;  /* the sampling thread's own */
static int km_task_fd = -1;
static pthread_t km_thread;
static pthread_mutex_t km_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t km_cv = PTHREAD_COND_INITIALIZER;

struct km_seen { pid_t tid; uint64_t cpu_ns; uint64_t carry_ns; };
static struct km_seen km_tab[KM_MAX_THREADS];
static int km_ntab = 0;

static void km_on_prof(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    if (si == NULL || si->si_code != SI_QUEUE || si->si_pid != km_pid) return;  /* only the sampling thread's */
    long w = (long)si->si_value.sival_int;
    if (w <= 0) return;
    ucontext_t *uc = (ucontext_t *)ctx;
#if defined(__x86_64__)
    uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    uint64_t pc = (uint64_t)uc->uc_mcontext.pc;
#else
    uint64_t pc = 0;
#endif
    __atomic_fetch_add(&km_weight, w, __ATOMIC_RELAXED);
    long i = __atomic_fetch_add(&km_count, 1, __ATOMIC_RELAXED);
    if (i < KM_MAX_SAMPLES) { km_pcs[i] = pc; km_ws[i] = (uint32_t)w; }
}

static int km_cpu_ns(pid_t tid, uint64_t *out) {
    struct timespec ts;
    /* MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): the thread's own CPU clock, exact (not tick-based) */
    clockid_t c = (clockid_t)(((unsigned)~tid << 3) | 6u);
    if (clock_gettime(c, &ts) != 0) return -1;
    *out = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return 0;
}

/* the process's threads now (getdents64 over /proc/self/task, read again from its start) */
static int km_list(pid_t *tids, int max) {
    char buf[16384];
    int n = 0;
    if (km_task_fd < 0 || lseek(km_task_fd, 0, SEEK_SET) != 0) return -1;
    for (;;) {
        long got = syscall(SYS_getdents64, km_task_fd, buf, sizeof buf);
        if (got <= 0) break;
        for (long off = 0; off < got;) {
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, 2);
            const char *name = buf + off + 19;
            if (name[0] >= '0' && name[0] <= '9' && n < max) {
                long v = 0;
                for (const char *p = name; *p >= '0' && *p <= '9'; ++p) v = v * 10 + (*p - '0');
                tids[n++] = (pid_t)v;
            }
            off += reclen;
        }
    }
    return n;
}

/* one look at every thread: ``signal`` 0 only updates what each thread's clock read (the CPU time spent while no call
 * was watched is nobody's sample) */
static void km_round(int signal) {
    static pid_t tids[KM_MAX_THREADS];
    static struct km_seen next[KM_MAX_THREADS];
    int n = km_list(tids, KM_MAX_THREADS), m = 0;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
        pid_t tid = tids[i];
        if (tid == km_tid) continue;
        uint64_t now;
        if (km_cpu_ns(tid, &now) != 0) continue;
        struct km_seen *old = NULL;
        for (int j = 0; j < km_ntab; ++j)
            if (km_tab[j].tid == tid) { old = &km_tab[j]; break; }
        /* a thread first seen while a call is watched started since the last look: all its time is the call's */
        uint64_t spent = old ? now - old->cpu_ns : (signal ? now : 0);
        uint64_t carry = (old ? old->carry_ns : 0) + (signal ? spent : 0);
        if (signal && carry * 2 >= (uint64_t)km_period_ns) {
            long w = (long)((carry + (uint64_t)km_period_ns / 2) / (uint64_t)km_period_ns);
            if (w < 1) w = 1;
            if (w > KM_MAX_WEIGHT) w = KM_MAX_WEIGHT;
            siginfo_t si;
            memset(&si, 0, sizeof si);
            si.si_signo = SIGPROF;
            si.si_code = SI_QUEUE;
            si.si_pid = km_pid;
            si.si_uid = getuid();
            si.si_value.sival_int = (int)w;
            if (syscall(SYS_rt_tgsigqueueinfo, km_pid, tid, SIGPROF, &si) == 0)
                __atomic_fetch_add(&km_sent, w, __ATOMIC_RELAXED);
            carry = 0;
        }
        if (!signal) carry = 0;
        next[m].tid = tid; next[m].cpu_ns = now; next[m].carry_ns = carry;
        ++m;
    }
    memcpy(km_tab, next, sizeof(struct km_seen) * (size_t)m);
    km_ntab = m;
}

static void *km_loop(void *arg) {
    (void)arg;
    km_tid = (pid_t)syscall(SYS_gettid);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);  /* the sampler's own thread takes no signal of the process's */
    int idle = KM_IDLE_ROUNDS;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (__atomic_load_n(&km_running, __ATOMIC_SEQ_CST)) {
        if (idle >= KM_IDLE_ROUNDS) {
            pthread_mutex_lock(&km_mu);
            __atomic_store_n(&km_waiting, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n(&km_on, __ATOMIC_SEQ_CST) && __atomic_load_n(&km_running, __ATOMIC_SEQ_CST))
                pthread_cond_wait(&km_cv, &km_mu);
            __atomic_store_n(&km_waiting, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&km_mu);
            km_round(0);  /* what each thread spent while no call was watched is nobody's */
            idle = 0;
            clock_gettime(CLOCK_MONOTONIC, &next);
        }
        next.tv_nsec += km_period_ns;
        while (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; next.tv_sec += 1; }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec)) next = now;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        int on = __atomic_load_n(&km_on, __ATOMIC_SEQ_CST);
        km_round(on);
        idle = on ? 0 : idle + 1;
    }
    return NULL;
}

static long km_children_us(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return -1;
    return (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + (long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* installs the handler and starts the sampling thread: a look at every thread per ``usec`` of wall time while on */
int km_sampler_start(long usec) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = km_on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) return -1;
    if (km_running) return 0;
    km_period_ns = usec > 0 ? usec * 1000L : 500000L;
    km_pid = getpid();
    km_child_last = km_children_us();
    km_task_fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (km_task_fd < 0) return -1;
    km_running = 1;
    if (pthread_create(&km_thread, NULL, km_loop, NULL) != 0) { km_running = 0; return -1; }
    return 0;
}

int km_sampler_stop(void) {
    if (!km_running) return 0;
    __atomic_store_n(&km_on, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&km_mu);
    __atomic_store_n(&km_running, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&km_cv);
    pthread_mutex_unlock(&km_mu);
    pthread_join(km_thread, NULL);
    return 0;
}

void km_sampler_on(void) {
    __atomic_store_n(&km_on, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&km_waiting, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&km_mu);
        pthread_cond_signal(&km_cv);
        pthread_mutex_unlock(&km_mu);
    }
}

void km_sampler_off(void) { __atomic_store_n(&km_on, 0, __ATOMIC_SEQ_CST); }

/* whether the handler is still the sampler's and its thread still there */
int km_sampler_intact(void) {
    struct sigaction sa;
    if (sigaction(SIGPROF, NULL, &sa) != 0 || sa.sa_sigaction != km_on_prof) return 0;
    if (!km_running || km_tid == 0) return km_running;
    return syscall(SYS_tgkill, km_pid, km_tid, 0) == 0;
}

/* copies up to ``max`` (address, weight) pairs into ``out`` / ``weights``, returns how many samples were recorded,
 * and starts over; ``sent`` and ``weight``: the periods of CPU time signalled and recorded since the last take;
 * ``child_us``: the microseconds of CPU time of child processes reaped since then */
long km_sampler_take(uint64_t *out, uint32_t *weights, long max, long *sent, long *weight, long *child_us) {
    long n = __atomic_exchange_n(&km_count, 0, __ATOMIC_SEQ_CST);
    long k = n < KM_MAX_SAMPLES ? n : KM_MAX_SAMPLES;
    if (k > max) k = max;
    for (long i = 0; i < k; ++i) { out[i] = km_pcs[i]; weights[i] = km_ws[i]; }
    *sent = __atomic_exchange_n(&km_sent, 0, __ATOMIC_SEQ_CST);
    *weight = __atomic_exchange_n(&km_weight, 0, __ATOMIC_SEQ_CST);
    long now = km_children_us();
    *child_us = (km_child_last >= 0 && now > km_child_last) ? now - km_child_last : 0;
    km_child_last = now;
    return n;
}

/* The dispatch monitor's check of a host conversion of floating values to an integer or boolean dtype
 * (verifier/child/monitors.py ``DispatchRecorder._conversion``): 1 where a value is not whole (``to_bool``: not 0 or 1),
 * NaN included, else 0; -1 for a shape it does not take. Here, in the sampler's own library, not with numpy: the check
 * runs inside the watched call, and its samples in numpy's library counted as a vendor's compute in the candidate's
 * forward (an honest conversion of whole values was C01 on a loaded host). ``kind``: 4 float32, 8 float64, 2 float16;
 * ``strides`` in elements. No libm: a double of magnitude 2^52 or more is whole. */
static double km_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13);
    else if (e != 0) bits = sign | ((e + 112) << 23) | (m << 13);
    else if (m == 0) bits = sign;
    else { e = 113; while (!(m & 0x400)) { m <<= 1; e--; } bits = sign | (e << 23) | ((m & 0x3ff) << 13); }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

int km_not_whole(const char *base, int kind, int ndim, const long *shape, const long *strides, int to_bool) {
    long idx[64];
    if (ndim < 0 || ndim > 64 || (kind != 2 && kind != 4 && kind != 8)) return -1;
    for (int d = 0; d < ndim; ++d) { if (shape[d] <= 0) return 0; idx[d] = 0; }
    for (;;) {
        long off = 0;
        for (int d = 0; d < ndim; ++d) off += idx[d] * strides[d];
        double v = kind == 4 ? ((const float *)base)[off] : kind == 8 ? ((const double *)base)[off]
                                                                       : km_half(((const uint16_t *)base)[off]);
        if (v != v) return 1;
        if (to_bool) { if (v != 0.0 && v != 1.0) return 1; }
        else if ((v < 0 ? -v : v) < 4503599627370496.0 && v != (double)(long long)v) return 1;
        int d = ndim - 1;
        while (d >= 0 && ++idx[d] == shape[d]) { idx[d] = 0; --d; }
        if (d < 0) return 0;
    }
}

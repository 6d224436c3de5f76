/* Where forward's CPU time goes on the cpu backend: a SIGPROF timer over the process's CPU time (every thread's)
 * records the interrupted instruction's address while a watched call runs. Loaded by verifier/child/sampler.py. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

#define KM_MAX_SAMPLES 65536

static volatile uint64_t km_pcs[KM_MAX_SAMPLES];
static volatile long km_count = 0;   /* samples taken while on (may exceed the buffer: the rest are counted only) */
static volatile int km_on = 0;

static void km_on_prof(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)si;
    if (!km_on) return;
    ucontext_t *uc = (ucontext_t *)ctx;
#if defined(__x86_64__)
    uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    uint64_t pc = (uint64_t)uc->uc_mcontext.pc;
#else
    uint64_t pc = 0;
#endif
    long i = __atomic_fetch_add(&km_count, 1, __ATOMIC_RELAXED);
    if (i < KM_MAX_SAMPLES) km_pcs[i] = pc;
}

/* installs the handler and starts the timer: one signal per ``usec`` of the process's CPU time */
int km_sampler_start(long usec) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = km_on_prof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) return -1;
    struct itimerval it;
    it.it_interval.tv_sec = usec / 1000000; it.it_interval.tv_usec = usec % 1000000;
    it.it_value = it.it_interval;
    return setitimer(ITIMER_PROF, &it, NULL);
}

int km_sampler_stop(void) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    km_on = 0;
    return setitimer(ITIMER_PROF, &it, NULL);
}

void km_sampler_on(void) { __atomic_store_n(&km_on, 1, __ATOMIC_SEQ_CST); }
void km_sampler_off(void) { __atomic_store_n(&km_on, 0, __ATOMIC_SEQ_CST); }

/* whether the handler is still the sampler's and the timer still armed */
int km_sampler_intact(void) {
    struct sigaction sa;
    struct itimerval it;
    if (sigaction(SIGPROF, NULL, &sa) != 0 || sa.sa_sigaction != km_on_prof) return 0;
    if (getitimer(ITIMER_PROF, &it) != 0) return 0;
    return it.it_interval.tv_sec != 0 || it.it_interval.tv_usec != 0;
}

/* copies up to ``max`` addresses into ``out``, returns how many samples were taken, and starts over */
long km_sampler_take(uint64_t *out, long max) {
    int was = km_on;
    km_on = 0;
    long n = km_count;
    long k = n < KM_MAX_SAMPLES ? n : KM_MAX_SAMPLES;
    if (k > max) k = max;
    for (long i = 0; i < k; ++i) out[i] = km_pcs[i];
    km_count = 0;
    km_on = was;
    return n;
}

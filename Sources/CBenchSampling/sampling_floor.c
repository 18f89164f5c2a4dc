// The sampling floor: a fixed loop under a cpu-clock perf event, with and without a signal
// per overflow (CBenchSampling.h says why).
#include "CBenchSampling.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_PAGES 2  // the control page and one data page, as the Time Profiler maps

static _Atomic uint64_t g_signals;

static void countSignal(int signal, siginfo_t *info, void *context) {
  (void)signal;
  (void)info;
  (void)context;
  atomic_fetch_add_explicit(&g_signals, 1, memory_order_relaxed);
}

static double nowMilliseconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

// Arithmetic on a buffer that stays in L1: the loop's own cost does not depend on the
// caches, so what a sample evicts shows as it would in a program's hot loop.
static float g_buffer[1 << 12];

static void loop(int32_t work) {
  float sum = 0;
  for (int32_t round = 0; round < work; round++) {
    for (int i = 0; i < (1 << 12); i++) {
      g_buffer[i] = g_buffer[i] * 0.999f + (float)i;
      sum += g_buffer[i];
    }
  }
  __asm__ volatile("" : : "x"(sum));
}

CBenchSampling_Run CBenchSampling_run(CBenchSampling_Source source, int32_t rateHz, int32_t work) {
  CBenchSampling_Run run = {0, 0, 0};
  if (source == CBenchSampling_None) {
    double start = nowMilliseconds();
    loop(work);
    run.milliseconds = nowMilliseconds() - start;
    return run;
  }
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.sample_period = 1000000000ull / (uint64_t)(rateHz > 0 ? rateHz : 1000);
  attr.sample_type = PERF_SAMPLE_READ;
  attr.disabled = 1;
  attr.exclude_kernel = 1;  // allowed at perf_event_paranoid 2, as the Time Profiler sets it
  attr.exclude_hv = 1;
  attr.wakeup_events = source == CBenchSampling_EventSignal ? 1 : 0;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    run.error = errno;
    return run;
  }
  long pageBytes = sysconf(_SC_PAGESIZE);
  size_t ringBytes = (size_t)(RING_PAGES * pageBytes);
  struct perf_event_mmap_page *ring = mmap(NULL, ringBytes, PROT_READ, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) {
    run.error = errno;
    close(fd);
    return run;
  }
  struct sigaction previous;
  bool handled = source == CBenchSampling_EventSignal;
  if (handled) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = countSignal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    struct f_owner_ex owner = {.type = F_OWNER_TID, .pid = tid};
    if (sigaction(SIGPROF, &action, &previous) != 0 || fcntl(fd, F_SETFL, O_ASYNC) != 0 ||
        fcntl(fd, F_SETSIG, SIGPROF) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0) {
      run.error = errno;
      munmap(ring, ringBytes);
      close(fd);
      return run;
    }
  }
  atomic_store(&g_signals, 0);
  double start = nowMilliseconds();
  (void)ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  loop(work);
  (void)ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  run.milliseconds = nowMilliseconds() - start;
  // Each overflow writes one record (header and counter value) whether or not it signals.
  uint64_t head = __atomic_load_n(&ring->data_head, __ATOMIC_ACQUIRE);
  run.samples = handled ? atomic_load(&g_signals) : head / (sizeof(struct perf_event_header) + sizeof(uint64_t));
  close(fd);  // a signal still pending is discarded with the event's owner
  munmap(ring, ringBytes);
  if (handled) sigaction(SIGPROF, &previous, NULL);
  return run;
}

// The Time Profiler's primary sample source: a software cpu-clock perf event per thread.
//
// POSIX CPU-time timers (timer_create on a thread's CPU clock) expire on the kernel's
// ticks, so at HZ=250 a 1 kHz request gets about 250 signals per CPU second. The
// cpu-clock event runs an hrtimer while its thread is on a CPU and overflows every period
// of that thread's CPU time (measured here: 982-989 overflows per CPU second at 1 kHz).
// Each event's overflow is signalled to its own thread (F_SETOWN_EX, F_OWNER_TID) as
// SIGPROF (F_SETSIG), so the existing handler runs on the thread it samples.
//
// Re-arming after each overflow (PERF_EVENT_IOC_REFRESH, as async-profiler does) cost
// 6.3 µs per sample here, a VM where starting an hrtimer exits to the hypervisor. Instead
// each event has a one-page ring mapped read-only: the kernel then overwrites it freely,
// wakes (signals) on every record, and never stops the event. Each record carries the
// counter (PERF_SAMPLE_READ), so the handler weighs a sample by the CPU time since the
// previous one without a system call, in nanoseconds as counted. Not rounded to periods:
// with the rounding carried from sample to sample, a weight counts the points of a fixed
// grid of the thread's CPU time passed since the previous sample, which ties the weights
// to one phase of work that repeats at the period whenever the gaps between samples vary.
// With exclude_kernel (required at perf_event_paranoid 2) overflows that land in kernel
// mode write no record, and their time goes to the next sample's weight: the count itself
// includes kernel time.
//
// Dithered (dither.h), the handler sets a new period with PERF_EVENT_IOC_PERIOD, which
// restarts the event's hrtimer for that much CPU time from now. That restart exits to the
// hypervisor on a VM (docs/measurements.md), so the period is drawn anew every DITHER_BLOCK
// samples, not every one. Within a block, samples d apart lie d drawn periods apart, a
// length uniform over d mean periods' width, so in work that repeats every mean period
// their phases are pairwise independent (E[exp(2πi·d·U)] = 0): the variance of a count
// stays binomial. A sample's weight is the gap before it, and the phase a block starts at
// does not depend on the period drawn for it, so weighting by the gap adds no bias.
#include "dither.h"
#include "sampler_internal.h"

#include "CPerfSampler.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

// fds at or above this are not used (the event is closed and the thread falls back to a
// timer): the handler indexes a static table by si_fd.
#define PERF_MAX_FD  16384
#define RING_PAGES   2   // the control page and one data page
#define RECORD_BYTES 16  // perf_event_header + the counter value

typedef struct Slot {
  _Atomic uint64_t cookie;  // 0: not ours
  struct perf_event_mmap_page *page;
  uint64_t period;  // the mean
  // Written only by the handler of the slot's own thread.
  uint64_t last;
  uint64_t dither;     // the generator's state
  uint32_t sinceDraw;  // samples since the period was last drawn
} Slot;

enum { DITHER_BLOCK = 16 };

static Slot g_slots[PERF_MAX_FD];
static long g_pageBytes;

int perf_source_open(pid_t tid, int32_t rateHz, uint64_t cookie, bool *refused) {
  *refused = false;
  if (!g_pageBytes) g_pageBytes = sysconf(_SC_PAGESIZE);
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  uint64_t period = 1000000000ull / (uint64_t)rateHz;
  uint64_t dither = dither_seed((uint64_t)tid, cookie);
  // The first period is the mean, not drawn: a thread that runs one period of CPU time is
  // then sampled once, where a drawn one would miss half of them (54 of 100 1 ms threads).
  // One drawn period after the first sample is enough to randomize the phase.
  attr.sample_period = period;
  attr.sample_type = PERF_SAMPLE_READ;
  attr.read_format = 0;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.wakeup_events = 1;
  int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *refused = err != ESRCH && err != EMFILE && err != ENFILE && err != ENOMEM;
    return -err;
  }
  int err = 0;
  void *ring = MAP_FAILED;
  if (fd >= PERF_MAX_FD) {
    err = EMFILE;
    goto fail;
  }
  // Read-only: an overwriting ring the kernel never waits on.
  ring = mmap(NULL, (size_t)(RING_PAGES * g_pageBytes), PROT_READ, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) {
    err = errno;  // EPERM: over perf_event_mlock_kb and RLIMIT_MEMLOCK
    goto fail;
  }
  Slot *slot = &g_slots[fd];
  slot->page = ring;
  slot->period = period;
  slot->last = 0;
  slot->dither = dither;
  slot->sinceDraw = DITHER_BLOCK - 1;  // drawn at the first sample
  atomic_store_explicit(&slot->cookie, cookie, memory_order_release);
  struct f_owner_ex owner = {.type = F_OWNER_TID, .pid = tid};
  if (fcntl(fd, F_SETFL, O_ASYNC) != 0 || fcntl(fd, F_SETSIG, SIGPROF) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0 ||
      ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
    err = errno;
    atomic_store(&slot->cookie, 0);
    goto fail;
  }
  return fd;
fail:
  if (ring != MAP_FAILED) munmap(ring, (size_t)(RING_PAGES * g_pageBytes));
  close(fd);
  return -(err ? err : EINVAL);
}

void perf_source_forget(int fd) {
  if (fd < 0 || fd >= PERF_MAX_FD) return;
  (void)ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  atomic_store(&g_slots[fd].cookie, 0);
}

void perf_source_release(int fd) {
  if (fd < 0 || fd >= PERF_MAX_FD) return;
  Slot *slot = &g_slots[fd];
  if (slot->page) munmap(slot->page, (size_t)(RING_PAGES * g_pageBytes));
  slot->page = NULL;
  close(fd);
}

uint64_t perf_source_count(int fd) {
  uint64_t value = 0;
  if (read(fd, &value, sizeof(value)) != (ssize_t)sizeof(value)) return 0;
  return value;
}

bool perf_source_signal(const siginfo_t *info, uint64_t *cookie, uint32_t *weight) {
  if (info->si_code < POLL_IN || info->si_code > POLL_HUP) return false;
  int fd = info->si_fd;
  if (fd < 0 || fd >= PERF_MAX_FD) return false;
  Slot *slot = &g_slots[fd];
  uint64_t value = atomic_load_explicit(&slot->cookie, memory_order_acquire);
  if (!value) return false;
  *cookie = value;
  // Without a sample record to read (a throttle record is newest): no weight; the next
  // record's counter still holds this time, so the weights keep adding up.
  *weight = 0;
  if (g_dither && ++slot->sinceDraw >= DITHER_BLOCK) {
    slot->sinceDraw = 0;
    uint64_t next = dither_period(&slot->dither, slot->period);
    (void)ioctl(fd, PERF_EVENT_IOC_PERIOD, &next);  // failing, the event keeps its last period
  }
  struct perf_event_mmap_page *page = slot->page;
  if (!page) return true;
  uint64_t head = __atomic_load_n(&page->data_head, __ATOMIC_ACQUIRE);
  uint64_t size = page->data_size;
  if (head < RECORD_BYTES || !size) return true;
  const uint8_t *data = (const uint8_t *)page + page->data_offset;
  struct perf_event_header header;
  uint64_t count;
  memcpy(&header, data + (head - RECORD_BYTES) % size, sizeof(header));
  memcpy(&count, data + (head - 8) % size, sizeof(count));
  // The newest record is a sample (a throttle record would be longer): its counter
  // says how much CPU time the thread used since the previous sample's.
  if (header.type != PERF_RECORD_SAMPLE || header.size != RECORD_BYTES || count < slot->last) return true;
  // Any amount, small ones included: a weight clamped to at least one period (as before)
  // made a thread's weights add up to 107-124 % of its CPU time in some runs.
  uint64_t elapsed = count - slot->last;
  slot->last = count;
  *weight = elapsed > UINT32_MAX ? UINT32_MAX : (uint32_t)elapsed;
  return true;
}

int32_t CPerfSampler_perfEventsAvailable(void) {
  bool refused = false;
  int fd = perf_source_open((pid_t)syscall(SYS_gettid), 1, 0, &refused);
  if (fd < 0) return 0;
  perf_source_forget(fd);
  perf_source_release(fd);
  return 1;
}

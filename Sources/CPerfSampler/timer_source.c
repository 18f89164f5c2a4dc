// The POSIX-timer sample source's weights and dithering (the timers themselves are created
// in thread_table.c). A sample stands for the time its timer's clock (the thread's CPU
// clock, or the monotonic one on the wall clock) moved since the previous sample, read in
// the handler: CPU-time timers expire on kernel ticks, not when asked, so neither the
// period asked for nor 1 + overruns is the time that passed. Each timer is armed periodic
// at the mean period; dithered, the handler re-arms it with a drawn first expiry and the
// same interval, so the next sample comes after the drawn period or the tick after it (the
// interval still fires if a re-arm is lost). Dithering then picks which tick, it does not
// make them finer.
#include "dither.h"
#include "sampler_internal.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// Indexed by the kernel's timer id (si_timerid), which the handler has without a lookup.
// A slot is registered when the table arms the timer and forgotten before it deletes it, so
// the handler re-arms only a timer of ours that is still alive: a stale signal's id may name
// the program's own timer by then, and re-arming that would change the program's signals.
// Ids grow per process, so two live timers can share a slot: the later one takes it and the
// other keeps its fixed period, weighed 1 + overruns periods.
#define TIMER_SLOTS 4096

typedef struct TimerSlot {
  _Atomic uint64_t cookie;  // 0: no timer of ours
  _Atomic int32_t id;
  clockid_t clock;  // the timer's clock
  uint64_t lastNs;  // that clock at the previous sample (at arming, before the first)
  uint64_t dither;  // the generator's state
} TimerSlot;

// Registered and forgotten under the table's lock; the rest is written only by the handler
// on its timer's thread.
static TimerSlot g_timerSlots[TIMER_SLOTS];

static uint64_t clock_ns(clockid_t clock) {
  struct timespec now;
  if (clock_gettime(clock, &now) != 0) return 0;
  return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

void timer_source_register(int id, uint64_t cookie, clockid_t clock) {
  if (id < 0) return;
  TimerSlot *slot = &g_timerSlots[id % TIMER_SLOTS];
  atomic_store_explicit(&slot->cookie, 0, memory_order_release);
  slot->clock = clock;
  slot->lastNs = clock_ns(clock);
  slot->dither = dither_seed(cookie >> 32, (uint64_t)id);
  atomic_store_explicit(&slot->id, id, memory_order_relaxed);
  atomic_store_explicit(&slot->cookie, cookie, memory_order_release);
}

void timer_source_forget(int id) {
  if (id < 0) return;
  TimerSlot *slot = &g_timerSlots[id % TIMER_SLOTS];
  if (atomic_load_explicit(&slot->id, memory_order_relaxed) == id)
    atomic_store_explicit(&slot->cookie, 0, memory_order_release);
}

uint32_t timer_source_signal(const siginfo_t *info, uint64_t cookie) {
  int32_t rateHz = g_config.rateHz;
  uint64_t mean = 1000000000ull / (uint64_t)(rateHz > 0 ? rateHz : 1);
  uint64_t overruns = (uint64_t)(info->si_overrun > 0 ? info->si_overrun : 0);
  uint64_t weight = (1 + overruns) * mean;  // a timer whose slot another one took
  int id = info->si_timerid;
  TimerSlot *slot = id >= 0 ? &g_timerSlots[id % TIMER_SLOTS] : NULL;
  if (slot && atomic_load_explicit(&slot->cookie, memory_order_acquire) == cookie &&
      atomic_load_explicit(&slot->id, memory_order_relaxed) == id) {
    // clock_gettime is async-signal-safe; on a CPU clock it is a system call, at the
    // kernel's tick rate (250 a second at HZ=250), the rate these timers fire at.
    uint64_t now = clock_ns(slot->clock);
    if (now >= slot->lastNs) weight = now - slot->lastNs;
    slot->lastNs = now;
    if (g_dither) {
      uint64_t next = dither_period(&slot->dither, mean);
      struct itimerspec spec = {
          .it_interval = {.tv_sec = (time_t)(mean / 1000000000ull), .tv_nsec = (long)(mean % 1000000000ull)},
          .it_value = {.tv_sec = (time_t)(next / 1000000000ull), .tv_nsec = (long)(next % 1000000000ull)},
      };
      // The kernel's id, so the raw call: glibc's timer_t is not at hand in the handler.
      // Failing, the timer stays periodic.
      (void)syscall(SYS_timer_settime, id, 0, &spec, NULL);
    }
  }
  return weight > UINT32_MAX ? UINT32_MAX : (uint32_t)weight;
}

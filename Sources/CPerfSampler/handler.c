// The SIGPROF handler: whose signal it is, the sample's stack from the fast unwinder (or
// deferred, or from libunwind), and its record in the arena; installing the handler.
#include "async_chain.h"
#include "deferred.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

// Frames the handler itself adds on top of the interrupted stack (handler,
// unw_backtrace, the signal trampoline), so maxDepth interrupted frames still fit.
#define HANDLER_FRAME_SLACK 32

// MARK: - State shared with the signal handler

// Everything the handler touches on every sample: one cache line (see HotState).
SAMPLER_HIDDEN HotState g_hot __attribute__((aligned(64)));
SAMPLER_HIDDEN _Atomic uint64_t g_lost;
SAMPLER_HIDDEN _Atomic uint64_t g_fallbacks;
SAMPLER_HIDDEN _Atomic uint64_t g_mismatches;

static uintptr_t g_restorer;  // glibc's __restore_rt, read back from sigaction
static struct sigaction g_previous;
SAMPLER_HIDDEN int32_t g_previousKind;  // what g_previous is: 0 default, 1 a handler, 2 ignored
static bool g_installed;

// MARK: - Signal handler

// The libunwind path: unw_backtrace from inside the handler, dropping the handler's own
// frames (up to the trampoline and the interrupted PC). Returns the frame count in out.
static int libunwind_stack(void *context, uint64_t *out, int maxDepth) {
  uintptr_t pc = (uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
  void *buffer[maxDepth + HANDLER_FRAME_SLACK];
  int captured = unw_backtrace(buffer, maxDepth + HANDLER_FRAME_SLACK);
  if (captured < 0) captured = 0;

  // Search from the trampoline on, so a handler-side frame can never match by chance.
  int trampoline = -1;
  for (int i = 0; i < captured; i++) {
    if ((uintptr_t)buffer[i] == g_restorer) {
      trampoline = i;
      break;
    }
  }
  int first = -1;
  for (int i = trampoline + 1; i < captured; i++) {
    if ((uintptr_t)buffer[i] == pc) {
      first = i;
      break;
    }
  }

  // Either the frames from the interrupted PC on, or (fallback) the PC followed by
  // whatever libunwind found after the trampoline.
  int tailStart;
  if (first >= 0) {
    tailStart = first + 1;
  } else {
    atomic_fetch_add_explicit(&g_fallbacks, 1, memory_order_relaxed);
    tailStart = trampoline >= 0 ? trampoline + 1 : captured;
  }
  int tailCount = captured - tailStart;
  if (tailCount > maxDepth - 1) tailCount = maxDepth - 1;
  if (tailCount < 0) tailCount = 0;
  out[0] = pc;
  for (int i = 0; i < tailCount; i++) out[i + 1] = (uint64_t)(uintptr_t)buffer[tailStart + i];
  return 1 + tailCount;
}

// Only the owner's handler writes its counter: a plain increment, no locked add.
static inline void count_fast_sample(ThreadRecord *owner) {
  if (owner) {
    uint64_t count = atomic_load_explicit(&owner->fastSamples, memory_order_relaxed);
    atomic_store_explicit(&owner->fastSamples, count + 1, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&g_fastSamples, 1, memory_order_relaxed);
  }
}

// Records one sample; runs inside the signal handler, with g_inflight held.
static void record_sample(uint32_t weight, void *context, uint64_t entryNs, int32_t tid, ThreadRecord *record) {
  atomic_fetch_add_explicit(&g_signals, 1, memory_order_relaxed);

  int maxDepth = atomic_load_explicit(&g_maxDepth, memory_order_relaxed);
  int mode = atomic_load_explicit(&g_unwinderActive, memory_order_relaxed);

  uint64_t frames[maxDepth];
  int count = -1;
  bool walked = false;  // frames are the fast path's walk, its states in the owner's trace
  ThreadRecord *owner = record && atomic_load_explicit(&record->tid, memory_order_relaxed) == tid ? record : NULL;
  if (owner) async_prefetch_task(owner);
  if (mode != UNWINDER_LIBUNWIND && owner) {
    WalkMiss miss;
    count = fast_unwind((const ucontext_t *)context, owner, frames, maxDepth, &miss);
    walked = count > 0;
    if (count == -2) {
      // The task's chain is read now, while its contexts are what they are at the sample;
      // the walk that finds the executor's frame is finished later.
      uint64_t chain[ASYNC_MAX_HOPS];
      int hops = atomic_load_explicit(&g_executorLow, memory_order_relaxed)
                     ? async_chain(async_resumed_context(owner), owner, chain, ASYNC_MAX_HOPS)
                     : 0;
      if (mode == UNWINDER_VERIFY) {
        uint64_t check[maxDepth];
        int checked = libunwind_stack(context, check, maxDepth);
        if (defer_sample((const ucontext_t *)context, &miss, frames, check, checked, chain, hops, tid, weight, entryNs))
          return;
      } else if (defer_sample((const ucontext_t *)context, &miss, frames, NULL, 0, chain, hops, tid, weight, entryNs)) {
        return;
      }
      // Not deferred: learn in place, going on from the miss.
      count = walk((const ucontext_t *)context, miss.ip, miss.sp, miss.bp, miss.leaf, miss.high, 0, frames, miss.n,
                   maxDepth, NULL, NULL, NULL, NULL);
    }
  }
  if (count > 0 && mode == UNWINDER_VERIFY) {
    uint64_t check[maxDepth];
    int checked = libunwind_stack(context, check, maxDepth);
    if (checked != count || memcmp(check, frames, (size_t)count * 8) != 0) {
      atomic_fetch_add_explicit(&g_mismatches, 1, memory_order_relaxed);
      memcpy(frames, check, (size_t)checked * 8);  // record what libunwind saw
      count = checked;
      walked = false;
    }
    count_fast_sample(owner);
  } else if (count > 0) {
    count_fast_sample(owner);
  } else {
    count = libunwind_stack(context, frames, maxDepth);
  }
  if (owner) count = async_extend(frames, count, maxDepth, walked ? &owner->traces[owner->current] : NULL, owner);
  append_record(tid, weight, entryNs, (uint32_t)(now_ns() - entryNs), frames, (uint32_t)count);
}

SAMPLER_HIDDEN void sigprof_handler(int sig, siginfo_t *info, void *context) {
  int savedErrno = errno;
  // Only the raw TSC here: the calibration is read once the signal is known to be this
  // session's, which start calibrated before enabling it (a stale signal from an earlier
  // session can arrive while start rewrites it).
  uint64_t entryTsc = __rdtsc();

  // Held from here: stop() (and a thread's disarm) unmap a perf event's ring only when
  // no handler that may have read its fd's slot is left.
  atomic_fetch_add(&g_inflight, 1);
  uint64_t value;
  uint32_t weight;  // ns
  if (info->si_code == SI_TIMER) {
    value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    // Our timers weigh and re-arm in timer_source.c; a program's own keeps its period.
    weight = ((uint32_t)value & COOKIE_MAGIC_MASK) == COOKIE_MAGIC ? timer_source_signal(info, value) : 0;
  } else if (info->si_code == SI_QUEUE) {
    // A wall-clock tick (wall_ticks.c), or a program's own sigqueue: the cookie tells.
    value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    weight = (uint32_t)info->si_uid;
  } else if (!perf_source_signal(info, &value, &weight)) {
    value = 0;
  }
  uint32_t cookie = (uint32_t)value;
  if ((cookie & COOKIE_MAGIC_MASK) != COOKIE_MAGIC) {
    atomic_fetch_sub(&g_inflight, 1);
    CPerfSupport_forwardSignal(&g_previous, sig, info, context);
    errno = savedErrno;
    return;
  }

  // The thread's record and both its walks: the misses on them overlap with the shared
  // line's below. The tables are static, and only our timers send this cookie.
  ThreadRecord *record = NULL;
  uint32_t recordIndex = cookie & COOKIE_RECORD_MASK;
  if (recordIndex && recordIndex <= THREAD_RECORDS) {
    // The walk starts with the interrupted PC's rule: a miss everything else waits for.
    uint64_t pc = (uint64_t)((const ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
    if (pc < RULE_MAX_PC) __builtin_prefetch(&g_rules[rule_set(rule_address(pc, true)) * RULE_WAYS]);
    record = &g_records[recordIndex - 1];
    for (int line = 0; line < 1 + 2 * TRACE_PREFETCH_LINES; line++) {
      const uint8_t *at = line == 0 ? (const uint8_t *)record
                          : line <= TRACE_PREFETCH_LINES
                              ? (const uint8_t *)&record->traces[0] + 64 * (line - 1)
                              : (const uint8_t *)&record->traces[1] + 64 * (line - 1 - TRACE_PREFETCH_LINES);
      __builtin_prefetch(at, 1);
    }
  }
  // In-flight count first (above), then the enabled check (both seq_cst): stop() clears
  // g_enabled and then waits for g_inflight == 0, so no handler touches the arena
  // after stop() returns.
  // A generation mismatch is a SIGPROF still pending from an earlier session's
  // (deleted) timer.
  if (atomic_load(&g_enabled) && !atomic_load_explicit(&g_hot.muted, memory_order_relaxed) &&
      (cookie & COOKIE_GENERATION_MASK) ==
          ((atomic_load_explicit(&g_generation, memory_order_relaxed) << COOKIE_GENERATION_SHIFT) &
           COOKIE_GENERATION_MASK)) {
    record_sample(weight, context, tsc_ns(entryTsc), (int32_t)(value >> 32), record);
  }
  atomic_fetch_sub(&g_inflight, 1);
  errno = savedErrno;
}

SAMPLER_HIDDEN int install_handler(void) {
  struct sigaction current;
  // Still ours: keep the previous handler found when it was installed.
  if (g_installed && sigaction(SIGPROF, NULL, &current) == 0 && current.sa_sigaction == sigprof_handler) return 0;
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_sigaction = sigprof_handler;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGPROF, &action, &g_previous) != 0) return errno;
  // The program's own disposition: chained to (a handler) or honoured (ignored) for
  // SIGPROFs that are not ours, and reported.
  g_previousKind = (g_previous.sa_flags & SA_SIGINFO) ? (g_previous.sa_sigaction ? 1 : 0)
                   : g_previous.sa_handler == SIG_IGN ? 2
                   : g_previous.sa_handler == SIG_DFL ? 0
                                                      : 1;
  // glibc reports the restorer it installed (__restore_rt): the handler uses it to find
  // where its own frames end.
  if (sigaction(SIGPROF, NULL, &current) == 0) g_restorer = (uintptr_t)current.sa_restorer;
  // The handler stays installed for the rest of the process, disabled between sessions:
  // SIGPROFs from deleted timers can still be pending after stop, and restoring SIG_DFL
  // would let one of them terminate the process. Foreign SIGPROFs are chained to the
  // previous handler.
  g_installed = true;
  return 0;
}

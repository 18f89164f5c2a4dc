// The Time Profiler's sampler: per-thread POSIX timers deliver SIGPROF to each thread,
// the handler unwinds with libunwind into a lock-free mmap arena.
// Only the parts that must be C live here (signal handler, timers, /proc scanning).
#include "CPerfSampler.h"

#include "CPerfClock.h"
#include "sampler_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <libunwind.h>
#include <x86intrin.h>

_Static_assert(sizeof(CPerfSampler_SampleHeader) == 24, "arena record header layout");
_Static_assert(sizeof(CPerfSampler_SampleHeader) % 8 == 0, "frames must stay 8-byte aligned");
_Static_assert(sizeof(CPerfSampler_Config) == 24, "config layout");
_Static_assert(sizeof(CPerfSampler_ThreadInfo) == 88, "thread info layout");
_Static_assert(sizeof(void *) == sizeof(uint64_t), "frames are stored as 64-bit addresses");

// The kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): another thread's CPU clock.
// Computed unsigned because shifting a negative int is undefined in C.
#define THREAD_CPUCLOCK(tid) ((clockid_t)((((uint32_t)~(uint32_t)(tid)) << 3) | 6u))

// Frames the handler itself adds on top of the interrupted stack (handler,
// unw_backtrace, the signal trampoline), so maxDepth interrupted frames still fit.
#define HANDLER_FRAME_SLACK 32

// Timer signals carry (tid << 32) | COOKIE_MAGIC | generation | record in sigev_value: the
// handler tells its own SIGPROFs (current or earlier session) from anyone else's and
// learns the thread id without a gettid syscall.
// The record is 1 + the index of the thread's ThreadRecord (0: none), so the handler
// finds its thread's state without a lookup.
#define COOKIE_MAGIC 0x5A000000u
#define COOKIE_MAGIC_MASK 0xFF000000u
#define COOKIE_GENERATION_SHIFT 10
#define COOKIE_GENERATION_MASK 0x00FFFC00u
#define COOKIE_RECORD_MASK 0x000003FFu

#define DISCOVERY_INTERVAL_NS 2000000L
// A new thread runs unsampled until discovery sees it: a short cap keeps Dispatch's
// short-lived workers in the profile at the price of a little more /proc scanning.
#define DISCOVERY_MAX_INTERVAL_NS 4000000L

// MARK: - State shared with the signal handler

enum { STATE_IDLE = 0, STATE_RUNNING = 1, STATE_STOPPED = 2, STATE_BUSY = 3 };
static _Atomic int32_t g_state = STATE_IDLE;

// Everything the handler touches on every sample shares one cache line: between two
// samples the profiled code evicts it, and each separate line is a miss (~100 ns).
static struct {
  _Atomic int32_t enabled;
  _Atomic int32_t inflight;
  _Atomic uint32_t generation;
  _Atomic int32_t maxDepth;
  uint8_t *_Atomic arena;
  _Atomic uint64_t capacity;
  _Atomic uint64_t used;
  _Atomic uint64_t signals;
  struct Tables *tables;
  _Atomic int32_t unwinderActive;
  _Atomic int32_t muted;
} g_hot __attribute__((aligned(64)));
_Static_assert(sizeof(g_hot) <= 64, "handler state fits one cache line");
#define g_enabled g_hot.enabled
#define g_inflight g_hot.inflight
#define g_generation g_hot.generation
#define g_arena g_hot.arena
#define g_capacity g_hot.capacity
#define g_maxDepth g_hot.maxDepth
#define g_used g_hot.used
#define g_signals g_hot.signals
#define g_fastSamples TABLES->fastSamples
#define g_unwinderActive g_hot.unwinderActive
static _Atomic uint64_t g_lost;
static _Atomic uint64_t g_fallbacks;

static uintptr_t g_restorer;  // glibc's __restore_rt, read back from sigaction
static struct sigaction g_previous;
static int32_t g_previousKind;  // what g_previous is: 0 default, 1 a handler, 2 ignored
static bool g_installed;

// MARK: - State owned by start/stop and the discovery thread

typedef struct ThreadEntry {
  pid_t tid;
  timer_t timer;
  bool hasTimer;
  bool exited;
  bool timerFailed;
  int timerErrno;
  uint64_t mark;
  char firstName[16];
  char latestName[16];
  bool nameRefreshed;
  int32_t record;  // index into the ThreadRecords while armed, -1: none
  int perfFd;      // the thread's cpu-clock event while armed, -1: none
  int32_t source;  // CPerfSampler_Source that sampled it
  bool bornDuring;   // started during the recording: its CPU time counts from 0
  bool ended;        // its end was seen on it (pthread_create threads)
  bool lingering;    // ended, but still listed in /proc until its exit completes
  bool cpuKnown;
  bool blocksSignal;
  uint64_t cpuAtArmNs;  // the thread's CPU clock when it was armed
  uint64_t cpuNs;       // its CPU time during the recording, once known
  // Wall-clock ticks (wall_ticks.c): its cookie, its /proc files, and the wall time it
  // spent where a tick would have made its call return EINTR.
  uint64_t cookie;
  int statFd;
  int syscallFd;
  uint64_t unsignalledNs;
  int32_t unsignalledSyscall;
} ThreadEntry;

// Guards the thread table and the thread records' free list: the discovery thread, start
// and stop, and threads starting and ending (threads.c) change them. Never the handler.
static pthread_mutex_t g_tableLock = PTHREAD_MUTEX_INITIALIZER;
static ThreadEntry *g_threads;
static size_t g_threadCount;
static size_t g_threadCapacity;
static uint64_t g_scanMark;
static _Atomic uint64_t g_timerFailures;
// errno of the first refused perf_event_open this session (0: none): the reason threads
// were given timers instead.
static int g_perfErrno;
static _Atomic pid_t g_tickerTid;  // the wall clock's ticker thread while it runs, else 0
static _Atomic bool g_tableOpen;  // threads may be added (start to stop), under g_tableLock
static int32_t g_handlerReplaced;  // at stop: 0 ours, 1 another handler, 2 SIG_IGN, 3 SIG_DFL
static bool g_perfRefused;  // perf_event_open is refused outright: timers from here on

static CPerfSampler_Config g_config;
static uint64_t g_startNs;
static uint64_t g_stopNs;
static size_t g_mappedBytes;

static pthread_t g_discovery;
static bool g_discoveryRunning;
static _Atomic int32_t g_discoveryStop;

// MARK: - Helpers

static inline uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: async-signal-safe
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int32_t CPerfSampler_gettid(void) { return (int32_t)syscall(SYS_gettid); }

static void set_error(CPerfSampler_Error *error, int32_t code, const char *call, int err) {
  if (error) {
    error->code = code;
    error->sysErrno = err;
    error->call = call;
  }
}

// Reads /proc/self/task/<tid>/comm into out; leaves out untouched if the thread is gone.
static void read_comm(pid_t tid, char out[16]) {
  char path[64];
  const char *prefix = "/proc/self/task/";
  size_t n = strlen(prefix);
  memcpy(path, prefix, n);
  char digits[16];
  int d = 0;
  unsigned value = (unsigned)tid;
  do {
    digits[d++] = (char)('0' + value % 10);
    value /= 10;
  } while (value && d < (int)sizeof(digits));
  while (d) path[n++] = digits[--d];
  memcpy(path + n, "/comm", 6);

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char name[16] = {0};
  ssize_t got = read(fd, name, 15);
  close(fd);
  if (got <= 0) return;
  if (name[got - 1] == '\n') name[got - 1] = 0;
  memcpy(out, name, 16);
}


// MARK: - Fast unwinder (rule cache + per-thread stack bounds)
//
// unw_backtrace inside the handler costs 5-20 µs per sample here (cold per-thread trace
// caches, a DWARF step with dl_iterate_phdr and sigprocmask for every PC it has not seen
// on that thread, and the handler's own frames). The fast path walks the interrupted
// stack itself: for each PC it looks up a tiny unwind rule (frame-pointer frame, or
// CFA = RSP + k with RBP unchanged or saved at RSP + j) in a process-wide lock-free cache.
// A rule is derived once per PC with one libunwind step from that frame (so it follows
// the DWARF CFI exactly, also for glibc/libdispatch code without frame pointers and for
// frameless leaves), then reused by every thread; off the handler, libdw's CFI row tells
// which other addresses it holds for. Every stack read is bounds-checked against the
// thread's stack mapping, which the discovery thread finds in /proc/self/maps from an
// RSP the handler published. Anything unexpected falls back to unw_backtrace.

enum { UNWINDER_AUTO = 0, UNWINDER_LIBUNWIND = 1, UNWINDER_VERIFY = 2 };
static _Atomic int32_t g_unwinder = -1;  // -1: not set, read PERFHARNESS_UNWINDER at start
static _Atomic uint64_t g_mismatches;

enum { RULE_FP = 1, RULE_SP = 2, RULE_END = 3 };
// A PC whose frame libunwind steps but no rule shape fits: such samples use libunwind
// straight away instead of learning (or deferring) again.
#define RULE_NONE 4u
// rule (26 bits, != 0): bits 0-1 type, 2-13 k (CFA = RSP + 8k), 14-25 j (RBP saved at
// RSP + 8(j-1), 0 = kept).
#define RULE_FIELD_BITS 12
#define RULE_FIELD_MASK ((1u << RULE_FIELD_BITS) - 1)
#define RULE_BITS 26
// The rule cache: 8-way sets of one 64-byte line each, one 8-byte word per entry, so a
// lookup costs at most one cache miss. A frame's rule is a function of its lookup
// address: the PC for the interrupted frame, the return address - 1 (in the call) for
// the others, as in libunwind. An entry holds the rule of one lookup address, or of a
// whole granule (16 aligned bytes, all in one CFI row: learned from the row's range,
// see extend_learned_rules). The set is a function of the granule, so both kinds for an
// address share one line, and its low RULE_SET_BITS bits can be recovered from the
// rest: an entry stores only its tag next to its rule, word = (tag << RULE_BITS) | rule,
// with tag = (address >> 15) << 5 | (address & 15) << 1 for an address, | 1 for a
// granule. Addresses are below 2^47 (user space). A word is written and read whole
// (atomically), so it is always self-consistent; 0 is empty. Entries are never cleared
// while sampling, so a lookup stops at the first empty way.
#define RULE_SET_BITS 11
#define RULE_SETS (1u << RULE_SET_BITS)
#define RULE_WAYS 8  // the replacement in a full set takes 3 bits of a hash
#define RULE_MAX_PC (1ull << 47)
#define RULE_GRANULE_BITS 4
#define g_rules (TABLES->rules)

#define TRACE_FRAMES 256
enum { TRACE_END_RULE = 1, TRACE_END_ZERO = 2, TRACE_END_DEPTH = 3 };
typedef struct TraceFrame {
  uint64_t ip, sp, bp;
  uint64_t bpAddr;  // where the next frame's bp was read; 0: bp kept
} TraceFrame;
typedef struct Trace {
  uint64_t high;     // the stack bounds the walk ran in
  int32_t count;     // frames; 0: none (or the walk did not finish)
  int32_t end;       // TRACE_END_*: why the walk stopped after the last frame
  uint64_t endAddr;  // TRACE_END_ZERO: the stack word that read 0
  TraceFrame frames[TRACE_FRAMES];
} Trace;
// One per sampled thread, assigned by discovery when it arms the thread's timer and
// named in the timer's signals (COOKIE_RECORD_MASK). Besides the stack bounds, only the
// owning thread's handler touches it (a handler is never nested on one thread: SIGPROF
// is blocked while it runs).
typedef struct ThreadRecord {
  _Atomic int32_t tid;       // 0: free
  int32_t current;           // traces[current] holds the last walk
  _Atomic uint64_t lastRsp;  // set by the handler while the bounds are unknown or stale
  _Atomic uint64_t low;      // [low, high): the stack mapping, published by discovery
  _Atomic uint64_t high;     // 0 = unknown (written last, read first)
  // The thread's fast-path samples, on the line the handler reads anyway: a shared
  // counter costs a locked add on a line other threads' handlers also write. Kept when
  // the record passes to another thread (summed at the end).
  _Atomic uint64_t fastSamples;
  uint64_t pad[3];
  Trace traces[2];
} ThreadRecord;
_Static_assert(offsetof(ThreadRecord, traces) == 64, "record header is one line");
// Threads alive at once that get the fast path (the others use libunwind).
#define THREAD_RECORDS 512
_Static_assert(THREAD_RECORDS < COOKIE_RECORD_MASK, "record index fits the cookie");
// Lines of a walk fetched ahead: its header and 30 frames.
#define TRACE_PREFETCH_LINES 16

// Everything the fast path reads besides the stack, in one region backed by huge pages
// where the kernel allows: in a VM each 4 KB page a sample touches for the first time in
// a while is a TLB miss with a two-level page walk, which costs more than the cache miss.
typedef struct Tables {
  _Atomic uint64_t rules[RULE_SETS * RULE_WAYS];
  _Atomic uint64_t fastSamples;
  // now_ns from the TSC (set at start, when the TSC is invariant): ns = nsBase +
  // (tsc - tscBase) * nsPerTsc32 / 2^32.
  uint64_t useTsc, tscBase, nsBase, nsPerTsc32;
  uint64_t pad[3];
  ThreadRecord records[THREAD_RECORDS];
} Tables;
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
// Static rather than mmap'd: the handler computes the tables' address (RIP-relative)
// instead of loading a pointer, a load that missed the cache on most samples (300-500 ns
// here) and that every other access of the handler had to wait for. Untouched pages of
// it cost nothing; start faults in what handlers may use.
#define TABLES_SPAN ((sizeof(Tables) + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1))
static uint8_t g_tableStorage[TABLES_SPAN + HUGE_PAGE_BYTES] __attribute__((aligned(4096)));
#define TABLES \
  ((Tables *)(((uintptr_t)g_tableStorage + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1)))
// The handler's clock. clock_gettime goes through libc's wrapper, the vDSO and the
// kernel's clock data: three more pages for a handler to touch, and in a VM each page not
// touched for a while is a TLB miss with a two-level walk. The TSC is read in place.
// tsc: a TSC reading taken earlier (the handler's entry), or 0 for now. Without the TSC,
// CLOCK_MONOTONIC now either way.
static inline uint64_t tsc_ns(uint64_t tsc) {
  const Tables *t = TABLES;
  if (__builtin_expect(t->useTsc != 0, 1))
    return t->nsBase + (uint64_t)(((unsigned __int128)((tsc ? tsc : __rdtsc()) - t->tscBase) * t->nsPerTsc32) >> 32);
  return monotonic_ns();
}

static inline uint64_t now_ns(void) { return tsc_ns(0); }

// Calibrates now_ns against CLOCK_MONOTONIC, if the TSC runs at a constant rate in every
// power state; start only.
static void calibrate_tsc(Tables *t) {
  t->useTsc = CPerfClock_tscIsInvariant() && CPerfClock_calibrate(&t->nsPerTsc32, &t->nsBase, &t->tscBase);
}

uint64_t CPerfSampler_nowNs(void) { return now_ns(); }

// The lookup address of a frame (see the rule cache).
static inline uint64_t rule_address(uint64_t ip, bool leaf) { return leaf ? ip : ip - 1; }

static inline uint32_t rule_set(uint64_t address) {
  uint64_t granule = address >> RULE_GRANULE_BITS;
  uint64_t high = granule >> RULE_SET_BITS;
  return (uint32_t)((granule ^ high ^ (high >> RULE_SET_BITS) ^ (high >> (2 * RULE_SET_BITS))) & (RULE_SETS - 1));
}

static inline uint64_t rule_granule_tag(uint64_t address) {
  return ((address >> (RULE_GRANULE_BITS + RULE_SET_BITS)) << (RULE_GRANULE_BITS + 1)) | 1;
}

static inline uint64_t rule_address_tag(uint64_t address) {
  return (rule_granule_tag(address) - 1) | ((address & ((1u << RULE_GRANULE_BITS) - 1)) << 1);
}

static inline uint32_t rule_lookup(uint64_t address) {
  const _Atomic uint64_t *set = &g_rules[rule_set(address) * RULE_WAYS];
  uint64_t exact = rule_address_tag(address), granule = rule_granule_tag(address);
  for (int w = 0; w < RULE_WAYS; w++) {
    uint64_t e = atomic_load_explicit(&set[w], memory_order_relaxed);
    if (e == 0) return 0;
    uint64_t tag = e >> RULE_BITS;
    if (tag == exact || tag == granule) return (uint32_t)(e & ((1u << RULE_BITS) - 1));
  }
  return 0;
}

static void rule_insert_tagged(uint64_t address, uint64_t tag, uint32_t rule) {
  _Atomic uint64_t *set = &g_rules[rule_set(address) * RULE_WAYS];
  uint64_t word = (tag << RULE_BITS) | rule;
  for (int w = 0; w < RULE_WAYS; w++) {
    uint64_t expected = 0;
    if (atomic_compare_exchange_strong(&set[w], &expected, word)) return;
    if ((expected >> RULE_BITS) == tag) return;  // another thread learned it
  }
  // Full set: replace a way (rules are immutable facts, any entry may be evicted).
  atomic_store_explicit(&set[(tag * 0x9E3779B97F4A7C15ull) >> 61], word, memory_order_relaxed);
}

static void rule_insert(uint64_t address, uint32_t rule) {
  rule_insert_tagged(address, rule_address_tag(address), rule);
}

// Steps libunwind once from the frame (ip, sp, bp), registers otherwise as in uc. The
// cursor points into ctx, which the caller owns. Returns unw_step's result, or -1 when
// the cursor cannot be set up.
static int step_once(unw_context_t *ctx, unw_cursor_t *cursor, const ucontext_t *uc, uint64_t ip, uint64_t sp,
                     uint64_t bp, bool leaf) {
  memcpy(ctx, uc, sizeof(*ctx) < sizeof(*uc) ? sizeof(*ctx) : sizeof(*uc));
  ctx->uc_mcontext.gregs[REG_RIP] = (greg_t)ip;
  ctx->uc_mcontext.gregs[REG_RSP] = (greg_t)sp;
  ctx->uc_mcontext.gregs[REG_RBP] = (greg_t)bp;
  if (unw_init_local2(cursor, ctx, leaf ? UNW_INIT_SIGNAL_FRAME : 0) < 0) return -1;
  return unw_step(cursor);
}

// derive_rule's answer when the caller's frame starts beyond `high`: on a partial stack
// copy that says nothing about the PC, so nothing is learned from it.
#define RULE_BEYOND 0xFFFFFFFFu

// x86-64's red zone: below sp, left alone by signal delivery.
#define RED_ZONE_BYTES 128u

// The range of the FDE (libunwind's procedure) that covers lookup address `address`;
// false when there is none.
static bool fde_range(uint64_t address, uint64_t *start, uint64_t *end) {
  unw_context_t ctx;
  unw_cursor_t cursor;
  unw_proc_info_t info;
  if (unw_getcontext(&ctx) != 0) return false;
  ctx.uc_mcontext.gregs[REG_RIP] = (greg_t)address;
  // As a signal frame, the lookup is at the address itself (not the one before it).
  if (unw_init_local2(&cursor, &ctx, UNW_INIT_SIGNAL_FRAME) < 0 || unw_get_proc_info(&cursor, &info) < 0)
    return false;
  // Without an FDE, libunwind describes a one-byte procedure at the address.
  if (info.format != UNW_INFO_FORMAT_TABLE && info.end_ip - info.start_ip <= 1) return false;
  *start = info.start_ip;
  *end = info.end_ip;
  return true;
}

// A caller frame without unwind information (the Swift runtime's metadata accessor
// thunks have none) is stepped by libunwind along the frame-pointer chain, with a
// made-up sp (the frame's own sp + 16 in libunwind 1.6), which no rule shape fits. At a
// return address the frame is set up (the call comes after the prologue), so the chain
// gives the real caller: a frame-pointer rule reads the same return address and rbp as
// libunwind did, and gives the caller its true sp. Without it, every sample under such
// a frame was deferred with a copy of the whole stack.
static uint32_t chain_rule(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t high, uint64_t cip, uint64_t cbp,
                           const unw_save_loc_t *loc) {
  if (bp < sp || bp > high - 16 || (bp & 7)) return 0;
  if (loc->type != UNW_SLT_MEMORY || loc->u.addr != bp) return 0;
  if (*(const uint64_t *)(uintptr_t)bp != cbp || *(const uint64_t *)(uintptr_t)(bp + 8) != cip) return 0;
  uint64_t start, end;
  return fde_range(rule_address(ip, false), &start, &end) ? 0 : RULE_FP;
}

// One libunwind step from the frame (ip, sp, bp), turned into a rule; 0 if the frame
// does not fit the rule shapes (then the sample falls back to unw_backtrace). On a stack
// copy, sp and bp are the copy's (delta added), and words read from it are the stack's.
static uint32_t derive_rule(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf,
                            uint64_t high, int64_t delta) {
  unw_context_t ctx;
  unw_cursor_t cursor;
  int r = step_once(&ctx, &cursor, uc, ip, sp, bp, leaf);
  if (r == 0) return RULE_END;
  if (r < 0) return 0;
  unw_word_t cip = 0, csp = 0, cbp = 0;
  unw_save_loc_t loc;
  if (unw_get_reg(&cursor, UNW_REG_IP, &cip) < 0 || unw_get_reg(&cursor, UNW_REG_SP, &csp) < 0 ||
      unw_get_reg(&cursor, UNW_X86_64_RBP, &cbp) < 0 || unw_get_save_loc(&cursor, UNW_X86_64_RBP, &loc) < 0)
    return 0;
  if (csp > high) return RULE_BEYOND;
  if (csp <= sp || (csp & 7) || cip == 0) return 0;
  if (*(const uint64_t *)(uintptr_t)(csp - 8) != cip)  // the return address is not at CFA - 8
    return leaf ? 0 : chain_rule(ip, sp, bp, high, cip, cbp, &loc);
  if (csp == bp + 16 && loc.type == UNW_SLT_MEMORY && loc.u.addr == bp) return RULE_FP;
  uint64_t k = (csp - sp) / 8;
  if (k > RULE_FIELD_MASK) return 0;
  uint64_t j = 0;
  // A register the frame did not save is reported at its slot in our context copy.
  bool inContext = loc.type == UNW_SLT_MEMORY && loc.u.addr >= (uintptr_t)&ctx &&
                   loc.u.addr < (uintptr_t)&ctx + sizeof(ctx);
  if (loc.type == UNW_SLT_MEMORY && !inContext && loc.u.addr < sp && loc.u.addr >= sp - RED_ZONE_BYTES) {
    // Between `pop %rbp` and the `ret` or tail jump of an epilogue, the CFI still names
    // the slot rbp was popped from, now below sp (LLVM emits no .cfi_restore there): the
    // caller's rbp is the one in the register, which the slot must show.
    if (cbp != bp - (uint64_t)delta) return 0;
  } else if (loc.type == UNW_SLT_MEMORY && !inContext) {
    if (loc.u.addr < sp || loc.u.addr >= csp || ((loc.u.addr - sp) & 7)) return 0;
    j = (loc.u.addr - sp) / 8 + 1;
    if (j > RULE_FIELD_MASK) return 0;
  } else if (cbp != bp) {
    return 0;
  }
  return RULE_SP | (uint32_t)(k << 2) | (uint32_t)(j << (2 + RULE_FIELD_BITS));
}

// One libunwind step from (ip, sp, bp), as it is: for a frame no rule shape fits, met
// while finishing a deferred sample on a stack copy (where unw_backtrace is no option).
static bool libunwind_step(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf, uint64_t *nip,
                           uint64_t *nsp, uint64_t *nbp) {
  unw_context_t ctx;
  unw_cursor_t cursor;
  int r = step_once(&ctx, &cursor, uc, ip, sp, bp, leaf);
  if (r < 0) return false;
  if (r == 0) {
    *nip = 0;
    return true;
  }
  unw_word_t cip = 0, csp = 0, cbp = 0;
  if (unw_get_reg(&cursor, UNW_REG_IP, &cip) < 0 || unw_get_reg(&cursor, UNW_REG_SP, &csp) < 0 ||
      unw_get_reg(&cursor, UNW_X86_64_RBP, &cbp) < 0)
    return false;
  *nip = cip;
  *nsp = csp;
  *nbp = cbp;
  return true;
}

// MARK: - Rules for a CFI row's whole range
//
// Rules are learned one lookup address at a time, from a frame met on a stack. The
// interrupted PC is a new address on most samples at first, so most of a session's
// early samples were deferred (70-75 % in a 1-second session of a 42-frame stack). A
// rule is a fact about the CFI row that holds at its address, though, and the row holds
// for a range of addresses (a function's body after its prologue, usually): after
// learning a rule on a stack copy, the discovery thread reads that row with libdw, and
// when the row says what libunwind's step said, gives the rule to the row's whole range
// (whole granules as one entry each, the bytes around them one by one). The rule stays
// libunwind's; libdw only tells where else it holds. (Giving every row of the function
// its rule as well, unchecked by a step, deferred no fewer samples in the bench.)

// The addresses around a learned one that get its rule, in a long row: more would push
// other rules out of the cache.
#define RULE_EXTEND_BYTES 2048
#define LEARNED_MAX 64

// The discovery thread's (or stop's) rules learned on stack copies, to extend.
typedef struct LearnedRule {
  uint64_t address;
  uint32_t rule;
} LearnedRule;
static LearnedRule g_learned[LEARNED_MAX];
static int g_learnedCount;
static _Atomic uint64_t g_rangeRules;  // entries given from CFI rows' ranges this session
static _Atomic uint64_t g_deferredSamples;

static void note_learned_rule(uint64_t address, uint32_t rule) {
  uint32_t type = rule & 3;
  if ((type == RULE_FP || type == RULE_SP) && g_learnedCount < LEARNED_MAX)
    g_learned[g_learnedCount++] = (LearnedRule){.address = address, .rule = rule};
}

// Discovery thread only, for one session: libdwfl's view of the loaded modules.
static Dwfl *g_dwfl;
static const Dwfl_Callbacks g_dwflCallbacks = {
    .find_elf = dwfl_linux_proc_find_elf, .find_debuginfo = dwfl_standard_find_debuginfo};

static uint64_t g_dwflReportedNs;

// Reads the loaded modules again, at most every 100 ms: code outside any module (JIT
// code) must not cost a read of /proc/self/maps per rule.
static bool report_modules(void) {
  uint64_t now = monotonic_ns();
  if (g_dwfl && now - g_dwflReportedNs < 100000000) return false;
  g_dwflReportedNs = now;
  if (!g_dwfl) g_dwfl = dwfl_begin(&g_dwflCallbacks);
  if (!g_dwfl) return false;
  dwfl_report_begin(g_dwfl);
  int reported = dwfl_linux_proc_report(g_dwfl, getpid());
  return dwfl_report_end(g_dwfl, NULL, NULL) == 0 && reported == 0;
}

enum { SAVED_SAME, SAVED_AT_CFA, SAVED_OTHER };

// Where a row keeps register regno of the caller: SAVED_AT_CFA with *offset from the CFA,
// SAVED_SAME when it is unchanged, SAVED_OTHER for any other rule.
static int saved_register(Dwarf_Frame *frame, int regno, int64_t *offset) {
  Dwarf_Op storage[3], *ops = NULL;
  size_t count = 0;
  if (dwarf_frame_register(frame, regno, storage, &ops, &count) != 0) return SAVED_OTHER;
  if (count == 0) return ops == NULL ? SAVED_SAME : SAVED_OTHER;  // same value : undefined
  if (ops[0].atom != DW_OP_call_frame_cfa) return SAVED_OTHER;
  if (count == 1) {
    *offset = 0;
    return SAVED_AT_CFA;
  }
  if (count == 2 && ops[1].atom == DW_OP_plus_uconst) {
    *offset = (int64_t)ops[1].number;
    return SAVED_AT_CFA;
  }
  return SAVED_OTHER;
}

// The rule a CFI row describes, in the handler's rule shapes; 0 if none fits.
static uint32_t row_rule(Dwarf_Frame *frame) {
  Dwarf_Op *ops = NULL;
  size_t count = 0;
  if (dwarf_frame_cfa(frame, &ops, &count) != 0 || count != 1) return 0;
  int64_t reg, cfaOffset;
  if (ops[0].atom == DW_OP_bregx) {
    reg = (int64_t)ops[0].number;
    cfaOffset = (int64_t)ops[0].number2;
  } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
    reg = ops[0].atom - DW_OP_breg0;
    cfaOffset = (int64_t)ops[0].number;
  } else {
    return 0;
  }
  int64_t ra = 0, rbp = 0;  // DWARF registers: 6 rbp, 7 rsp, 16 the return address
  if (saved_register(frame, 16, &ra) != SAVED_AT_CFA || ra != -8) return 0;
  int rbpSaved = saved_register(frame, 6, &rbp);
  if (reg == 6) return cfaOffset == 16 && rbpSaved == SAVED_AT_CFA && rbp == -16 ? RULE_FP : 0;
  if (reg != 7 || cfaOffset <= 0 || cfaOffset % 8 || cfaOffset / 8 > RULE_FIELD_MASK) return 0;
  uint32_t k = (uint32_t)(cfaOffset / 8), j = 0;
  if (rbpSaved == SAVED_AT_CFA) {
    int64_t fromSp = cfaOffset + rbp;  // the slot, from the frame's sp
    if (fromSp < 0 || fromSp >= cfaOffset || fromSp % 8) return 0;
    j = (uint32_t)(fromSp / 8) + 1;
  } else if (rbpSaved != SAVED_SAME) {
    return 0;
  }
  return RULE_SP | (k << 2) | (j << (2 + RULE_FIELD_BITS));
}

// The CFI row that holds at lookup address `address`: its range [*start, *end) and the
// rule it describes (0 if no rule shape fits); false if libdw finds none.
static bool cfi_row(uint64_t address, uint64_t *start, uint64_t *end, uint32_t *rule) {
  if (!g_dwfl && !report_modules()) return false;
  Dwfl_Module *module = dwfl_addrmodule(g_dwfl, address);
  if (!module && report_modules()) module = dwfl_addrmodule(g_dwfl, address);  // loaded since
  if (!module) return false;
  Dwarf_Addr bias = 0;
  Dwarf_CFI *cfi = dwfl_module_eh_cfi(module, &bias);
  Dwarf_Frame *frame = NULL;
  if (!cfi || dwarf_cfi_addrframe(cfi, address - bias, &frame) != 0) return false;
  Dwarf_Addr low = 0, high = 0;
  bool signal = false;
  int returnColumn = dwarf_frame_info(frame, &low, &high, &signal);
  *start = low + bias;
  *end = high + bias;
  *rule = returnColumn == 16 && !signal ? row_rule(frame) : 0;
  free(frame);
  return *start <= address && address < *end;
}

// Gives rule to every lookup address in [start, end).
static void give_rule(uint64_t start, uint64_t end, uint32_t rule) {
  const uint64_t granule = 1u << RULE_GRANULE_BITS;
  uint64_t first = (start + granule - 1) & ~(granule - 1), last = end & ~(granule - 1);
  if (first >= last) first = last = end;  // no whole granule: every byte on its own
  for (uint64_t a = start; a < first; a++) rule_insert(a, rule);
  for (uint64_t a = first; a < last; a += granule) rule_insert_tagged(a, rule_granule_tag(a), rule);
  for (uint64_t a = last; a < end; a++) rule_insert(a, rule);
  atomic_fetch_add_explicit(&g_rangeRules, (first - start) + (last - first) / granule + (end - last),
                            memory_order_relaxed);
}

// Gives each noted rule to the rest of its row (near it).
static void extend_learned_rules(void) {
  for (int i = 0; i < g_learnedCount; i++) {
    uint64_t address = g_learned[i].address, start, end;
    uint32_t rule = 0;
    if (!cfi_row(address, &start, &end, &rule) || rule != g_learned[i].rule) continue;
    if (address - start > RULE_EXTEND_BYTES) start = address - RULE_EXTEND_BYTES;
    if (end - address > RULE_EXTEND_BYTES) end = address + RULE_EXTEND_BYTES;
    give_rule(start, end, rule);
  }
  g_learnedCount = 0;
}

// Set by a handler that met a thread without known stack bounds: the discovery thread
// reads /proc/self/maps only then.
static _Atomic int32_t g_boundsWanted;

#define STACK_PREFETCH_NEAR_BYTES 1024

// Where a walk stopped at a PC without a rule (the handler defers such samples).
typedef struct WalkMiss {
  int n;  // frames already in out
  uint64_t ip, sp, bp, high;
  bool leaf;
  // The PC has RULE_NONE: the drain takes libunwind's step there, which may read any
  // word of the stack, so the whole stack is copied.
  bool noRule;
  uint64_t low;  // the stack mapping's low end (set by fast_unwind)
  // Set by fast_unwind when the thread's last walk can finish this one: frames
  // rejoin->frames[rejoinIndex...] hold on the stack, so only [sp, their sp) is copied.
  const struct Trace *rejoin;
  int rejoinIndex;
} WalkMiss;

// MARK: - Last walk per thread
//
// After a few milliseconds of the profiled code the rule table is out of the cache, and
// a walk is a chain of dependent misses (rule -> CFA -> return address -> next rule):
// about 100-200 ns per frame. Consecutive samples of a thread mostly share their outer
// frames, so each thread keeps its last walk: the state (ip, sp, bp) of every frame and
// where the next frame's bp was read. When a new walk reaches a state of the last one,
// the rest of that walk is reused if the stack still holds the same return addresses
// and saved bp values at the same places: those are exactly the words the walk would
// read from there on, and rules are a function of the state, so the reused frames are
// the ones the walk would find. The checks are independent loads, which overlap.
#define g_records (TABLES->records)
// Records handed out (discovery and start only): [0, g_recordsUsed) have been used this
// session; g_freeRecords holds those whose thread has gone.
static _Atomic int32_t g_recordsUsed;
static int32_t g_freeRecords[THREAD_RECORDS];
static int32_t g_freeRecordCount;
static size_t g_tablesPopulated;  // bytes of Tables faulted in (start/discovery only)

// What walk reuses from and records into (live stack only).
typedef struct Replay {
  const Trace *previous;  // NULL: nothing to reuse
  Trace *next;            // NULL: record nothing
} Replay;

// Walks from (ip, sp, bp) with rules, appending to out[n..max). The stack is read at
// address + delta (delta = 0: the live stack; else a copy of [sp, high)); high bounds
// every read. On a PC without a rule: with miss, stops there and returns -2; without,
// learns the rule with libunwind on uc (registers replaced by the frame's, translated).
// -1: the stack does not fit the rules (use libunwind). With replay (live stack, from
// the interrupted frame), reuses the thread's last walk where it still holds and
// records this one.
// With meet (a partial copy that ends at meet->sp), the walk stops when it reaches the
// state meet describes and returns n with *met set; it returns -1 if it passes it.
static int walk(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf, uint64_t high,
                int64_t delta, uint64_t *out, int n, int max, WalkMiss *miss, Replay *replay,
                const TraceFrame *meet, bool *met) {
#define STACK_WORD(address) (*(const uint64_t *)(uintptr_t)((address) + (uint64_t)delta))
  const Trace *previous = replay ? replay->previous : NULL;
  Trace *next = replay ? replay->next : NULL;
  if (previous && (previous->high != high || previous->count <= 0)) previous = NULL;
  int cursor = 0;  // in previous: the first frame whose sp may still be >= sp
  int recorded = 0;
  if (next) next->count = 0;
  while (n < max) {
    if (previous) {
      while (cursor < previous->count && previous->frames[cursor].sp < sp) cursor++;
      const TraceFrame *same = cursor < previous->count ? &previous->frames[cursor] : NULL;
      if (same && same->sp == sp && same->ip == ip && same->bp == bp && (cursor == 0) == leaf) {
        // Replay: frame i is the walk's; frame i + 1 is too if the words the step from
        // i reads still hold what they held.
        int i = cursor;
        for (;;) {
          const TraceFrame *f = &previous->frames[i];
          out[n++] = f->ip;
          if (next && recorded < TRACE_FRAMES) next->frames[recorded] = *f;
          recorded++;
          if (n == max) {
            if (next) {
              next->end = TRACE_END_DEPTH;
              next->count = recorded <= TRACE_FRAMES ? recorded : 0;
              next->high = high;
            }
            return n;
          }
          if (i == previous->count - 1) {
            bool holds = previous->end == TRACE_END_RULE ||
                         (previous->end == TRACE_END_ZERO && STACK_WORD(previous->endAddr) == 0);
            if (holds) {
              if (next) {
                next->end = previous->end;
                next->endAddr = previous->endAddr;
                next->count = recorded <= TRACE_FRAMES ? recorded : 0;
                next->high = high;
              }
              return n;
            }
          } else {
            const TraceFrame *g = f + 1;
            if (STACK_WORD(g->sp - 8) == g->ip && (f->bpAddr ? STACK_WORD(f->bpAddr) == g->bp : f->bp == g->bp)) {
              i++;
              continue;
            }
          }
          // The stack changed after frame i: walk on from it as usual, without reuse.
          n--;
          recorded--;
          ip = f->ip;
          sp = f->sp;
          bp = f->bp;
          leaf = i == 0;
          previous = NULL;
          break;
        }
      }
    }
    if (meet && !leaf) {
      if (sp >= meet->sp) {
        if (sp != meet->sp || ip != meet->ip || bp != meet->bp) return -1;
        *met = true;
        return n;
      }
      // libunwind steps out of a frame without unwind information (the Swift runtime's
      // metadata accessor thunks) along the frame-pointer chain, skipping the caller and
      // making up sp: the walk then comes out at the rejoin frame's return address and
      // frame pointer below its sp. Under a frame-pointer rule the rest of the walk reads
      // only bp and the words above it, which the last walk's frames were checked against.
      if (ip == meet->ip && bp == meet->bp && (rule_lookup(rule_address(ip, false)) & 3) == RULE_FP) {
        *met = true;
        return n;
      }
    }
    uint64_t address = rule_address(ip, leaf);
    uint32_t rule = address < RULE_MAX_PC ? rule_lookup(address) : 0;
    // A PC no rule shape fits is deferred as well: libunwind's step there, on the copy,
    // costs the handler a stack copy (a few µs) instead of unw_backtrace (30-50 µs).
    if (!rule || (rule == RULE_NONE && miss)) {
      // Deferred, the interrupted frame too: its registers travel with the stack copy
      // (translated where they point into it), and the copy starts below sp, with the
      // red zone, where CFI can place a register just popped (at a `ret` after
      // `pop %rbp`, rbp is still described as saved at CFA - 16 = sp - 8).
      if (miss) {
        *miss = (WalkMiss){.n = n, .ip = ip, .sp = sp, .bp = bp, .high = high, .leaf = leaf, .noRule = rule != 0};
        return -2;
      }
      rule = derive_rule(uc, ip, sp + (uint64_t)delta, bp + (uint64_t)delta, leaf, high + (uint64_t)delta, delta);
      if (rule == RULE_BEYOND) {
        if (meet) return -1;
        rule = 0;
      }
      if (address < RULE_MAX_PC) {
        rule_insert(address, rule ? rule : RULE_NONE);
        // On a copy (never in a handler): the row's whole range may get the rule too.
        if (rule && delta != 0) note_learned_rule(address, rule);
      }
    }
    out[n++] = ip;
    TraceFrame *record = next && recorded < TRACE_FRAMES ? &next->frames[recorded] : NULL;
    recorded++;
    if (record) *record = (TraceFrame){.ip = ip, .sp = sp, .bp = bp, .bpAddr = 0};
    uint32_t type = rule & 3;
    if (type == RULE_END) {
      if (next) next->end = TRACE_END_RULE;
      break;
    }
    uint64_t cfa = 0, nbp = 0;
    bool fits = type != 0;  // 0: no rule (RULE_NONE)
    if (fits && type == RULE_FP) {
      fits = !(bp < sp || bp > high - 16 || (bp & 7));
      if (fits) {
        cfa = bp + 16;
        nbp = STACK_WORD(bp);
        if (record) record->bpAddr = bp;
      }
    } else if (fits) {
      uint64_t k = (rule >> 2) & RULE_FIELD_MASK, j = (rule >> (2 + RULE_FIELD_BITS)) & RULE_FIELD_MASK;
      cfa = sp + 8 * k;
      fits = cfa <= high;
      if (fits) nbp = j ? STACK_WORD(sp + 8 * (j - 1)) : bp;
      if (record && j) record->bpAddr = sp + 8 * (j - 1);
    }
    if (fits && cfa <= sp) fits = false;
    if (!fits) {
      // Live stack: the caller uses unw_backtrace. On a stack copy (a deferred sample,
      // where that is no longer possible), take libunwind's step for this one frame as
      // it is; registers it returns that point into the copy are translated back.
      if (delta == 0) return -1;
      uint64_t nip, nsp, xbp;
      if (!libunwind_step(uc, ip, sp + (uint64_t)delta, bp + (uint64_t)delta, leaf, &nip, &nsp, &xbp)) return -1;
      if (nip == 0) break;
      nsp -= (uint64_t)delta;
      if (nsp <= sp || nsp > high) return -1;
      if (xbp >= sp + (uint64_t)delta && xbp < high + (uint64_t)delta) xbp -= (uint64_t)delta;
      ip = nip;
      sp = nsp;
      bp = xbp;
      leaf = false;
      continue;
    }
    uint64_t nip = STACK_WORD(cfa - 8);
    if (nip == 0) {
      if (next) {
        next->end = TRACE_END_ZERO;
        next->endAddr = cfa - 8;
      }
      break;
    }
    ip = nip;
    sp = cfa;
    bp = nbp;
    leaf = false;
  }
#undef STACK_WORD
  // A walk on a partial copy that stops before the rejoin frame read words the copy does
  // not hold (or the stack changed): it is no stack, and must not pass for a short one.
  if (meet && n < max) return -1;
  if (next) {
    if (n == max) next->end = TRACE_END_DEPTH;
    next->count = recorded <= TRACE_FRAMES ? recorded : 0;
    next->high = high;
  }
  return n;
}

// For a walk that stopped at a PC without a rule at sp: the lowest caller frame of the
// thread's last walk above sp, if the stack still holds it and every frame after it (the
// words a walk from there would read, as in the replay). Its index, or -1.
static int rejoin_point(const Trace *trace, uint64_t sp, uint64_t high) {
  if (trace->high != high || trace->count <= 1) return -1;
  // The walk reaches a frame's state only through its return address: a frame whose
  // return address slot changed (a call from another site in the same function) is not
  // where this walk will come out.
  int j = 1;
  while (j < trace->count && (trace->frames[j].sp <= sp ||
                              *(const uint64_t *)(uintptr_t)(trace->frames[j].sp - 8) != trace->frames[j].ip))
    j++;
  if (j == trace->count) return -1;
  for (int i = j; i < trace->count - 1; i++) {
    const TraceFrame *f = &trace->frames[i], *g = f + 1;
    uint64_t ra = *(const uint64_t *)(uintptr_t)(g->sp - 8);
    if (ra != g->ip || (f->bpAddr ? *(const uint64_t *)(uintptr_t)f->bpAddr != g->bp : f->bp != g->bp)) return -1;
  }
  bool holds = trace->end == TRACE_END_RULE ||
               (trace->end == TRACE_END_ZERO && *(const uint64_t *)(uintptr_t)trace->endAddr == 0);
  return holds ? j : -1;
}

// Fills out[0..] (leaf first) from the interrupted context; -1 means "use libunwind",
// -2 (only with miss) a PC without a rule, described in *miss.
static int fast_unwind(const ucontext_t *uc, ThreadRecord *record, uint64_t *out, int max, WalkMiss *miss) {
  uint64_t ip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
  uint64_t sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
  uint64_t bp = (uint64_t)uc->uc_mcontext.gregs[REG_RBP];
  uint64_t high = atomic_load_explicit(&record->high, memory_order_acquire);
  uint64_t low = atomic_load_explicit(&record->low, memory_order_relaxed);
  if (high == 0 || sp < low || sp >= high) {
    atomic_store_explicit(&record->lastRsp, sp, memory_order_relaxed);
    atomic_store_explicit(&g_boundsWanted, 1, memory_order_relaxed);
    return -1;
  }
  // The walk is a chain of dependent loads (rule -> CFA -> return address -> next
  // rule), each usually a cache miss after 4 ms of the profiled code: prefetch the
  // stack lines the walk is likely to read so those misses overlap instead.
  uint64_t end = sp + STACK_PREFETCH_NEAR_BYTES;
  if (end > high) end = high;
  for (uint64_t line = sp & ~(uint64_t)63; line < end; line += 64) __builtin_prefetch((const void *)(uintptr_t)line);
  Replay replay = {.previous = &record->traces[record->current], .next = &record->traces[record->current ^ 1]};
  // With a last walk, the words a reuse checks are known: the return address slots it
  // recorded (the frames near sp are walked anyway, and prefetched above).
  for (int32_t i = 1; i < replay.previous->count; i++) {
    uint64_t slotAddress = replay.previous->frames[i].sp - 8;
    if (slotAddress >= end) __builtin_prefetch((const void *)(uintptr_t)slotAddress);
  }
  // The frames just above the leaf are usually walked before the last walk is met
  // again: their rules are likely the same as last time.
  for (int32_t i = 1; i < 4 && i < replay.previous->count; i++) {
    uint64_t caller = replay.previous->frames[i].ip;
    if (caller < RULE_MAX_PC) __builtin_prefetch(&g_rules[rule_set(rule_address(caller, false)) * RULE_WAYS]);
  }
  int n = walk(uc, ip, sp, bp, true, high, 0, out, 0, max, miss, &replay, NULL, NULL);
  if (n > 0 && replay.next->count > 0) record->current ^= 1;
  if (n == -2) {
    miss->low = low;
    miss->rejoinIndex = miss->noRule ? -1 : rejoin_point(replay.previous, miss->sp, high);
    miss->rejoin = miss->rejoinIndex > 0 ? replay.previous : NULL;
  }
  return n;
}

// MARK: - Deferred samples
//
// Learning a rule costs 15-30 µs in the handler (a libunwind step with cold caches). When
// the walk meets a PC without a rule (the interrupted PC or a return address), the
// handler instead copies the rest of the stack ([sp - red zone, high), if small enough)
// and the interrupted registers with the frames found so far into the defer buffer and
// returns; the discovery thread (2-16 ms) and stop() finish the walk on the copy,
// learning the missing rules there with libunwind on a synthetic context, and append
// the finished sample to the arena (so records are not in timestamp order). The buffer
// is filled once per session; when it is full the handler learns in place as before.
// Most misses are a new interrupted PC under callers the thread's last walk already
// holds (copying the whole stack took ~27 KB and ~7 µs per sample, median): then the
// handler checks those callers as a replay would and copies only up to the lowest of
// them (usually < 1 KB).
// The walk on the copy ends where it reaches that frame's exact state, and the frames
// from there on are the checked ones. If it comes out elsewhere, the stack had changed
// under the checked words, and the sample keeps only what was found before the miss
// (counted as a libunwind fallback; in verify mode, libunwind's stack is recorded).
#define DEFER_BYTES ((uint64_t)16 << 20)
#define DEFER_MAX_COPY ((uint64_t)64 << 10)
// Mapped after the buffer and never written: libunwind steps on a partial copy may read
// past its end (a frame that ends beyond the copy), and must read mapped memory there.
#define DEFER_SLACK ((uint64_t)1 << 20)
typedef struct DeferEntry {
  _Atomic uint32_t ready;  // 1: written; 2: abandoned (skip)
  uint32_t bytes;          // whole entry, 8-byte multiple
  int32_t tid;
  uint32_t weight;
  uint64_t timestampNs;
  uint32_t handlerNs;
  uint32_t prefixCount;    // frames before the miss
  uint32_t checkCount;     // verify mode: libunwind's frames
  uint32_t leaf;
  uint32_t suffixCount;       // frames of the thread's last walk that finish this one
  uint32_t unused;
  uint64_t ip, sp, bp, high;  // at the miss
  uint64_t copyEnd;           // the copy holds [sp - below, copyEnd): high, or the
                              // rejoin frame's sp when suffixCount > 0
  uint64_t meetIp, meetSp, meetBp;  // the rejoin frame's state
  uint64_t below;             // red zone bytes copied below sp
  greg_t gregs[NGREG];        // the interrupted registers: libunwind learns from these,
                              // as it would have in the handler
  // then: prefix[prefixCount], suffix[suffixCount], check[checkCount],
  // copy[copyEnd - sp + below]
} DeferEntry;
static uint8_t *g_defer;         // mmap'd at the first start, reused by later sessions
static _Atomic uint64_t g_deferUsed;
static uint64_t g_deferDone;     // consumer position (discovery thread, then stop)
static _Atomic uint64_t g_rejoined;  // deferred samples finished from the last walk
// Discovery thread: finds the stack mapping of every thread whose handler asked for it.
static void resolve_stacks(void) {
  if (!atomic_exchange(&g_boundsWanted, 0)) return;
  bool needed = false;
  int32_t used = atomic_load(&g_recordsUsed);
  for (int i = 0; i < used && !needed; i++) {
    ThreadRecord *slot = &g_records[i];
    if (!atomic_load(&slot->tid)) continue;
    uint64_t r = atomic_load(&slot->lastRsp);
    uint64_t hi = atomic_load(&slot->high), lo = atomic_load(&slot->low);
    if (r && (hi == 0 || r < lo || r >= hi)) needed = true;
  }
  if (!needed) return;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) break;
    if (len == cap) {
      char *grown = realloc(buf, cap * 2 + 1);
      if (!grown) { free(buf); buf = NULL; break; }
      buf = grown;
      cap *= 2;
    }
    ssize_t got = read(fd, buf + len, cap - len);
    if (got <= 0) break;
    len += (size_t)got;
  }
  close(fd);
  if (!buf) return;
  buf[len] = 0;
  for (int i = 0; i < used; i++) {
    ThreadRecord *slot = &g_records[i];
    if (!atomic_load(&slot->tid)) continue;
    uint64_t r = atomic_load(&slot->lastRsp);
    uint64_t hi = atomic_load(&slot->high), lo = atomic_load(&slot->low);
    if (!r || (hi && r >= lo && r < hi)) continue;
    for (char *line = buf; line && *line;) {
      char *end = NULL;
      uint64_t a = strtoull(line, &end, 16);
      uint64_t b = (end && *end == '-') ? strtoull(end + 1, &end, 16) : 0;
      bool writable = end && end[0] == ' ' && end[1] == 'r' && end[2] == 'w';
      if (writable && r >= a && r < b) {
        atomic_store(&slot->high, 0);
        atomic_store(&slot->low, a);
        atomic_store(&slot->high, b);
        break;
      }
      line = strchr(line, '\n');
      if (line) line++;
    }
  }
  free(buf);
}

static void populate_tables(size_t bytes);

// Discovery (or start): a record for a thread about to be armed; -1 if none is free.
// A reused record's last thread is gone, so no handler of it is running.
static int32_t claim_record(pid_t tid) {
  int32_t index;
  if (g_freeRecordCount > 0) {
    index = g_freeRecords[--g_freeRecordCount];
  } else {
    index = atomic_load(&g_recordsUsed);
    if (index >= THREAD_RECORDS) return -1;
    // Faulted in before any handler can use it (a page fault in the handler costs ~1 µs).
    populate_tables(offsetof(Tables, records) + (size_t)(index + 16) * sizeof(ThreadRecord));
    atomic_store(&g_records[index].fastSamples, 0);
    atomic_store(&g_recordsUsed, index + 1);
  }
  ThreadRecord *record = &g_records[index];
  record->current = 0;
  record->traces[0].count = 0;
  record->traces[1].count = 0;
  atomic_store(&record->lastRsp, 0);
  atomic_store(&record->high, 0);
  atomic_store(&record->low, 0);
  atomic_store(&record->tid, tid);
  return index;
}

static void release_record(int32_t index) {
  if (index < 0) return;
  atomic_store(&g_records[index].tid, 0);
  g_freeRecords[g_freeRecordCount++] = index;
}

void CPerfSampler_setUnwinder(int32_t unwinder) { atomic_store(&g_unwinder, unwinder); }

uint64_t CPerfSampler_fastSamples(void) {
  if (!g_hot.tables) return 0;
  uint64_t total = atomic_load(&g_fastSamples);
  int32_t used = atomic_load(&g_recordsUsed);
  for (int32_t i = 0; i < used; i++) total += atomic_load(&g_records[i].fastSamples);
  return total;
}
uint64_t CPerfSampler_unwinderMismatches(void) { return atomic_load(&g_mismatches); }
uint64_t CPerfSampler_rejoinedSamples(void) { return atomic_load(&g_rejoined); }
uint64_t CPerfSampler_deferredSamples(void) { return atomic_load(&g_deferredSamples); }
uint64_t CPerfSampler_rangeRules(void) { return atomic_load(&g_rangeRules); }
uint64_t CPerfSampler_unwindFallbacks(void) { return atomic_load(&g_fallbacks); }
int32_t CPerfSampler_activeUnwinder(void) { return atomic_load(&g_unwinderActive); }

// MARK: - Signal handler

static void chain_to_previous(int sig, siginfo_t *info, void *context) {
  // Not one of our timer signals: give it to whoever owned SIGPROF before us. If that
  // was SIG_DFL the signal is swallowed instead of killing the process.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
}

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

// Appends a finished record to the arena; false if it does not fit.
static bool append_record(int32_t tid, uint32_t weight, uint64_t timestampNs, uint32_t handlerNs,
                          const uint64_t *frames, uint32_t frameCount) {
  uint8_t *arena = atomic_load_explicit(&g_arena, memory_order_relaxed);
  uint64_t capacity = atomic_load_explicit(&g_capacity, memory_order_relaxed);
  uint64_t size = sizeof(CPerfSampler_SampleHeader) + (uint64_t)frameCount * 8;
  uint64_t offset = atomic_fetch_add_explicit(&g_used, size, memory_order_relaxed);
  if (offset + size > capacity) {
    atomic_fetch_add_explicit(&g_lost, 1, memory_order_relaxed);
    return false;
  }
  CPerfSampler_SampleHeader *record = (CPerfSampler_SampleHeader *)(arena + offset);
  memcpy(record + 1, frames, (size_t)frameCount * 8);
  record->weight = weight;
  record->timestampNs = timestampNs;
  record->frameCount = frameCount;
  record->tid = tid;
  record->handlerNs = handlerNs;
  return true;
}

// Handler side: stores a sample whose walk stopped at miss; false if it cannot be
// deferred (then the caller learns in place).
static bool defer_sample(const ucontext_t *uc, const WalkMiss *miss, const uint64_t *prefix, const uint64_t *check, int checkCount,
                         int32_t tid, uint32_t weight, uint64_t entryNs) {
  const TraceFrame *meet = miss->rejoin ? &miss->rejoin->frames[miss->rejoinIndex] : NULL;
  uint32_t suffixCount = meet ? (uint32_t)(miss->rejoin->count - miss->rejoinIndex) : 0;
  uint64_t copyEnd = meet ? meet->sp : miss->high;
  if (!g_defer || copyEnd - miss->sp > DEFER_MAX_COPY) return false;
  uint64_t below = miss->sp - miss->low >= RED_ZONE_BYTES ? RED_ZONE_BYTES : 0;
  uint64_t copyBytes = copyEnd - miss->sp + below;
  uint64_t bytes =
      sizeof(DeferEntry) + (uint64_t)(miss->n + suffixCount + checkCount) * 8 + ((copyBytes + 7) & ~7ull);
  if (atomic_load_explicit(&g_deferUsed, memory_order_relaxed) + bytes > DEFER_BYTES) return false;
  uint64_t offset = atomic_fetch_add_explicit(&g_deferUsed, bytes, memory_order_relaxed);
  if (offset + bytes > DEFER_BYTES) {
    // Lost the race for the end of the buffer: leave a skip entry if the header fits.
    if (offset + sizeof(DeferEntry) <= DEFER_BYTES) {
      DeferEntry *e = (DeferEntry *)(g_defer + offset);
      e->bytes = 0;
      atomic_store_explicit(&e->ready, 2, memory_order_release);
    }
    return false;
  }
  DeferEntry *e = (DeferEntry *)(g_defer + offset);
  e->bytes = (uint32_t)bytes;
  e->tid = tid;
  e->weight = weight;
  e->timestampNs = entryNs;
  e->prefixCount = (uint32_t)miss->n;
  e->checkCount = (uint32_t)checkCount;
  e->leaf = miss->leaf;
  e->ip = miss->ip;
  e->sp = miss->sp;
  e->bp = miss->bp;
  e->high = miss->high;
  e->copyEnd = copyEnd;
  e->suffixCount = suffixCount;
  if (meet) {
    e->meetIp = meet->ip;
    e->meetSp = meet->sp;
    e->meetBp = meet->bp;
  }
  e->below = below;
  memcpy(e->gregs, uc->uc_mcontext.gregs, sizeof(e->gregs));
  uint64_t *tail = (uint64_t *)(e + 1);
  memcpy(tail, prefix, (size_t)miss->n * 8);
  for (uint32_t i = 0; i < suffixCount; i++) tail[miss->n + i] = meet[i].ip;
  if (checkCount) memcpy(tail + miss->n + suffixCount, check, (size_t)checkCount * 8);
  memcpy(tail + miss->n + suffixCount + checkCount, (const void *)(uintptr_t)(miss->sp - below), (size_t)copyBytes);
  e->handlerNs = (uint32_t)(now_ns() - entryNs);
  atomic_store_explicit(&e->ready, 1, memory_order_release);
  return true;
}

// Finishes deferred samples in order, up to the first one still being written.
// Discovery thread (or stop(), after the last handler): never inside a handler.
// Returns whether it finished any.
static bool drain_deferred(bool extendRules) {
  if (!g_defer) return false;
  uint64_t from = g_deferDone;
  int maxDepth = atomic_load(&g_maxDepth);
  int mode = atomic_load(&g_unwinderActive);
  uint64_t frames[CPerfSampler_MaxDepth];
  unw_context_t synthetic;
  memset(&synthetic, 0, sizeof(synthetic));
  while (g_deferDone + sizeof(DeferEntry) <= DEFER_BYTES &&
         g_deferDone < atomic_load_explicit(&g_deferUsed, memory_order_acquire)) {
    DeferEntry *e = (DeferEntry *)(g_defer + g_deferDone);
    uint32_t state = atomic_load_explicit(&e->ready, memory_order_acquire);
    if (state == 0) return g_deferDone != from;  // a handler is still writing it
    if (state == 2 || e->bytes == 0) {
      g_deferDone = DEFER_BYTES;  // only the end-of-buffer race writes these
      return true;
    }
    const uint64_t *tail = (const uint64_t *)(e + 1);
    const uint64_t *suffix = tail + e->prefixCount;
    const uint64_t *check = suffix + e->suffixCount;
    const uint8_t *copy = (const uint8_t *)(check + e->checkCount) + e->below;  // at sp
    memcpy(frames, tail, (size_t)e->prefixCount * 8);
    memcpy(((ucontext_t *)&synthetic)->uc_mcontext.gregs, e->gregs, sizeof(e->gregs));
    // General registers that pointed into the copied stack point into the copy, so a
    // rule that reads through one (a realigned frame's CFA, say) reads what the handler
    // would have read. RIP, RSP and RBP are set per step.
    static const int general[] = {REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14,
                                  REG_R15, REG_RDI, REG_RSI, REG_RBX, REG_RDX, REG_RAX, REG_RCX};
    uint64_t copyDelta = (uint64_t)(uintptr_t)copy - e->sp;
    for (size_t r = 0; r < sizeof(general) / sizeof(general[0]); r++) {
      uint64_t value = (uint64_t)((ucontext_t *)&synthetic)->uc_mcontext.gregs[general[r]];
      if (value >= e->sp - e->below && value < e->copyEnd)
        ((ucontext_t *)&synthetic)->uc_mcontext.gregs[general[r]] = (greg_t)(value + copyDelta);
    }
    TraceFrame meet = {.ip = e->meetIp, .sp = e->meetSp, .bp = e->meetBp};
    bool met = false;
    int n = walk((const ucontext_t *)&synthetic, e->ip, e->sp, e->bp, e->leaf, e->copyEnd,
                 (int64_t)((uint64_t)(uintptr_t)copy - e->sp), frames, (int)e->prefixCount, maxDepth, NULL, NULL,
                 e->suffixCount ? &meet : NULL, &met);
    if (met) {
      atomic_fetch_add_explicit(&g_rejoined, 1, memory_order_relaxed);
      // The last walk's frames from the rejoin point on, checked on the live stack.
      for (uint32_t i = 0; i < e->suffixCount && n < maxDepth; i++) frames[n++] = suffix[i];
    }
    bool rejoinFailed = n < 0 && e->suffixCount;
    if (n < 0) {
      // Frames the rules cannot describe (libunwind would have been used in the
      // handler): keep what was found before the miss.
      atomic_fetch_add_explicit(&g_fallbacks, 1, memory_order_relaxed);
      n = (int)e->prefixCount;
      frames[n++] = e->ip;
    } else {
      atomic_fetch_add_explicit(&g_fastSamples, 1, memory_order_relaxed);
    }
    if (mode == UNWINDER_VERIFY) {
      if (rejoinFailed) {
        // A counted fallback, not a wrong stack: record libunwind's.
        memcpy(frames, check, (size_t)e->checkCount * 8);
        n = (int)e->checkCount;
      } else if ((uint32_t)n != e->checkCount || memcmp(check, frames, (size_t)n * 8) != 0) {
        atomic_fetch_add_explicit(&g_mismatches, 1, memory_order_relaxed);
        memcpy(frames, check, (size_t)e->checkCount * 8);
        n = (int)e->checkCount;
      }
    }
    append_record(e->tid, e->weight, e->timestampNs, e->handlerNs, frames, (uint32_t)n);
    atomic_fetch_add_explicit(&g_deferredSamples, 1, memory_order_relaxed);
    if (extendRules) extend_learned_rules();
    g_learnedCount = 0;
    g_deferDone += e->bytes;
  }
  return g_deferDone != from;
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
  ThreadRecord *owner = record && atomic_load_explicit(&record->tid, memory_order_relaxed) == tid ? record : NULL;
  if (mode != UNWINDER_LIBUNWIND && owner) {
    WalkMiss miss;
    count = fast_unwind((const ucontext_t *)context, owner, frames, maxDepth, &miss);
    if (count == -2) {
      if (mode == UNWINDER_VERIFY) {
        uint64_t check[maxDepth];
        int checked = libunwind_stack(context, check, maxDepth);
        if (defer_sample((const ucontext_t *)context, &miss, frames, check, checked, tid, weight, entryNs)) return;
      } else if (defer_sample((const ucontext_t *)context, &miss, frames, NULL, 0, tid, weight, entryNs)) {
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
    }
    count_fast_sample(owner);
  } else if (count > 0) {
    count_fast_sample(owner);
  } else {
    count = libunwind_stack(context, frames, maxDepth);
  }
  append_record(tid, weight, entryNs, (uint32_t)(now_ns() - entryNs), frames, (uint32_t)count);
}

static void sigprof_handler(int sig, siginfo_t *info, void *context) {
  int savedErrno = errno;
  // Only the raw TSC here: the calibration is read once the signal is known to be this
  // session's, which start calibrated before enabling it (a stale signal from an earlier
  // session can arrive while start rewrites it).
  uint64_t entryTsc = __rdtsc();

  // Held from here: stop() (and a thread's disarm) unmap a perf event's ring only when
  // no handler that may have read its fd's slot is left.
  atomic_fetch_add(&g_inflight, 1);
  uint64_t value;
  uint32_t weight;
  if (info->si_code == SI_TIMER) {
    value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    weight = 1u + (uint32_t)(info->si_overrun > 0 ? info->si_overrun : 0);
  } else if (info->si_code == SI_QUEUE) {
    // A wall-clock tick (wall_ticks.c), or a program's own sigqueue: the cookie tells.
    value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    weight = info->si_uid ? (uint32_t)info->si_uid : 1u;
  } else if (!perf_source_signal(info, &value, &weight)) {
    value = 0;
  }
  uint32_t cookie = (uint32_t)value;
  if ((cookie & COOKIE_MAGIC_MASK) != COOKIE_MAGIC) {
    atomic_fetch_sub(&g_inflight, 1);
    chain_to_previous(sig, info, context);
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

static int install_handler(void) {
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

// MARK: - Thread discovery

static ThreadEntry *find_live(pid_t tid) {
  for (size_t i = 0; i < g_threadCount; i++)
    if (g_threads[i].tid == tid && !g_threads[i].exited) return &g_threads[i];
  return NULL;
}

static uint64_t thread_cpu_ns(pid_t tid, bool *known) {
  struct timespec ts;
  *known = clock_gettime(THREAD_CPUCLOCK(tid), &ts) == 0;
  return *known ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec : 0;
}

static void wait_for_handlers(void);

// The perf event first (it keeps the requested rate); a timer where perf events are refused
// (perf_event_paranoid 3, seccomp in containers) or run out (fds, locked memory).
static bool arm_perf(ThreadEntry *entry, uint64_t cookie) {
  if (g_config.source != CPerfSampler_SourceAuto || g_perfRefused) return false;
  bool refused = false;
  int fd = perf_source_open(entry->tid, g_config.rateHz, cookie, &refused);
  if (fd >= 0) {
    entry->perfFd = fd;
    entry->source = CPerfSampler_SourcePerfEvent;
    return true;
  }
  if (-fd == ESRCH) {
    // Gone, but /proc can list it until its exit completes: not a new thread if seen there.
    entry->exited = true;
    entry->lingering = true;
    return true;  // nothing to arm
  }
  if (!g_perfErrno) g_perfErrno = -fd;
  // Refused outright (not just out of fds or locked memory): no use asking per thread.
  g_perfRefused |= refused;
  return false;
}

static ThreadEntry *find_lingering(pid_t tid) {
  for (size_t i = 0; i < g_threadCount; i++)
    if (g_threads[i].tid == tid && g_threads[i].lingering) return &g_threads[i];
  return NULL;
}

static void arm(ThreadEntry *entry) {
  entry->perfFd = -1;
  entry->statFd = -1;
  entry->syscallFd = -1;
  entry->unsignalledSyscall = -1;
  bool known;
  entry->cpuAtArmNs = thread_cpu_ns(entry->tid, &known);
  struct sigevent event;
  memset(&event, 0, sizeof(event));
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGPROF;
  event._sigev_un._tid = entry->tid;
  entry->record = atomic_load(&g_unwinderActive) == UNWINDER_LIBUNWIND ? -1 : claim_record(entry->tid);
  uint64_t cookie = ((uint64_t)(uint32_t)entry->tid << 32) | COOKIE_MAGIC |
                    ((atomic_load(&g_generation) << COOKIE_GENERATION_SHIFT) & COOKIE_GENERATION_MASK) |
                    (uint32_t)(entry->record + 1);
  event.sigev_value.sival_ptr = (void *)(uintptr_t)cookie;
  if (g_config.clock == CPerfSampler_ClockWall && g_config.source == CPerfSampler_SourceAuto) {
    // Running, it is sampled by its cpu-clock event, whose signals arrive in user code and
    // so interrupt no call; blocked, by the ticker (wall_ticks.c).
    (void)arm_perf(entry, cookie);
    entry->cookie = cookie;
    entry->source = CPerfSampler_SourceWallTicks;
    return;
  }
  if (arm_perf(entry, cookie)) {
    if (entry->exited) {
      release_record(entry->record);
      entry->record = -1;
    }
    return;
  }
  clockid_t clock = g_config.clock == CPerfSampler_ClockWall ? CLOCK_MONOTONIC : THREAD_CPUCLOCK(entry->tid);

  timer_t timer;
  if (timer_create(clock, &event, &timer) != 0) {
    int err = errno;
    // EINVAL/ESRCH: the thread exited between the scan and here.
    if (err == EINVAL || err == ESRCH) {
      entry->exited = true;
    } else {
      entry->timerFailed = true;
      entry->timerErrno = err;
      atomic_fetch_add(&g_timerFailures, 1);
    }
    release_record(entry->record);
    entry->record = -1;
    return;
  }
  long period = 1000000000L / g_config.rateHz;
  struct itimerspec spec = {
      .it_interval = {.tv_sec = period / 1000000000L, .tv_nsec = period % 1000000000L},
      .it_value = {.tv_sec = period / 1000000000L, .tv_nsec = period % 1000000000L},
  };
  if (timer_settime(timer, 0, &spec, NULL) != 0) {
    entry->timerFailed = true;
    entry->timerErrno = errno;
    atomic_fetch_add(&g_timerFailures, 1);
    timer_delete(timer);
    release_record(entry->record);
    entry->record = -1;
    return;
  }
  entry->timer = timer;
  entry->hasTimer = true;
  entry->source = CPerfSampler_SourceTimer;
}

// The CPU time the recording could have sampled: from the thread's start if it started
// during the recording, else from when it was armed.
static void note_cpu_time(ThreadEntry *entry) {
  if (entry->cpuKnown) return;
  uint64_t base = entry->bornDuring ? 0 : entry->cpuAtArmNs;
  bool known;
  uint64_t now = thread_cpu_ns(entry->tid, &known);
  if (!known && entry->perfFd >= 0) {
    // Gone already: its event still holds the CPU time since it was armed.
    uint64_t counted = perf_source_count(entry->perfFd);
    now = entry->cpuAtArmNs + counted;
    known = counted > 0;
  }
  if (known && now >= base) {
    entry->cpuNs = now - base;
    entry->cpuKnown = true;
  }
}

// One thread's sampling source off; for stop, `wait` false and one wait for them all.
static void disarm_one(ThreadEntry *entry, bool wait) {
  if (entry->source == CPerfSampler_SourceWallTicks) {
    if (entry->statFd >= 0) close(entry->statFd);
    if (entry->syscallFd >= 0) close(entry->syscallFd);
    entry->statFd = entry->syscallFd = -1;
    entry->cookie = 0;
  }
  if (entry->hasTimer) {
    timer_delete(entry->timer);  // errors ignored: nothing left to do about them
    entry->hasTimer = false;
  }
  if (entry->perfFd >= 0) {
    perf_source_forget(entry->perfFd);
    if (wait) {
      wait_for_handlers();
      perf_source_release(entry->perfFd);
      entry->perfFd = -1;
    }
  }
}

static void disarm(ThreadEntry *entry) {
  note_cpu_time(entry);
  disarm_one(entry, true);
}

static ThreadEntry *add_thread(pid_t tid, bool bornDuring) {
  if (g_threadCount == g_threadCapacity) {
    size_t capacity = g_threadCapacity ? g_threadCapacity * 2 : 64;
    ThreadEntry *grown = realloc(g_threads, capacity * sizeof(ThreadEntry));
    if (!grown) return NULL;
    g_threads = grown;
    g_threadCapacity = capacity;
  }
  ThreadEntry *entry = &g_threads[g_threadCount++];
  memset(entry, 0, sizeof(*entry));
  entry->tid = tid;
  entry->mark = g_scanMark;
  entry->bornDuring = bornDuring;
  read_comm(tid, entry->firstName);
  arm(entry);
  return entry;
}

// Arms every thread not seen before; deletes the timers of threads that are gone, so a
// recycled tid is treated as a new thread.
// Returns whether a thread appeared or went.
static bool scan(pid_t exclude) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return false;
  pthread_mutex_lock(&g_tableLock);
  bool changed = false;
  g_scanMark++;
  struct dirent *item;
  while ((item = readdir(dir)) != NULL) {
    if (item->d_name[0] < '0' || item->d_name[0] > '9') continue;
    pid_t tid = (pid_t)strtol(item->d_name, NULL, 10);
    if (tid <= 0 || tid == exclude || tid == atomic_load_explicit(&g_tickerTid, memory_order_relaxed)) continue;
    ThreadEntry *entry = find_live(tid);
    ThreadEntry *ending = entry ? NULL : find_lingering(tid);
    if (ending) {
      ending->mark = g_scanMark;  // the same thread on its way out, not a new one
    } else if (entry) {
      entry->mark = g_scanMark;
      // A new thread usually names itself right after it starts, after the scan that
      // found it (it inherits its creator's name until then): look once more.
      if (!entry->nameRefreshed) {
        entry->nameRefreshed = true;
        read_comm(tid, entry->latestName);
      }
    } else {
      // Found after the first scan: it started during the recording (or just before it
      // and was missed, which only undercounts its coverage).
      add_thread(tid, g_scanMark > 1);
      changed = true;
    }
  }
  closedir(dir);
  for (size_t i = 0; i < g_threadCount; i++) {
    ThreadEntry *entry = &g_threads[i];
    if (entry->lingering && entry->mark != g_scanMark) entry->lingering = false;
    if (!entry->exited && entry->mark != g_scanMark) {
      entry->exited = true;
      disarm(entry);
      release_record(entry->record);
      entry->record = -1;
      changed = true;
    }
  }
  pthread_mutex_unlock(&g_tableLock);
  return changed;
}

// Faults arena pages in ahead of the handler (a first write to a fresh anonymous page
// costs the handler a page fault, ~1 µs, every few samples). MADV_POPULATE_WRITE
// (Linux 5.14+) maps the pages writable without touching their contents, so it is safe
// while handlers write records; on older kernels it fails and nothing changes.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define ARENA_PREFAULT_BYTES (1u << 20)
static uint64_t g_prefaulted;  // arena bytes populated so far (start/discovery only)
static bool g_prefaultWorks;

static uint64_t g_deferPrefaulted;

// Faults in the tables up to `bytes` (rounded to a huge page), so handlers do not.
static void populate_tables(size_t bytes) {
  if (bytes > sizeof(Tables)) bytes = sizeof(Tables);
  if (bytes <= g_tablesPopulated) return;
  size_t to = (bytes + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
  if (to > sizeof(Tables)) to = (sizeof(Tables) + 4095) & ~(size_t)4095;
  if (madvise((uint8_t *)g_hot.tables + g_tablesPopulated, to - g_tablesPopulated, MADV_POPULATE_WRITE) == 0)
    g_tablesPopulated = to;
}

// The same for the defer buffer (samples copied there are ~10-20 KB each).
static void prefault_defer(void) {
  if (!g_prefaultWorks || !g_defer) return;
  uint64_t limit = atomic_load(&g_deferUsed) + ARENA_PREFAULT_BYTES;
  if (limit > DEFER_BYTES) limit = DEFER_BYTES;
  if (limit <= g_deferPrefaulted) return;
  uint64_t to = (limit + ARENA_PREFAULT_BYTES - 1) & ~(uint64_t)(ARENA_PREFAULT_BYTES - 1);
  if (to > DEFER_BYTES) to = DEFER_BYTES;
  if (madvise(g_defer + g_deferPrefaulted, (size_t)(to - g_deferPrefaulted), MADV_POPULATE_WRITE) != 0) return;
  g_deferPrefaulted = to;
}

static void prefault_arena(void) {
  prefault_defer();
  if (!g_prefaultWorks) return;
  uint8_t *arena = atomic_load(&g_arena);
  uint64_t limit = atomic_load(&g_used) + ARENA_PREFAULT_BYTES;
  if (limit > g_mappedBytes) limit = g_mappedBytes;
  if (!arena || limit <= g_prefaulted) return;
  uint64_t from = g_prefaulted, to = (limit + ARENA_PREFAULT_BYTES - 1) & ~(uint64_t)(ARENA_PREFAULT_BYTES - 1);
  if (to > g_mappedBytes) to = g_mappedBytes;
  if (madvise(arena + from, (size_t)(to - from), MADV_POPULATE_WRITE) != 0) {
    g_prefaultWorks = false;
    return;
  }
  g_prefaulted = to;
}

// CPerfAlloc's, when the allocation interposer is linked in: this thread's reads of /proc
// (opendir, the maps buffer) are the harness's allocations, not the profiled program's.
extern int32_t CPerfAlloc_setIgnoringAllocations(int32_t ignoring) __attribute__((weak));

static void *discovery_main(void *unused) {
  (void)unused;
  if (CPerfAlloc_setIgnoringAllocations) (void)CPerfAlloc_setIgnoringAllocations(1);
  pid_t self = (pid_t)syscall(SYS_gettid);
  // Each round costs the profiled process some CPU (a /proc directory read at least), so
  // while the threads stay the same and nothing waits for this thread, the interval
  // doubles up to DISCOVERY_MAX_INTERVAL_NS; any change brings it back to the minimum.
  long intervalNs = DISCOVERY_INTERVAL_NS;
  while (!atomic_load(&g_discoveryStop)) {
    const struct timespec interval = {.tv_sec = 0, .tv_nsec = intervalNs};
    nanosleep(&interval, NULL);
    if (atomic_load(&g_discoveryStop)) break;
    bool changed = scan(self);
    changed |= atomic_load_explicit(&g_boundsWanted, memory_order_relaxed) != 0;
    changed |= drain_deferred(true);
    intervalNs = changed ? DISCOVERY_INTERVAL_NS
                 : intervalNs * 2 > DISCOVERY_MAX_INTERVAL_NS ? DISCOVERY_MAX_INTERVAL_NS
                                                              : intervalNs * 2;
    prefault_arena();
    if (atomic_load_explicit(&g_unwinderActive, memory_order_relaxed) != UNWINDER_LIBUNWIND) resolve_stacks();
  }
  if (g_dwfl) dwfl_end(g_dwfl);  // its files stay open only while recording
  g_dwfl = NULL;
  return NULL;
}

// Wall clock: one tick per period, to every thread a signal cannot make fail (wall_ticks.c).
static pthread_t g_ticker;
static bool g_tickerRunning;

static void *ticker_main(void *unused) {
  (void)unused;
  atomic_store(&g_tickerTid, (pid_t)syscall(SYS_gettid));
  const uint64_t period = 1000000000ull / (uint64_t)g_config.rateHz;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  uint64_t last = (uint64_t)next.tv_sec * 1000000000ull + (uint64_t)next.tv_nsec;
  while (!atomic_load(&g_discoveryStop)) {
    uint64_t due = last + period;
    next.tv_sec = (time_t)(due / 1000000000ull);
    next.tv_nsec = (long)(due % 1000000000ull);
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    if (atomic_load(&g_discoveryStop)) break;
    // A late tick (a loaded machine) stands for every period since the last one.
    uint64_t now = monotonic_ns();
    uint64_t periods = now > last ? (now - last + period / 2) / period : 1;
    if (periods < 1) periods = 1;
    last += periods * period;
    pthread_mutex_lock(&g_tableLock);
    for (size_t i = 0; i < g_threadCount; i++) {
      ThreadEntry *entry = &g_threads[i];
      if (entry->exited || entry->source != CPerfSampler_SourceWallTicks || !entry->cookie) continue;
      int32_t number = -1;
      switch (wall_thread_state(entry->tid, &entry->statFd, &entry->syscallFd, &number)) {
      case WALL_RUNNING:
        // Its cpu-clock event samples it. Without one, a tick: it may enter a sleep before the
        // signal lands (2-3 of 200 short nanosleeps failed so).
        if (entry->perfFd < 0) (void)wall_signal(entry->tid, entry->cookie, (uint32_t)periods);
        break;
      case WALL_BLOCKED_SAFE:
        (void)wall_signal(entry->tid, entry->cookie, (uint32_t)periods);
        break;
      case WALL_BLOCKED_UNSAFE:
        entry->unsignalledNs += periods * period;
        entry->unsignalledSyscall = number;
        break;
      case WALL_GONE:
        break;
      }
    }
    pthread_mutex_unlock(&g_tableLock);
  }
  return NULL;
}

// MARK: - Session lifecycle

static void wait_for_handlers(void) {
  while (atomic_load(&g_inflight) != 0) sched_yield();
}

static void teardown_timers(void) {
  for (size_t i = 0; i < g_threadCount; i++) {
    if (!g_threads[i].exited) note_cpu_time(&g_threads[i]);
    disarm_one(&g_threads[i], false);
  }
  wait_for_handlers();
  for (size_t i = 0; i < g_threadCount; i++) {
    if (g_threads[i].perfFd >= 0) perf_source_release(g_threads[i].perfFd);
    g_threads[i].perfFd = -1;
  }
}

// Threads can no longer be added (by threads.c's hooks), and every thread's sampling
// source is off.
static void close_table(void) {
  pthread_mutex_lock(&g_tableLock);
  g_tableOpen = false;
  teardown_timers();
  pthread_mutex_unlock(&g_tableLock);
}

// A forked child keeps none of the recording (its threads are other tids, and no discovery
// thread runs in it), but inherits the table's lock in whatever state another thread held it
// at the fork: its first pthread_create would wait on it forever.
static void forget_table_in_child(void) {
  atomic_store(&g_tableOpen, false);
  pthread_mutex_init(&g_tableLock, NULL);
}

static void forget_table_in_children(void) { (void)pthread_atfork(NULL, NULL, forget_table_in_child); }

void sampler_thread_born(void) {
  if (!atomic_load_explicit(&g_tableOpen, memory_order_relaxed)) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_tableLock);
  // The caller is new: an ended thread's entry with its tid is a recycled tid's.
  ThreadEntry *stale = find_lingering(tid);
  if (stale) stale->lingering = false;
  if (g_tableOpen && !find_live(tid)) (void)add_thread(tid, true);
  pthread_mutex_unlock(&g_tableLock);
}

void sampler_thread_ended(const char name[16], uint64_t cpuNs, bool blocksSignal) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_tableLock);
  ThreadEntry *entry = g_tableOpen ? find_live(tid) : NULL;
  if (entry) {
    memcpy(entry->latestName, name, 16);
    entry->latestName[15] = 0;
    entry->blocksSignal = blocksSignal;
    uint64_t base = entry->bornDuring ? 0 : entry->cpuAtArmNs;
    if (cpuNs >= base) {
      entry->cpuNs = cpuNs - base;
      entry->cpuKnown = true;
    }
    entry->ended = true;
    entry->lingering = true;
    entry->exited = true;
    disarm_one(entry, true);
    release_record(entry->record);
    entry->record = -1;
  }
  pthread_mutex_unlock(&g_tableLock);
}

static void free_session(void) {
  uint8_t *arena = atomic_load(&g_arena);
  if (arena) munmap(arena, g_mappedBytes);
  atomic_store(&g_arena, NULL);
  atomic_store(&g_capacity, 0);
  g_mappedBytes = 0;
  free(g_threads);
  g_threads = NULL;
  g_threadCount = g_threadCapacity = 0;
}

static void warm_unwinder(void) {
  // libunwind initializes its address space, its per-thread trace cache (mmap,
  // pthread_once, pthread_setspecific) and its caches of the loaded objects on first
  // use. Doing that here, outside any signal handler, keeps that one-time work out of
  // the handler where an interrupted thread may hold the locks it needs, and keeps the
  // first samples' handler time representative. Threads other than the caller warm up
  // on their first sample (libunwind's allocation there is mmap-based, not malloc).
  void *frames[64];
  (void)unw_backtrace(frames, 64);
}

int32_t CPerfSampler_start(const CPerfSampler_Config *config, CPerfSampler_Error *error) {
  set_error(error, CPerfSampler_OK, NULL, 0);
  if (!config) {
    set_error(error, CPerfSampler_ErrorInvalidClock, "config", 0);
    return CPerfSampler_ErrorInvalidClock;
  }
  if (config->clock != CPerfSampler_ClockCPU && config->clock != CPerfSampler_ClockWall) {
    set_error(error, CPerfSampler_ErrorInvalidClock, "clock", 0);
    return CPerfSampler_ErrorInvalidClock;
  }
  if (config->rateHz < CPerfSampler_MinRateHz || config->rateHz > CPerfSampler_MaxRateHz) {
    set_error(error, CPerfSampler_ErrorInvalidRate, "rateHz", 0);
    return CPerfSampler_ErrorInvalidRate;
  }
  if (config->maxDepth < CPerfSampler_MinDepth || config->maxDepth > CPerfSampler_MaxDepth) {
    set_error(error, CPerfSampler_ErrorInvalidDepth, "maxDepth", 0);
    return CPerfSampler_ErrorInvalidDepth;
  }
  if (config->bufferBytes < CPerfSampler_MinBufferBytes || config->bufferBytes > ((uint64_t)1 << 40)) {
    set_error(error, CPerfSampler_ErrorInvalidBuffer, "bufferBytes", 0);
    return CPerfSampler_ErrorInvalidBuffer;
  }

  int32_t expected = STATE_IDLE;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    set_error(error, CPerfSampler_ErrorBusy, "CPerfSampler_start", EBUSY);
    return CPerfSampler_ErrorBusy;
  }

  warm_unwinder();

  int err = install_handler();
  if (err) {
    set_error(error, CPerfSampler_ErrorSystem, "sigaction(SIGPROF)", err);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  if (!g_hot.tables) {
    (void)madvise(TABLES, TABLES_SPAN, MADV_HUGEPAGE);  // a hint: 4 KB pages otherwise
    g_hot.tables = TABLES;
    g_tablesPopulated = 0;
  }
  populate_tables(HUGE_PAGE_BYTES);
  calibrate_tsc(TABLES);  // before any now_ns of the session

  long page = sysconf(_SC_PAGESIZE);
  size_t bytes = (size_t)((config->bufferBytes + (uint64_t)page - 1) & ~((uint64_t)page - 1));
  void *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) {
    set_error(error, CPerfSampler_ErrorSystem, "mmap(arena)", errno);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  g_config = *config;
  g_mappedBytes = bytes;
  atomic_store(&g_arena, (uint8_t *)arena);
  atomic_store(&g_capacity, config->bufferBytes);
  atomic_store(&g_maxDepth, config->maxDepth);
  atomic_store(&g_used, 0);
  atomic_store(&g_signals, 0);
  atomic_store(&g_lost, 0);
  atomic_store(&g_fallbacks, 0);
  atomic_store(&g_timerFailures, 0);
  atomic_fetch_add(&g_generation, 1);
  g_scanMark = 0;
  g_stopNs = 0;
  atomic_store(&g_discoveryStop, 0);
  g_discoveryRunning = false;

  int32_t unwinder = atomic_load(&g_unwinder);
  if (unwinder < 0) {
    const char *env = getenv("PERFHARNESS_UNWINDER");
    unwinder = !env ? UNWINDER_AUTO
               : strcmp(env, "libunwind") == 0 ? UNWINDER_LIBUNWIND
               : strcmp(env, "verify") == 0    ? UNWINDER_VERIFY
                                               : UNWINDER_AUTO;
  }
  if (unwinder < UNWINDER_AUTO || unwinder > UNWINDER_VERIFY) unwinder = UNWINDER_AUTO;
  atomic_store(&g_unwinderActive, unwinder);
  atomic_store(&g_mismatches, 0);
  atomic_store(&g_rejoined, 0);
  atomic_store(&g_rangeRules, 0);
  atomic_store(&g_deferredSamples, 0);
  // No handler records now (g_enabled is 0): the tables can be reset without races. The
  // rules are dropped too, in case a library was unloaded since the last session.
  memset((void *)g_rules, 0, sizeof(g_rules));
  atomic_store(&g_fastSamples, 0);

  if (!g_defer) {
    void *defer = mmap(NULL, DEFER_BYTES + DEFER_SLACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (defer != MAP_FAILED) g_defer = defer;  // else: learn in the handler
  } else {
    madvise(g_defer, DEFER_BYTES, MADV_DONTNEED);  // back to zero pages
  }
  atomic_store(&g_deferUsed, 0);
  g_deferDone = 0;
  atomic_store(&g_recordsUsed, 0);
  g_freeRecordCount = 0;
  g_deferPrefaulted = 0;
  g_prefaulted = 0;
  g_prefaultWorks = true;
  prefault_arena();

  g_perfErrno = 0;
  g_perfRefused = false;
  g_handlerReplaced = 0;
  g_startNs = now_ns();
  atomic_store(&g_enabled, 1);
  static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;
  pthread_once(&atforkOnce, forget_table_in_children);
  pthread_mutex_lock(&g_tableLock);
  g_tableOpen = true;
  pthread_mutex_unlock(&g_tableLock);

  // The first scan runs here, so the calling thread and every thread alive now are
  // sampled from the moment start returns.
  scan(0);
  pid_t self = (pid_t)syscall(SYS_gettid);
  ThreadEntry *me = find_live(self);
  if (!me || me->source == CPerfSampler_SourceAuto) {
    int failure = me ? me->timerErrno : ESRCH;
    atomic_store(&g_enabled, 0);
    close_table();
    wait_for_handlers();
    free_session();
    set_error(error, CPerfSampler_ErrorSystem, "timer_create(calling thread)", failure);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  // The discovery thread starts with every signal blocked (it is never sampled and
  // must not run anyone's handlers).
  sigset_t all, saved;
  sigfillset(&all);
  // The wall clock's ticker first, and its tid known before discovery can see it: it is
  // the sampler's, never sampled or reported.
  g_tickerRunning = false;
  atomic_store(&g_tickerTid, 0);
  if (config->clock == CPerfSampler_ClockWall && config->source == CPerfSampler_SourceAuto) {
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    err = sampler_create_unwatched(&g_ticker, ticker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (err) {
      atomic_store(&g_enabled, 0);
      close_table();
      wait_for_handlers();
      free_session();
      set_error(error, CPerfSampler_ErrorSystem, "pthread_create(wall-clock ticker)", err);
      atomic_store(&g_state, STATE_IDLE);
      return CPerfSampler_ErrorSystem;
    }
    g_tickerRunning = true;
    while (atomic_load(&g_tickerTid) == 0) sched_yield();
  }
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  err = sampler_create_unwatched(&g_discovery, discovery_main, NULL);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (err) {
    if (g_tickerRunning) {
      atomic_store(&g_discoveryStop, 1);
      pthread_join(g_ticker, NULL);
      g_tickerRunning = false;
    }
    atomic_store(&g_enabled, 0);
    close_table();
    wait_for_handlers();
    free_session();
    set_error(error, CPerfSampler_ErrorSystem, "pthread_create(discovery)", err);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }
  g_discoveryRunning = true;
  atomic_store(&g_state, STATE_RUNNING);
  return CPerfSampler_OK;
}

int32_t CPerfSampler_stop(CPerfSampler_Error *error) {
  set_error(error, CPerfSampler_OK, NULL, 0);
  int32_t expected = STATE_RUNNING;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    set_error(error, CPerfSampler_ErrorState, "CPerfSampler_stop (no running session)", 0);
    return CPerfSampler_ErrorState;
  }
  if (g_discoveryRunning) {
    atomic_store(&g_discoveryStop, 1);
    pthread_join(g_discovery, NULL);
    g_discoveryRunning = false;
  }
  if (g_tickerRunning) {
    pthread_join(g_ticker, NULL);  // it stops on g_discoveryStop too
    g_tickerRunning = false;
    atomic_store(&g_tickerTid, 0);  // its tid may be a program thread's next
  }
  // Replaced or ignored by the program since start: its threads' signals went elsewhere.
  struct sigaction current;
  if (sigaction(SIGPROF, NULL, &current) == 0 && current.sa_sigaction != sigprof_handler)
    g_handlerReplaced = current.sa_handler == SIG_IGN ? 2 : current.sa_handler == SIG_DFL ? 3 : 1;
  close_table();
  // Signals already queued may still arrive: the handler ignores them from here on,
  // and the arena stays mapped until release anyway.
  atomic_store(&g_enabled, 0);
  wait_for_handlers();
  drain_deferred(false);
  // Taken after the last handler left, so no sample is stamped later than the stop.
  g_stopNs = now_ns();

  for (size_t i = 0; i < g_threadCount; i++) {
    ThreadEntry *entry = &g_threads[i];
    if (!entry->exited) {
      read_comm(entry->tid, entry->latestName);
      entry->blocksSignal = sampler_blocks_sigprof(entry->tid);
    }
  }
  atomic_store(&g_state, STATE_STOPPED);
  return CPerfSampler_OK;
}

void CPerfSampler_setMuted(int32_t muted) { atomic_store(&g_hot.muted, muted != 0); }

void CPerfSampler_stats(CPerfSampler_Stats *stats) {
  memset(stats, 0, sizeof(*stats));
  if (atomic_load(&g_state) != STATE_STOPPED) return;
  uint64_t used = atomic_load(&g_used);
  uint64_t capacity = atomic_load(&g_capacity);
  stats->startNs = g_startNs;
  stats->stopNs = g_stopNs;
  stats->signalsReceived = atomic_load(&g_signals);
  stats->lostSamples = atomic_load(&g_lost);
  stats->unwindFallbacks = atomic_load(&g_fallbacks);
  stats->usedBytes = used < capacity ? used : capacity;
  stats->timerFailures = atomic_load(&g_timerFailures);
  stats->perfErrno = g_perfErrno;
  stats->handlerReplaced = g_handlerReplaced;
  stats->previousHandler = g_previousKind;
}

const uint8_t *CPerfSampler_arena(void) {
  if (atomic_load(&g_state) != STATE_STOPPED) return NULL;
  return atomic_load(&g_arena);
}

int32_t CPerfSampler_threadCount(void) {
  if (atomic_load(&g_state) != STATE_STOPPED) return 0;
  return (int32_t)g_threadCount;
}

int32_t CPerfSampler_threadAt(int32_t index, CPerfSampler_ThreadInfo *info) {
  if (atomic_load(&g_state) != STATE_STOPPED || index < 0 || (size_t)index >= g_threadCount) return -1;
  ThreadEntry *entry = &g_threads[index];
  memset(info, 0, sizeof(*info));
  info->tid = entry->tid;
  info->isMain = entry->tid == getpid();
  info->exited = entry->exited;
  info->timerFailed = entry->timerFailed;
  memcpy(info->firstName, entry->firstName, 16);
  memcpy(info->latestName, entry->latestName, 16);
  info->source = entry->source;
  info->blocksSignal = entry->blocksSignal;
  info->bornDuring = entry->bornDuring;
  info->cpuKnown = entry->cpuKnown;
  info->cpuNs = entry->cpuNs;
  info->unsignalledNs = entry->unsignalledNs;
  info->unsignalledSyscall = entry->unsignalledSyscall;
  return 0;
}

void CPerfSampler_release(void) {
  int32_t expected = STATE_STOPPED;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return;
  free_session();
  atomic_store(&g_state, STATE_IDLE);
}

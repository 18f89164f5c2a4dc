// The fast unwinder's rule cache: the tables the handler reads, a frame's rule looked up,
// and a rule learned with one libunwind step (inline: the walk runs it in the handler).
#ifndef CPERFSAMPLER_RULES_H
#define CPERFSAMPLER_RULES_H

#include "sampler_internal.h"
#include "CPerfSupport.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ucontext.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <x86intrin.h>

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

enum { RULE_FP = 1, RULE_SP = 2, RULE_END = 3 };
// A PC whose frame libunwind steps but no rule shape fits: such samples use libunwind
// straight away instead of learning (or deferring) again.
#define RULE_NONE 4u
// rule (26 bits, != 0): bits 0-1 type, 2-13 k (CFA = RSP + 8k), 14-25 j (RBP saved at
// RSP + 8(j-1), 0 = kept).
#define RULE_FIELD_BITS 12
#define RULE_FIELD_MASK ((1u << RULE_FIELD_BITS) - 1)
#define RULE_BITS       26
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
#define RULE_SET_BITS     11
#define RULE_SETS         (1u << RULE_SET_BITS)
#define RULE_WAYS         8  // the replacement in a full set takes 3 bits of a hash
#define RULE_MAX_PC       (1ull << 47)
#define RULE_GRANULE_BITS 4
#define g_rules           (TABLES->rules)

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
  // The mapping that held this thread's last async context (async_chain.h): the owner's
  // handler only.
  uint64_t asyncLow, asyncHigh;
  uint64_t asyncSequence;  // of the ranges that mapping came from
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
  // Swift concurrency's executor and running task (async_chain.h), on the line every
  // sample reads for its clock: a line of their own was a miss on every sample.
  _Atomic uint64_t executorLow, executorHigh;
  _Atomic int64_t taskSlotOffset;
  ThreadRecord records[THREAD_RECORDS];
} Tables;
#define HUGE_PAGE_BYTES ((size_t)2 << 20)
// Static rather than mmap'd: the handler computes the tables' address (RIP-relative)
// instead of loading a pointer, a load that missed the cache on most samples (300-500 ns
// here) and that every other access of the handler had to wait for. Untouched pages of
// it cost nothing; start faults in what handlers may use.
#define TABLES_SPAN ((sizeof(Tables) + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1))
extern SAMPLER_HIDDEN uint8_t g_tableStorage[TABLES_SPAN + HUGE_PAGE_BYTES] __attribute__((aligned(4096)));
#define TABLES ((Tables *)(((uintptr_t)g_tableStorage + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1)))
// The handler's clock. clock_gettime goes through libc's wrapper, the vDSO and the
// kernel's clock data: three more pages for a handler to touch, and in a VM each page not
// touched for a while is a TLB miss with a two-level walk. The TSC is read in place.
// tsc: a TSC reading taken earlier (the handler's entry), or 0 for now. Without the TSC,
// CLOCK_MONOTONIC now either way.
static inline uint64_t tsc_ns(uint64_t tsc) {
  const Tables *t = TABLES;
  if (__builtin_expect(t->useTsc != 0, 1))
    return t->nsBase + (uint64_t)(((unsigned __int128)((tsc ? tsc : __rdtsc()) - t->tscBase) * t->nsPerTsc32) >> 32);
  return CPerfSupport_monotonicNs();
}

static inline uint64_t now_ns(void) { return tsc_ns(0); }

/// Calibrates now_ns (rules.c); start only.
SAMPLER_HIDDEN void calibrate_tsc(Tables *t);

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

// Stores a rule under tag in address's set; in a full set, only with evict (then in place
// of a granule's entry if the set has one, else of a way chosen by the tag). Returns
// whether it took a way (false if the tag was there).
SAMPLER_HIDDEN bool rule_insert_tagged(uint64_t address, uint64_t tag, uint32_t rule, bool evict);

// A rule a frame met on a stack was stepped to: it may take any way.
static inline void rule_insert(uint64_t address, uint32_t rule) {
  rule_insert_tagged(address, rule_address_tag(address), rule, true);
}

// Steps libunwind once from the frame (ip, sp, bp), registers otherwise as in uc. The
// cursor points into ctx, which the caller owns. Returns unw_step's result, or -1 when
// the cursor cannot be set up.
static inline int step_once(unw_context_t *ctx, unw_cursor_t *cursor, const ucontext_t *uc, uint64_t ip, uint64_t sp,
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

/// The frame-pointer rule for a caller frame without unwind information (rules.c).
SAMPLER_HIDDEN uint32_t chain_rule(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t high, uint64_t cip, uint64_t cbp,
                                   const unw_save_loc_t *loc);

// One libunwind step from the frame (ip, sp, bp), turned into a rule; 0 if the frame
// does not fit the rule shapes (then the sample falls back to unw_backtrace). On a stack
// copy, sp and bp are the copy's (delta added), and words read from it are the stack's.
static inline uint32_t derive_rule(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf,
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
  bool inContext =
      loc.type == UNW_SLT_MEMORY && loc.u.addr >= (uintptr_t)&ctx && loc.u.addr < (uintptr_t)&ctx + sizeof(ctx);
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
static inline bool libunwind_step(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf, uint64_t *nip,
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

// MARK: - Rules for a CFI row's whole range (cfi_ranges.c)

#define LEARNED_MAX 64

// The discovery thread's (or stop's) rules learned on stack copies, to extend.
typedef struct LearnedRule {
  uint64_t address;
  uint32_t rule;
} LearnedRule;
extern SAMPLER_HIDDEN LearnedRule g_learned[LEARNED_MAX];
extern SAMPLER_HIDDEN int g_learnedCount;
extern SAMPLER_HIDDEN _Atomic uint64_t g_rangeRules;  // entries given from CFI rows' ranges this session
extern SAMPLER_HIDDEN struct Dwfl *g_dwfl;            // libdwfl's view of the loaded modules, for one session

static inline void note_learned_rule(uint64_t address, uint32_t rule) {
  uint32_t type = rule & 3;
  if ((type == RULE_FP || type == RULE_SP) && g_learnedCount < LEARNED_MAX)
    g_learned[g_learnedCount++] = (LearnedRule){.address = address, .rule = rule};
}

/// Gives each noted rule to the rest of its row (near it).
SAMPLER_HIDDEN void extend_learned_rules(void);

#endif

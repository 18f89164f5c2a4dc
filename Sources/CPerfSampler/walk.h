// The fast unwinder's walk over a stack with the rule cache, reusing the thread's last walk;
// fast_unwind, the handler's entry to it, is inline here.
#ifndef CPERFSAMPLER_WALK_H
#define CPERFSAMPLER_WALK_H

#include "rules.h"

extern SAMPLER_HIDDEN _Atomic int32_t g_boundsWanted;  // a handler met a thread without known stack bounds

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

// MARK: - Last walk per thread (walk.c)

#define g_records (TABLES->records)
extern SAMPLER_HIDDEN _Atomic int32_t g_recordsUsed;
extern SAMPLER_HIDDEN int32_t g_freeRecords[THREAD_RECORDS];
extern SAMPLER_HIDDEN int32_t g_freeRecordCount;

// What walk reuses from and records into (live stack only).
typedef struct Replay {
  const Trace *previous;  // NULL: nothing to reuse
  Trace *next;            // NULL: record nothing
} Replay;

/// Walks from (ip, sp, bp) with rules, appending to out[n..max) (see walk.c).
SAMPLER_HIDDEN int walk(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf, uint64_t high,
                        int64_t delta, uint64_t *out, int n, int max, WalkMiss *miss, Replay *replay,
                        const TraceFrame *meet, bool *met);

// For a walk that stopped at a PC without a rule at sp: the lowest caller frame of the
// thread's last walk above sp, if the stack still holds it and every frame after it (the
// words a walk from there would read, as in the replay). Its index, or -1.
static inline int rejoin_point(const Trace *trace, uint64_t sp, uint64_t high) {
  if (trace->high != high || trace->count <= 1) return -1;
  // The walk reaches a frame's state only through its return address: a frame whose
  // return address slot changed (a call from another site in the same function) is not
  // where this walk will come out.
  int j = 1;
  while (j < trace->count &&
         (trace->frames[j].sp <= sp || *(const uint64_t *)(uintptr_t)(trace->frames[j].sp - 8) != trace->frames[j].ip))
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

// Where frames keep a frame pointer, the chain of saved rbp values names the callers
// before the walk reaches them: their rules' sets are prefetched here, so that the walk's
// rule misses (one after another, each waiting for the last) overlap instead. On
// Foundation's JSON coding, where most walks meet callers the last walk did not have,
// this took a fifth to a quarter off the walk. Only a hint: rbp may hold anything (a frameless leaf
// uses it freely), so every word read is inside the thread's stack, and the walk still
// takes each frame by its rule.
#define CHAIN_PREFETCH_FRAMES 16
static inline void prefetch_chain_rules(uint64_t bp, uint64_t sp, uint64_t high) {
  for (int i = 0; i < CHAIN_PREFETCH_FRAMES; i++) {
    if (bp < sp || bp > high - 16 || (bp & 7)) return;
    uint64_t address = rule_address(*(const uint64_t *)(uintptr_t)(bp + 8), false);
    if (address < RULE_MAX_PC) __builtin_prefetch(&g_rules[rule_set(address) * RULE_WAYS]);
    uint64_t up = *(const uint64_t *)(uintptr_t)bp;
    if (up <= bp) return;  // the chain climbs the stack, or it is no chain
    bp = up;
  }
}

// Fills out[0..] (leaf first) from the interrupted context; -1 means "use libunwind",
// -2 (only with miss) a PC without a rule, described in *miss.
static inline int fast_unwind(const ucontext_t *uc, ThreadRecord *record, uint64_t *out, int max, WalkMiss *miss) {
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
  // Not when the leaf has no rule: that sample is deferred before any caller is looked up.
  if (ip < RULE_MAX_PC && rule_lookup(rule_address(ip, true))) prefetch_chain_rules(bp, sp, high);
  int n = walk(uc, ip, sp, bp, true, high, 0, out, 0, max, miss, &replay, NULL, NULL);
  if (n > 0 && replay.next->count > 0) record->current ^= 1;
  if (n == -2) {
    miss->low = low;
    miss->rejoinIndex = miss->noRule ? -1 : rejoin_point(replay.previous, miss->sp, high);
    miss->rejoin = miss->rejoinIndex > 0 ? replay.previous : NULL;
  }
  return n;
}

/// Discovery (or start): a record for a thread about to be armed; -1 if none is free.
SAMPLER_HIDDEN int32_t claim_record(pid_t tid);
SAMPLER_HIDDEN void release_record(int32_t index);

#endif

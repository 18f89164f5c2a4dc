// The fast unwinder's walk: a stack walked with the rule cache, reusing the thread's last
// walk where the stack still holds it; and the per-thread records that keep those walks.
#include "walk.h"

#include <stdatomic.h>

// Set by a handler that met a thread without known stack bounds: the discovery thread
// reads /proc/self/maps only then.
SAMPLER_HIDDEN _Atomic int32_t g_boundsWanted;

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

// Records handed out (discovery and start only): [0, g_recordsUsed) have been used this
// session; g_freeRecords holds those whose thread has gone.
SAMPLER_HIDDEN _Atomic int32_t g_recordsUsed;
SAMPLER_HIDDEN int32_t g_freeRecords[THREAD_RECORDS];
SAMPLER_HIDDEN int32_t g_freeRecordCount;

// Walks from (ip, sp, bp) with rules, appending to out[n..max). The stack is read at
// address + delta (delta = 0: the live stack; else a copy of [sp, high)); high bounds
// every read. On a PC without a rule: with miss, stops there and returns -2; without,
// learns the rule with libunwind on uc (registers replaced by the frame's, translated).
// -1: the stack does not fit the rules (use libunwind). With replay (live stack, from
// the interrupted frame), reuses the thread's last walk where it still holds and
// records this one.
// With meet (a partial copy that ends at meet->sp), the walk stops when it reaches the
// state meet describes and returns n with *met set; it returns -1 if it passes it.
SAMPLER_HIDDEN int walk(const ucontext_t *uc, uint64_t ip, uint64_t sp, uint64_t bp, bool leaf, uint64_t high,
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
      // No end of the stack: a step here starts from the interrupted registers, and a frame
      // whose CFA lies in another one (ld.so's lazy-binding trampoline realigns through rbx)
      // reads a wrong word on a frame above the interrupted one. Outermost frames end by
      // their rule (RULE_END).
      if (nip == 0) return -1;
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

// Discovery (or start): a record for a thread about to be armed; -1 if none is free.
// A reused record's last thread is gone, so no handler of it is running.
SAMPLER_HIDDEN int32_t claim_record(pid_t tid) {
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

SAMPLER_HIDDEN void release_record(int32_t index) {
  if (index < 0) return;
  atomic_store(&g_records[index].tid, 0);
  g_freeRecords[g_freeRecordCount++] = index;
}

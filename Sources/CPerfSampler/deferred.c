// Deferred samples: the handler copies the stack of a walk that met a PC without a rule,
// and the discovery thread (or stop) finishes the walk on the copy.
#include "deferred.h"

#include <stdatomic.h>
#include <string.h>

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
#define DEFER_MAX_COPY ((uint64_t)64 << 10)
typedef struct DeferEntry {
  _Atomic uint32_t ready;  // 1: written; 2: abandoned (skip)
  uint32_t bytes;          // whole entry, 8-byte multiple
  int32_t tid;
  uint32_t weight;
  uint64_t timestampNs;
  uint32_t handlerNs;
  uint32_t prefixCount;  // frames before the miss
  uint32_t checkCount;   // verify mode: libunwind's frames
  uint32_t leaf;
  uint32_t suffixCount;             // frames of the thread's last walk that finish this one
  uint32_t chainCount;              // the task's logical frames, read in the handler
  uint64_t ip, sp, bp, high;        // at the miss
  uint64_t copyEnd;                 // the copy holds [sp - below, copyEnd): high, or the
                                    // rejoin frame's sp when suffixCount > 0
  uint64_t meetIp, meetSp, meetBp;  // the rejoin frame's state
  uint64_t below;                   // red zone bytes copied below sp
  greg_t gregs[NGREG];              // the interrupted registers: libunwind learns from these,
                                    // as it would have in the handler
  // then: prefix[prefixCount], suffix[suffixCount], check[checkCount], chain[chainCount],
  // copy[copyEnd - sp + below]
} DeferEntry;
SAMPLER_HIDDEN uint8_t *g_defer;  // mmap'd at the first start, reused by later sessions
SAMPLER_HIDDEN _Atomic uint64_t g_deferUsed;
SAMPLER_HIDDEN uint64_t g_deferDone;         // consumer position (discovery thread, then stop)
SAMPLER_HIDDEN _Atomic uint64_t g_rejoined;  // deferred samples finished from the last walk
SAMPLER_HIDDEN _Atomic uint64_t g_deferredSamples;

// Handler side: stores a sample whose walk stopped at miss; false if it cannot be
// deferred (then the caller learns in place).
SAMPLER_HIDDEN bool defer_sample(const ucontext_t *uc, const WalkMiss *miss, const uint64_t *prefix,
                                 const uint64_t *check, int checkCount, const uint64_t *chain, int chainCount,
                                 int32_t tid, uint32_t weight, uint64_t entryNs) {
  const TraceFrame *meet = miss->rejoin ? &miss->rejoin->frames[miss->rejoinIndex] : NULL;
  uint32_t suffixCount = meet ? (uint32_t)(miss->rejoin->count - miss->rejoinIndex) : 0;
  uint64_t copyEnd = meet ? meet->sp : miss->high;
  if (!g_defer || copyEnd - miss->sp > DEFER_MAX_COPY) return false;
  uint64_t below = miss->sp - miss->low >= RED_ZONE_BYTES ? RED_ZONE_BYTES : 0;
  uint64_t copyBytes = copyEnd - miss->sp + below;
  uint64_t bytes =
      sizeof(DeferEntry) + (uint64_t)(miss->n + suffixCount + checkCount + chainCount) * 8 + ((copyBytes + 7) & ~7ull);
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
  e->chainCount = (uint32_t)chainCount;
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
  if (chainCount) memcpy(tail + miss->n + suffixCount + checkCount, chain, (size_t)chainCount * 8);
  memcpy(tail + miss->n + suffixCount + checkCount + chainCount, (const void *)(uintptr_t)(miss->sp - below),
         (size_t)copyBytes);
  e->handlerNs = (uint32_t)(now_ns() - entryNs);
  atomic_store_explicit(&e->ready, 1, memory_order_release);
  return true;
}

// Finishes deferred samples in order, up to the first one still being written.
// Discovery thread (or stop(), after the last handler): never inside a handler.
// Returns whether it finished any.
SAMPLER_HIDDEN bool drain_deferred(bool extendRules) {
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
    const uint64_t *chain = check + e->checkCount;
    const uint8_t *copy = (const uint8_t *)(chain + e->chainCount) + e->below;  // at sp
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
    bool walkFailed = n < 0;
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
      if (walkFailed) {
        // A counted fallback (the walk knew it could not finish), not a wrong stack:
        // record libunwind's.
        memcpy(frames, check, (size_t)e->checkCount * 8);
        n = (int)e->checkCount;
      } else if ((uint32_t)n != e->checkCount || memcmp(check, frames, (size_t)n * 8) != 0) {
        atomic_fetch_add_explicit(&g_mismatches, 1, memory_order_relaxed);
        memcpy(frames, check, (size_t)e->checkCount * 8);
        n = (int)e->checkCount;
      }
    }
    if (e->chainCount)
      n = async_insert(frames, n, maxDepth, async_executor_callee(frames, n), chain, (int)e->chainCount);
    append_record(e->tid, e->weight, e->timestampNs, e->handlerNs, frames, (uint32_t)n);
    atomic_fetch_add_explicit(&g_deferredSamples, 1, memory_order_relaxed);
    if (extendRules) extend_learned_rules();
    g_learnedCount = 0;
    g_deferDone += e->bytes;
  }
  return g_deferDone != from;
}

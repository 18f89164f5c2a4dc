// Deferred samples (deferred.c): a walk that met a PC without a rule, copied by the handler
// and finished off it.
#ifndef CPERFSAMPLER_DEFERRED_H
#define CPERFSAMPLER_DEFERRED_H

#include "async_chain.h"
#include "walk.h"

#define DEFER_BYTES ((uint64_t)16 << 20)
// Mapped after the buffer and never written: libunwind steps on a partial copy may read
// past its end (a frame that ends beyond the copy), and must read mapped memory there.
#define DEFER_SLACK ((uint64_t)1 << 20)
extern SAMPLER_HIDDEN uint8_t *g_defer;  // mmap'd at the first start, reused by later sessions
extern SAMPLER_HIDDEN _Atomic uint64_t g_deferUsed;
extern SAMPLER_HIDDEN uint64_t g_deferDone;         // consumer position (discovery thread, then stop)
extern SAMPLER_HIDDEN _Atomic uint64_t g_rejoined;  // deferred samples finished from the last walk
extern SAMPLER_HIDDEN _Atomic uint64_t g_deferredSamples;

/// Handler side: stores a sample whose walk stopped at miss; false if it cannot be deferred.
SAMPLER_HIDDEN bool defer_sample(const ucontext_t *uc, const WalkMiss *miss, const uint64_t *prefix,
                                 const uint64_t *check, int checkCount, const uint64_t *chain, int chainCount,
                                 int32_t tid, uint32_t weight, uint64_t entryNs);
/// Finishes deferred samples in order (never inside a handler); whether it finished any.
SAMPLER_HIDDEN bool drain_deferred(bool extendRules);

#endif

// Swift concurrency's logical call chains: a sample taken in an async function goes on past
// the executor into the functions that await it, read from the task's async contexts.
#ifndef CPERFSAMPLER_ASYNC_CHAIN_H
#define CPERFSAMPLER_ASYNC_CHAIN_H

#include "rules.h"

// A frame of the logical chain carries this bit: the address is a resume function's entry
// (a function pointer, not a return address), and the address 0 with it is the marker
// between the executor's frames and the task's logical ones.
#define ASYNC_FRAME_TAG ((uint64_t)CPerfSampler_AsyncFrameTag)
// Contexts followed at most per sample (a chain of Parent pointers that loops ends here).
// The chain is gathered on the interrupted thread's stack, as the frames are: a thread near
// its stack's end must survive a sample, so the buffer stays at 512 bytes.
#define ASYNC_MAX_HOPS 64
// Bytes below a chain's first context fetched ahead (where its callers' contexts lie).
#define ASYNC_PREFETCH_BELOW 1024
// Readable and writable mappings the chain may read; more are not kept.
#define ASYNC_RANGES_MAX 1024

// Where the executor calls a task's resume function: the code range of the Swift runtime's
// job-running function, published by discovery for a session with async chains (0, 0
// until then, without Swift concurrency, or with physical stacks only).
#define g_executorLow  (TABLES->executorLow)
#define g_executorHigh (TABLES->executorHigh)
// Where the runtime keeps the thread's running task, from the thread pointer (its
// thread-local ActiveTask in the runtime's static TLS block); 0: unknown.
#define g_taskSlotOffset (TABLES->taskSlotOffset)
// The Swift ABI's Job and AsyncTask (64-bit): the function and context a task resumes with.
#define TASK_RESUME_FUNCTION 0x38
#define TASK_RESUME_CONTEXT  0x40
// The readable and writable mappings, sorted, as discovery last read them; sequence is odd
// while it rewrites them (a handler that sees it change uses nothing it read).
typedef struct AsyncRanges {
  _Atomic uint32_t sequence;
  uint32_t count;
  uint64_t start[ASYNC_RANGES_MAX], end[ASYNC_RANGES_MAX];
} AsyncRanges;
extern SAMPLER_HIDDEN AsyncRanges g_asyncRanges;
extern SAMPLER_HIDDEN _Atomic int32_t g_asyncRangesWanted;  // a context lay outside them
extern SAMPLER_HIDDEN _Atomic uint64_t g_asyncChains;       // samples given a logical chain
extern SAMPLER_HIDDEN _Atomic uint64_t g_asyncUnread;       // executor frames without a readable context

/// Discovery: publishes the executor's code range (found once per process, in a symbol
/// table read with libdwfl) unless the session records physical stacks only.
SAMPLER_HIDDEN void publish_executor(void);
/// Discovery and start: reads the mappings again when a handler asked (or force).
SAMPLER_HIDDEN void refresh_async_ranges(bool force);

// Whether [address, address + 16) lies in one readable, writable mapping, as last read.
// The thread's record remembers the last mapping that held a context: a task's contexts
// live in a few allocator slabs, so the search is rarely needed.
static inline bool async_context_readable(uint64_t address, ThreadRecord *record) {
  if (address & 7) return false;
  uint32_t sequence = atomic_load_explicit(&g_asyncRanges.sequence, memory_order_acquire);
  if (sequence & 1) return false;
  if (record->asyncSequence == sequence && address >= record->asyncLow && address + 16 <= record->asyncHigh)
    return true;
  uint32_t low = 0, high = g_asyncRanges.count;
  if (high > ASYNC_RANGES_MAX) return false;
  while (low < high) {  // the first range that ends after address
    uint32_t middle = (low + high) / 2;
    if (g_asyncRanges.end[middle] <= address)
      low = middle + 1;
    else
      high = middle;
  }
  uint64_t start = low < ASYNC_RANGES_MAX ? g_asyncRanges.start[low] : 0;
  uint64_t end = low < ASYNC_RANGES_MAX ? g_asyncRanges.end[low] : 0;
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&g_asyncRanges.sequence, memory_order_relaxed) != sequence) return false;
  if (low >= g_asyncRanges.count || address < start || address + 16 > end) {
    atomic_store_explicit(&g_asyncRangesWanted, 1, memory_order_relaxed);
    return false;
  }
  record->asyncLow = start;
  record->asyncHigh = end;
  record->asyncSequence = sequence;
  return true;
}

// A frame without a frame record (optimized partial functions keep the context in a
// register): the context the running task was resumed with. It is the running function's
// own (resumed after a switch of executor), or that of the callee it awaited, which has
// returned (its ResumeParent is then what the task resumed): that one's Parent is the
// running function's. 0 when the task or its context cannot be read.
static inline uint64_t async_resumed_context(ThreadRecord *record) {
  int64_t offset = atomic_load_explicit(&g_taskSlotOffset, memory_order_relaxed);
  if (offset == 0) return 0;
  uint64_t slot = (uint64_t)(uintptr_t)__builtin_thread_pointer() + (uint64_t)offset;
  // The static TLS block lies beside the thread's descriptor: in its stack mapping for a
  // thread from pthread_create, in the table of mappings for the main thread.
  if (!(slot >= record->low && slot + 8 <= record->high) && !async_context_readable(slot & ~(uint64_t)15, record))
    return 0;
  uint64_t task = *(const uint64_t *)(uintptr_t)slot;
  if (!task || !async_context_readable(task + TASK_RESUME_FUNCTION, record)) return 0;
  uint64_t resumed = *(const uint64_t *)(uintptr_t)(task + TASK_RESUME_FUNCTION);
  uint64_t context = *(const uint64_t *)(uintptr_t)(task + TASK_RESUME_CONTEXT);
  if (!async_context_readable(context, record)) return 0;
  const uint64_t *words = (const uint64_t *)(uintptr_t)context;
  return words[1] == resumed ? words[0] : context;
}

// Handler entry: the running task's line is fetched while the walk runs (the chain reads
// it after the walk, a miss or two the walk's own then hide).
static inline void async_prefetch_task(const ThreadRecord *record) {
  int64_t offset = atomic_load_explicit(&g_taskSlotOffset, memory_order_relaxed);
  if (offset == 0 || !record) return;
  uint64_t slot = (uint64_t)(uintptr_t)__builtin_thread_pointer() + (uint64_t)offset;
  uint64_t low = atomic_load_explicit(&record->low, memory_order_relaxed);
  uint64_t high = atomic_load_explicit(&record->high, memory_order_relaxed);
  if (slot < low || slot + 8 > high) return;
  uint64_t task = *(const uint64_t *)(uintptr_t)slot;
  if (task) __builtin_prefetch((const void *)(uintptr_t)(task + TASK_RESUME_FUNCTION));
}

// The frame the executor called among `count` frames (leaf first), or -1.
static inline int async_executor_callee(const uint64_t *frames, int count) {
  uint64_t low = atomic_load_explicit(&g_executorLow, memory_order_relaxed);
  uint64_t high = atomic_load_explicit(&g_executorHigh, memory_order_relaxed);
  if (low == 0) return -1;
  for (int i = 1; i < count; i++) {
    if (frames[i] > low && frames[i] <= high) return i - 1;  // a return address: the call ends before it
  }
  return -1;
}

// Follows Parent pointers from `context` into chain[0..room): each function that resumes
// in an awaiting caller (ResumeParent), tagged. Returns how many.
static inline int async_chain(uint64_t context, ThreadRecord *record, uint64_t *chain, int room) {
  int hops = 0;
  if (room > ASYNC_MAX_HOPS) room = ASYNC_MAX_HOPS;
  // A task's contexts come from its own bump allocator, callers' before callees': the
  // awaiting callers' lie mostly just below the first. Each hop waits for the last (a
  // cache miss each after a millisecond of the program's work), so their lines are
  // fetched together first. A prefetch reads nothing and faults on nothing.
  for (uint64_t line = (context & ~(uint64_t)63) - ASYNC_PREFETCH_BELOW; line <= context; line += 64)
    __builtin_prefetch((const void *)(uintptr_t)line);
  while (context && hops < room) {
    if (!async_context_readable(context, record)) break;
    const uint64_t *words = (const uint64_t *)(uintptr_t)context;
    uint64_t parent = words[0], resume = words[1];
    if (resume == 0 || resume >= RULE_MAX_PC) break;
    chain[hops++] = resume | ASYNC_FRAME_TAG;
    context = parent;
  }
  return hops;
}

// Inserts chain[0..hops) and the marker after frame k. Returns the new count.
static inline int async_insert(uint64_t *frames, int count, int max, int k, const uint64_t *chain, int hops) {
  if (hops <= 0 || k < 0 || count + hops + 1 > max) {
    atomic_fetch_add_explicit(&g_asyncUnread, 1, memory_order_relaxed);
    return count;
  }
  memmove(&frames[k + 2 + hops], &frames[k + 1], (size_t)(count - k - 1) * 8);
  memcpy(&frames[k + 1], chain, (size_t)hops * 8);
  frames[k + 1 + hops] = ASYNC_FRAME_TAG;
  atomic_fetch_add_explicit(&g_asyncChains, 1, memory_order_relaxed);
  return count + hops + 1;
}

// After a walk of `count` frames (leaf first) whose states are in `trace` (NULL: not
// known, as for libunwind's stack): if a frame was called by the executor, the chain of
// its task's contexts is inserted after it, then the marker, then the executor's frames.
// The context is the one an async frame record keeps (exact), else the one the task was
// resumed with. Returns the new count (at most max).
static inline int async_extend(uint64_t *frames, int count, int max, const Trace *trace, ThreadRecord *record) {
  int k = async_executor_callee(frames, count);
  if (k < 0) return count;
  int room = max - count - 1;  // the marker takes one
  if (room <= 0) return count;
  uint64_t context = 0;
  // An async function's frame record: rbp points at the saved rbp, CFA = rbp + 16, and the
  // context is stored just below it (LLVM's Swift async frame layout on x86-64).
  const TraceFrame *f = trace && trace->count == count ? &trace->frames[k] : NULL;
  if (f && f->bp + 16 == f[1].sp && f->bp >= f->sp + 8) {
    context = *(const uint64_t *)(uintptr_t)(f->bp - 8);
  } else {
    context = async_resumed_context(record);
  }
  uint64_t chain[ASYNC_MAX_HOPS];
  int hops = async_chain(context, record, chain, room);
  return async_insert(frames, count, max, k, chain, hops);
}

#endif

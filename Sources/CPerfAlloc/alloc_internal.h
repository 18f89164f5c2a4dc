// CPerfAlloc's private base header, included by every file of the interposer: the libc
// entry points, build switches and macros, the session's state and the per-thread words.
// Hot helpers are static inline in the concept headers built on this one.
#ifndef CPERFALLOC_ALLOC_INTERNAL_H
#define CPERFALLOC_ALLOC_INTERNAL_H

#include "alloc_namespace.h"

// The Allocations instrument's malloc interposer: definitions of the malloc family in
// the executable catch every library's calls (docs/design.md, "Measured facts"). Only the
// parts that must be C live in this target: the hooks, their mmap-backed tables, the
// snapshot (docs/design.md, "The C targets", lists its files).
#include "CPerfAlloc.h"

#include "CPerfSupport.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

_Static_assert(sizeof(void *) == 8, "64-bit only: slots pack addresses and sizes");
_Static_assert(sizeof(CPerfAlloc_Config) == 16, "config layout");
_Static_assert(sizeof(CPerfAlloc_Error) == 16, "error layout");
_Static_assert(sizeof(CPerfAlloc_Block) == 24, "block layout");
_Static_assert(sizeof(CPerfAlloc_Freed) == 24, "freed layout");
_Static_assert(sizeof(CPerfAlloc_Mark) == 32, "mark layout");
_Static_assert(sizeof(CPerfAlloc_TimelinePoint) == 16, "timeline layout");

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

// ThreadSanitizer brings its own allocator and must see every malloc and free (it tracks
// heap lifetimes, and it calls malloc before its runtime is up, which an instrumented
// interposer cannot survive). Under it the malloc family is left to the sanitizer and the
// Allocations instrument reports itself unavailable.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CPERFALLOC_INTERPOSES 0
#endif
#endif
#ifndef CPERFALLOC_INTERPOSES
#define CPERFALLOC_INTERPOSES 1
#endif

#define LIKELY(x)   __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TLS         __thread __attribute__((tls_model("initial-exec")))

// What the files share (globals, thread-locals, out-of-line functions) stays inside the
// image that links CPerfAlloc: direct addressing, no PLT or GOT, as when it was all static.
#define ALLOC_HIDDEN __attribute__((visibility("hidden")))

// MARK: - State

// STATE_TRACKING: tracking every block from process start, no session yet.
enum { STATE_IDLE = 0, STATE_RUNNING = 1, STATE_STOPPED = 2, STATE_BUSY = 3, STATE_TRACKING = 4 };
extern ALLOC_HIDDEN _Atomic int32_t g_state;

// The only thing the hooks read when not recording.
extern ALLOC_HIDDEN _Atomic int32_t g_recording;
// Set from the constructor (PERFHARNESS_TRACK_ALL_BLOCKS=1) until the session starts:
// the hooks then record every block as preexisting, and nothing else.
extern ALLOC_HIDDEN _Atomic int32_t g_preexistingPhase;
// The session tracks the blocks allocated before it (the constructor ran).
extern ALLOC_HIDDEN bool g_tracksPreexisting;
// CPerfAlloc_setPaused: no block allocated now is the session's. Frees are recorded as
// ever, so a session block freed meanwhile leaves the counts.
extern ALLOC_HIDDEN _Atomic int32_t g_paused;

extern ALLOC_HIDDEN int32_t g_mode;
extern ALLOC_HIDDEN int32_t g_maxDepth;
extern ALLOC_HIDDEN uint64_t g_startNs;
extern ALLOC_HIDDEN uint64_t g_stopNs;
extern ALLOC_HIDDEN _Atomic uint32_t g_generation;
// The generation as a slot stores it (w0 from GENERATION_SHIFT, at most 0xFFFF).
extern ALLOC_HIDDEN _Atomic uint64_t g_generationBits;
extern ALLOC_HIDDEN _Atomic int64_t g_peakLiveBytes;

// Per-thread: the reentrancy guard (what a hook's slow path calls, e.g. /proc reads, must
// not be recorded; glibc's malloc and free call neither, so the common paths run without
// it), the cached tid and the stack bounds for the walk.
extern ALLOC_HIDDEN TLS int t_inHook;
extern ALLOC_HIDDEN TLS int32_t t_ignoringAllocations;  // CPerfAlloc_setIgnoringAllocations
extern ALLOC_HIDDEN TLS int32_t t_tid;
extern ALLOC_HIDDEN TLS uintptr_t t_stackLo;
extern ALLOC_HIDDEN TLS uintptr_t t_stackHi;  // 0: not yet looked up; 1: unknown (no walk)

static inline int32_t currentTid(void) {
  if (UNLIKELY(t_tid == 0)) t_tid = (int32_t)syscall(SYS_gettid);
  return t_tid;
}

// MARK: - Size classes

// CPerfAlloc_sizeClass, for the hooks to inline (the public function calls it).
static inline uint32_t sizeClassOf(uint64_t size) {
  if (size <= 16) return 0;
  return (uint32_t)(64 - __builtin_clzll(size - 1)) - 4;
}

static inline uint64_t sizeKey(uint64_t size) { return ((uint64_t)sizeClassOf(size) << 1) | 1; }

// In hooks.c: the fork handlers, which session.c registers.
ALLOC_HIDDEN void forkPrepare(void);
ALLOC_HIDDEN void forkParent(void);
ALLOC_HIDDEN void forkChild(void);

#endif

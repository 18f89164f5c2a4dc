// The Allocations instrument's malloc interposer: definitions of the malloc family in
// the executable catch every library's calls (docs/design.md, "Measured facts"). Only the
// parts that must be C live here: the hooks, their mmap-backed tables, the snapshot.
#include "CPerfAlloc.h"

#include "CPerfClock.h"

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

_Static_assert(sizeof(void *) == 8, "64-bit only: slots pack addresses and sizes");
_Static_assert(sizeof(CPerfAlloc_Config) == 16, "config layout");
_Static_assert(sizeof(CPerfAlloc_Error) == 16, "error layout");
_Static_assert(sizeof(CPerfAlloc_Block) == 48, "block layout");
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

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TLS __thread __attribute__((tls_model("initial-exec")))

// MARK: - State

// STATE_TRACKING: tracking every block from process start, no session yet.
enum { STATE_IDLE = 0, STATE_RUNNING = 1, STATE_STOPPED = 2, STATE_BUSY = 3, STATE_TRACKING = 4 };
static _Atomic int32_t g_state = STATE_IDLE;

// The only thing the hooks read when not recording.
static _Atomic int32_t g_recording;
// Set from the constructor (PERFHARNESS_TRACK_ALL_BLOCKS=1) until the session starts:
// the hooks then record every block as preexisting, and nothing else.
static _Atomic int32_t g_preexistingPhase;
// The session tracks the blocks allocated before it (the constructor ran).
static bool g_tracksPreexisting;
// CPerfAlloc_setPaused: no block allocated now is the session's. Frees are recorded as
// ever, so a session block freed meanwhile leaves the counts.
static _Atomic int32_t g_paused;

static int32_t g_mode;
static int32_t g_maxDepth;
static uint64_t g_startNs;
static uint64_t g_stopNs;
static _Atomic uint32_t g_generation;
// The generation as a slot stores it (w0's bits above the address, at most 0xFFFF).
static _Atomic uint64_t g_generationBits;
static _Atomic int64_t g_peakLiveBytes;

// Per-thread: the reentrancy guard (what a hook's slow path calls, e.g. /proc reads, must
// not be recorded; glibc's malloc and free call neither, so the common paths run without
// it), the cached tid and the stack bounds for the walk.
static TLS int t_inHook;
static TLS int32_t t_ignoringAllocations;  // CPerfAlloc_setIgnoringAllocations
static TLS int32_t t_tid;
static TLS uint64_t t_tidBits;  // the thread's id as a slot stores it (w1); 0: not yet known
static TLS uintptr_t t_stackLo;
static TLS uintptr_t t_stackHi;  // 0: not yet looked up; 1: unknown (no walk)

static uint64_t monotonicNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Block timestamps come from the TSC (a few ns, against ~20 for clock_gettime), scaled
// to microseconds since start with a factor calibrated against CLOCK_MONOTONIC at start.
#include <x86intrin.h>
static uint64_t g_startTsc;
static uint64_t g_microsPerTsc32;  // microseconds per TSC tick, 32.32 fixed point

static inline uint64_t microsSinceStart(void) {
  uint64_t delta = __rdtsc() - g_startTsc;
  return (uint64_t)(((unsigned __int128)delta * g_microsPerTsc32) >> 32);
}

// Reading the TSC costs ~17 ns on this VM (more than the rest of the recording path), so
// the hooks read it only every CLOCK_EVERY allocations per thread and publish the reading
// in g_nowMicros; blocks are stamped with the latest published reading. The timeline is
// sampled on those reads, with an exact time.
#define CLOCK_EVERY 64
static _Atomic uint64_t g_nowMicros;  // latest reading of any thread, microseconds since start
static TLS uint32_t t_clockCountdown;

static void calibrateClock(void) {
  uint64_t nsPerTsc32 = 0;
  if (!CPerfClock_calibrate(&nsPerTsc32, &g_startNs, &g_startTsc)) {
    g_startNs = monotonicNs();  // a TSC that stands still: every block at the start
    g_startTsc = __rdtsc();
  }
  g_microsPerTsc32 = nsPerTsc32 / 1000;
}

int32_t CPerfAlloc_gettid(void) { return (int32_t)syscall(SYS_gettid); }

static int32_t currentTid(void) {
  if (UNLIKELY(t_tid == 0)) t_tid = (int32_t)syscall(SYS_gettid);
  return t_tid;
}

static void *mapBytes(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static size_t pageRound(size_t bytes) {
  size_t page = 4096;
  return (bytes + page - 1) & ~(page - 1);
}

// A spinlock rather than a pthread mutex: uncontended it is one atomic exchange, and
// the atfork handlers can take and drop all of them without any glibc state.
typedef _Atomic uint32_t SpinLock;

static void spinLock(SpinLock *lock) {
  unsigned spins = 0;
  while (atomic_exchange_explicit(lock, 1, memory_order_acquire)) {
    while (atomic_load_explicit(lock, memory_order_relaxed)) {
      if (++spins > 64) sched_yield();
      else __builtin_ia32_pause();
    }
  }
}

static void spinUnlock(SpinLock *lock) { atomic_store_explicit(lock, 0, memory_order_release); }

// MARK: - Size classes and time

uint32_t CPerfAlloc_sizeClass(uint64_t size) {
  if (size <= 16) return 0;
  return (uint32_t)(64 - __builtin_clzll(size - 1)) - 4;
}

static uint64_t sizeKey(uint64_t size) { return ((uint64_t)CPerfAlloc_sizeClass(size) << 1) | 1; }

// MARK: - Live-block tables
//
// Open addressing with linear probing, split into stripes by address hash so threads
// rarely share a lock. A slot is 24 bytes:
//   w0: address >> 4 (43 bits; 0 empty, 1 tombstone) | generation << 43 (16 bits)
//   w1: size (40 bits) | tid << 40 (22 bits: pid_max <= 2^22) | object flag << 62
//   w2: stackId (32 bits) | microseconds since start << 32 (wraps after 71 minutes)
// Tables grow by 1.5x at 3/4 load, so a live block costs 32-48 bytes of table.

#ifndef STRIPE_BITS
#define STRIPE_BITS 6
#endif
#define STRIPES (1 << STRIPE_BITS)
#define INITIAL_SLOTS 256
#define FREED_SLOTS 4096
// After the hashed slots, one slot per size class: untyped frees need no lookup (sizes
// have 40 bits, so classes stay under 37).
#define SIZE_CLASS_SLOTS 64
#define FREED_TABLE_BYTES pageRound((FREED_SLOTS + SIZE_CLASS_SLOTS) * sizeof(FreedSlot))
#define KEY_EMPTY 0ull
#define KEY_TOMBSTONE 1ull
#define ADDR_BITS 43
#define ADDR_MASK ((1ull << ADDR_BITS) - 1)
#define SIZE_MASK ((1ull << 40) - 1)
#define TID_MASK ((1ull << 22) - 1)
#define OBJECT_BIT (1ull << 62)
// w1: the block was allocated before the session started (tracked from process start,
// see CPerfAlloc_preexistingBlocks): it is in no statistic, only in the table.
#define PREEXISTING_BIT (1ull << 63)

typedef struct Slot {
  uint64_t w0, w1, w2;
} Slot;
_Static_assert(sizeof(Slot) == 24, "live-block slot must stay 24 bytes (per-block overhead)");

typedef struct FreedSlot {
  uint64_t key, count, bytes;
} FreedSlot;
_Static_assert(sizeof(FreedSlot) == 24, "freed slot layout");

// Frees counted by category: a stripe's (under its lock) or a nursery's (its owner's).
typedef struct FreedTable {
  FreedSlot *slots;  // FREED_TABLE_BYTES, mapped at the first free
  uint64_t used;
  uint64_t lost;     // frees whose category found no room (or no table)
} FreedTable;

typedef struct __attribute__((aligned(128))) Stripe {
  SpinLock lock;
  Slot *slots;
  uint64_t capacity;  // slots
  uint64_t mappedBytes;
  uint64_t used;      // live + tombstones
  uint64_t live;
  uint64_t liveBytes;
  uint64_t allocations;
  uint64_t allocatedBytes;
  uint64_t frees;
  uint64_t lostBlocks;
  FreedTable freed;
  uint64_t preLive;       // blocks with PREEXISTING_BIT
  uint64_t preLiveBytes;
} Stripe;
_Static_assert(sizeof(Stripe) == 128, "a stripe fills two cache lines, no false sharing");

static Stripe g_stripes[STRIPES];

static inline uint64_t hashAddress(uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

static inline Stripe *stripeFor(uint64_t h) { return &g_stripes[h >> (64 - STRIPE_BITS)]; }

// Multiply-shift range reduction: any capacity works, so tables can grow by 1.5x.
static inline uint64_t slotIndex(uint64_t h, uint64_t capacity) {
  return (uint64_t)(((unsigned __int128)(h << STRIPE_BITS) * capacity) >> 64);
}

static bool stripeMap(Stripe *s, uint64_t capacity) {
  size_t bytes = pageRound((size_t)capacity * sizeof(Slot));
  Slot *slots = mapBytes(bytes);
  if (!slots) return false;
  uint64_t newCapacity = bytes / sizeof(Slot);
  Slot *old = s->slots;
  uint64_t oldCapacity = s->capacity;
  size_t oldBytes = s->mappedBytes;
  for (uint64_t i = 0; i < oldCapacity; i++) {
    uint64_t key = old[i].w0 & ADDR_MASK;
    if (key <= KEY_TOMBSTONE) continue;
    uint64_t j = slotIndex(hashAddress(key), newCapacity);
    while (slots[j].w0 != 0) j = (j + 1 == newCapacity) ? 0 : j + 1;
    slots[j] = old[i];
  }
  s->slots = slots;
  s->capacity = newCapacity;
  s->mappedBytes = bytes;
  s->used = s->live + s->preLive;
  if (old) munmap(old, oldBytes);
  return true;
}

// Called with the stripe locked. Keeps (live + tombstones) <= 3/4 of the capacity.
static bool stripeReserve(Stripe *s) {
  if (LIKELY(s->slots && (s->used + 1) * 4 <= s->capacity * 3)) return true;
  uint64_t capacity = s->capacity ? s->capacity : INITIAL_SLOTS;
  if ((s->live + s->preLive + 1) * 2 > capacity) capacity += capacity / 2;
  return stripeMap(s, capacity);
}

// Backward-shift deletion (no tombstones): later slots of the probe run move back into
// the hole unless that would put them before their home slot. Called with the lock held.
static void stripeErase(Stripe *s, uint64_t i) {
  Slot *slots = s->slots;
  uint64_t capacity = s->capacity;
  uint64_t j = i;
  for (;;) {
    j = (j + 1 == capacity) ? 0 : j + 1;
    uint64_t k = slots[j].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == KEY_TOMBSTONE) continue;  // none are made any more; a hole cannot move past one
    uint64_t home = slotIndex(hashAddress(k), capacity);
    // Slot j may fill the hole at i unless its home lies cyclically in (i, j].
    bool homeInRange = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (homeInRange) continue;
    slots[i] = slots[j];
    i = j;
  }
  slots[i].w0 = KEY_EMPTY;
  s->used--;
}

__attribute__((noinline, cold)) static bool freedMap(FreedTable *t) {
  t->slots = mapBytes(FREED_TABLE_BYTES);
  if (!t->slots) t->lost++;
  return t->slots != NULL;
}

// An untyped free: its size class's slot.
static inline void freedAddUntyped(FreedTable *t, uint64_t size) {
  if (UNLIKELY(!t->slots) && !freedMap(t)) return;
  uint32_t sizeClass = CPerfAlloc_sizeClass(size);
  FreedSlot *f = &t->slots[FREED_SLOTS + sizeClass];
  if (UNLIKELY(f->count == 0)) {
    f->key = ((uint64_t)sizeClass << 1) | 1;
    t->used++;
  }
  f->count++;
  f->bytes += size;
}

// Keys are metadata pointers or small odd numbers: mix before indexing. The tables are
// page-aligned, so without the per-table offset one key would land in the same cache set
// in all tables and keep evicting itself. `table` numbers the table (stripes first, then
// nurseries).
static inline uint64_t freedHome(uint64_t table, uint64_t key) {
  uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 52;  // 12 bits: FREED_SLOTS == 4096
  return (i + table * 43) & (FREED_SLOTS - 1);
}

static void freedProbe(FreedTable *t, uint64_t i, uint64_t key, uint64_t size) {
  for (uint64_t probes = 0; probes < FREED_SLOTS; probes++) {
    FreedSlot *f = &t->slots[i];
    if (f->key == key || f->count == 0) {
      if (f->count == 0) { f->key = key; t->used++; }
      f->count++;
      f->bytes += size;
      return;
    }
    i = (i + 1) & (FREED_SLOTS - 1);
  }
  t->lost++;
}

static inline __attribute__((always_inline)) void freedAdd(FreedTable *t, uint64_t table, uint64_t key,
                                                           uint64_t size) {
  if (key & 1) {
    freedAddUntyped(t, size);  // the key is the size's
    return;
  }
  if (UNLIKELY(!t->slots) && !freedMap(t)) return;
  uint64_t i = freedHome(table, key);
  FreedSlot *f = &t->slots[i];
  if (LIKELY(f->key == key && f->count)) {  // the category's slot, met before
    f->count++;
    f->bytes += size;
    return;
  }
  freedProbe(t, i, key, size);
}

// MARK: - Stack table
//
// Lock-free open addressing (inserts also happen under a stripe lock, which is what
// makes stop and fork see a quiescent table). Frames live in an append-only arena.

#define STACK_SLOTS (1u << 20)
#define STACK_ARENA_FRAMES (64ull << 20)
#define STACK_BUSY 1ull

typedef struct StackSlot {
  _Atomic uint64_t hash;  // 0 empty, 1 being written, else the stack's hash (>= 2)
  uint32_t offset;        // in frames
  uint32_t depth;
} StackSlot;
_Static_assert(sizeof(StackSlot) == 16, "stack slot layout");

static StackSlot *g_stackSlots;
static uint64_t *g_stackArena;
static _Atomic uint64_t g_stackArenaUsed;
static _Atomic uint64_t g_stackCount;
static _Atomic uint64_t g_lostStacks;

// `partial` is the rotate-xor of the frames, accumulated by the walk (stackHashStep).
static inline uint64_t stackHashStep(uint64_t h, uint64_t frame) { return ((h << 7) | (h >> 57)) ^ frame; }

static uint32_t stackIntern(const uint64_t *frames, uint32_t depth, uint64_t partial) {
  // Rotate-xor keeps the per-frame dependency chain to two cycles; one multiply mixes.
  uint64_t h = partial ^ ((uint64_t)depth << 56);
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  if (h < 2) h += 2;
  uint32_t index = (uint32_t)(h >> 40) & (STACK_SLOTS - 1);
  for (uint32_t probes = 0; probes < 4096; probes++) {
    StackSlot *slot = &g_stackSlots[index];
    uint64_t seen = atomic_load_explicit(&slot->hash, memory_order_acquire);
    if (seen == 0) {
      uint64_t expected = 0;
      if (atomic_compare_exchange_strong_explicit(&slot->hash, &expected, STACK_BUSY, memory_order_acq_rel, memory_order_acquire)) {
        uint64_t offset = atomic_fetch_add_explicit(&g_stackArenaUsed, depth, memory_order_relaxed);
        if (offset + depth > STACK_ARENA_FRAMES) {
          // Full: leave a slot that matches nothing (depth 0 never equals a real depth).
          slot->offset = 0;
          slot->depth = 0;
          atomic_store_explicit(&slot->hash, h, memory_order_release);
          atomic_fetch_add_explicit(&g_lostStacks, 1, memory_order_relaxed);
          return 0;
        }
        memcpy(&g_stackArena[offset], frames, depth * sizeof(uint64_t));
        slot->offset = (uint32_t)offset;
        slot->depth = depth;
        atomic_store_explicit(&slot->hash, h, memory_order_release);
        atomic_fetch_add_explicit(&g_stackCount, 1, memory_order_relaxed);
        return index + 1;
      }
      seen = expected;
    }
    while (seen == STACK_BUSY) {
      __builtin_ia32_pause();
      seen = atomic_load_explicit(&slot->hash, memory_order_acquire);
    }
    if (seen == h && slot->depth == depth &&
        memcmp(&g_stackArena[slot->offset], frames, depth * sizeof(uint64_t)) == 0) {
      return index + 1;
    }
    index = (index + 1) & (STACK_SLOTS - 1);
  }
  atomic_fetch_add_explicit(&g_lostStacks, 1, memory_order_relaxed);
  return 0;
}

// MARK: - Stack walking

static uint64_t parseHex(const char **cursor) {
  uint64_t value = 0;
  const char *p = *cursor;
  for (;; p++) {
    char c = *p;
    if (c >= '0' && c <= '9') value = value * 16 + (uint64_t)(c - '0');
    else if (c >= 'a' && c <= 'f') value = value * 16 + (uint64_t)(c - 'a' + 10);
    else break;
  }
  *cursor = p;
  return value;
}

// The mapping that holds `sp`, read from /proc/self/maps with raw syscalls: no malloc,
// no stdio lock, no pthread lock (pthread_getattr_np takes the thread's lock and
// reallocs, so it could deadlock if the hooked malloc came from inside it).
static void lookUpStackBounds(uintptr_t sp) {
  t_stackHi = 1;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buffer[4096];
  size_t have = 0;
  for (;;) {
    ssize_t got = read(fd, buffer + have, sizeof(buffer) - 1 - have);
    if (got <= 0) break;
    have += (size_t)got;
    buffer[have] = 0;
    char *line = buffer;
    char *newline;
    while ((newline = memchr(line, '\n', have - (size_t)(line - buffer)))) {
      const char *p = line;
      uint64_t start = parseHex(&p);
      if (*p == '-') {
        p++;
        uint64_t end = parseHex(&p);
        if (sp >= start && sp < end) {
          // The main thread's [stack] grows down: allow up to 1 GiB below its top.
          bool mainStack = memmem(line, (size_t)(newline - line), "[stack]", 7) != NULL;
          t_stackLo = mainStack ? (end > (1ull << 30) ? end - (1ull << 30) : 0) : start;
          t_stackHi = end;
          close(fd);
          return;
        }
      }
      line = newline + 1;
    }
    size_t rest = have - (size_t)(line - buffer);
    memmove(buffer, line, rest);
    have = rest;
    if (have >= sizeof(buffer) - 1) have = 0;  // an absurdly long line: drop it
  }
  close(fd);
}

// `frame` is the hook's frame: frame[0] the caller's frame pointer, frame[1] the return
// address into malloc's caller (the public hooks tail-call the recording functions).
// Fills `reads` with the (next, ret) word pairs it read, frame by frame (up to
// STACK_CACHE_FRAMES; *readCount is the number of pairs read, or UINT32_MAX if more),
// and *hash with the frames' running hash.
#define STACK_CACHE_FRAMES 64
#define STACK_CACHE_ENTRIES 4
static uint32_t captureStack(uintptr_t *frame, uint64_t *out, int maxDepth, uintptr_t (*reads)[2],
                             uint32_t *readCount, uint64_t *hash) {
  uintptr_t sp = (uintptr_t)frame;
  *readCount = UINT32_MAX;
  *hash = 0;
  if (UNLIKELY(t_stackHi == 0)) lookUpStackBounds(sp);
  uintptr_t hi = t_stackHi;
  if (hi <= 1 || sp < t_stackLo || sp >= hi) return 0;
  uint32_t depth = 0, count = 0;
  uint64_t h = 0;
  uintptr_t fp = sp;
  while ((int)depth < maxDepth) {
    if (fp < sp || fp + 16 > hi || (fp & 7)) break;
    uintptr_t next = ((uintptr_t *)fp)[0];
    uintptr_t ret = ((uintptr_t *)fp)[1];
    if (count < STACK_CACHE_FRAMES) {
      reads[count][0] = next;
      reads[count][1] = ret;
    }
    count++;
    if (ret < 4096) break;
    out[depth++] = ret;
    h = stackHashStep(h, ret);
    if (next <= fp) break;
    fp = next;
  }
  *hash = h;
  if (count <= STACK_CACHE_FRAMES) *readCount = count;
  return depth;
}

// Per-thread cache of the last stacks walked. The walk is a function of its start (the
// hook's frame), the thread's stack bounds, maxDepth and the words it reads; an entry
// keeps the words read, so if memory still holds them at the same addresses the walk
// would give the same frames, and the entry's stack id is exact. Checking needs no
// pointer chasing: the addresses are known, so the loads run in parallel.
typedef struct StackCacheEntry {
  uint64_t session;  // g_session when filled; 0 never matches
  uintptr_t start;
  uint32_t stackId;
  uint32_t readCount;
  uintptr_t reads[STACK_CACHE_FRAMES][2];  // (next frame pointer, return address)
} StackCacheEntry;
static TLS StackCacheEntry t_stackCache[STACK_CACHE_ENTRIES];
static TLS uint32_t t_stackCacheNext;
static uint64_t g_session;  // incremented by every start

static inline bool stackCacheMatches(const StackCacheEntry *e, uintptr_t start) {
  if (e->session != g_session || e->start != start) return false;
  uintptr_t fp = start;
  uint32_t n = e->readCount;
  // A frame's two words and the entry's pair are 16 bytes each: one compare per frame
  // (the check is most of what a full-stack allocation costs at depth).
  __m128i diff = _mm_setzero_si128();
  for (uint32_t k = 0; k < n; k++) {
    __m128i live = _mm_loadu_si128((const __m128i *)fp);
    __m128i kept = _mm_loadu_si128((const __m128i *)e->reads[k]);
    diff = _mm_or_si128(diff, _mm_xor_si128(live, kept));
    fp = e->reads[k][0];
  }
  return _mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xFFFF;  // SSE2 only
}

// The cached stack id for a walk from `frame`, or 0 with *found false.
static inline uint32_t stackCacheLookUp(uintptr_t *frame, bool *found) {
  uintptr_t start = (uintptr_t)frame;
  uint32_t first = t_stackCacheNext;
  for (uint32_t i = 0; i < STACK_CACHE_ENTRIES; i++) {
    // Newest first: entry (next - 1), (next - 2), ...
    const StackCacheEntry *e = &t_stackCache[(first + STACK_CACHE_ENTRIES - 1 - i) % STACK_CACHE_ENTRIES];
    if (stackCacheMatches(e, start)) {
      *found = true;
      return e->stackId;
    }
  }
  *found = false;
  return 0;
}

static void stackCacheStore(uintptr_t *frame, uint32_t stackId, uintptr_t (*reads)[2], uint32_t readCount) {
  if (readCount > STACK_CACHE_FRAMES || stackId == 0) return;
  StackCacheEntry *e = &t_stackCache[t_stackCacheNext % STACK_CACHE_ENTRIES];
  t_stackCacheNext = (t_stackCacheNext + 1) % STACK_CACHE_ENTRIES;
  e->session = g_session;
  e->start = (uintptr_t)frame;
  e->stackId = stackId;
  e->readCount = readCount;
  memcpy(e->reads, reads, (size_t)readCount * sizeof(reads[0]));
}

// MARK: - Swift object recognition

#define MAX_OBJECT_SITES 16
static uintptr_t g_slowAllocStart, g_slowAllocLength;
// Zero after the last site; swift_allocObject's own site, the usual one, first.
static uintptr_t g_objectSites[MAX_OBJECT_SITES + 1];
static uint32_t g_objectSiteCount;
static bool g_sitesLookedUp;

static size_t symbolSize(void *address, size_t fallback) {
  Dl_info info;
  const ElfW(Sym) *symbol = NULL;
  if (dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) && symbol && info.dli_saddr == address &&
      symbol->st_size > 0) {
    return symbol->st_size;
  }
  return fallback;
}

// Records the return addresses of `call swift_slowAlloc` inside `function`: a
// malloc from swift_slowAlloc whose caller returns to one of these is an object.
static void scanForObjectSites(const uint8_t *function, size_t length) {
  if (!function) return;
  for (size_t i = 0; i + 5 <= length; i++) {
    if (function[i] != 0xE8) continue;
    int32_t rel;
    memcpy(&rel, function + i + 1, 4);
    uintptr_t target = (uintptr_t)(function + i + 5) + (intptr_t)rel;
    if (target != g_slowAllocStart) continue;
    uintptr_t site = (uintptr_t)(function + i + 5);
    bool known = false;
    for (uint32_t k = 0; k < g_objectSiteCount; k++) known |= g_objectSites[k] == site;
    if (!known && g_objectSiteCount < MAX_OBJECT_SITES) g_objectSites[g_objectSiteCount++] = site;
  }
}

static void lookUpObjectSites(void) {
  if (g_sitesLookedUp) return;
  g_sitesLookedUp = true;
  void *slowAlloc = dlsym(RTLD_DEFAULT, "swift_slowAlloc");
  if (!slowAlloc) return;
  g_slowAllocStart = (uintptr_t)slowAlloc;
  g_slowAllocLength = symbolSize(slowAlloc, 128);
  static const char *const names[] = {"swift_allocObject", "swift_bufferAllocate", "swift_allocBox"};
  for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
    void *function = dlsym(RTLD_DEFAULT, names[n]);
    if (function) scanForObjectSites(function, symbolSize(function, 256));
  }
  // The hook pointer's initial value is the runtime's own (local) implementation.
  void **hookPointer = dlsym(RTLD_DEFAULT, "_swift_allocObject");
  if (hookPointer && *hookPointer) scanForObjectSites(*hookPointer, 256);
}

// The hook's frame at `frame` holds callerFrame (the allocating function's saved frame
// pointer) and ret (its return address).
static inline bool isObjectAt(uintptr_t ret, uintptr_t callerFrame, uintptr_t frame) {
  if (LIKELY(ret - g_slowAllocStart >= g_slowAllocLength)) return false;
  // swift_slowAlloc keeps a frame pointer: its saved return address is the site.
  if (callerFrame <= frame || (callerFrame & 7)) return false;
  uintptr_t site = ((uintptr_t *)callerFrame)[1];
  // Most objects come from the first site: it costs one compare, with no count to load.
  for (const uintptr_t *known = g_objectSites; *known; known++) {
    if (*known == site) return true;
  }
  return false;
}

static inline bool isObjectAllocation(uintptr_t *frame) { return isObjectAt(frame[1], frame[0], (uintptr_t)frame); }

// MARK: - Timeline and marks

static CPerfAlloc_TimelinePoint *g_timeline;
static uint64_t g_timelineCapacity;
static uint64_t g_timelineIntervalNs;
static _Atomic uint64_t g_timelineCount;
static _Atomic uint64_t g_timelineLast;  // microseconds since start
static _Atomic uint64_t g_lostTimeline;

static void timelineAppend(uint64_t now, int64_t liveBytes) {
  uint64_t index = atomic_fetch_add_explicit(&g_timelineCount, 1, memory_order_relaxed);
  if (index >= g_timelineCapacity) {
    atomic_fetch_sub_explicit(&g_timelineCount, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_lostTimeline, 1, memory_order_relaxed);
    return;
  }
  g_timeline[index].timestampNs = now;
  g_timeline[index].liveBytes = liveBytes > 0 ? (uint64_t)liveBytes : 0;
}

static int64_t sumLiveBytes(void);

static void timelineMaybeSample(uint64_t micros) {
  uint64_t last = atomic_load_explicit(&g_timelineLast, memory_order_relaxed);
  if (micros - last < g_timelineIntervalNs / 1000) return;
  if (!atomic_compare_exchange_strong_explicit(&g_timelineLast, &last, micros, memory_order_relaxed, memory_order_relaxed)) return;
  timelineAppend(g_startNs + micros * 1000, sumLiveBytes());
}

static CPerfAlloc_Mark g_marks[CPerfAlloc_MaxMarks];
static _Atomic uint64_t g_markCount;
static SpinLock g_markLock;

// MARK: - Recording paths (only reached while g_recording is set)

// The live heap is the sum of the stripes' counters (each kept under its lock): no
// shared counter on the hot path. It is summed, and the peak updated, whenever the
// timeline samples (at most once per interval), at marks and at stop, so the peak has
// the timeline's resolution.
static void nurseriesLive(int64_t *blocks, int64_t *bytes);

static int64_t sumLiveBytes(void) {
  int64_t total = 0;
  nurseriesLive(NULL, &total);
  for (int i = 0; i < STRIPES; i++) total += (int64_t)__atomic_load_n(&g_stripes[i].liveBytes, __ATOMIC_RELAXED);
  int64_t peak = atomic_load_explicit(&g_peakLiveBytes, memory_order_relaxed);
  while (total > peak && !atomic_compare_exchange_weak_explicit(&g_peakLiveBytes, &peak, total, memory_order_relaxed, memory_order_relaxed)) {
  }
  return total;
}


// Before the session: the block's address, size, thread and object flag, nothing else.
// A block allocated while start() ends the phase becomes a session block without a stack.
__attribute__((noinline, cold)) static void recordPreexisting(uint64_t address, size_t size, bool object) {
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    spinUnlock(&s->lock);
    return;
  }
  bool before = atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed) ||
                atomic_load_explicit(&g_paused, memory_order_relaxed);
  if (UNLIKELY((address & 15) || key > ADDR_MASK || !stripeReserve(s))) {
    if (!before) s->lostBlocks++;
    spinUnlock(&s->lock);
    return;
  }
  uint64_t generation = before ? 0 : atomic_load_explicit(&g_generation, memory_order_relaxed);
  if (generation > 0xFFFF) generation = 0xFFFF;
  uint64_t size40 = size > SIZE_MASK ? SIZE_MASK : size;
  uint64_t micros = before ? 0 : atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
  Slot slot = {
    .w0 = key | (generation << ADDR_BITS),
    .w1 = size40 | (((uint64_t)currentTid() & TID_MASK) << 40) | (object ? OBJECT_BIT : 0) |
          (before ? PREEXISTING_BIT : 0),
    .w2 = micros << 32,
  };
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == key) {
      // Never seen freed: forget the old one.
      uint64_t oldSize = s->slots[i].w1 & SIZE_MASK;
      if (s->slots[i].w1 & PREEXISTING_BIT) {
        s->preLive--;
        s->preLiveBytes -= oldSize;
      } else {
        s->live--;
        __atomic_store_n(&s->liveBytes, s->liveBytes - oldSize, __ATOMIC_RELAXED);
      }
      s->used--;
      break;
    }
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  s->used++;
  s->slots[i] = slot;
  if (before) {
    s->preLive++;
    s->preLiveBytes += size;
  } else {
    s->live++;
    __atomic_store_n(&s->liveBytes, s->liveBytes + size, __ATOMIC_RELAXED);
    s->allocations++;
    s->allocatedBytes += size;
  }
  spinUnlock(&s->lock);
}

// Puts a block's slot into its stripe's table as a live block, replacing a block at the
// same address that was never seen freed; false (counted as lost) without room. Called
// with the stripe locked. Allocation counters are the caller's.
static bool stripePlace(Stripe *s, uint64_t h, const Slot *slot) {
  if (UNLIKELY(!stripeReserve(s))) {
    s->lostBlocks++;
    return false;
  }
  uint64_t key = slot->w0 & ADDR_MASK;
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  uint64_t firstFree = UINT64_MAX;
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == KEY_TOMBSTONE) {
      if (firstFree == UINT64_MAX) firstFree = i;
    } else if (k == key) {
      // A block we never saw freed (freed by a path that bypasses free): replace it.
      if (s->slots[i].w1 & PREEXISTING_BIT) {
        s->preLive--;
        s->preLiveBytes -= s->slots[i].w1 & SIZE_MASK;
      } else {
        s->live--;
        __atomic_store_n(&s->liveBytes, s->liveBytes - (s->slots[i].w1 & SIZE_MASK), __ATOMIC_RELAXED);
      }
      s->slots[i].w0 = KEY_TOMBSTONE;
      if (firstFree == UINT64_MAX) firstFree = i;
      break;
    }
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  if (firstFree == UINT64_MAX) {
    firstFree = i;
    s->used++;
  }
  s->slots[firstFree] = *slot;
  s->live++;
  __atomic_store_n(&s->liveBytes, s->liveBytes + (slot->w1 & SIZE_MASK), __ATOMIC_RELAXED);
  return true;
}

// Takes out the slot stripePlace put in, if it is still there unchanged.
static void stripeRemoveExact(Stripe *s, uint64_t h, const Slot *slot) {
  uint64_t key = slot->w0 & ADDR_MASK;
  uint64_t capacity = s->capacity;
  for (uint64_t i = slotIndex(h, capacity);; i = (i + 1 == capacity) ? 0 : i + 1) {
    const Slot *at = &s->slots[i];
    uint64_t k = at->w0 & ADDR_MASK;
    if (k == KEY_EMPTY) return;
    if (k != key) continue;
    if (at->w0 == slot->w0 && at->w1 == slot->w1 && at->w2 == slot->w2) {
      stripeErase(s, i);
      s->live--;
      __atomic_store_n(&s->liveBytes, s->liveBytes - (slot->w1 & SIZE_MASK), __ATOMIC_RELAXED);
    }
    return;
  }
}

// MARK: - Nurseries
//
// Most blocks die young, on the thread that made them. A stripe costs each malloc and
// free an atomic exchange on its lock and a probe of a table larger than the caches; a
// nursery is one thread's small direct-mapped table of its newest blocks, which its
// owner reads and writes with plain loads and stores. A block leaves it when freed,
// when a newer block needs its slot (it moves to the stripes), or when a drain moves
// every nursery's blocks to the stripes (marks, live listings, stop).
// Another thread frees a block in a nursery with a compare-and-swap on its key word. The
// owner evicts by putting the block into the stripes first and then taking it out of
// its slot with a compare-and-swap, so a concurrent free finds it in one place or the
// other (and if the free won, the owner takes its stripe copy back out).
// A drain stops all use of nurseries: it clears g_nurseriesOn, and membarrier makes that
// store and every thread's busy flag ordered (so the owner's side needs no fence); then
// it waits until no thread is inside a nursery operation. Frees that missed the stripes
// while a drain was moving blocks look again after it (g_drainSeq).

#define NURSERY_BITS 10
#define NURSERY_SLOTS (1u << NURSERY_BITS)
#define MAX_NURSERIES 256

typedef struct Nursery {
  _Atomic int32_t owner;  // tid; 0: free for another thread
  _Atomic int32_t busy;   // its thread is inside a nursery operation
  uint32_t index;         // numbers its freed table after the stripes'
  uint32_t unused;
  // Written by the thread (or by a drain, when no thread uses nurseries), summed by
  // others. Live blocks of all nurseries = allocations - frees - movedOut, summed.
  uint64_t allocations, allocatedBytes, frees, freedBytes, movedOut, movedOutBytes;
  FreedTable freed;
  Slot slots[NURSERY_SLOTS];
} Nursery;

static Nursery *g_nurseries[MAX_NURSERIES];
static _Atomic uint32_t g_nurseryCount;
static SpinLock g_nurseryLock;  // adding a nursery
// Frees by threads that got no nursery (all MAX_NURSERIES taken) are counted here,
// under g_overflowLock; its slots stay empty.
static Nursery g_overflow;  // index MAX_NURSERIES, set at start
static SpinLock g_overflowLock;
static _Atomic int32_t g_nurseriesOn;
// Types and counts with nurseries and no reserved addresses: malloc's hook skips the checks
// other sessions need (reserved addresses, zeroing, blocks from before the session, stacks).
static _Atomic int32_t g_countsFast;
static _Atomic uint64_t g_drainSeq;  // odd while a drain moves blocks
static bool g_nurseriesUsable;       // this session uses them (membarrier is available)
static TLS Nursery *t_nursery;
static TLS int32_t t_noNursery;      // none was left for this thread

#define BUMP(field, by) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (by), __ATOMIC_RELAXED)

static inline uint32_t nurseryIndex(uint64_t h) { return (uint32_t)(h >> 20) & (NURSERY_SLOTS - 1); }

__attribute__((noinline, cold)) static Nursery *claimNursery(void) {
  if (t_noNursery) return NULL;
  int32_t tid = currentTid();
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i < count; i++) {
    int32_t none = 0;
    if (atomic_load_explicit(&g_nurseries[i]->owner, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong(&g_nurseries[i]->owner, &none, tid))
      return t_nursery = g_nurseries[i];
  }
  Nursery *n = NULL;
  spinLock(&g_nurseryLock);
  count = atomic_load_explicit(&g_nurseryCount, memory_order_relaxed);
  if (count < MAX_NURSERIES && (n = mapBytes(sizeof(Nursery)))) {
    atomic_store_explicit(&n->owner, tid, memory_order_relaxed);
    n->index = count;
    g_nurseries[count] = n;
    atomic_store_explicit(&g_nurseryCount, count + 1, memory_order_release);
  }
  spinUnlock(&g_nurseryLock);
  if (!n) t_noNursery = 1;
  return t_nursery = n;
}

static inline Nursery *nurseryForThread(void) {
  Nursery *n = t_nursery;
  return LIKELY(n != NULL) ? n : claimNursery();
}

// The thread's side of the drain's handshake: busy, then the flag, with only the
// compiler kept from reordering them (the drain's membarrier orders the CPUs).
static inline bool nurseryEnter(Nursery *n) {
  atomic_store_explicit(&n->busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  if (LIKELY(atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed))) return true;
  atomic_store_explicit(&n->busy, 0, memory_order_release);
  return false;
}

static inline void nurseryLeave(Nursery *n) { atomic_store_explicit(&n->busy, 0, memory_order_release); }

// Moves the block in slot e (key word `old`) to the stripes, to make room for newKey.
__attribute__((noinline)) static void nurseryEvict(Nursery *n, Slot *e, uint64_t old, uint64_t newKey) {
  Slot moving = {old, __atomic_load_n(&e->w1, __ATOMIC_RELAXED), __atomic_load_n(&e->w2, __ATOMIC_RELAXED)};
  uint64_t size = moving.w1 & SIZE_MASK;
  uint64_t key = old & ADDR_MASK;
  if (key == newKey) {
    // Its address is handed out again, so it was freed where no hook saw it: forget it.
    if (__atomic_compare_exchange_n(&e->w0, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      BUMP(n->movedOut, 1);
      BUMP(n->movedOutBytes, size);
    }
    return;
  }
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  bool placed = stripePlace(s, h, &moving);
  spinUnlock(&s->lock);
  if (__atomic_compare_exchange_n(&e->w0, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    BUMP(n->movedOut, 1);
    BUMP(n->movedOutBytes, size);
  } else if (placed) {
    // Another thread freed it from the slot meanwhile (and counted the free).
    spinLock(&s->lock);
    stripeRemoveExact(s, h, &moving);
    spinUnlock(&s->lock);
  }
}

// Fills the empty slot e.
static inline void nurseryFill(Nursery *n, Slot *e, const Slot *slot, uint64_t size) {
  __atomic_store_n(&e->w1, slot->w1, __ATOMIC_RELAXED);
  __atomic_store_n(&e->w2, slot->w2, __ATOMIC_RELAXED);
  __atomic_store_n(&e->w0, slot->w0, __ATOMIC_RELEASE);  // last: others read it first
  BUMP(n->allocations, 1);
  BUMP(n->allocatedBytes, size);
}

static inline void nurseryInsert(Nursery *n, uint64_t h, const Slot *slot, uint64_t size) {
  Slot *e = &n->slots[nurseryIndex(h)];
  uint64_t old = __atomic_load_n(&e->w0, __ATOMIC_RELAXED);
  if (UNLIKELY(old & ADDR_MASK)) nurseryEvict(n, e, old, slot->w0 & ADDR_MASK);
  nurseryFill(n, e, slot, size);
}

// A block taken out of a nursery slot, counted on `counter` (the taking thread's): as a
// free by category, or (for realloc) as moved out, its free counted by the caller.
static inline __attribute__((always_inline)) void countNurseryTake(Nursery *counter, uint64_t w1, void *pointer,
                                                                   bool aggregate) {
  uint64_t size = w1 & SIZE_MASK;
  if (!aggregate) {
    BUMP(counter->movedOut, 1);
    BUMP(counter->movedOutBytes, size);
    return;
  }
  BUMP(counter->frees, 1);
  BUMP(counter->freedBytes, size);
  uint64_t metadata = (w1 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
  if (metadata != 0 && !(metadata & 7)) freedAdd(&counter->freed, STRIPES + counter->index, metadata, size);
  else freedAddUntyped(&counter->freed, size);
}

// Moves every nursery's blocks to the stripes and leaves nurseries off (reopenNurseries
// turns them on again). Never from a hook.
static void drainNurseries(void) {
  if (!g_nurseriesUsable) return;
  int savedErrno = errno;
  atomic_fetch_add(&g_drainSeq, 1);
  atomic_store(&g_nurseriesOn, 0);
  // Cannot fail once registered (registerMembarrier), which made nurseries usable.
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  uint32_t count = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i < count; i++) {
    while (atomic_load(&g_nurseries[i]->busy)) sched_yield();
  }
  spinLock(&g_overflowLock);
  pid_t pid = getpid();
  for (uint32_t i = 0; i < count; i++) {
    Nursery *n = g_nurseries[i];
    for (uint32_t j = 0; j < NURSERY_SLOTS; j++) {
      Slot moving = n->slots[j];
      uint64_t key = moving.w0 & ADDR_MASK;
      if (!key) continue;
      uint64_t h = hashAddress(key);
      Stripe *s = stripeFor(h);
      spinLock(&s->lock);
      stripePlace(s, h, &moving);
      spinUnlock(&s->lock);
      n->slots[j].w0 = 0;
      BUMP(n->movedOut, 1);
      BUMP(n->movedOutBytes, moving.w1 & SIZE_MASK);
    }
    // A thread that has exited leaves its nursery to the next new thread.
    int32_t owner = atomic_load(&n->owner);
    if (owner && syscall(SYS_tgkill, pid, owner, 0) != 0 && errno == ESRCH) atomic_store(&n->owner, 0);
  }
  spinUnlock(&g_overflowLock);
  atomic_fetch_add(&g_drainSeq, 1);
  errno = savedErrno;
}

static void reopenNurseries(void) {
  if (g_nurseriesUsable) atomic_store(&g_nurseriesOn, 1);
}

// Nurseries need membarrier's private expedited command (Linux 4.14); registering for it
// is the one process-wide effect, once.
static bool registerMembarrier(void) {
  static int registered;  // 0 unknown, 1 yes, -1 no
  if (!registered) registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
  return registered > 0;
}

static void resetNursery(Nursery *n) {
  n->allocations = n->allocatedBytes = n->frees = n->freedBytes = n->movedOut = n->movedOutBytes = 0;
  if (n->freed.slots) munmap(n->freed.slots, FREED_TABLE_BYTES);
  n->freed = (FreedTable){0};
}

// The nurseries' live blocks and bytes (racy while they are in use: for the timeline).
static void nurseriesLive(int64_t *blocks, int64_t *bytes) {
  int64_t b = 0, n = 0;
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i <= count; i++) {
    Nursery *x = i < count ? g_nurseries[i] : &g_overflow;
    n += (int64_t)(__atomic_load_n(&x->allocations, __ATOMIC_RELAXED) - __atomic_load_n(&x->frees, __ATOMIC_RELAXED) -
                   __atomic_load_n(&x->movedOut, __ATOMIC_RELAXED));
    b += (int64_t)(__atomic_load_n(&x->allocatedBytes, __ATOMIC_RELAXED) -
                   __atomic_load_n(&x->freedBytes, __ATOMIC_RELAXED) - __atomic_load_n(&x->movedOutBytes, __ATOMIC_RELAXED));
  }
  if (blocks) *blocks = n;
  if (bytes) *bytes = b;
}

static inline uint64_t currentTidBits(void) {
  if (UNLIKELY(t_tidBits == 0)) t_tidBits = ((uint64_t)currentTid() & TID_MASK) << 40;
  return t_tidBits;
}

// The block's slot, stack id still 0. *clockRead: this allocation read the clock (the
// timeline is sampled then).
static inline __attribute__((always_inline)) Slot newSlot(uint64_t key, size_t size, bool object, bool *clockRead) {
  uint64_t micros;
  if (UNLIKELY(t_clockCountdown == 0)) {
    t_clockCountdown = CLOCK_EVERY - 1;
    micros = microsSinceStart();
    *clockRead = true;
    uint64_t seen = atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
    while (micros > seen && !atomic_compare_exchange_weak_explicit(&g_nowMicros, &seen, micros, memory_order_relaxed,
                                                                   memory_order_relaxed)) {
    }
  } else {
    t_clockCountdown--;
    micros = atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
  }
  uint64_t size40 = size > SIZE_MASK ? SIZE_MASK : size;
  return (Slot){
    .w0 = key | atomic_load_explicit(&g_generationBits, memory_order_relaxed),
    .w1 = size40 | currentTidBits() | (object ? OBJECT_BIT : 0),
    .w2 = micros << 32,
  };
}

// Into the stripes: for blocks that cannot go to a nursery, or while nurseries are off.
__attribute__((noinline)) static void recordAllocInStripes(uint64_t h, Slot slot, size_t size, bool fits,
                                                           const uint64_t *frames, uint32_t depth, uint64_t stackHash,
                                                           uintptr_t *frame, uintptr_t (*reads)[2], uint32_t readCount,
                                                           bool clockRead) {
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    spinUnlock(&s->lock);
    return;
  }
  if (UNLIKELY(!fits)) {
    s->lostBlocks++;
    spinUnlock(&s->lock);
    return;
  }
  if (depth) {
    uint32_t stackId = stackIntern(frames, depth, stackHash);
    stackCacheStore(frame, stackId, reads, readCount);
    slot.w2 |= stackId;
  }
  if (stripePlace(s, h, &slot)) {
    s->allocations++;
    s->allocatedBytes += size;
  }
  if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
  spinUnlock(&s->lock);
}

// With full stacks, or while blocks from before the session are listed.
__attribute__((noinline)) static void recordAllocWithStack(void *pointer, size_t size, uintptr_t *frame, bool object) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  if (UNLIKELY(atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed))) {
    recordPreexisting(address, size, object);
    return;
  }
  uint64_t frames[CPerfAlloc_MaxDepth];
  uintptr_t reads[STACK_CACHE_FRAMES][2];
  uint32_t depth = 0, readCount = 0, stackId = 0;
  uint64_t stackHash = 0;
  bool cached = false;
  if (g_mode == CPerfAlloc_ModeFullStacks) {
    stackId = stackCacheLookUp(frame, &cached);
    if (!cached) depth = captureStack(frame, frames, g_maxDepth, reads, &readCount, &stackHash);
  }
  bool clockRead = false;
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Slot slot = newSlot(key, size, object, &clockRead);
  slot.w2 |= stackId;
  bool fits = !(address & 15) && key <= ADDR_MASK;
  if (LIKELY(fits && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed))) {
    Nursery *n = nurseryForThread();
    if (n && nurseryEnter(n)) {
      if (depth) {
        stackId = stackIntern(frames, depth, stackHash);
        stackCacheStore(frame, stackId, reads, readCount);
        slot.w2 |= stackId;
      }
      nurseryInsert(n, h, &slot, size);
      if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
      nurseryLeave(n);
      return;
    }
  }
  recordAllocInStripes(h, slot, size, fits, frames, depth, stackHash, frame, reads, readCount, clockRead);
}

// recordAllocCounts' way to the stripes, with the slot in registers (a slot passed by value
// would be spilled to the stack on the common path too).
__attribute__((noinline)) static void recordCountsInStripes(uint64_t h, uint64_t w0, uint64_t w1, uint64_t w2,
                                                            size_t size, uint32_t flags) {
  recordAllocInStripes(h, (Slot){w0, w1, w2}, size, flags & 1, NULL, 0, 0, NULL, NULL, 0, flags & 2);
}

// Types and counts: the common case, kept lean (no stack buffers on this path).
static inline __attribute__((always_inline)) void recordAllocCountsAt(void *pointer, size_t size, bool object) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  bool clockRead = false;
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Slot slot = newSlot(key, size, object, &clockRead);
  bool fits = !(address & 15) && key <= ADDR_MASK;
  Nursery *n = t_nursery;
  if (UNLIKELY(n == NULL) && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) n = claimNursery();
  // nurseryEnter reads the flag the drains turn off.
  if (LIKELY(n != NULL && fits) && nurseryEnter(n)) {
    nurseryInsert(n, h, &slot, size);
    if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
    nurseryLeave(n);
    return;
  }
  recordCountsInStripes(h, slot.w0, slot.w1, slot.w2, size, (fits ? 1 : 0) | (clockRead ? 2 : 0));
}

static inline __attribute__((always_inline)) void recordAllocCounts(void *pointer, size_t size, uintptr_t *frame) {
  if (UNLIKELY(t_ignoringAllocations)) return;
  recordAllocCountsAt(pointer, size, isObjectAllocation(frame));
}

// Set-up work the scenario does not want measured: a leak scan still needs to know the
// block (it may hold the only reference to a session block), as one from before the
// session. Out of line, so the hooks' frames stay as they were: a leak scan reads stale
// words where they fall.
__attribute__((noinline, cold)) static void recordPaused(void *pointer, size_t size, uintptr_t *frame) {
  if (g_tracksPreexisting && !t_ignoringAllocations) {
    recordPreexisting((uint64_t)(uintptr_t)pointer, size, isObjectAllocation(frame));
  }
}

static inline __attribute__((always_inline)) void recordAlloc(void *pointer, size_t size, uintptr_t *frame) {
  if (UNLIKELY(atomic_load_explicit(&g_paused, memory_order_relaxed))) {
    recordPaused(pointer, size, frame);
    return;
  }
  if (UNLIKELY(g_mode == CPerfAlloc_ModeFullStacks || atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed))) {
    if (!t_ignoringAllocations) recordAllocWithStack(pointer, size, frame, isObjectAllocation(frame));
    return;
  }
  recordAllocCounts(pointer, size, frame);
}

// Call while the block is still allocated: a Swift object's first word is its metadata.
static uint64_t categoryKey(void *pointer, const Slot *slot);

enum { TAKE_UNTRACKED = 0, TAKE_TRACKED = 1, TAKE_PREEXISTING = 2 };

// Removes `pointer` from its stripe's table; fills *out. Returns TAKE_TRACKED for a block
// of the session, TAKE_PREEXISTING for one allocated before it (never counted or
// aggregated). With `aggregate`, also counts the free under its category in the same
// critical section.
static int takeFromStripes(void *pointer, uint64_t key, uint64_t h, Slot *out, bool aggregate) {
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed) || !s->slots)) {
    spinUnlock(&s->lock);
    return TAKE_UNTRACKED;
  }
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) {
      // Allocated before recording started (or untracked): ignore.
      spinUnlock(&s->lock);
      return TAKE_UNTRACKED;
    }
    if (k == key) break;
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  Slot slot = s->slots[i];
  *out = slot;
  stripeErase(s, i);
  uint64_t size = slot.w1 & SIZE_MASK;
  if (slot.w1 & PREEXISTING_BIT) {
    s->preLive--;
    s->preLiveBytes -= size;
    spinUnlock(&s->lock);
    return TAKE_PREEXISTING;
  }
  s->live--;
  __atomic_store_n(&s->liveBytes, s->liveBytes - size, __ATOMIC_RELAXED);
  if (aggregate) {
    // categoryKey's cases, with the untyped one needing no lookup. The block is still
    // allocated: a Swift object's first word is its metadata.
    s->frees++;
    uint64_t metadata = (slot.w1 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
    if (metadata != 0 && !(metadata & 7)) freedAdd(&s->freed, (uint64_t)(s - g_stripes), metadata, size);
    else freedAddUntyped(&s->freed, size);
  }
  spinUnlock(&s->lock);
  return TAKE_TRACKED;
}

// The thread's own nursery; true if the block was there. Reads the slot's words into
// registers: *out is only written for realloc (a free's caller discards it).
static inline __attribute__((always_inline)) bool takeFromOwnNursery(Nursery *own, void *pointer, uint64_t key,
                                                                     uint64_t h, Slot *out, bool aggregate) {
  Slot *e = &own->slots[nurseryIndex(h)];
  uint64_t w0 = __atomic_load_n(&e->w0, __ATOMIC_RELAXED);
  if ((w0 & ADDR_MASK) != key) return false;
  uint64_t w1 = e->w1;
  if (!aggregate) *out = (Slot){w0, w1, e->w2};
  // Only a second free of the same block could race with this store.
  __atomic_store_n(&e->w0, 0, __ATOMIC_RELAXED);
  countNurseryTake(own, w1, pointer, aggregate);
  return true;
}

// While nurseries are on, after the thread's own (own: NULL for an overflow thread): the
// stripes, then the other nurseries.
__attribute__((noinline)) static int takeFromOthers(Nursery *own, Nursery *counter, void *pointer, uint64_t key,
                                                    uint64_t h, Slot *out, bool aggregate) {
  uint32_t index = nurseryIndex(h);
  int taken = takeFromStripes(pointer, key, h, out, aggregate);
  if (taken != TAKE_UNTRACKED) return taken;
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i < count; i++) {
    Nursery *n = g_nurseries[i];
    if (n == own) continue;
    Slot *e = &n->slots[index];
    uint64_t w0 = __atomic_load_n(&e->w0, __ATOMIC_ACQUIRE);
    if ((w0 & ADDR_MASK) != key) continue;
    Slot slot = {w0, __atomic_load_n(&e->w1, __ATOMIC_RELAXED), __atomic_load_n(&e->w2, __ATOMIC_RELAXED)};
    if (__atomic_compare_exchange_n(&e->w0, &w0, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      *out = slot;
      countNurseryTake(counter, slot.w1, pointer, aggregate);
      return TAKE_TRACKED;
    }
    // Its owner moved it to the stripes meanwhile.
    taken = takeFromStripes(pointer, key, h, out, aggregate);
    if (taken != TAKE_UNTRACKED) return taken;
  }
  return TAKE_UNTRACKED;
}

// Nurseries off, or a drain under way: the stripes.
__attribute__((noinline)) static int takeFromStripesAfterDrain(void *pointer, uint64_t key, uint64_t h, Slot *out,
                                                                bool aggregate) {
  uint64_t seq = atomic_load_explicit(&g_drainSeq, memory_order_acquire);
  int taken = takeFromStripes(pointer, key, h, out, aggregate);
  if (UNLIKELY(taken == TAKE_UNTRACKED && ((seq & 1) || atomic_load_explicit(&g_drainSeq, memory_order_acquire) != seq))) {
    // A drain was moving nursery blocks to the stripes: look again once it is done.
    while (atomic_load_explicit(&g_drainSeq, memory_order_acquire) & 1) sched_yield();
    taken = takeFromStripes(pointer, key, h, out, aggregate);
  }
  return taken;
}

__attribute__((noinline)) static int takeAsOverflowThread(void *pointer, uint64_t key, uint64_t h, Slot *out,
                                                           bool aggregate) {
  spinLock(&g_overflowLock);
  if (atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) {
    int taken = takeFromOthers(NULL, &g_overflow, pointer, key, h, out, aggregate);
    spinUnlock(&g_overflowLock);
    return taken;
  }
  spinUnlock(&g_overflowLock);
  return takeFromStripesAfterDrain(pointer, key, h, out, aggregate);
}

// Removes `pointer` from wherever it is tracked (takeFromStripes' results); fills *out.
static inline __attribute__((always_inline)) int takeBlock(void *pointer, Slot *out, bool aggregate) {
  uint64_t key = (uint64_t)(uintptr_t)pointer >> 4;
  uint64_t h = hashAddress(key);
  Nursery *n = t_nursery;
  if (UNLIKELY(n == NULL) && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) {
    n = claimNursery();
    if (n == NULL) return takeAsOverflowThread(pointer, key, h, out, aggregate);
  }
  // nurseryEnter reads the flag the drains turn off.
  if (LIKELY(n != NULL)) {
    if (nurseryEnter(n)) {
      int taken = takeFromOwnNursery(n, pointer, key, h, out, aggregate)
                      ? TAKE_TRACKED
                      : takeFromOthers(n, n, pointer, key, h, out, aggregate);
      nurseryLeave(n);
      return taken;
    }
  }
  return takeFromStripesAfterDrain(pointer, key, h, out, aggregate);
}

static uint64_t categoryKey(void *pointer, const Slot *slot) {
  uint64_t size = slot->w1 & SIZE_MASK;
  if (!(slot->w1 & OBJECT_BIT)) return sizeKey(size);
  uint64_t metadata = *(uint64_t *)pointer;
  return (metadata == 0 || (metadata & 7)) ? sizeKey(size) : metadata;
}

static void aggregateFree(void *pointer, const Slot *slot, uint64_t key) {
  uint64_t size = slot->w1 & SIZE_MASK;
  uint64_t h = hashAddress((uint64_t)(uintptr_t)pointer >> 4);
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  if (LIKELY(atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    s->frees++;
    freedAdd(&s->freed, (uint64_t)(s - g_stripes), key, size);
  }
  spinUnlock(&s->lock);
}

// realloc failed: the old block is still valid, put it back unchanged.
static void putBack(void *pointer, const Slot *slot) {
  uint64_t key = (uint64_t)(uintptr_t)pointer >> 4;
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  spinLock(&s->lock);
  if (atomic_load_explicit(&g_recording, memory_order_relaxed) && stripeReserve(s)) {
    uint64_t i = slotIndex(h, s->capacity);
    while ((s->slots[i].w0 & ADDR_MASK) > KEY_TOMBSTONE) i = (i + 1 == s->capacity) ? 0 : i + 1;
    if ((s->slots[i].w0 & ADDR_MASK) == KEY_EMPTY) s->used++;
    s->slots[i] = *slot;
    uint64_t size = slot->w1 & SIZE_MASK;
    if (slot->w1 & PREEXISTING_BIT) {
      s->preLive++;
      s->preLiveBytes += size;
    } else {
      s->live++;
      __atomic_store_n(&s->liveBytes, s->liveBytes + size, __ATOMIC_RELAXED);
    }
  }
  spinUnlock(&s->lock);
}

static void recordFree(void *pointer) {
  Slot slot;
  takeBlock(pointer, &slot, true);
}

// While every block is tracked for the leaks instrument, new blocks start zeroed (their
// content is unspecified, so this changes no defined behaviour, as glibc's
// MALLOC_PERTURB_ does with another byte). A conservative scan reads every word of a live
// block: uninitialized bytes left from a freed block (spare array capacity, the unused
// end of an allocator's page, padding) would otherwise hold stale pointers, and a stale
// pointer to an address reused since reads as a reference that keeps a leak alive.
static bool g_zeroNewBlocks;

static inline void zeroIfTrackingAll(void *pointer, size_t from, size_t to) {
  if (UNLIKELY(g_zeroNewBlocks)) memset((char *)pointer + from, 0, to - from);
}

// MARK: - Reserved addresses (CPerfAlloc_reserveAddresses)
//
// The array is only ever replaced between sessions; an old one is never unmapped, so a
// hook still reading it after a stop reads valid memory.
static const uint64_t *_Atomic g_reserved;
static _Atomic uint64_t g_reservedCount;
static uint64_t g_reservedLo, g_reservedHi;
static uint64_t *g_reservedStorage;
static size_t g_reservedStorageBytes;
#define HELD_CAPACITY 65536
static void **g_held;  // HELD_CAPACITY, mapped with the first reservation
static _Atomic uint64_t g_heldCount;
static _Atomic uint64_t g_heldBytes;
static _Atomic uint64_t g_notAvoided;

// Whether [p, p + size) covers a reserved address (the scanner counts interior pointers).
static inline bool coversReserved(void *pointer, size_t size) {
  uint64_t n = atomic_load_explicit(&g_reservedCount, memory_order_acquire);
  if (LIKELY(n == 0) || !pointer) return false;
  uint64_t p = (uint64_t)(uintptr_t)pointer;
  if (p + size <= g_reservedLo || p > g_reservedHi) return false;
  const uint64_t *a = atomic_load_explicit(&g_reserved, memory_order_relaxed);
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (a[mid] < p) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && a[lo] < p + size;
}

// Keeps `pointer` out of use; false when there is no room (then it is used after all).
static bool holdAside(void *pointer, size_t size) {
  uint64_t i = atomic_fetch_add_explicit(&g_heldCount, 1, memory_order_relaxed);
  if (i >= HELD_CAPACITY) {
    atomic_fetch_add_explicit(&g_notAvoided, 1, memory_order_relaxed);
    return false;
  }
  g_held[i] = pointer;
  atomic_fetch_add_explicit(&g_heldBytes, size, memory_order_relaxed);
  return true;
}

// Allocates again with `again` while the block covers a reserved address.
#define AVOID_RESERVED(p, size, again) \
  while (UNLIKELY(coversReserved((p), (size))) && holdAside((p), (size))) (p) = (again)

void CPerfAlloc_reserveAddresses(const uint64_t *addresses, uint64_t count) {
  atomic_store(&g_countsFast, 0);
  atomic_store_explicit(&g_reservedCount, 0, memory_order_release);
  if (!count || !addresses) return;
  if (!g_held) {
    g_held = mapBytes(HELD_CAPACITY * sizeof(void *));
    if (!g_held) return;
  }
  size_t bytes = pageRound(count * sizeof(uint64_t));
  if (bytes > g_reservedStorageBytes) {
    uint64_t *storage = mapBytes(bytes);
    if (!storage) return;
    g_reservedStorage = storage;  // the old one stays mapped (see above)
    g_reservedStorageBytes = bytes;
  }
  memcpy(g_reservedStorage, addresses, count * sizeof(uint64_t));
  g_reservedLo = g_reservedStorage[0];
  g_reservedHi = g_reservedStorage[count - 1];
  atomic_store_explicit(&g_heldCount, 0, memory_order_relaxed);
  atomic_store_explicit(&g_heldBytes, 0, memory_order_relaxed);
  atomic_store_explicit(&g_notAvoided, 0, memory_order_relaxed);
  atomic_store_explicit(&g_reserved, g_reservedStorage, memory_order_relaxed);
  atomic_store_explicit(&g_reservedCount, count, memory_order_release);
}

void CPerfAlloc_releaseReservedAddresses(CPerfAlloc_Reserved *out) {
  CPerfAlloc_Reserved r = {
    .addresses = atomic_exchange_explicit(&g_reservedCount, 0, memory_order_acq_rel),
    .heldBytes = atomic_load_explicit(&g_heldBytes, memory_order_relaxed),
    .notAvoided = atomic_load_explicit(&g_notAvoided, memory_order_relaxed),
  };
  uint64_t held = atomic_exchange_explicit(&g_heldCount, 0, memory_order_relaxed);
  if (held > HELD_CAPACITY) held = HELD_CAPACITY;
  r.heldBlocks = held;
  for (uint64_t i = 0; i < held; i++) {
    if (g_held[i]) __libc_free(g_held[i]);
    g_held[i] = NULL;
  }
  atomic_store_explicit(&g_heldBytes, 0, memory_order_relaxed);
  atomic_store_explicit(&g_notAvoided, 0, memory_order_relaxed);
  if (out) *out = r;
}

// MARK: - Frees after a listing (CPerfAlloc_watchFrees)

// 32 MB of address space, touched as it fills: the analysis between a stop and its scan
// frees tens of thousands of blocks, not millions.
#define WATCH_CAPACITY ((uint64_t)1 << 22)
static uint64_t *g_watchLog;
static _Atomic int32_t g_watchWanted;  // set before the listing, the log starts at it
static _Atomic int32_t g_watching;
static _Atomic uint64_t g_watchCount;
#define WATCHING() UNLIKELY(atomic_load_explicit(&g_watching, memory_order_relaxed))

static inline void noteFree(void *pointer) {
  uint64_t i = atomic_fetch_add_explicit(&g_watchCount, 1, memory_order_relaxed);
  if (i < WATCH_CAPACITY) g_watchLog[i] = (uint64_t)(uintptr_t)pointer;
}

// Under the listing's locks (or right before it): frees from here on are logged.
static void startWatchIfWanted(void) {
  if (!atomic_load_explicit(&g_watchWanted, memory_order_relaxed) || !g_watchLog) return;
  atomic_store_explicit(&g_watchCount, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watching, 1, memory_order_release);
}

void CPerfAlloc_watchFrees(void) {
  if (!g_watchLog) {
    g_watchLog = mapBytes(WATCH_CAPACITY * sizeof(uint64_t));
    if (!g_watchLog) return;
  }
  atomic_store_explicit(&g_watching, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watchWanted, 1, memory_order_release);
}

uint64_t CPerfAlloc_watchedFrees(const uint64_t **addresses, uint64_t *frees) {
  if (addresses) *addresses = g_watchLog;
  uint64_t n = atomic_load_explicit(&g_watching, memory_order_acquire)
                   ? atomic_load_explicit(&g_watchCount, memory_order_acquire) : 0;
  if (frees) *frees = n;
  return n < WATCH_CAPACITY ? n : WATCH_CAPACITY;
}

void CPerfAlloc_endWatchingFrees(void) {
  atomic_store_explicit(&g_watchWanted, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watching, 0, memory_order_release);
}

#if CPERFALLOC_INTERPOSES
// MARK: - The hooks
//
// Each public function checks one relaxed flag and forwards; while recording it
// tail-calls (musttail) a recording variant with the same signature, so that variant's
// frame sits directly on the caller's and its return address is the allocation site.

#define RECORDING() UNLIKELY(atomic_load_explicit(&g_recording, memory_order_relaxed))
#define HOOK_FRAME() ((uintptr_t *)__builtin_frame_address(0))

__attribute__((noinline)) static void *recordCountsSlow(void *p, size_t size, uintptr_t ret, uintptr_t callerFrame,
                                                       uintptr_t frame) {
  t_inHook = 1;
  if (p && !t_ignoringAllocations) recordAllocCountsAt(p, size, isObjectAt(ret, callerFrame, frame));
  t_inHook = 0;
  return p;
}

// malloc's recording in a types-and-counts session, after glibc's malloc (frame: the
// hook's, as its three words). A block whose nursery slot is empty goes in without a
// call, so this needs no stack frame of its own; everything else (no nursery yet, an
// eviction, ignored allocations) goes to recordCountsSlow before anything has changed.
__attribute__((noinline)) static void *recordCounts(void *p, size_t size, uintptr_t ret, uintptr_t callerFrame,
                                                   uintptr_t frame) {
  Nursery *n = t_nursery;
  uint64_t address = (uint64_t)(uintptr_t)p;
  uint64_t key = address >> 4;
  bool fits = !(address & 15) && key <= ADDR_MASK;
  uint32_t countdown = t_clockCountdown;
  uint64_t tidBits = t_tidBits;
  // The clock's turn and a thread's first allocation take the slow path too (newSlot):
  // whatever calls out would cost this function its frameless path.
  if (UNLIKELY(!p || !n || !fits || t_ignoringAllocations || countdown == 0 || tidBits == 0 || !nurseryEnter(n))) {
    __attribute__((musttail)) return recordCountsSlow(p, size, ret, callerFrame, frame);
  }
  Slot *e = &n->slots[nurseryIndex(hashAddress(key))];
  if (UNLIKELY(__atomic_load_n(&e->w0, __ATOMIC_RELAXED) & ADDR_MASK)) {
    nurseryLeave(n);
    __attribute__((musttail)) return recordCountsSlow(p, size, ret, callerFrame, frame);
  }
  t_clockCountdown = countdown - 1;
  uint64_t size40 = size > SIZE_MASK ? SIZE_MASK : size;
  Slot slot = {
    .w0 = key | atomic_load_explicit(&g_generationBits, memory_order_relaxed),
    .w1 = size40 | tidBits | (isObjectAt(ret, callerFrame, frame) ? OBJECT_BIT : 0),
    .w2 = atomic_load_explicit(&g_nowMicros, memory_order_relaxed) << 32,
  };
  nurseryFill(n, e, &slot, size);
  nurseryLeave(n);
  return p;
}

// Sessions other than types and counts with nurseries (and reentry).
__attribute__((noinline)) static void *mallocRecordingAll(size_t size) {
  if (t_inHook) return __libc_malloc(size);
  t_inHook = 1;
  void *p = __libc_malloc(size);
  AVOID_RESERVED(p, size, __libc_malloc(size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

__attribute__((noinline)) static void *mallocRecording(size_t size) {
  if (UNLIKELY(t_inHook || !atomic_load_explicit(&g_countsFast, memory_order_relaxed))) {
    __attribute__((musttail)) return mallocRecordingAll(size);
  }
  // No reentry guard around glibc's malloc, which calls no malloc.
  uintptr_t *frame = HOOK_FRAME();
  void *p = __libc_malloc(size);
  return recordCounts(p, size, frame[1], frame[0], (uintptr_t)frame);
}

void *malloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return mallocRecording(size);
  return __libc_malloc(size);
}

__attribute__((noinline)) static void freeRecordingSlow(void *pointer) {
  if (WATCHING()) noteFree(pointer);
  if (t_inHook) {
    __libc_free(pointer);
    return;
  }
  t_inHook = 1;
  recordFree(pointer);
  t_inHook = 0;
  // A tail call; glibc's free allocates nothing, and a malloc it made would be recorded
  // like any other.
  __libc_free(pointer);
}

// The common free: a block in the thread's own nursery, of a category its freed table has
// met. It checks all of that before it changes anything, so on any miss the slow path
// takes the whole free; it calls nothing else, which spares it a stack frame and the
// reentry guard.
__attribute__((noinline)) static void freeRecording(void *pointer) {
  Nursery *n = t_nursery;
  if (UNLIKELY(WATCHING() || t_inHook || !n || !nurseryEnter(n))) {
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  uint64_t key = (uint64_t)(uintptr_t)pointer >> 4;
  Slot *e = &n->slots[nurseryIndex(hashAddress(key))];
  uint64_t w0 = __atomic_load_n(&e->w0, __ATOMIC_RELAXED);
  FreedSlot *table = n->freed.slots;
  if (UNLIKELY((w0 & ADDR_MASK) != key || !table)) {
    nurseryLeave(n);
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  uint64_t w1 = e->w1;
  uint64_t size = w1 & SIZE_MASK;
  uint64_t metadata = (w1 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
  FreedSlot *f;
  if (metadata != 0 && !(metadata & 7)) {
    f = &table[freedHome(STRIPES + n->index, metadata)];
    if (UNLIKELY(f->key != metadata)) f = NULL;
  } else {
    f = &table[FREED_SLOTS + CPerfAlloc_sizeClass(size)];
  }
  if (UNLIKELY(!f || f->count == 0)) {
    nurseryLeave(n);
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  // Only a second free of the same block could race with this store.
  __atomic_store_n(&e->w0, 0, __ATOMIC_RELAXED);
  BUMP(n->frees, 1);
  BUMP(n->freedBytes, size);
  f->count++;
  f->bytes += size;
  nurseryLeave(n);
  __attribute__((musttail)) return __libc_free(pointer);
}

void free(void *pointer) {
  if (RECORDING() && pointer) {
    __attribute__((musttail)) return freeRecording(pointer);
  }
  if (WATCHING() && pointer) noteFree(pointer);
  __libc_free(pointer);
}

__attribute__((noinline)) static void *callocRecording(size_t count, size_t size) {
  if (t_inHook) return __libc_calloc(count, size);
  t_inHook = 1;
  void *p = __libc_calloc(count, size);
  AVOID_RESERVED(p, count * size, __libc_calloc(count, size));
  if (p) recordAlloc(p, count * size, HOOK_FRAME());  // no overflow: calloc succeeded
  t_inHook = 0;
  return p;
}

void *calloc(size_t count, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return callocRecording(count, size);
  return __libc_calloc(count, size);
}

__attribute__((noinline)) static void *reallocRecording(void *pointer, size_t size) {
  if (WATCHING() && pointer) noteFree(pointer);
  if (t_inHook) return __libc_realloc(pointer, size);
  t_inHook = 1;
  // Take the old block out before glibc can hand its address to another thread.
  Slot old;
  int taken = pointer ? takeBlock(pointer, &old, false) : TAKE_UNTRACKED;
  bool tracked = taken == TAKE_TRACKED;
  uint64_t oldKey = tracked ? categoryKey(pointer, &old) : 0;
  // What the block held before: the rest is uninitialized, i.e. stale words of freed
  // blocks, which a leak scan would read as pointers to whatever now lives at those
  // addresses (realloc(NULL, n) included: it is a malloc).
  size_t oldSize = !pointer ? 0 : taken != TAKE_UNTRACKED ? (size_t)(old.w1 & SIZE_MASK)
                   : g_zeroNewBlocks ? malloc_usable_size(pointer) : 0;
  void *p = __libc_realloc(pointer, size);
  if (!p && size != 0 && pointer) {
    if (taken != TAKE_UNTRACKED) putBack(pointer, &old);  // failed: the old block is untouched
  } else {
    if (tracked) aggregateFree(pointer, &old, oldKey);
    if (UNLIKELY(coversReserved(p, size))) {
      // Moved elsewhere by hand; the block glibc chose is held aside.
      void *q = __libc_malloc(size);
      AVOID_RESERVED(q, size, __libc_malloc(size));
      if (q) {
        memcpy(q, p, size);
        if (holdAside(p, size)) p = q;
        else __libc_free(q);
      }
    }
    if (p) {
      if (size > oldSize) zeroIfTrackingAll(p, oldSize, size);
      recordAlloc(p, size, HOOK_FRAME());
    }
  }
  t_inHook = 0;
  return p;
}

void *realloc(void *pointer, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return reallocRecording(pointer, size);
  // Logged moved or not: a block resized in place is not the listed block either.
  if (WATCHING() && pointer) noteFree(pointer);
  return __libc_realloc(pointer, size);
}

void *reallocarray(void *pointer, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(pointer, bytes);
}

__attribute__((noinline)) static void *memalignRecording(size_t alignment, size_t size) {
  if (t_inHook) return __libc_memalign(alignment, size);
  t_inHook = 1;
  void *p = __libc_memalign(alignment, size);
  AVOID_RESERVED(p, size, __libc_memalign(alignment, size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *memalign(size_t alignment, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return memalignRecording(alignment, size);
  return __libc_memalign(alignment, size);
}

static bool isPowerOfTwo(size_t x) { return x && !(x & (x - 1)); }

__attribute__((noinline)) static int posixMemalignRecording(void **out, size_t alignment, size_t size) {
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void *)) return EINVAL;
  int savedErrno = errno;
  void *p;
  if (t_inHook) {
    p = __libc_memalign(alignment, size);
  } else {
    t_inHook = 1;
    p = __libc_memalign(alignment, size);
    AVOID_RESERVED(p, size, __libc_memalign(alignment, size));
    if (p) {
      zeroIfTrackingAll(p, 0, size);
      recordAlloc(p, size, HOOK_FRAME());
    }
    t_inHook = 0;
  }
  errno = savedErrno;  // posix_memalign reports through its result, never errno
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

int posix_memalign(void **out, size_t alignment, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return posixMemalignRecording(out, alignment, size);
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void *)) return EINVAL;
  int savedErrno = errno;
  void *p = __libc_memalign(alignment, size);
  errno = savedErrno;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
  if (!isPowerOfTwo(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  if (RECORDING()) __attribute__((musttail)) return memalignRecording(alignment, size);
  return __libc_memalign(alignment, size);
}

static size_t pageSize(void) {
  static _Atomic size_t cached;
  size_t page = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!page) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    atomic_store_explicit(&cached, page, memory_order_relaxed);
  }
  return page;
}

__attribute__((noinline)) static void *vallocRecording(size_t size) {
  if (t_inHook) return __libc_memalign(pageSize(), size);
  t_inHook = 1;
  void *p = __libc_memalign(pageSize(), size);
  AVOID_RESERVED(p, size, __libc_memalign(pageSize(), size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *valloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return vallocRecording(size);
  return __libc_memalign(pageSize(), size);
}

// Whole pages; 0 becomes one page. NULL with ENOMEM when rounding overflows.
static size_t pageRoundedOrZero(size_t size) {
  size_t page = pageSize();
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) return 0;
  rounded &= ~(page - 1);
  return rounded ? rounded : page;
}

__attribute__((noinline)) static void *pvallocRecording(size_t size) {
  size_t rounded = pageRoundedOrZero(size);
  if (!rounded) {
    errno = ENOMEM;
    return NULL;
  }
  if (t_inHook) return __libc_memalign(pageSize(), rounded);
  t_inHook = 1;
  void *p = __libc_memalign(pageSize(), rounded);
  AVOID_RESERVED(p, rounded, __libc_memalign(pageSize(), rounded));
  if (p) {
    zeroIfTrackingAll(p, 0, rounded);
    recordAlloc(p, rounded, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *pvalloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return pvallocRecording(size);
  size_t rounded = pageRoundedOrZero(size);
  if (!rounded) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_memalign(pageSize(), rounded);
}

// glibc exports no __libc_ name for it: find the next definition (libc's) once.
static size_t (*_Atomic g_libcUsableSize)(void *);

size_t malloc_usable_size(void *pointer) {
  size_t (*real)(void *) = atomic_load_explicit(&g_libcUsableSize, memory_order_acquire);
  if (UNLIKELY(!real)) {
    real = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    if (!real) return 0;
    atomic_store_explicit(&g_libcUsableSize, real, memory_order_release);
  }
  return real(pointer);
}

#endif  // CPERFALLOC_INTERPOSES

// MARK: - Fork

// The child must never see a table mid-update: the forking thread holds every lock
// across fork(). The child keeps the recorded data but records nothing more.
static void forkPrepare(void) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  spinLock(&g_markLock);
  for (int i = 0; i < STRIPES; i++) spinLock(&g_stripes[i].lock);
}

static void forkParent(void) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
  spinUnlock(&g_markLock);
}

static void forkChild(void) {
  t_tid = 0;
  t_tidBits = 0;
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  atomic_store_explicit(&g_recording, 0, memory_order_relaxed);
  atomic_store_explicit(&g_nurseriesOn, 0, memory_order_relaxed);
  for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
  spinUnlock(&g_markLock);
}

// MARK: - Session control

static CPerfAlloc_Block *g_blocks;
static uint64_t g_blockCount;
static size_t g_blocksBytes;
static CPerfAlloc_Block *g_preBlocks;
static uint64_t g_preBlockCount;
static size_t g_preBlocksBytes;
static CPerfAlloc_Freed *g_freedSnapshot;
static uint64_t g_freedCount;
static size_t g_freedBytes;
static CPerfAlloc_Stats g_stats;

static int32_t fail(CPerfAlloc_Error *error, int32_t code, const char *call, int sysErrno) {
  if (error) {
    error->code = code;
    error->sysErrno = sysErrno;
    error->call = call;
  }
  return code;
}

static void unmapAll(void) {
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    if (s->slots) munmap(s->slots, s->mappedBytes);
    if (s->freed.slots) munmap(s->freed.slots, FREED_TABLE_BYTES);
    uint32_t keep = atomic_load(&s->lock);  // release() holds it: stay locked
    memset(s, 0, sizeof(*s));
    atomic_store(&s->lock, keep);
  }
  if (g_stackSlots) munmap(g_stackSlots, (size_t)STACK_SLOTS * sizeof(StackSlot));
  if (g_stackArena) munmap(g_stackArena, (size_t)STACK_ARENA_FRAMES * sizeof(uint64_t));
  if (g_timeline) munmap(g_timeline, pageRound(g_timelineCapacity * sizeof(CPerfAlloc_TimelinePoint)));
  if (g_blocks) munmap(g_blocks, g_blocksBytes);
  if (g_preBlocks) munmap(g_preBlocks, g_preBlocksBytes);
  g_preBlocks = NULL;
  g_preBlockCount = 0;
  if (g_freedSnapshot) munmap(g_freedSnapshot, g_freedBytes);
  g_stackSlots = NULL;
  g_stackArena = NULL;
  g_timeline = NULL;
  g_blocks = NULL;
  g_freedSnapshot = NULL;
  g_blockCount = g_freedCount = 0;
}

static int registerAtfork(void) {
  static bool registered;
  if (registered) return 0;
  int rc = pthread_atfork(forkPrepare, forkParent, forkChild);
  if (rc == 0) registered = true;
  return rc;
}

// Stops the hooks' tracking of a session that never started (start failed).
static void endTracking(void) {
  for (int i = 0; i < STRIPES; i++) spinLock(&g_stripes[i].lock);
  atomic_store(&g_recording, 0);
  atomic_store(&g_preexistingPhase, 0);
  for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
}

int32_t CPerfAlloc_start(const CPerfAlloc_Config *config, CPerfAlloc_Error *error) {
  if (error) memset(error, 0, sizeof(*error));
  if (!CPERFALLOC_INTERPOSES)
    return fail(error, CPerfAlloc_ErrorState,
                "the allocations instrument is not available under ThreadSanitizer (no malloc interposer)", 0);
  if (!config) return fail(error, CPerfAlloc_ErrorInvalidMode, "config", 0);
  if (config->mode != CPerfAlloc_ModeCountsOnly && config->mode != CPerfAlloc_ModeFullStacks)
    return fail(error, CPerfAlloc_ErrorInvalidMode, "mode", 0);
  if (config->mode == CPerfAlloc_ModeFullStacks &&
      (config->maxDepth < CPerfAlloc_MinDepth || config->maxDepth > CPerfAlloc_MaxDepth))
    return fail(error, CPerfAlloc_ErrorInvalidDepth, "maxDepth", 0);
  int32_t expected = STATE_IDLE;
  bool continuing = false;  // the tables already hold the blocks allocated since process start
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    expected = STATE_TRACKING;
    if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY))
      return fail(error, CPerfAlloc_ErrorBusy, "start", 0);
    continuing = true;
  }

  int rc = registerAtfork();
  if (rc != 0) {
    if (continuing) {
      atomic_store(&g_state, STATE_TRACKING);
      return fail(error, CPerfAlloc_ErrorSystem, "pthread_atfork", rc);
    }
    atomic_store(&g_state, STATE_IDLE);
    return fail(error, CPerfAlloc_ErrorSystem, "pthread_atfork", rc);
  }
  lookUpObjectSites();

  g_mode = config->mode;
  g_maxDepth = config->maxDepth > 0 ? config->maxDepth : CPerfAlloc_DefaultDepth;
  g_timelineIntervalNs = 1000ull * (config->timelineIntervalUs ? config->timelineIntervalUs : CPerfAlloc_DefaultTimelineIntervalUs);
  g_timelineCapacity = config->timelineCapacity ? config->timelineCapacity : (1u << 20);
  g_timeline = mapBytes(pageRound(g_timelineCapacity * sizeof(CPerfAlloc_TimelinePoint)));
  if (g_mode == CPerfAlloc_ModeFullStacks) {
    g_stackSlots = mapBytes((size_t)STACK_SLOTS * sizeof(StackSlot));
    g_stackArena = mapBytes((size_t)STACK_ARENA_FRAMES * sizeof(uint64_t));
  }
  if (!g_timeline || (g_mode == CPerfAlloc_ModeFullStacks && (!g_stackSlots || !g_stackArena))) {
    int saved = errno;
    if (continuing) endTracking();
    unmapAll();
    atomic_store(&g_state, STATE_IDLE);
    return fail(error, CPerfAlloc_ErrorSystem, "mmap", saved);
  }
  for (int i = 0; !continuing && i < STRIPES; i++) {
    if (!stripeMap(&g_stripes[i], INITIAL_SLOTS)) {
      int saved = errno;
      unmapAll();
      atomic_store(&g_state, STATE_IDLE);
      return fail(error, CPerfAlloc_ErrorSystem, "mmap", saved);
    }
  }
  atomic_store(&g_stackArenaUsed, 0);
  atomic_store(&g_stackCount, 0);
  atomic_store(&g_lostStacks, 0);
  atomic_store(&g_timelineCount, 0);
  atomic_store(&g_lostTimeline, 0);
  atomic_store(&g_markCount, 0);
  atomic_store(&g_generation, 0);
  atomic_store(&g_generationBits, 0);
  atomic_store(&g_peakLiveBytes, 0);
  memset(&g_stats, 0, sizeof(g_stats));
  calibrateClock();
  g_session++;
  atomic_store(&g_nowMicros, 0);
  atomic_store(&g_timelineLast, 0);
  timelineAppend(g_startNs, 0);
  g_tracksPreexisting = continuing;
  // A session that continues from process start keeps every block in the stripes, where
  // the preexisting ones already are.
  g_nurseriesUsable = !continuing && registerMembarrier();
  uint32_t nurseries = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i < nurseries; i++) resetNursery(g_nurseries[i]);
  resetNursery(&g_overflow);
  g_overflow.index = MAX_NURSERIES;
  atomic_store(&g_nurseriesOn, g_nurseriesUsable);
  atomic_store(&g_countsFast, g_nurseriesUsable && g_mode == CPerfAlloc_ModeCountsOnly && !g_zeroNewBlocks);
  if (continuing) {
    // From here on, blocks are the session's: the phase ends under every stripe lock, so
    // each block is on one side of it.
    for (int i = 0; i < STRIPES; i++) spinLock(&g_stripes[i].lock);
    atomic_store(&g_preexistingPhase, 0);
    for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
  }
  atomic_store(&g_paused, 0);
  atomic_store(&g_state, STATE_RUNNING);
  atomic_store(&g_recording, 1);
  return CPerfAlloc_OK;
}

int32_t CPerfAlloc_trackAllBlocks(void) {
  int32_t expected = STATE_IDLE;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return CPerfAlloc_ErrorBusy;
  if (registerAtfork() != 0) {
    atomic_store(&g_state, STATE_IDLE);
    return CPerfAlloc_ErrorSystem;
  }
  lookUpObjectSites();
  for (int i = 0; i < STRIPES; i++) {
    if (!stripeMap(&g_stripes[i], INITIAL_SLOTS)) {
      unmapAll();
      atomic_store(&g_state, STATE_IDLE);
      return CPerfAlloc_ErrorSystem;
    }
  }
  atomic_store(&g_preexistingPhase, 1);
  g_zeroNewBlocks = true;
  atomic_store(&g_state, STATE_TRACKING);
  atomic_store(&g_recording, 1);
  return CPerfAlloc_OK;
}

// The harness's hook for the leaks instrument (documented in CPerfAlloc.h): a scenario's
// child process has PERFHARNESS_TRACK_ALL_BLOCKS=1 so that the blocks allocated before its
// recording are known to the memory graph. It runs from the executable's .preinit_array,
// before any shared library's initializer (the Swift runtime's first metadata pages, the
// main thread's Foundation state), with the environment as an argument (libc's own
// getenv may not be set up yet), and removes the variable so that processes the scenario
// starts do not pay for it.
static void trackAllBlocksIfAsked(int argc, char **argv, char **envp) {
  (void)argc;
  (void)argv;
  for (char **entry = envp; entry && *entry; entry++) {
    if (strcmp(*entry, "PERFHARNESS_TRACK_ALL_BLOCKS=1") != 0) continue;
    for (char **rest = entry; *rest; rest++) rest[0] = rest[1];
    (void)CPerfAlloc_trackAllBlocks();
    return;
  }
}
__attribute__((section(".preinit_array"), used)) static void (*const g_trackAllBlocksAtStart)(int, char **, char **) =
  trackAllBlocksIfAsked;

int32_t CPerfAlloc_setPaused(int32_t paused) {
  if (atomic_load(&g_state) != STATE_RUNNING) return 0;
  int32_t previous = atomic_exchange(&g_paused, paused ? 1 : 0);
  if (paused) {
    // The frameless counts path records without looking at the flag: while paused every
    // allocation takes the path that does.
    atomic_store(&g_countsFast, 0);
  } else if (previous) {
    atomic_store(&g_countsFast, g_nurseriesUsable && g_mode == CPerfAlloc_ModeCountsOnly && !g_zeroNewBlocks &&
                                    atomic_load(&g_reservedCount) == 0);
  }
  return previous;
}

int32_t CPerfAlloc_setIgnoringAllocations(int32_t ignoring) {
  int32_t previous = t_ignoringAllocations;
  t_ignoringAllocations = ignoring;
  return previous;
}

int32_t CPerfAlloc_isRecording(void) { return atomic_load_explicit(&g_recording, memory_order_relaxed); }

int32_t CPerfAlloc_markGeneration(CPerfAlloc_Mark *out) {
  if (atomic_load(&g_state) != STATE_RUNNING) return CPerfAlloc_ErrorState;
  spinLock(&g_markLock);
  uint64_t count = atomic_load(&g_markCount);
  if (count >= CPerfAlloc_MaxMarks) {
    spinUnlock(&g_markLock);
    return CPerfAlloc_ErrorState;
  }
  uint32_t generation = atomic_fetch_add(&g_generation, 1) + 1;
  atomic_store(&g_generationBits, (uint64_t)(generation > 0xFFFF ? 0xFFFF : generation) << ADDR_BITS);
  // The young blocks go to the stripes, so the count is exact at the mark.
  drainNurseries();
  int64_t blocks = 0;
  nurseriesLive(&blocks, NULL);
  for (int i = 0; i < STRIPES; i++) blocks += (int64_t)__atomic_load_n(&g_stripes[i].live, __ATOMIC_RELAXED);
  int64_t live = sumLiveBytes();
  reopenNurseries();
  CPerfAlloc_Mark mark = {
    .generation = generation,
    .timestampNs = monotonicNs(),
    .liveBytes = live > 0 ? (uint64_t)live : 0,
    .liveBlocks = blocks > 0 ? (uint64_t)blocks : 0,
  };
  g_marks[count] = mark;
  atomic_store(&g_markCount, count + 1);
  spinUnlock(&g_markLock);
  if (out) *out = mark;
  return CPerfAlloc_OK;
}

// Copies a freed table's categories into the snapshot from index f (its lost frees as
// one entry with key UINT64_MAX); returns the next index.
static uint64_t snapshotFreed(const FreedTable *t, uint64_t f, uint64_t capacity) {
  for (uint64_t j = 0; g_freedSnapshot && t->slots && j < FREED_SLOTS + SIZE_CLASS_SLOTS; j++) {
    if (t->slots[j].count == 0 || f >= capacity) continue;
    g_freedSnapshot[f].key = t->slots[j].key;
    g_freedSnapshot[f].count = t->slots[j].count;
    g_freedSnapshot[f].bytes = t->slots[j].bytes;
    f++;
  }
  if (g_freedSnapshot && t->lost && f < capacity) {
    g_freedSnapshot[f].key = UINT64_MAX;
    g_freedSnapshot[f].count = t->lost;
    g_freedSnapshot[f].bytes = 0;
    f++;
  }
  return f;
}

int32_t CPerfAlloc_stop(CPerfAlloc_Error *error) {
  if (error) memset(error, 0, sizeof(*error));
  int32_t expected = STATE_RUNNING;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY))
    return fail(error, CPerfAlloc_ErrorState, "stop without a running session", 0);

  // Holding every stripe lock: no hook is mid-update, frees of tracked blocks wait (so
  // every live object's first word can still be read), and after the flag drops no
  // hook touches a table again. Nothing here may malloc: the guard makes sure.
  t_inHook = 1;
  spinLock(&g_markLock);
  atomic_store(&g_countsFast, 0);
  drainNurseries();  // every live block is in the stripes from here on
  for (int i = 0; i < STRIPES; i++) spinLock(&g_stripes[i].lock);
  atomic_store(&g_recording, 0);
  startWatchIfWanted();
  g_stopNs = monotonicNs();

  uint64_t live = 0, freedEntries = 0, preLive = 0;
  for (int i = 0; i < STRIPES; i++) {
    live += g_stripes[i].live;
    preLive += g_stripes[i].preLive;
    freedEntries += g_stripes[i].freed.used + (g_stripes[i].freed.lost ? 1 : 0);
  }
  uint32_t nurseries = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i <= nurseries; i++) {
    const Nursery *x = i < nurseries ? g_nurseries[i] : &g_overflow;
    freedEntries += x->freed.used + (x->freed.lost ? 1 : 0);
  }
  g_blocksBytes = pageRound((live ? live : 1) * sizeof(CPerfAlloc_Block));
  g_blocks = mapBytes(g_blocksBytes);
  g_freedBytes = pageRound((freedEntries ? freedEntries : 1) * sizeof(CPerfAlloc_Freed));
  g_freedSnapshot = mapBytes(g_freedBytes);
  if (g_tracksPreexisting) {
    g_preBlocksBytes = pageRound((preLive ? preLive : 1) * sizeof(CPerfAlloc_Block));
    g_preBlocks = mapBytes(g_preBlocksBytes);
  }
  int mapErrno = errno;

  CPerfAlloc_Stats *st = &g_stats;
  st->startNs = g_startNs;
  st->stopNs = g_stopNs;
  st->mode = g_mode;
  st->swiftObjectSites = g_objectSiteCount;
  uint64_t n = 0, f = 0, pre = 0;
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    st->totalAllocations += s->allocations;
    st->totalBytes += s->allocatedBytes;
    st->trackedFrees += s->frees;
    st->liveBlocks += s->live;
    st->liveBytes += s->liveBytes;
    st->lostBlocks += s->lostBlocks;
    st->lostFreedKeys += s->freed.lost;
    st->blockTableBytes += s->mappedBytes;
    for (uint64_t j = 0; g_blocks && j < s->capacity; j++) {
      const Slot *slot = &s->slots[j];
      uint64_t key = slot->w0 & ADDR_MASK;
      if (key <= KEY_TOMBSTONE) continue;
      CPerfAlloc_Block *b;
      if (slot->w1 & PREEXISTING_BIT) {
        if (!g_preBlocks || pre >= preLive) continue;
        b = &g_preBlocks[pre++];
      } else {
        if (n >= live) continue;
        b = &g_blocks[n++];
      }
      b->address = key << 4;
      b->size = slot->w1 & SIZE_MASK;
      b->tid = (int32_t)((slot->w1 >> 40) & TID_MASK);
      b->flags = (slot->w1 & OBJECT_BIT) ? CPerfAlloc_BlockSwiftObject : 0;
      b->metadata = (slot->w1 & OBJECT_BIT) ? *(uint64_t *)(uintptr_t)b->address : 0;
      b->generation = (uint32_t)((slot->w0 >> ADDR_BITS) & 0xFFFF);
      b->stackId = (uint32_t)slot->w2;
      b->timestampNs = g_startNs + (slot->w2 >> 32) * 1000;
    }
    f = snapshotFreed(&s->freed, f, freedEntries);
  }
  for (uint32_t i = 0; i <= nurseries; i++) {
    const Nursery *x = i < nurseries ? g_nurseries[i] : &g_overflow;
    st->totalAllocations += x->allocations;
    st->totalBytes += x->allocatedBytes;
    st->trackedFrees += x->frees;
    st->lostFreedKeys += x->freed.lost;
    if (i < nurseries) st->blockTableBytes += sizeof(Nursery);
    f = snapshotFreed(&x->freed, f, freedEntries);
  }
  g_blockCount = n;
  g_preBlockCount = pre;
  st->preexistingBlocks = pre;
  for (int i = 0; i < STRIPES; i++) st->preexistingBytes += g_stripes[i].preLiveBytes;
  g_freedCount = f;
  (void)sumLiveBytes();  // the peak, including the final state
  int64_t peak = atomic_load(&g_peakLiveBytes);
  st->peakLiveBytes = peak > 0 ? (uint64_t)peak : 0;
  timelineAppend(g_stopNs, (int64_t)st->liveBytes);
  st->lostStacks = atomic_load(&g_lostStacks);
  st->lostTimeline = atomic_load(&g_lostTimeline);
  st->stackCount = atomic_load(&g_stackCount);
  st->timelineCount = atomic_load(&g_timelineCount);
  st->markCount = atomic_load(&g_markCount);
  st->stackTableBytes = g_stackSlots ? st->stackCount * sizeof(StackSlot) + atomic_load(&g_stackArenaUsed) * sizeof(uint64_t) : 0;

  for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
  spinUnlock(&g_markLock);
  t_inHook = 0;
  atomic_store(&g_state, STATE_STOPPED);
  if (!g_blocks || !g_freedSnapshot) return fail(error, CPerfAlloc_ErrorSystem, "mmap (snapshot)", mapErrno);
  return CPerfAlloc_OK;
}

void CPerfAlloc_stats(CPerfAlloc_Stats *stats) {
  if (stats) *stats = g_stats;
}

const CPerfAlloc_Block *CPerfAlloc_blocks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? g_blockCount : 0;
  return ok ? g_blocks : NULL;
}

// Copies the live blocks, each stripe under its lock, as blocks (`out`) or as (address,
// size) pairs (`pairs`), up to `capacity`; returns how many are live.
static uint64_t copyLiveBlocks(CPerfAlloc_Block *out, uint64_t *pairs, uint64_t capacity) {
  uint64_t n = 0;
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    spinLock(&s->lock);
    for (uint64_t j = 0; j < s->capacity; j++) {
      const Slot *slot = &s->slots[j];
      uint64_t key = slot->w0 & ADDR_MASK;
      if (key <= KEY_TOMBSTONE) continue;
      if (pairs && n < capacity) {
        pairs[2 * n] = key << 4;
        pairs[2 * n + 1] = slot->w1 & SIZE_MASK;
      }
      if (out && n < capacity) {
        CPerfAlloc_Block *b = &out[n];
        b->address = key << 4;
        b->size = slot->w1 & SIZE_MASK;
        b->tid = (int32_t)((slot->w1 >> 40) & TID_MASK);
        // Live, and its table entry cannot go while the stripe is locked: its first word
        // is readable (0 while the runtime has not yet stored the metadata).
        b->metadata = (slot->w1 & OBJECT_BIT) ? *(const uint64_t *)(uintptr_t)b->address : 0;
        b->flags = ((slot->w1 & OBJECT_BIT) && b->metadata ? CPerfAlloc_BlockSwiftObject : 0) |
                   ((slot->w1 & PREEXISTING_BIT) ? CPerfAlloc_BlockPreexisting : 0);
        b->generation = (uint32_t)((slot->w0 >> ADDR_BITS) & 0xFFFF);
        b->stackId = (slot->w1 & PREEXISTING_BIT) ? 0 : (uint32_t)slot->w2;
        b->timestampNs = g_startNs + (slot->w2 >> 32) * 1000;
      }
      n++;
    }
    spinUnlock(&s->lock);
  }
  return n;
}

uint64_t CPerfAlloc_liveBlocksNow(CPerfAlloc_Block *out, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_RUNNING) return 0;
  // Marks and stop drain too: one drain at a time.
  spinLock(&g_markLock);
  drainNurseries();
  if (out) startWatchIfWanted();
  uint64_t n = copyLiveBlocks(out, NULL, capacity);
  reopenNurseries();
  spinUnlock(&g_markLock);
  return n;
}

uint64_t CPerfAlloc_liveBlocksBeforeSession(uint64_t *pairs, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_TRACKING) return 0;
  return copyLiveBlocks(NULL, pairs, capacity);
}

const CPerfAlloc_Block *CPerfAlloc_preexistingBlocks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED && g_preBlocks;
  if (count) *count = ok ? g_preBlockCount : 0;
  return ok ? g_preBlocks : NULL;
}

const CPerfAlloc_Freed *CPerfAlloc_freed(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? g_freedCount : 0;
  return ok ? g_freedSnapshot : NULL;
}

const CPerfAlloc_Mark *CPerfAlloc_marks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? atomic_load(&g_markCount) : 0;
  return ok ? g_marks : NULL;
}

const CPerfAlloc_TimelinePoint *CPerfAlloc_timeline(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  uint64_t n = atomic_load(&g_timelineCount);
  if (count) *count = ok ? (n < g_timelineCapacity ? n : g_timelineCapacity) : 0;
  return ok ? g_timeline : NULL;
}

const uint64_t *CPerfAlloc_stackFrames(uint32_t stackId, uint32_t *depth) {
  if (depth) *depth = 0;
  int32_t state = atomic_load(&g_state);
  // Entries are published with release order and never change: readable while recording.
  if ((state != STATE_STOPPED && state != STATE_RUNNING) || !g_stackSlots || stackId == 0 || stackId > STACK_SLOTS)
    return NULL;
  StackSlot *slot = &g_stackSlots[stackId - 1];
  if (atomic_load(&slot->hash) < 2 || slot->depth == 0) return NULL;
  if (depth) *depth = slot->depth;
  return &g_stackArena[slot->offset];
}

void CPerfAlloc_release(void) {
  int32_t expected = STATE_STOPPED;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return;
  // Hooks that raced with stop re-check the flag under these locks and leave.
  for (int i = 0; i < STRIPES; i++) spinLock(&g_stripes[i].lock);
  unmapAll();
  for (int i = STRIPES - 1; i >= 0; i--) spinUnlock(&g_stripes[i].lock);
  atomic_store(&g_state, STATE_IDLE);
}

// See CPerfHeapScan.h. Linux x86_64 only (register layout of ucontext_t). The scan
// itself: park the threads, read the roots, mark, release.
#include "heap_scan_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "CPerfSupportInline.h"

// MARK: - The output arrays, populated while the index is built

// The marks, the edge starts and the edge columns' first `count` entries are populated on a
// second thread while this one builds the block index: their first touches (the kernel
// clearing 200 MB for 16 M blocks) were on the scan's path. The index is built sooner than
// the arrays are cleared where the host has yet to back the memory, and this thread waited
// in the join for up to 200 ms: it takes chunks of the arrays too once the index is built. A
// chunk at a time, so neither holds the address space's lock for a whole array. Joined before
// any thread parks.
#define POPULATE_MIN_BLOCKS (1u << 20)
#define POPULATE_CHUNK      ((uint64_t)1 << 20)

typedef struct {
  void *start[4];
  uint64_t bytes[4];      // page multiples
  _Atomic uint64_t next;  // the next chunk's offset, counted over the four arrays in turn
} PopulateJob;

// Populates the job's chunks not taken yet, until none is left.
static void populate_share(PopulateJob *job) {
  for (;;) {
    uint64_t at = atomic_fetch_add_explicit(&job->next, POPULATE_CHUNK, memory_order_relaxed);
    int i = 0;
    while (i < 4 && at >= job->bytes[i]) at -= job->bytes[i++];
    if (i == 4) return;
    uint64_t left = job->bytes[i] - at;
    CPerfSupport_populate((char *)job->start[i] + at, left < POPULATE_CHUNK ? left : POPULATE_CHUNK);
  }
}

static void *populate_thread(void *context) {
  populate_share(context);
  return NULL;
}

/// An edge column with room for `capacity` entries from the start (0 if it could not map).
static void reserve_column(Vec *v, uint64_t capacity) {
  uint64_t bytes = round_page(capacity * v->elementSize);
  v->data = map_bytes(bytes);
  v->capacity = v->data ? bytes / v->elementSize : 0;
}

static int32_t scan_impl(const CPerfHeapScan_Block *blocks, uint64_t count, const CPerfHeapScan_Options *options,
                         int32_t callerTid, uint64_t callerFramesTop, CPerfHeapScan_Result *result) {
  int skipCallerStack = options ? options->skipCallerStack : 0;
  int scanGlobals = options ? options->scanGlobals : 1;
  int scanThreads = options ? options->scanThreads : 1;
  int sig = options && options->signalNumber ? options->signalNumber : SIGPROF;
  int timeoutMs = options && options->parkTimeoutMs > 0 ? options->parkTimeoutMs : 500;

  Index ix;
  Scanner sc = {.ix = &ix, .snapshot = options ? options->snapshot : NULL};
  if (options && options->layouts && options->layoutBits) {
    sc.layouts = options->layouts;
    sc.layoutCount = options->layoutCount;
    sc.layoutBits = options->layoutBits;
  }
  sc.glibcChunks = !(options && options->usableSize);
  if (options && options->recorderMemoryCount && options->recorderMemoryStarts && options->recorderMemoryEnds) {
    sc.excludedStarts = options->recorderMemoryStarts;
    sc.excludedEnds = options->recorderMemoryEnds;
    sc.excludedCount = options->recorderMemoryCount;
  }
  if (options && options->arrayStorage) {
    sc.arrayStorage = options->arrayStorage;
    sc.arrayStorageCount = options->arrayStorageCount;
    sc.usableSize = options->usableSize;
  }
  if (options) sc.taskSlabMetadata = options->taskSlabMetadata;
  sc.edgeTargets.elementSize = sc.edgeOffsets.elementSize = sizeof(uint32_t);
  Vec maps = {0}, segments = {.elementSize = sizeof(Range)}, tids = {0};
  int32_t status = 0;
  int installed = 0, restore = 1;
  uint64_t slotBytes = 0;

  result->blockCount = count;
  result->marks = map_bytes(round_page(count));
  if (!result->marks) {
    result->error = errno;
    result->call = "mmap";
    return result->error;
  }
  sc.marks = result->marks;
  result->edgeStart.count = count + 1;
  result->edgeStart.bytes = round_page((count + 1) * sizeof(uint32_t));
  result->edgeStart.data = map_bytes(result->edgeStart.bytes);
  if (!result->edgeStart.data) {
    result->error = errno;
    result->call = "mmap";
    return result->error;
  }
  sc.edgeStart = result->edgeStart.data;
  if (options && options->recordRootSources) {
    result->rootSources = map_bytes(round_page(count * sizeof(uint64_t)));
    sc.rootSources = result->rootSources;
  }
  PopulateJob populate = {0};
  pthread_t populator;
  int populating = 0;
  if (count >= POPULATE_MIN_BLOCKS) {
    // Most big heaps have about an edge a block (an array of objects: one per element).
    reserve_column(&sc.edgeTargets, count);
    reserve_column(&sc.edgeOffsets, count);
    // A column that could not be mapped has no capacity: nothing of it is populated.
    populate =
        (PopulateJob){.start = {result->marks, result->edgeStart.data, sc.edgeTargets.data, sc.edgeOffsets.data},
                      .bytes = {round_page(count), result->edgeStart.bytes, sc.edgeTargets.capacity * sizeof(uint32_t),
                                sc.edgeOffsets.capacity * sizeof(uint32_t)}};
    populating = CPerfSupport_startQuietThread(NULL, &populator, populate_thread, &populate);
  }
  int indexed = index_build(&ix, blocks, count);
  int indexErrno = errno;
  if (populating) {
    populate_share(&populate);
    pthread_join(populator, NULL);
  }
  if (indexed != 0) {
    status = indexErrno;
    result->call = "mmap (block index)";
    goto done;
  }
  // Everything that may take a lock another thread could hold happens before the stop.
  if (scanGlobals) dl_iterate_phdr(collect_segment, &segments);
  // Below the thread pointer: every image's static TLS plus glibc's surplus (a few KiB);
  // above it, struct pthread (its pthread_setspecific slots). The main thread's lie in a
  // mapping of ld.so's, not on its stack. Not the whole mapping: neighbouring anonymous
  // mappings merge with it, and one may hold the scanner's own block list.
  uint64_t tlsBelow = scanThreads ? static_tls_bytes() : 0, tlsAbove = 4096;
  if (scanThreads) {
    if (list_threads(&tids, (int32_t)syscall(SYS_gettid)) != 0) {
      status = errno;
      result->call = "open /proc/self/task";
      goto done;
    }
    // Room for threads started while the others park (listed again below).
    uint64_t slotCapacity = tids.count * 2 + 64;
    slotBytes = round_page(slotCapacity * sizeof(Slot));
    g_slots = map_bytes(slotBytes);
    if (!g_slots) {
      status = errno;
      result->call = "mmap (thread slots)";
      goto done;
    }
    int32_t *tid = tids.data;
    for (uint64_t i = 0; i < tids.count; i++) atomic_store(&g_slots[i].tid, tid[i]);
    atomic_store(&g_slotCount, tids.count);
    atomic_store(&g_release, 0);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = park_handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&action.sa_mask);
    // A handler left installed by an earlier scan (a thread never parked) must not
    // become its own "previous" handler.
    struct sigaction current;
    sigaction(sig, NULL, &current);
    struct sigaction *keep =
        (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == park_handler ? &current : &g_previous;
    if (sigaction(sig, &action, keep) != 0) {
      status = errno;
      result->call = "sigaction";
      goto done;
    }
    installed = 1;
    atomic_store(&g_active, 1);
    pid_t pid = getpid();
    for (uint64_t i = 0; i < tids.count; i++) {
      if (syscall(SYS_tgkill, pid, tid[i], sig) != 0) atomic_store(&g_slots[i].state, 3);  // gone
    }
    uint64_t deadline = CPerfSupport_monotonicNs() + (uint64_t)timeoutMs * 1000000ull;
    for (int round = 0;; round++) {
      for (;;) {
        int waiting = 0;
        for (uint64_t i = 0; i < tids.count; i++)
          if (atomic_load(&g_slots[i].state) == 0) waiting = 1;
        if (!waiting || CPerfSupport_monotonicNs() > deadline) break;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
      }
      // A thread that another one started before it parked was in no list: neither parked
      // nor scanned, its stack and TLS (a Dispatch worker's cache of continuations) would
      // read as no root at all. List again until no new thread appears.
      if (round >= 8 || CPerfSupport_monotonicNs() > deadline) break;
      Vec again = {0};
      if (list_threads(&again, (int32_t)syscall(SYS_gettid)) != 0) break;
      uint64_t added = 0;
      for (uint64_t j = 0; j < again.count; j++) {
        int32_t t = ((int32_t *)again.data)[j];
        int known = 0;
        for (uint64_t i = 0; i < tids.count && !known; i++) known = ((int32_t *)tids.data)[i] == t;
        if (known || tids.count >= slotCapacity) continue;
        if (vec_push(&tids, &t) != 0) break;
        uint64_t i = tids.count - 1;
        atomic_store(&g_slots[i].tid, t);
        atomic_store(&g_slotCount, tids.count);
        if (syscall(SYS_tgkill, pid, t, sig) != 0) atomic_store(&g_slots[i].state, 3);
        added++;
      }
      vec_free(&again);
      if (added == 0) break;
    }
  }
  // The world is stopped (as far as it parks): no malloc from here to the release.
  if (read_maps(&maps) != 0) {
    status = errno ? errno : EIO;
    result->call = "read /proc/self/maps";
  }
  // Copies of blocks freed since the listing (options->keptFreedWords): records of
  // [address, position of that free in the log, n, n words]. A block's copy is read only if
  // it was taken at the block's first free in the log: at a later one the address held
  // another block.
  const uint64_t *kept = NULL;
  uint64_t keptWordCount = 0, keptDropped = 0;
  uint32_t *firstFree = NULL;  // per block: 1 + the log position of its first free, or 0
  uint64_t firstFreeBytes = round_page(count * sizeof(uint32_t));
  if (status == 0 && options && options->freedSinceListing && options->keptFreedWords) {
    keptWordCount = options->keptFreedWords(&kept, &keptDropped);
    if (kept && keptWordCount) firstFree = map_bytes(firstFreeBytes);
  }
  if (status == 0 && options && options->freedSinceListing) {
    const uint64_t *freed = NULL;
    uint64_t frees = 0, logged = options->freedSinceListing(&freed, &frees);
    for (uint64_t i = 0; freed && i < logged; i++) {
      if (freed[i] - ix.minStart >= ix.maxEnd - ix.minStart) continue;  // no block there
      int64_t b = index_find(&ix, freed[i]);
      if (b >= 0 && block_start(&ix.blocks[b]) == freed[i] && !(sc.marks[b] & CPerfHeapScan_MarkFreed)) {
        sc.marks[b] |= CPerfHeapScan_MarkFreed;
        if (firstFree) firstFree[b] = (uint32_t)i + 1;  // the log holds fewer than 2^32
        result->freedBlocks++;
      }
    }
    result->freesNotLogged = frees > logged ? frees - logged : 0;
  }
  if (firstFree && result->freedBlocks) {
    uint64_t bytes = round_page(count * sizeof(uint64_t *));
    sc.keptWords = map_bytes(bytes);
    for (uint64_t at = 0; sc.keptWords && at + 3 <= keptWordCount;) {
      uint64_t address = kept[at], logIndex = kept[at + 1], words = kept[at + 2];
      if (at + 3 + words > keptWordCount) break;
      if (address - ix.minStart < ix.maxEnd - ix.minStart) {
        int64_t b = index_find(&ix, address);
        if (b >= 0 && block_start(&ix.blocks[b]) == address && firstFree[b] == logIndex + 1) {
          sc.keptWords[b] = &kept[at + 2];
          result->keptFreedBlocks++;
        }
      }
      at += 3 + words;
    }
    if (sc.keptWords && !result->keptFreedBlocks) {
      munmap(sc.keptWords, bytes);
      sc.keptWords = NULL;
    }
  }
  if (firstFree) munmap(firstFree, firstFreeBytes);
  if (status == 0) {
    classify_blocks(&sc, &maps);
    Range *seg = segments.data;
    for (uint64_t i = 0; i < segments.count; i++) {
      // Only what is readable now (a segment may be partly unmapped or PROT_NONE).
      for (uint64_t a = seg[i].start; a < seg[i].end;) {
        const Mapping *m = find_mapping(&maps, a);
        if (!m) {
          a = (a + 4096) & ~4095ull;
          continue;
        }
        uint64_t end = m->end < seg[i].end ? m->end : seg[i].end;
        if (m->readable) {
          scan_root_range(&sc, a, end, CPerfHeapScan_MarkGlobalRoot, seg[i].startsOnly);
          result->rootBytes += end - a;
        }
        a = end;
      }
    }
    if (scanThreads) {
      int32_t *tid = tids.data;
      for (uint64_t i = 0; i < tids.count; i++) {
        Slot *s = &g_slots[i];
        int32_t state = atomic_load(&s->state);
        if (state == 3) continue;
        uint64_t sp, stackPointer = 0;
        int skipStack = skipCallerStack && tid[i] == callerTid;
        if (skipStack) {
          if (state == 1) result->threadCount++;
        } else if (state == 1) {
          scan_words(&sc, s->regs, NGREG, CPerfHeapScan_MarkStackRoot, 0, NULL, 0);
          // The 128 bytes below the stack pointer (the red zone) hold a leaf function's
          // locals, but only while that function runs: a thread blocked in a system call
          // (an idle Dispatch worker, any waiting thread) has there whatever the frames it
          // returned from left, such as the last object a finished block allocated. Scanned,
          // such a word kept a leaked cycle made on a worker reachable in about 1 run of 10.
          stackPointer = s->rsp;
          sp = s->inSyscall ? s->rsp : s->rsp - 128;
          result->threadCount++;
        } else {
          // Did not park (signal blocked?): its stack is scanned from the stack pointer
          // of the system call it is blocked in, if any, else not at all.
          sp = stackPointer = blocked_thread_sp(tid[i]);
          if (sp == 0) {
            result->unscannedThreads++;
            continue;
          }
          result->blockedThreads++;  // in a system call: no live red zone (see above)
        }
        const Mapping *m = NULL;
        if (!skipStack) {
          m = find_mapping(&maps, stackPointer);
          if (!m || !m->readable) continue;
          if (sp < m->start) sp = m->start;
          scan_root_range(&sc, sp, m->end, CPerfHeapScan_MarkStackRoot, 0);
          result->rootBytes += m->end - sp;
        } else {
          m = find_mapping(&maps, s->tp);  // its TLS lies on its stack unless it is the main thread
          if (m && m->readable) {
            // A thread started on a stack of its own has its TCB at the very top of it, and
            // its first frames right below its TLS, closer than glibc's static TLS size
            // (measured: 8 KiB of it, and the frames began 7.9 KiB below the TCB). Those
            // frames are the caller's, skipped: a clean-stack thread says where they end.
            uint64_t from = s->tp - m->start > tlsBelow ? s->tp - tlsBelow : m->start;
            if (callerFramesTop > from && callerFramesTop <= s->tp) from = callerFramesTop;
            uint64_t to = m->end - s->tp > tlsAbove ? s->tp + tlsAbove : m->end;
            scan_root_range(&sc, from, to, CPerfHeapScan_MarkStackRoot, 0);
            result->rootBytes += to - from;
          }
          continue;
        }
        // The main thread's TCB and static TLS are not on its stack (ld.so allocates them):
        // its pthread_setspecific values and TLS variables are roots too.
        const Mapping *t = state == 1 ? find_mapping(&maps, s->tp) : NULL;
        if (t && t != m && t->readable) {
          uint64_t from = s->tp - t->start > tlsBelow ? s->tp - tlsBelow : t->start;
          uint64_t to = t->end - s->tp > tlsAbove ? s->tp + tlsAbove : t->end;
          scan_root_range(&sc, from, to, CPerfHeapScan_MarkStackRoot, 0);
          result->rootBytes += to - from;
        }
      }
    }
    scan_blocks(&sc);
    for (uint64_t i = 0; i < count; i++)
      if (!(sc.marks[i] & CPerfHeapScan_MarkUnreadable)) result->scannedBytes += block_size(&blocks[i]);
    if (sc.failed) {
      status = ENOMEM;
      result->call = "mremap (edges)";
    }
  }

done:
  if (installed) {
    atomic_store(&g_release, 1);
    syscall(SYS_futex, &g_release, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    // Wait until every parked thread has left the handler before unmapping its slot.
    for (uint64_t i = 0; i < tids.count; i++) {
      int32_t state = atomic_load(&g_slots[i].state);
      if (state == 0) restore = 0;  // may still arrive: keep the handler (it returns at once)
      while (state == 1) {
        sched_yield();
        state = atomic_load(&g_slots[i].state);
      }
    }
    atomic_store(&g_active, 0);
    atomic_store(&g_slotCount, 0);
    if (restore) sigaction(sig, &g_previous, NULL);
  }
  result->extraBytes = round_page(count) + ix.tableBytes + ix.largeBytes + slotBytes + result->edgeStart.bytes +
                       round_page(sc.edgeTargets.capacity * sizeof(uint32_t)) * 2 +
                       round_page(maps.capacity * sizeof(Mapping));
  if (g_slots && restore) {
    munmap(g_slots, slotBytes);
    g_slots = NULL;
  }
  if (sc.keptWords) munmap(sc.keptWords, round_page(count * sizeof(uint64_t *)));
  vec_free(&maps);
  vec_free(&segments);
  vec_free(&tids);
  index_free(&ix);
  result->staleWords = sc.staleWords;
  result->layoutWords = sc.layoutWords;
  result->taskSlabWords = sc.taskSlabWords;
  result->edgeCount = sc.edgeTargets.count;
  result->edgeTargets = (CPerfHeapScan_Column){sc.edgeTargets.data, sc.edgeTargets.count,
                                               round_page(sc.edgeTargets.capacity * sizeof(uint32_t))};
  result->edgeOffsets = (CPerfHeapScan_Column){sc.edgeOffsets.data, sc.edgeOffsets.count,
                                               round_page(sc.edgeOffsets.capacity * sizeof(uint32_t))};
  result->error = status;
  return status;
}

__attribute__((noinline)) void CPerfHeapScan_scrubStack(uint32_t bytes) {
  if (bytes > 262144) bytes = 262144;
  volatile char *buf = __builtin_alloca(bytes);
  memset((char *)buf, 0, bytes);
  __asm__ volatile("" ::"r"(buf) : "memory");
}

typedef struct {
  const CPerfHeapScan_Block *blocks;
  uint64_t count;
  const CPerfHeapScan_Options *options;
  CPerfHeapScan_Result *result;
  int32_t callerTid;
  int32_t status;
  uint64_t callerFramesTop;  // the caller's first frame ends here (0: unknown)
} ScanJob;

// Set by a clean-stack thread (CPerfHeapScan_runOnCleanStack): where its frames begin.
static __thread uint64_t t_framesTop;

static void *scan_thread(void *argument) {
  ScanJob *job = argument;
  job->status = scan_impl(job->blocks, job->count, job->options, job->callerTid, job->callerFramesTop, job->result);
  return NULL;
}

int32_t CPerfHeapScan_scan(const CPerfHeapScan_Block *blocks, uint64_t count, const CPerfHeapScan_Options *options,
                           CPerfHeapScan_Result *result) {
  memset(result, 0, sizeof *result);
  // The calling thread is scanned like every other one (parked by the signal while it
  // waits for the scanner thread, or from its system call's stack pointer): its
  // callee-saved registers go to this frame first, and the stack below is scrubbed so
  // stale slots of functions that already returned do not look like roots.
  ucontext_t registers;
  memset(&registers, 0, sizeof registers);
  getcontext(&registers);
  CPerfHeapScan_scrubStack(32768);
  // The scan runs on its own thread, whose stack is not a root: nothing the scanner
  // computes can keep a block alive.
  ScanJob job = {blocks, count, options, result, (int32_t)syscall(SYS_gettid), 0, t_framesTop};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  int error = pthread_create(&thread, &attr, scan_thread, &job);
  pthread_attr_destroy(&attr);
  if (error != 0) {
    result->error = error;
    result->call = "pthread_create";
    return error;
  }
  pthread_join(thread, NULL);
  __asm__ volatile("" ::"r"(&registers) : "memory");
  return job.status;
}

void CPerfHeapScan_freeColumn(CPerfHeapScan_Column *column) {
  if (column->data) munmap(column->data, column->bytes);
  column->data = NULL;
  column->count = column->bytes = 0;
}

void CPerfHeapScan_freeMarks(uint8_t *marks, uint64_t blockCount) {
  if (marks) munmap(marks, round_page(blockCount));
}

void CPerfHeapScan_freeResult(CPerfHeapScan_Result *result) {
  CPerfHeapScan_freeColumn(&result->edgeStart);
  CPerfHeapScan_freeColumn(&result->edgeTargets);
  CPerfHeapScan_freeColumn(&result->edgeOffsets);
  CPerfHeapScan_freeMarks(result->marks, result->blockCount);
  if (result->rootSources) munmap(result->rootSources, round_page(result->blockCount * sizeof(uint64_t)));
  result->rootSources = NULL;
  result->marks = NULL;
}

typedef struct {
  void (*body)(void *);
  void *context;
} CleanJob;

static void *clean_thread(void *argument) {
  CleanJob *job = argument;
  // This frame's CFA: above it only glibc's thread start, then the TLS.
  t_framesTop = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16;
  job->body(job->context);
  return NULL;
}

int32_t CPerfHeapScan_runOnCleanStack(void (*body)(void *), void *context, uint64_t stackBytes) {
  if (stackBytes < (1u << 20)) stackBytes = 1u << 20;
  stackBytes = round_page(stackBytes);
  // A fresh anonymous mapping is zero-filled (glibc's cached thread stacks are not).
  void *stack = map_bytes(stackBytes);
  if (!stack) return errno;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, stackBytes);
  CleanJob job = {body, context};
  pthread_t thread;
  int error = pthread_create(&thread, &attr, clean_thread, &job);
  pthread_attr_destroy(&attr);
  if (error == 0) pthread_join(thread, NULL);
  munmap(stack, stackBytes);
  return error;
}

// What the heap scanner's C files share (not part of the module's public header).
#ifndef CPERFHEAPSCAN_INTERNAL_H
#define CPERFHEAPSCAN_INTERNAL_H

#include "heap_scan_namespace.h"

#include "CPerfHeapScan.h"
#include "CPerfSupportInline.h"

#include <stdint.h>
#include <sys/mman.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <ucontext.h>

#define HEAPSCAN_HIDDEN __attribute__((visibility("hidden")))

#define PAGE_SHIFT   12
#define LARGE_PAGES  16  // blocks touching more pages than this go to the large list
#define POINTER_MASK 0x0000FFFFFFFFFFFFull

// MARK: - mmap'd buffers (buffers.c): the scan runs while other threads are parked,
// maybe inside malloc, so it never calls malloc.

static inline void *map_bytes(uint64_t bytes) { return CPerfSupport_mapAnonymous(bytes, false); }

static inline uint64_t round_page(uint64_t bytes) { return CPerfSupport_pageRound(bytes); }

typedef struct {
  void *data;
  uint64_t count, capacity, elementSize;
} Vec;

HEAPSCAN_HIDDEN int vec_push(Vec *v, const void *element);
HEAPSCAN_HIDDEN void vec_free(Vec *v);

/// vec_push for a column of 32-bit values, inline while there is room: a big heap has an
/// edge per block, and a call with a copy of a size known only at run time was a tenth of
/// its scan.
static inline int vec_push_u32(Vec *v, uint32_t value) {
  if (v->count == v->capacity) return vec_push(v, &value);
  ((uint32_t *)v->data)[v->count++] = value;
  return 0;
}

// MARK: - Mappings (buffers.c)

typedef struct {
  uint64_t start, end;
  uint32_t readable, writable;
  uint32_t anonymous;  // no file behind it ([heap], malloc arenas, stacks)
} Mapping;

/// Reads /proc/self/maps into an mmap'd array of Mapping (no malloc).
HEAPSCAN_HIDDEN int read_maps(Vec *out);
HEAPSCAN_HIDDEN const Mapping *find_mapping(const Vec *maps, uint64_t address);

// MARK: - Block index (block_index.c)

typedef struct {
  uint64_t page;    // page number + 1 (0: empty slot)
  uint32_t lo, hi;  // blocks overlapping the page: [lo, hi]
} PageEntry;

typedef struct {
  const CPerfHeapScan_Block *blocks;
  uint64_t count;
  uint64_t minStart, maxEnd;
  PageEntry *table;
  uint64_t mask;  // table capacity - 1
  uint64_t tableBytes;
  uint32_t *large;  // indices of large blocks, ascending
  uint64_t largeCount, largeBytes;
} Index;

// A block's fields, read from the listing's words.
static inline uint64_t block_start(const CPerfHeapScan_Block *b) { return b->addressWord & POINTER_MASK; }
static inline uint64_t block_size(const CPerfHeapScan_Block *b) {
  uint64_t size = b->sizeWord & CPerfHeapScan_BlockSizeMask;
  return size > UINT32_MAX ? UINT32_MAX : size;  // only the first 4 GiB are scanned
}
static inline uint64_t block_end(const CPerfHeapScan_Block *b) {
  uint64_t size = block_size(b);
  return block_start(b) + (size ? size : 1);
}
static inline uint64_t block_metadata(const CPerfHeapScan_Block *b) { return b->metadataWord & POINTER_MASK; }
static inline int block_is_swift_object(const CPerfHeapScan_Block *b) {
  return (b->sizeWord & CPerfHeapScan_BlockObjectBit) && block_metadata(b) != 0;
}
static inline int block_is_holder(const CPerfHeapScan_Block *b) {
  return (b->sizeWord & CPerfHeapScan_BlockHolderBit) != 0;
}

static inline uint64_t hash_page(uint64_t page) {
  page ^= page >> 29;
  page *= 0xbf58476d1ce4e5b9ull;
  page ^= page >> 32;
  return page;
}

HEAPSCAN_HIDDEN int index_build(Index *ix, const CPerfHeapScan_Block *blocks, uint64_t count);
HEAPSCAN_HIDDEN void index_free(Index *ix);

/// The block containing `v` (already masked), or -1.
static inline int64_t index_find(const Index *ix, uint64_t v) {
  const CPerfHeapScan_Block *blocks = ix->blocks;
  uint64_t p = (v >> PAGE_SHIFT) + 1;
  uint64_t h = hash_page(p - 1) & ix->mask;
  for (;;) {
    const PageEntry *e = &ix->table[h];
    if (e->page == p) {
      // Last block in [lo, hi] with start <= v.
      int64_t lo = e->lo, hi = e->hi, found = -1;
      while (lo <= hi) {
        int64_t mid = (lo + hi) >> 1;
        if (block_start(&blocks[mid]) <= v) {
          found = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      if (found >= 0 && v < block_end(&blocks[found])) return found;
      break;
    }
    if (e->page == 0) break;
    h = (h + 1) & ix->mask;
  }
  if (ix->largeCount) {
    int64_t lo = 0, hi = (int64_t)ix->largeCount - 1, found = -1;
    while (lo <= hi) {
      int64_t mid = (lo + hi) >> 1;
      if (block_start(&blocks[ix->large[mid]]) <= v) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found >= 0 && v < block_end(&blocks[ix->large[found]])) return ix->large[found];
  }
  return -1;
}

/// index_find, trying first the block `last` found and the one after it: the words of an
/// array or a list name blocks allocated one after another, which lie side by side in
/// memory, so one compare mostly replaces the page probe and the search within the page.
static inline int64_t index_find_near(const Index *ix, uint64_t v, int64_t last) {
  if (last >= 0) {
    const CPerfHeapScan_Block *blocks = ix->blocks;
    for (uint64_t b = (uint64_t)last; b <= (uint64_t)last + 1 && b < ix->count; b++) {
      // Blocks overlapping (marked not to scan) could hold v too: only a clean hit is taken.
      if (block_start(&blocks[b]) <= v && v < block_end(&blocks[b]) &&
          (b + 1 == ix->count || block_start(&blocks[b + 1]) > v) && (b == 0 || block_end(&blocks[b - 1]) <= v))
        return (int64_t)b;
    }
  }
  return index_find(ix, v);
}

// MARK: - Roots outside threads (roots.c)

typedef struct {
  uint64_t start, end;
  /// Only words naming a block's first byte are references here (glibc's own data).
  int startsOnly;
} Range;

/// dl_iterate_phdr callback: each image's writable PT_LOAD segments as Ranges into the Vec.
HEAPSCAN_HIDDEN int collect_segment(struct dl_phdr_info *info, size_t size, void *data);
HEAPSCAN_HIDDEN uint64_t static_tls_bytes(void);

// MARK: - Thread parking (parking.c)

typedef struct {
  _Atomic int32_t tid;
  _Atomic int32_t state;  // 0 signalled, 1 parked, 2 resumed
  uint64_t rsp;
  uint64_t tp;        // thread pointer (%fs:0): the thread's TCB, extern HEAPSCAN_HIDDEN TLS just below it
  int32_t inSyscall;  // parked at a system call instruction (blocked in it, or about to restart it)
  uint64_t regs[NGREG];
} Slot;

extern HEAPSCAN_HIDDEN Slot *g_slots;
extern HEAPSCAN_HIDDEN _Atomic uint64_t g_slotCount;
extern HEAPSCAN_HIDDEN _Atomic int32_t g_release;
extern HEAPSCAN_HIDDEN _Atomic int32_t g_active;
extern HEAPSCAN_HIDDEN struct sigaction g_previous;

HEAPSCAN_HIDDEN void park_handler(int sig, siginfo_t *info, void *context);
/// Thread ids of the process except the caller, into an mmap'd array.
HEAPSCAN_HIDDEN int list_threads(Vec *tids, int32_t self);
/// The stack pointer of a thread blocked in a system call (from /proc/self/task/T/syscall),
/// or 0.
HEAPSCAN_HIDDEN uint64_t blocked_thread_sp(int32_t tid);

// MARK: - Marking and edges (marking.c)

typedef struct {
  const Index *ix;
  uint8_t *marks;
  uint64_t *rootSources;         // optional: the first root word that marked each block
  Vec edgeTargets, edgeOffsets;  // uint32_t each, by source block in order
  uint32_t *edgeStart;           // per block, then the edge count (blockCount + 1)
  int failed;
  const CPerfHeapScan_Snapshot *snapshot;  // optional
  uint64_t snapshotCursor;                 // range of the last lookup
  uint64_t staleWords;
  const CPerfHeapScan_Layout *layouts;  // optional, sorted by metadata
  uint64_t layoutCount;
  const uint64_t *layoutBits;
  uint64_t layoutWords;
  const CPerfHeapScan_ArrayStorage *arrayStorage;  // optional, sorted by metadata
  uint64_t arrayStorageCount;
  size_t (*usableSize)(void *);
  int glibcChunks;  // glibc's malloc: the next chunk's header may lie in a block's last bytes
  const uint64_t *excludedStarts, *excludedEnds;  // the recorder's own memory: never a root
  uint64_t excludedCount;
  uint64_t taskSlabMetadata;  // optional (0): word 0 of a task allocator's slab
  uint64_t taskSlabWords;
  const uint64_t **keptWords;  // optional, per block: the copy of a freed block (count, words)
} Scanner;

/// Marks the blocks the words of [start, end) name, less the recorder's own memory.
HEAPSCAN_HIDDEN void scan_root_range(Scanner *sc, uint64_t start, uint64_t end, uint8_t mark, int startsOnly);
/// `layout` (optional) is that of the object whose words start `first` words before `words`.
HEAPSCAN_HIDDEN void scan_words(Scanner *sc, const uint64_t *words, uint64_t n, uint8_t mark, int checkSnapshot,
                                const CPerfHeapScan_Layout *layout, uint64_t first);
HEAPSCAN_HIDDEN void scan_blocks(Scanner *sc);
/// Marks blocks outside readable mappings, overlapping ones, and weak-reference side tables.
HEAPSCAN_HIDDEN void classify_blocks(Scanner *sc, const Vec *maps);

#endif

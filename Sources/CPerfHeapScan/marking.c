// Marking: which blocks the roots reach, and the edges between blocks (what the Swift
// side turns into the heap graph).
#include "heap_scan_internal.h"

#include <stddef.h>

_Static_assert(offsetof(CPerfHeapScan_Layout, metadata) == 0 && offsetof(CPerfHeapScan_ArrayStorage, metadata) == 0,
               "find_by_metadata reads an entry's metadata first");

/// The entry for `metadata` in a table sorted by metadata, each entry `stride` bytes with
/// its metadata first (the layouts, the array buffer types), or NULL.
static const void *find_by_metadata(const void *table, uint64_t count, size_t stride, uint64_t metadata) {
  uint64_t lo = 0, hi = count;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (*(const uint64_t *)((const char *)table + mid * stride) < metadata)
      lo = mid + 1;
    else
      hi = mid;
  }
  const void *entry = (const char *)table + lo * stride;
  return lo < count && *(const uint64_t *)entry == metadata ? entry : NULL;
}

/// The layout the caller gave for `metadata`'s type, if any.
static const CPerfHeapScan_Layout *layout_find(const Scanner *sc, uint64_t metadata) {
  return find_by_metadata(sc->layouts, sc->layoutCount, sizeof(CPerfHeapScan_Layout), metadata);
}

/// The layout of a Swift object's type, if the caller gave one. The last answer (for
/// `*lastMetadata`) is reused: neighbours in memory are mostly of one type, and a search
/// per object was 20 of the 245 ms a 16 M-object heap's block scan took.
static inline const CPerfHeapScan_Layout *layout_of(const Scanner *sc, const CPerfHeapScan_Block *blk,
                                                    const uint64_t *words, uint64_t n, uint64_t *lastMetadata,
                                                    const CPerfHeapScan_Layout **last) {
  if (!sc->layoutCount || !block_is_swift_object(blk) || block_size(blk) < 16 || n < 1) return NULL;
  uint64_t metadata = words[0];
  if (metadata != *lastMetadata) {
    *lastMetadata = metadata;
    *last = layout_find(sc, metadata);
  }
  return *last;
}

/// Whether word `w` of an object with layout `layout` cannot hold a reference.
static inline int layout_excludes(const Scanner *sc, const CPerfHeapScan_Layout *layout, uint64_t w) {
  if (!layout || w >= layout->words) return 0;
  uint64_t bit = (uint64_t)layout->firstBit + w;
  return (int)((sc->layoutBits[bit >> 6] >> (bit & 63)) & 1);
}

/// Whether the word at `address` still holds `value`, the value it held when the
/// snapshot was taken (and not a pointer into a block live then: see CPerfHeapScan.h).
static inline int unchanged_since_snapshot(Scanner *sc, uint64_t address, uint64_t value) {
  const CPerfHeapScan_Snapshot *snap = sc->snapshot;
  if (!snap || snap->rangeCount == 0 || value == 0) return 0;
  const CPerfHeapScan_SnapshotRange *r = snap->ranges;
  uint64_t i = sc->snapshotCursor;
  if (i >= snap->rangeCount || address < r[i].start || address >= r[i].end) {
    int64_t lo = 0, hi = (int64_t)snap->rangeCount - 1, found = -1;
    while (lo <= hi) {
      int64_t mid = (lo + hi) >> 1;
      if (r[mid].start <= address) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found < 0 || address >= r[found].end) return 0;
    i = (uint64_t)found;
    sc->snapshotCursor = i;
  }
  return snap->words[r[i].firstWord + (address - r[i].start) / 8] == value;
}

/// A root word naming a block allocated after the snapshot, unchanged since the
/// snapshot: written before that block existed, so it is a stale copy of an address
/// that was reused, not a reference.
static inline int stale_root_word(Scanner *sc, uint64_t address, uint64_t raw, int64_t target) {
  if (!sc->snapshot || block_is_holder(&sc->ix->blocks[target])) return 0;
  if (!unchanged_since_snapshot(sc, address, raw)) return 0;
  sc->staleWords++;
  return 1;
}

/// Whether `v`, inside block `b`'s requested bytes, names the block: its start, or one of its
/// own bytes. glibc puts the next chunk's header right after a chunk's usable bytes, and a
/// request of 16k + 1 to 16k + 8 bytes gets a chunk whose next header (its first word, the
/// previous chunk's size, unused while this one is in use) lies in the block's last 1-8
/// bytes: at start + max(16, (size + 7) & ~15). A word naming that header is malloc's name for
/// the next chunk (arenas, bins and allocator code name chunks by their header), not a
/// pointer into this block: read as one, it kept a malloc(2500) reachable. As LeakSanitizer
/// counts a pointer into the block's requested bytes, less those malloc's next header holds.
static inline int names_block(const Scanner *sc, const CPerfHeapScan_Block *b, uint64_t v) {
  uint64_t offset = v - block_start(b), size = block_size(b);
  if (offset == 0 || !sc->glibcChunks) return 1;
  uint64_t nextHeader = (size + 7) & ~15ull;
  return offset < (nextHeader > 16 ? nextHeader : 16);
}

static void scan_root_words(Scanner *sc, uint64_t start, uint64_t end, uint8_t mark, int startsOnly) {
  const Index *ix = sc->ix;
  start = (start + 7) & ~7ull;
  end &= ~7ull;
  for (uint64_t a = start; a < end; a += 8) {
    uint64_t v = *(const volatile uint64_t *)a & POINTER_MASK;
    if (v - ix->minStart >= ix->maxEnd - ix->minStart) continue;
    int64_t b = index_find(ix, v);
    if (b < 0 || (startsOnly && v != block_start(&ix->blocks[b])) || !names_block(sc, &ix->blocks[b], v)) continue;
    if (!(sc->marks[b] & CPerfHeapScan_MarkFreed)) {
      if (sc->rootSources && !sc->rootSources[b]) sc->rootSources[b] = a;
      sc->marks[b] |= mark;
    }
  }
}

void scan_root_range(Scanner *sc, uint64_t start, uint64_t end, uint8_t mark, int startsOnly) {
  while (start < end) {
    // The first excluded range overlapping what is left cuts it.
    uint64_t cutStart = end, cutEnd = end;
    for (uint64_t i = 0; i < sc->excludedCount; i++) {
      uint64_t from = sc->excludedStarts[i] > start ? sc->excludedStarts[i] : start, to = sc->excludedEnds[i];
      if (to > start && from < cutStart) {
        cutStart = from;
        cutEnd = to;
      }
    }
    scan_root_words(sc, start, cutStart, mark, startsOnly);
    start = cutEnd;
  }
}

/// A reference to a Swift object names its start: on x86_64 a multi-payload enum keeps its
/// tag in the high spare bits (masked off here), never the low ones. Any other pointer into
/// one is no reference under ARC (bytes that only look like one, such as the rest of an old
/// pointer under a string copied over it), so heap words are not followed there. Roots
/// still are: a parked thread may hold only an interior pointer into an object its
/// caller's frame owns.
static inline int inside_swift_object(const CPerfHeapScan_Block *target, uint64_t v) {
  return block_is_swift_object(target) && v != block_start(target);
}

void scan_words(Scanner *sc, const uint64_t *words, uint64_t n, uint8_t mark, int checkSnapshot,
                const CPerfHeapScan_Layout *layout, uint64_t first) {
  const Index *ix = sc->ix;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t v = words[i] & POINTER_MASK;
    if (v - ix->minStart >= ix->maxEnd - ix->minStart) continue;
    int64_t b = index_find(ix, v);
    if (b >= 0 && !(sc->marks[b] & CPerfHeapScan_MarkFreed) && names_block(sc, &ix->blocks[b], v)) {
      if (layout_excludes(sc, layout, first + i)) {
        sc->layoutWords++;
        continue;
      }
      if (mark == CPerfHeapScan_MarkHeldByHolder && inside_swift_object(&ix->blocks[b], v)) continue;
      if (checkSnapshot && stale_root_word(sc, (uint64_t)&words[i], words[i], b)) continue;
      if (sc->rootSources && !sc->rootSources[b]) sc->rootSources[b] = (uint64_t)&words[i];
      sc->marks[b] |= mark;
    }
  }
}

/// The words of an array buffer that hold its header and live elements. Swift sizes the
/// capacity by malloc_usable_size, so elements may lie past the requested size `n` words
/// (but inside the chunk). `stride` is the element stride, 0 when unknown.
static uint64_t array_live_words(const Scanner *sc, const uint64_t *words, uint64_t n, uint64_t stride) {
  uint64_t count = words[2], capacity = words[3] >> 1;
  if (capacity == 0 || count > capacity) return n;
  uint64_t usable;
  if (sc->usableSize) {
    // Another allocator keeps no header before the block (the word there may not be mapped).
    usable = sc->usableSize((void *)words);
  } else {
    // glibc's chunk header: size | flags. The usable size is at most size - 8.
    uint64_t chunk = words[-1] & ~7ull;
    if (chunk < 48) return n;
    usable = chunk - 8;
  }
  if (usable < 40 || usable + 8 < n * 8 || usable > n * 8 + 8184) return n;  // not a plausible size
  uint64_t usableWords = usable / 8;
  // Without the stride, its upper bound: the capacity was computed from the usable size.
  if (stride == 0) stride = (usable - 32) / capacity;
  uint64_t liveWords = (32 + count * stride + 7) / 8;
  return liveWords < usableWords ? liveWords : usableWords;
}

/// Whether `metadata` is a Swift array buffer type's; *stride its element stride (0: unknown).
static int array_storage_of(const Scanner *sc, uint64_t metadata, uint64_t *stride) {
  const CPerfHeapScan_ArrayStorage *entry =
      find_by_metadata(sc->arrayStorage, sc->arrayStorageCount, sizeof(CPerfHeapScan_ArrayStorage), metadata);
  if (!entry) return 0;
  *stride = entry->stride;
  return 1;
}

/// An edge from the block being scanned.
static inline int push_edge(Scanner *sc, uint32_t target, uint32_t offset) {
  return vec_push_u32(&sc->edgeTargets, target) | vec_push_u32(&sc->edgeOffsets, offset);
}

/// Swift Concurrency's task allocator is a stack of slabs (StackAllocator.h): word 0 is a
/// fake metadata pointer, word 1 the next slab, word 2 the capacity (low half) and the
/// current offset (high half), the payload from word 4 on. Frames pushed there and popped
/// since leave their words past the current offset, and the next slabs of the chain are
/// wholly free: a word there names what a finished frame held, a block freed since whose
/// address malloc may have handed to a leaked object. When word `w` of a block of `n` words
/// starts a slab that fits in it, its free part is words [*from, *to): returns 1.
static inline int task_slab_free_part(const Scanner *sc, const uint64_t *words, uint64_t w, uint64_t n, uint64_t *from,
                                      uint64_t *to) {
  if (!sc->taskSlabMetadata || words[w] != sc->taskSlabMetadata || (w & 1) || w + 4 > n) return 0;
  uint64_t capacity = (uint32_t)words[w + 2], offset = words[w + 2] >> 32;
  if (offset > capacity || (offset & 15) || capacity / 8 > n - w - 4) return 0;
  *from = w + 4 + offset / 8;
  *to = w + 4 + capacity / 8;
  return 1;
}

/// Counts the words of a slab's free part that name a block (not followed).
static void count_task_slab_words(Scanner *sc, const uint64_t *words, uint64_t from, uint64_t to) {
  const Index *ix = sc->ix;
  for (uint64_t i = from; i < to; i++) {
    uint64_t v = words[i] & POINTER_MASK;
    if (v - ix->minStart < ix->maxEnd - ix->minStart && index_find(ix, v) >= 0) sc->taskSlabWords++;
  }
}

void scan_blocks(Scanner *sc) {
  const Index *ix = sc->ix;
  const CPerfHeapScan_Block *blocks = ix->blocks;
  uint64_t lo = ix->minStart, span = ix->maxEnd - ix->minStart;
  int64_t near = -1;  // the block the last word named
  // Neighbours in memory are mostly of one type: the last type's array lookup is reused.
  uint64_t lastMetadata = 0, lastStride = 0, layoutMetadata = 0;
  int lastIsArray = 0;
  const CPerfHeapScan_Layout *lastLayout = NULL;
  for (uint64_t i = 0; i < ix->count; i++) {
    sc->edgeStart[i] = (uint32_t)sc->edgeTargets.count;
    const CPerfHeapScan_Block *blk = &blocks[i];
    const uint64_t *words = (const uint64_t *)block_start(blk);
    uint64_t n = block_size(blk) / 8;
    // A block freed since the listing is read from the copy taken when it was freed, if
    // there is one: what it named then (see CPerfHeapScan_Options.keptFreedWords). Nothing
    // of the freed block itself is read (it may be unmapped, or another block's by now).
    int copied = (sc->marks[i] & CPerfHeapScan_MarkFreed) && sc->keptWords && sc->keptWords[i];
    if (copied) {
      n = sc->keptWords[i][0];
      words = sc->keptWords[i] + 1;
    } else if (sc->marks[i] & (CPerfHeapScan_MarkSideTable | CPerfHeapScan_MarkUnreadable | CPerfHeapScan_MarkFreed |
                               CPerfHeapScan_MarkOverlapping)) {
      continue;
    }
    int swift = block_is_swift_object(blk);
    if (swift && sc->arrayStorageCount) {
      uint64_t metadata = block_metadata(blk);
      if (metadata != lastMetadata) {
        lastMetadata = metadata;
        lastStride = 0;
        lastIsArray = array_storage_of(sc, metadata, &lastStride);
      }
      // A copy holds the requested size only, and no allocator header before it.
      if (lastIsArray && n >= 4 && !copied) n = array_live_words(sc, words, n, lastStride);
    }
    // A slab older than the recording (a task started before it) is read up to its
    // current offset. Slabs inside a holder are read whole.
    uint64_t slabFrom, slabTo;
    if (n >= 4 && task_slab_free_part(sc, words, 0, n, &slabFrom, &slabTo) && block_is_holder(blk)) {
      count_task_slab_words(sc, words, slabFrom, slabTo);
      scan_words(sc, words, slabFrom, CPerfHeapScan_MarkHeldByHolder, 0, NULL, 0);
      continue;
    }
    if (block_is_holder(blk)) {
      // Word 1 of an object is its refcount: never a pointer worth following here.
      // Only a Swift object's words are checked against the snapshot: its references are
      // counted, so a word naming freed memory is never a reference that will be rewritten
      // with the same address, only bytes that were copied in (padding, unused payload). A C
      // structure may keep a dangling pointer and later store a new block that got the
      // same address into it.
      if (swift && n >= 2) {
        const CPerfHeapScan_Layout *layout = layout_of(sc, blk, words, n, &layoutMetadata, &lastLayout);
        scan_words(sc, words, 1, CPerfHeapScan_MarkHeldByHolder, 1, NULL, 0);
        scan_words(sc, words + 2, n - 2, CPerfHeapScan_MarkHeldByHolder, 1, layout, 2);
      } else {
        scan_words(sc, words, n, CPerfHeapScan_MarkHeldByHolder, 0, NULL, 0);
      }
      continue;
    }
    const CPerfHeapScan_Layout *layout = swift ? layout_of(sc, blk, words, n, &layoutMetadata, &lastLayout) : NULL;
    // The free parts of the task allocator's slabs met so far and still ahead: a task's
    // first slab lies inside the task's allocation, which may lie inside its parent's slab
    // (`async let`), so they nest. Innermost last.
    uint64_t skipFrom[4], skipTo[4];
    int skips = 0;
    for (uint64_t w = 0; w < n; w++) {
      while (skips > 0 && w >= skipFrom[skips - 1]) {
        skips--;
        if (w < skipTo[skips]) {
          count_task_slab_words(sc, words, w, skipTo[skips]);
          w = skipTo[skips];
        }
      }
      if (w >= n) break;
      if (swift && w == 1) {
        uint64_t rc = words[1];
        if ((rc >> 62) == 3) {
          int64_t st = index_find(ix, (rc & ~(3ull << 62)) << 3);
          if (st >= 0 && (sc->marks[st] & CPerfHeapScan_MarkSideTable)) {
            if (push_edge(sc, (uint32_t)st, 8u | CPerfHeapScan_EdgeSideTable) != 0) sc->failed = 1;
          }
        }
        continue;
      }
      uint64_t v = words[w] & POINTER_MASK;
      if (v - lo >= span) {
        uint64_t from, to;
        if (skips < 4 && task_slab_free_part(sc, words, w, n, &from, &to) &&
            (skips == 0 || to <= skipFrom[skips - 1])) {
          skipFrom[skips] = from;
          skipTo[skips] = to;
          skips++;
        }
        continue;
      }
      int64_t b = index_find_near(ix, v, near);
      if (b < 0) continue;
      near = b;
      if (sc->marks[b] & CPerfHeapScan_MarkFreed) continue;
      if (layout_excludes(sc, layout, w)) {
        sc->layoutWords++;
        continue;
      }
      uint32_t flags = 0;
      if (v != block_start(&blocks[b])) {
        if ((uint64_t)b == i) continue;  // interior self-pointer (e.g. dictionary storage)
        if (inside_swift_object(&blocks[b], v) || !names_block(sc, &blocks[b], v)) continue;
        flags |= CPerfHeapScan_EdgeInterior;
      }
      if (sc->marks[b] & CPerfHeapScan_MarkSideTable) flags |= CPerfHeapScan_EdgeWeak;
      uint64_t off = w * 8;
      if (off > CPerfHeapScan_EdgeOffsetMask) off = CPerfHeapScan_EdgeOffsetMask;
      if (push_edge(sc, (uint32_t)b, (uint32_t)off | flags) != 0) sc->failed = 1;
    }
  }
  sc->edgeStart[ix->count] = (uint32_t)sc->edgeTargets.count;
}

void classify_blocks(Scanner *sc, const Vec *maps) {
  const Index *ix = sc->ix;
  const CPerfHeapScan_Block *blocks = ix->blocks;
  const Mapping *m = maps->data;
  uint64_t mi = 0, previousEnd = 0;
  for (uint64_t i = 0; i < ix->count; i++) {
    uint64_t start = block_start(&blocks[i]), size = block_size(&blocks[i]), end = start + size;
    // Overlapping blocks (should not happen) would break the index: the later ones are not
    // scanned.
    if (i > 0 && start < previousEnd) sc->marks[i] |= CPerfHeapScan_MarkOverlapping;
    previousEnd = end;
    while (mi < maps->count && m[mi].end <= start) mi++;
    // Adjacent readable mappings may hold one block (e.g. a heap extended in place).
    uint64_t j = mi, covered = start;
    while (j < maps->count && m[j].start <= covered && m[j].readable && covered < end) covered = m[j++].end;
    if (covered < end && size > 0) sc->marks[i] |= CPerfHeapScan_MarkUnreadable;
  }
  for (uint64_t i = 0; i < ix->count; i++) {
    if (!block_is_swift_object(&blocks[i]) || block_size(&blocks[i]) < 16) continue;
    if (sc->marks[i] & CPerfHeapScan_MarkUnreadable) continue;
    uint64_t object = block_start(&blocks[i]);
    uint64_t rc = ((const uint64_t *)object)[1];
    if ((rc >> 62) != 3) continue;
    uint64_t table = (rc & ~(3ull << 62)) << 3;
    int64_t st = index_find(ix, table);
    if (st < 0 || block_start(&blocks[st]) != table || block_size(&blocks[st]) < 8) continue;
    if (sc->marks[st] & CPerfHeapScan_MarkUnreadable) continue;
    if (*(const uint64_t *)table == object) sc->marks[st] |= CPerfHeapScan_MarkSideTable;
  }
}

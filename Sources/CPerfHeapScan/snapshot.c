// The snapshot taken when a recording starts: what each live block held then, and which
// addresses named memory no live block held (dangling), so the scan can tell a stale
// copy of a reused address from a reference.
#include "heap_scan_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static void sort_pairs(uint64_t *pairs, uint64_t n) {
  // Heapsort by address: no allocation (qsort may call malloc).
  for (uint64_t start = n / 2; start-- > 0;) {
    for (uint64_t root = start;;) {
      uint64_t child = 2 * root + 1;
      if (child >= n) break;
      if (child + 1 < n && pairs[2 * (child + 1)] > pairs[2 * child]) child++;
      if (pairs[2 * root] >= pairs[2 * child]) break;
      uint64_t a = pairs[2 * root], b = pairs[2 * root + 1];
      pairs[2 * root] = pairs[2 * child];
      pairs[2 * root + 1] = pairs[2 * child + 1];
      pairs[2 * child] = a;
      pairs[2 * child + 1] = b;
      root = child;
    }
  }
  for (uint64_t end = n; end-- > 1;) {
    uint64_t a = pairs[0], b = pairs[1];
    pairs[0] = pairs[2 * end];
    pairs[1] = pairs[2 * end + 1];
    pairs[2 * end] = a;
    pairs[2 * end + 1] = b;
    for (uint64_t root = 0;;) {
      uint64_t child = 2 * root + 1;
      if (child >= end) break;
      if (child + 1 < end && pairs[2 * (child + 1)] > pairs[2 * child]) child++;
      if (pairs[2 * root] >= pairs[2 * child]) break;
      a = pairs[2 * root];
      b = pairs[2 * root + 1];
      pairs[2 * root] = pairs[2 * child];
      pairs[2 * root + 1] = pairs[2 * child + 1];
      pairs[2 * child] = a;
      pairs[2 * child + 1] = b;
      root = child;
    }
  }
}

static void sort_words(uint64_t *a, uint64_t n) {
  // Heapsort: no allocation.
  for (uint64_t start = n / 2; start-- > 0;) {
    for (uint64_t root = start;;) {
      uint64_t child = 2 * root + 1;
      if (child >= n) break;
      if (child + 1 < n && a[child + 1] > a[child]) child++;
      if (a[root] >= a[child]) break;
      uint64_t t = a[root];
      a[root] = a[child];
      a[child] = t;
      root = child;
    }
  }
  for (uint64_t end = n; end-- > 1;) {
    uint64_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    for (uint64_t root = 0;;) {
      uint64_t child = 2 * root + 1;
      if (child >= end) break;
      if (child + 1 < end && a[child + 1] > a[child]) child++;
      if (a[root] >= a[child]) break;
      t = a[root];
      a[root] = a[child];
      a[child] = t;
      root = child;
    }
  }
}

static int push_if_dangling(Vec *out, const Vec *maps, const Index *ix, uint64_t word) {
  uint64_t v = word & POINTER_MASK;
  if (v < 4096) return 0;
  const Mapping *m = find_mapping(maps, v);
  if (!m || !m->anonymous || !m->writable) return 0;
  if (v - ix->minStart < ix->maxEnd - ix->minStart && index_find(ix, v) >= 0) return 0;
  return vec_push(out, &v);
}

/// The values that named heap memory no live block held when the snapshot was taken:
/// dangling pointers of the blocks (their words, as snapshotted) and of the writable image
/// segments. Sorted, unique, into out->dangling.
static int32_t collect_dangling(const uint64_t *words, uint64_t wordCount, const Index *ix,
                                CPerfHeapScan_Snapshot *out) {
  Vec maps = {0}, segments = {.elementSize = sizeof(Range)}, values = {.elementSize = sizeof(uint64_t)};
  int32_t status = 0;
  if (read_maps(&maps) != 0) {
    status = errno ? errno : EIO;
    goto done;
  }
  for (uint64_t w = 0; w < wordCount && status == 0; w++) {
    if (words[w] && push_if_dangling(&values, &maps, ix, words[w]) != 0) status = ENOMEM;
  }
  dl_iterate_phdr(collect_segment, &segments);
  const Range *seg = segments.data;
  for (uint64_t i = 0; i < segments.count && status == 0; i++) {
    // malloc's bins and caches name free memory by design: not dangling references.
    if (seg[i].startsOnly) continue;
    for (uint64_t a = seg[i].start & ~7ull; a + 8 <= seg[i].end && status == 0;) {
      const Mapping *m = find_mapping(&maps, a);
      if (!m || !m->readable) {
        a = (a + 4096) & ~4095ull;
        continue;
      }
      uint64_t end = m->end < seg[i].end ? m->end : seg[i].end;
      for (; a + 8 <= end; a += 8) {
        uint64_t v = *(const volatile uint64_t *)a;
        if (v && push_if_dangling(&values, &maps, ix, v) != 0) {
          status = ENOMEM;
          break;
        }
      }
      a = end;
    }
  }
  if (status == 0 && values.count) {
    uint64_t *v = values.data, n = 0;
    sort_words(v, values.count);
    for (uint64_t i = 0; i < values.count; i++) {
      if (n == 0 || v[n - 1] != v[i]) v[n++] = v[i];
    }
    out->dangling = v;
    out->danglingCount = n;
    out->danglingBytes = round_page(values.capacity * sizeof(uint64_t));
    values.data = NULL;
  }
done:
  vec_free(&maps);
  vec_free(&segments);
  vec_free(&values);
  return status;
}

int32_t CPerfHeapScan_takeSnapshot(uint64_t (*liveBlocks)(uint64_t *pairs, uint64_t capacity),
                                   CPerfHeapScan_Snapshot *out) {
  memset(out, 0, sizeof *out);
  uint64_t *pairs = NULL, pairBytes = 0, n = 0;
  for (int attempt = 0; attempt < 4; attempt++) {
    uint64_t want = liveBlocks(NULL, 0);
    uint64_t capacity = want + want / 4 + 1024;
    pairBytes = round_page(capacity * 16);
    pairs = map_bytes(pairBytes);
    if (!pairs) return errno;
    n = liveBlocks(pairs, capacity);
    if (n <= capacity) break;
    munmap(pairs, pairBytes);
    pairs = NULL;
  }
  if (!pairs) return EAGAIN;
  sort_pairs(pairs, n);

  // The live blocks, for "did this word point into a block then?".
  uint64_t blockBytes = round_page((n ? n : 1) * sizeof(CPerfHeapScan_Block));
  CPerfHeapScan_Block *blocks = map_bytes(blockBytes);
  Vec ranges = {.elementSize = sizeof(CPerfHeapScan_SnapshotRange)};
  Index ix = {0};
  int32_t status = 0;
  if (!blocks) {
    status = errno;
    goto done;
  }
  uint64_t kept = 0, lastEnd = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t start = pairs[2 * i], size = pairs[2 * i + 1];
    if (start < lastEnd) continue;  // overlapping (should not happen): keep the first
    size = size > UINT32_MAX ? UINT32_MAX : size;
    blocks[kept] = (CPerfHeapScan_Block){.addressWord = start, .sizeWord = size};
    lastEnd = start + size;
    kept++;
  }
  if (index_build(&ix, blocks, kept) != 0) {
    status = errno ? errno : ENOMEM;
    goto done;
  }
  // What is snapshotted: every live block.
  uint64_t totalWords = 0;
  for (uint64_t i = 0; i < kept; i++) {
    uint64_t start = block_start(&blocks[i]);
    CPerfHeapScan_SnapshotRange r = {start, start + (block_size(&blocks[i]) & ~7ull), totalWords};
    if (r.end <= r.start) continue;
    if (vec_push(&ranges, &r) != 0) {
      status = ENOMEM;
      goto done;
    }
    totalWords += (r.end - r.start) / 8;
  }
  CPerfHeapScan_SnapshotRange *rs = ranges.data;  // sorted: the blocks are
  uint64_t wordBytes = round_page((totalWords ? totalWords : 1) * 8);
  uint64_t *words = map_bytes(wordBytes);
  if (!words) {
    status = errno;
    goto done;
  }
  // process_vm_readv: a block freed and unmapped meanwhile reads as a failure, not a fault.
  pid_t pid = getpid();
  for (uint64_t i = 0; i < ranges.count; i++) {
    uint64_t *dest = words + rs[i].firstWord;
    uint64_t bytes = rs[i].end - rs[i].start;
    struct iovec local = {dest, bytes}, remote = {(void *)(uintptr_t)rs[i].start, bytes};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) got = 0;
    if ((uint64_t)got < bytes) memset((char *)dest + got, 0, bytes - (uint64_t)got);
    // A word that points into a live block may be a reference that is later rewritten
    // with the same address (the block freed, a new one allocated there): not trusted.
    for (uint64_t w = 0; w < bytes / 8; w++) {
      uint64_t v = dest[w] & POINTER_MASK;
      if (v - ix.minStart < ix.maxEnd - ix.minStart && index_find(&ix, v) >= 0) dest[w] = 0;
    }
  }
  status = collect_dangling(words, totalWords, &ix, out);
  if (status != 0) goto done;
  out->ranges = ranges.data;
  out->rangeCount = ranges.count;
  out->rangeBytes = round_page(ranges.capacity * sizeof(CPerfHeapScan_SnapshotRange));
  out->words = words;
  out->wordBytes = wordBytes;
  ranges.data = NULL;

done:
  index_free(&ix);
  vec_free(&ranges);
  if (blocks) munmap(blocks, blockBytes);
  munmap(pairs, pairBytes);
  return status;
}

void CPerfHeapScan_freeSnapshot(CPerfHeapScan_Snapshot *snapshot) {
  if (snapshot->ranges) munmap(snapshot->ranges, snapshot->rangeBytes);
  if (snapshot->words) munmap(snapshot->words, snapshot->wordBytes);
  if (snapshot->dangling) munmap(snapshot->dangling, snapshot->danglingBytes);
  memset(snapshot, 0, sizeof *snapshot);
}

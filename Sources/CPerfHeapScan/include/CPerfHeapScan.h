// CPerfHeapScan: the leaks instrument's conservative heap-graph scanner (Linux x86_64).
//
// Given the live blocks of an allocation recording (sorted by address, non-overlapping),
// CPerfHeapScan_scan runs on a scanner thread of its own and stops every other thread of
// the process, the caller included (a signal parks each one in a handler that saved its
// registers), scans the roots (writable PT_LOAD
// segments of every loaded image, every thread's stack from its stack pointer to the top
// of its stack mapping, including static TLS, and every thread's registers), then every
// live block's words, and resumes the threads. A word is a pointer to a block when, with
// its top 16 bits masked, it falls inside the block (interior pointers count, except that a
// heap word pointing inside a Swift object rather than at its start is no reference: ARC
// references name the object's start).
//
// Swift awareness: Swift objects (CPerfHeapScan_BlockObjectBit) skip word 1 (refcount).
// When that word reads bit63|bit62|(sideTable >> 3) and sideTable is a live block whose
// word 0 points back at the object, that block is the object's weak-reference side
// table: it is not scanned, edges into it are marked CPerfHeapScan_EdgeWeak and the
// object gets an edge to it flagged CPerfHeapScan_EdgeSideTable (offset 8).
//
// Nothing here calls malloc once threads are stopped: all buffers are mmap'd.
#ifndef CPERFHEAPSCAN_H
#define CPERFHEAPSCAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// A block in the words of the allocation recorder's listing (CPerfAlloc_Block), so that a
/// big heap's listing is scanned where it lies: a copy of 16 M blocks was 256 MB of fresh
/// pages and a tenth of the check. 24 bytes per block.
typedef struct CPerfHeapScan_Block {
  /// The start address in the low 48 bits (the top 16 bits are the caller's).
  uint64_t addressWord;
  /// A Swift object's metadata pointer in the low 48 bits, else 0 (top 16: the caller's).
  uint64_t metadataWord;
  /// The size in bytes (CPerfHeapScan_BlockSizeMask; only the first 4 GiB are scanned),
  /// CPerfHeapScan_BlockHolderBit and CPerfHeapScan_BlockObjectBit (top 16: the caller's).
  uint64_t sizeWord;
} CPerfHeapScan_Block;

static const uint64_t CPerfHeapScan_BlockSizeMask = (1ull << 46) - 1;
/// A holder: its words are roots (the blocks they point to get
/// CPerfHeapScan_MarkHeldByHolder) and it has no edges of its own. The leaks instrument
/// passes the blocks allocated before the recording this way (the recorder's listing flags
/// them with this bit): they cannot be reported, but whatever they hold is alive.
static const uint64_t CPerfHeapScan_BlockHolderBit = 1ull << 46;
/// With a non-zero metadata pointer: a Swift heap object (word 0 is metadata, word 1 the
/// refcount, never scanned).
static const uint64_t CPerfHeapScan_BlockObjectBit = 1ull << 47;

/// The metadata of a Swift array buffer type (header: metadata, refcount, count,
/// capacity << 1 | flag; then the elements): only the header and the first `count`
/// elements of such a block are scanned, since the spare capacity holds stale words. With
/// the element stride, the words past the last element are never read: in the chunk's
/// slack beyond the bytes asked for they are stale, and one naming a leaked object kept it
/// "reachable". Where the stride is 0 (unknown) it is bounded from above by the glibc chunk
/// size over the capacity, so no live element is skipped.
typedef struct CPerfHeapScan_ArrayStorage {
  uint64_t metadata;
  uint64_t stride;
} CPerfHeapScan_ArrayStorage;

enum {
  /// An edge offset's mask: byte offset of the pointer inside the source block.
  CPerfHeapScan_EdgeOffsetMask = 0x1FFFFFFF,
  /// The pointer does not point at the target block's first byte.
  CPerfHeapScan_EdgeInterior = 1u << 31,
  /// The target is a weak-reference side table: a weak reference, not followed.
  CPerfHeapScan_EdgeWeak = 1u << 30,
  /// The object's refcount word naming its side table (the object owns it).
  CPerfHeapScan_EdgeSideTable = 1u << 29,
};

enum {
  /// Block marks (one byte per block).
  CPerfHeapScan_MarkGlobalRoot = 1,     // pointed to from a writable image segment
  CPerfHeapScan_MarkStackRoot = 2,      // pointed to from a stack or registers
  CPerfHeapScan_MarkSideTable = 4,      // a Swift weak-reference side table
  CPerfHeapScan_MarkUnreadable = 8,     // not inside a readable mapping: not scanned
  CPerfHeapScan_MarkHeldByHolder = 16,  // pointed to from a holder (CPerfHeapScan_BlockHolderBit)
  CPerfHeapScan_MarkFreed = 32,         // freed since the listing (options->freedSinceListing):
                                        // neither scanned nor pointed to
  CPerfHeapScan_MarkOverlapping = 64,   // starts inside the block before it (should not happen):
                                        // not scanned
};

/// One snapshotted address range: words [start, end) are words[firstWord...].
typedef struct CPerfHeapScan_SnapshotRange {
  uint64_t start;
  uint64_t end;
  uint64_t firstWord;
} CPerfHeapScan_SnapshotRange;

/// The words of every live block at one moment (the start of a recording), except words
/// that pointed into a block live then (stored as 0). A word of a holder that is a Swift
/// object, still holding its snapshot value and pointing at a block allocated after the
/// snapshot, was written before that block existed: bytes copied in with a reused address
/// (a struct's padding copied from the stack), not a reference. Words that pointed into a
/// live block are left out, and C blocks and image segments are never judged this way,
/// because a reference there may be rewritten with the same address after its block was
/// freed and another allocated there.
typedef struct CPerfHeapScan_Snapshot {
  CPerfHeapScan_SnapshotRange *ranges;  // sorted by start, mmap'd
  uint64_t rangeCount;
  uint64_t rangeBytes;
  uint64_t *words;  // mmap'd
  uint64_t wordBytes;
  /// Values (top 16 bits masked) that named anonymous writable memory, but no live block,
  /// in a live block's words or a writable image segment: dangling pointers, which a
  /// block allocated later at that address would turn into false references. Sorted,
  /// unique, mmap'd; the allocation hooks keep new blocks off them
  /// (CPerfAlloc_reserveAddresses).
  uint64_t *dangling;
  uint64_t danglingCount;
  uint64_t danglingBytes;
} CPerfHeapScan_Snapshot;

/// Takes a snapshot. `liveBlocks(pairs, capacity)` writes the live blocks as (address,
/// size) pairs, up to `capacity`, and returns how many are live (CPerfAlloc's
/// CPerfAlloc_liveBlocksBeforeSession). Allocates nothing with malloc. Returns 0 or an
/// errno value; free with CPerfHeapScan_freeSnapshot either way.
int32_t CPerfHeapScan_takeSnapshot(uint64_t (*liveBlocks)(uint64_t *pairs, uint64_t capacity),
                                   CPerfHeapScan_Snapshot *out);

void CPerfHeapScan_freeSnapshot(CPerfHeapScan_Snapshot *snapshot);

/// The words of a Swift object that cannot hold a reference, by its metadata (word 0):
/// padding between stored properties and after a short one (a multi-payload enum's tag
/// byte and the seven bytes after it), number-typed properties. Bit w, counted from
/// `firstBit` in CPerfHeapScan_Options.layoutBits, set: word w is not followed (no edge,
/// and a holder's word is no root). Words from `words` on (tail-allocated elements) are
/// followed.
typedef struct CPerfHeapScan_Layout {
  uint64_t metadata;
  uint32_t firstBit;
  uint32_t words;
} CPerfHeapScan_Layout;

typedef struct CPerfHeapScan_Options {
  int32_t scanGlobals;  // scan writable PT_LOAD segments
  int32_t scanThreads;  // scan the calling thread and park+scan the others
  // 0: SIGPROF. libdispatch's worker threads block every signal but the synchronous
  // ones, SIGPROF and SIGSYS (SigBlk fffffffe3bfbea27 on this toolchain), so a real-time
  // signal would park none of them. SIGPROFs that are not the scan's (the Time
  // Profiler's timers) go to the previous handler; the previous disposition is restored
  // after the scan unless a thread never parked (its SIGPROF may still be pending).
  int32_t signalNumber;
  int32_t parkTimeoutMs;  // 0: 500
  /// Non-zero: fill result->rootSources ("why is this block alive?").
  int32_t recordRootSources;
  /// Non-zero: the calling thread's stack and registers are not roots (its TLS still is).
  /// For a caller that ran the recorded code and returned from it: what it still holds
  /// alive lives in objects (holders), not in its frames, while the frames hold stale
  /// words, and a stale word whose address was reused reads as a root.
  int32_t skipCallerStack;
  /// Optional: taken when the blocks not flagged CPerfHeapScan_BlockHolderBit did not exist
  /// yet. Words of Swift-object holders that still hold their snapshot value are not
  /// references to those blocks (counted in result->staleWords).
  const CPerfHeapScan_Snapshot *snapshot;
  /// Optional: the addresses of blocks freed since `blocks` were listed (*addresses, as
  /// many as it returns) and how many frees there were (*frees: more if its log
  /// overflowed). Called once every other thread is parked. Such a block's address may now
  /// belong to another block, whose words are not the listed block's: it is marked
  /// CPerfHeapScan_MarkFreed and left out.
  uint64_t (*freedSinceListing)(const uint64_t **addresses, uint64_t *frees);
  /// Optional: layouts sorted by metadata, and their bits (see CPerfHeapScan_Layout).
  const CPerfHeapScan_Layout *layouts;
  uint64_t layoutCount;
  const uint64_t *layoutBits;
  /// Optional: the Swift array buffer types, sorted by metadata.
  const CPerfHeapScan_ArrayStorage *arrayStorage;
  uint64_t arrayStorageCount;
  /// Optional: the usable size of a block of an allocator other than glibc (its
  /// malloc_usable_size, which must take no lock: it is called while the other threads are
  /// parked). NULL: glibc's, whose chunk header before the block is read instead.
  size_t (*usableSize)(void *);
  /// Optional: the recorder's own memory, [starts[i], ends[i]) for i < recorderMemoryCount
  /// (the Time Profiler's tables and buffers, CPerfSampler_ownMemory): never a root, in a
  /// writable segment, a thread's stack mapping or TLS alike. It holds copies of the
  /// program's registers and stack words, which keep naming blocks the program dropped.
  const uint64_t *recorderMemoryStarts;
  const uint64_t *recorderMemoryEnds;
  uint64_t recorderMemoryCount;
  /// Optional (0: none): the fake metadata pointer Swift Concurrency's task allocator
  /// (`swift::StackAllocator<..., &TaskAllocatorSlabMetadata, ...>`) puts in word 0 of each
  /// slab, at its start: then the slab's next link (+8), capacity and current offset (two
  /// 32-bit words at +16), its payload from +32. A slab is a malloc block of its own, or the
  /// first slab of a task, inside the task's allocation. Past the current offset the slab is
  /// free memory to the allocator, holding what frames popped since left there: not scanned.
  uint64_t taskSlabMetadata;
  /// Optional, with freedSinceListing: copies of blocks' words taken when they were freed
  /// after the listing (CPerfAlloc_keptFreedWords: records of [address, position of the free
  /// in freedSinceListing's log, n, n words]; returns the words they take). A block marked
  /// CPerfHeapScan_MarkFreed is scanned from the copy taken at its first free in the log
  /// (at a later one the address held another block), and nothing of the freed block itself
  /// is read: what it named when it was freed (a table moved to a block no listing holds)
  /// stays reachable, since a freed block is not judged.
  uint64_t (*keptFreedWords)(const uint64_t **words, uint64_t *dropped);
} CPerfHeapScan_Options;

/// One of a result's mmap'd arrays. The caller may take one over (and later munmap
/// `bytes` at `data`), leaving NULL in the result for CPerfHeapScan_freeResult.
typedef struct CPerfHeapScan_Column {
  uint32_t *data;
  uint64_t count;
  uint64_t bytes;  // mapped
} CPerfHeapScan_Column;

typedef struct CPerfHeapScan_Result {
  /// The edges between blocks, by source block in order (compressed rows): block n's are
  /// edgeStart[n] ..< edgeStart[n + 1] (blockCount + 1 entries) of edgeTargets (the target
  /// block) and edgeOffsets (byte offset in the source | CPerfHeapScan_Edge* flags). In the
  /// form the caller keeps them: a copy was a big heap's every edge written twice.
  CPerfHeapScan_Column edgeStart, edgeTargets, edgeOffsets;
  uint64_t edgeCount;
  uint8_t *marks;  // one per block (CPerfHeapScan_Mark*), mmap'd
  uint64_t blockCount;
  /// With options->recordRootSources: per block, the address of the first root word
  /// (stack, register save slot, image segment) that pointed into it, else 0.
  uint64_t *rootSources;
  uint32_t threadCount;       // threads parked and scanned (the caller included)
  uint32_t unscannedThreads;  // threads that did not park in time, stack not read
  /// Threads that did not park (every signal blocked, like a harness's service thread) but
  /// wait in a system call: their stack was read from its stack pointer there; their
  /// registers were not.
  uint32_t blockedThreads;
  uint64_t rootBytes;        // bytes of root ranges scanned
  uint64_t scannedBytes;     // bytes of blocks scanned
  uint64_t extraBytes;       // bytes mapped for the scan (index, output, thread slots)
  uint64_t staleWords;       // root words not followed because of options->snapshot
  uint64_t freedBlocks;      // blocks marked CPerfHeapScan_MarkFreed
  uint64_t freesNotLogged;   // frees options->freedSinceListing counted but could not give
  uint64_t layoutWords;      // words naming a block, not followed because of options->layouts
  uint64_t taskSlabWords;    // words naming a block in the free part of a task allocator's slab
  uint64_t keptFreedBlocks;  // freed blocks scanned from the copy taken when they were freed
  int32_t error;             // 0, else errno of `call`
  const char *call;
} CPerfHeapScan_Result;

/// Scans the graph. `blocks` must be sorted by start (one that starts inside the block
/// before it is marked CPerfHeapScan_MarkOverlapping and not scanned). Returns 0, or an
/// errno value with result->call naming the failing call. Always call
/// CPerfHeapScan_freeResult afterwards.
int32_t CPerfHeapScan_scan(const CPerfHeapScan_Block *blocks, uint64_t count, const CPerfHeapScan_Options *options,
                           CPerfHeapScan_Result *result);

void CPerfHeapScan_freeResult(CPerfHeapScan_Result *result);

/// Unmaps a column taken over from a result.
void CPerfHeapScan_freeColumn(CPerfHeapScan_Column *column);
/// Unmaps a result's marks taken over by the caller (result->marks set to NULL), given the
/// result's blockCount.
void CPerfHeapScan_freeMarks(uint8_t *marks, uint64_t blockCount);

/// Runs body(context) on a new thread whose stack is a fresh zero-filled mapping, and
/// waits for it. A scenario run there, then scanned, has no stale stack slots from
/// earlier work above it (a conservative scan's main source of false "reachable").
/// Returns 0 or an errno value.
int32_t CPerfHeapScan_runOnCleanStack(void (*body)(void *), void *context, uint64_t stackBytes);

/// Zeroes `bytes` of the stack below the caller's frame, so stale slots of functions
/// that already returned do not look like roots to a later scan.
void CPerfHeapScan_scrubStack(uint32_t bytes);

#ifdef __cplusplus
}
#endif

#endif

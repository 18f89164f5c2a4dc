// CPerfAlloc: the Allocations instrument's malloc interposer (Linux, glibc only).
//
// Linking this target into an executable replaces malloc, free, calloc, realloc,
// reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc and
// malloc_usable_size for every library in the process (no LD_PRELOAD). While no session
// records, the replacements only forward to the allocator the program would have called
// (CPerfAlloc_nextAllocator).
//
// One session at a time per process:
//   CPerfAlloc_start -> CPerfAlloc_markGeneration* -> CPerfAlloc_stop -> read the
//   snapshot (stats, blocks, freed, stacks, marks, timeline) -> CPerfAlloc_release.
// Only after release can a new session start.
//
// Swift objects are recognized without the runtime's _swift_allocObject hook (replacing
// it turns on the retain/release swizzling path, which crashes on Swift 6.3 Linux): a
// block whose malloc/posix_memalign was called by swift_slowAlloc from one of the
// runtime's object allocation sites (swift_allocObject and the copies inlined into it)
// is an object, and its class metadata is read from the block's first word when it is
// freed, or at stop for live blocks.
#ifndef CPERFALLOC_H
#define CPERFALLOC_H

#include "CPerfSupport.h"
#include <stddef.h>
#include <stdint.h>
// Declares the functions this target defines that <stdlib.h> does not (memalign,
// pvalloc, malloc_usable_size), so Swift code importing CPerfAlloc can call them.
#include <malloc.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum CPerfAlloc_Mode {
  /// Sizes, Swift types, generations and counts; no stacks (stackId is always 0).
  CPerfAlloc_ModeCountsOnly = 0,
  /// Also a frame-pointer stack per allocation, deduplicated in the stack table.
  CPerfAlloc_ModeFullStacks = 1,
} CPerfAlloc_Mode;

enum {
  CPerfAlloc_MinDepth = 1,
  CPerfAlloc_MaxDepth = 256,
  CPerfAlloc_DefaultDepth = 64,
  /// Generation indices are stored in 16 bits per block; later marks fail.
  CPerfAlloc_MaxMarks = 65535,
  CPerfAlloc_DefaultTimelineIntervalUs = 1000,
};

typedef struct CPerfAlloc_Config {
  int32_t mode;                 // CPerfAlloc_Mode
  int32_t maxDepth;             // CPerfAlloc_MinDepth ... CPerfAlloc_MaxDepth (fullStacks)
  uint32_t timelineIntervalUs;  // 0: CPerfAlloc_DefaultTimelineIntervalUs
  uint32_t timelineCapacity;    // points; 0: 1 << 20
} CPerfAlloc_Config;

typedef enum CPerfAlloc_ErrorCode {
  CPerfAlloc_OK = 0,
  CPerfAlloc_ErrorInvalidMode = 1,
  CPerfAlloc_ErrorInvalidDepth = 2,
  /// Another session is running (or stopped but not yet released).
  CPerfAlloc_ErrorBusy = 3,
  /// A system call failed: `call` names it, `sysErrno` holds errno.
  CPerfAlloc_ErrorSystem = 4,
  /// stop/mark called in the wrong state, or too many marks.
  CPerfAlloc_ErrorState = 5,
} CPerfAlloc_ErrorCode;

/// code: a CPerfAlloc_ErrorCode.
typedef CPerfSupport_Error CPerfAlloc_Error;

/// A block allocated while recording and still live at stop, in three words: a big heap's
/// listing holds millions (at 48 bytes a block, writing the listing of 16 M blocks took
/// 300 ms). Addresses and metadata pointers are user-space addresses, under 2^48; the
/// stack id's halves ride in their top bits. Blocks carry no thread or time: the timeline
/// and the marks have the times.
typedef struct CPerfAlloc_Block {
  /// The address (low 48 bits) and the stack id's low 16 bits (0: no stack, countsOnly,
  /// or the stack table was full).
  uint64_t addressWord;
  /// The Swift metadata pointer (low 48 bits; 0 unless a Swift object) and the stack id's
  /// high 16 bits.
  uint64_t metadataWord;
  /// The requested size (low 46 bits), CPerfAlloc_BlockPreexistingBit,
  /// CPerfAlloc_BlockObjectBit and the generation (high 16 bits: 0 before the first mark).
  uint64_t sizeWord;
} CPerfAlloc_Block;

/// CPerfAlloc_Block.sizeWord's size (the larger sizes no user space holds are clamped), then
/// its two flags.
static const uint64_t CPerfAlloc_BlockSizeMask = (1ull << 46) - 1;
/// From CPerfAlloc_liveBlocksNow: allocated before the session (tracked since
/// CPerfAlloc_trackAllBlocks).
static const uint64_t CPerfAlloc_BlockPreexistingBit = 1ull << 46;
/// The Swift runtime allocated the block for an object whose metadata pointer was read.
static const uint64_t CPerfAlloc_BlockObjectBit = 1ull << 47;

/// Blocks allocated while recording and freed before stop, aggregated by category key.
/// One entry per key per thread table: merge entries with equal keys.
typedef struct CPerfAlloc_Freed {
  /// Even: a Swift object's metadata pointer. Odd: (sizeClass << 1) | 1 for other blocks.
  /// UINT64_MAX: the aggregate table was full (stats.lostFreedKeys counts those frees).
  uint64_t key;
  uint64_t count;
  uint64_t bytes;
} CPerfAlloc_Freed;

typedef struct CPerfAlloc_Mark {
  uint32_t generation;  // the generation this mark opens (1 for the first mark)
  uint32_t reserved;
  uint64_t timestampNs;
  uint64_t liveBytes;  // tracked live heap when the mark was taken
  uint64_t liveBlocks;
} CPerfAlloc_Mark;

typedef struct CPerfAlloc_TimelinePoint {
  uint64_t timestampNs;
  uint64_t liveBytes;
} CPerfAlloc_TimelinePoint;

typedef struct CPerfAlloc_Stats {
  uint64_t startNs;
  uint64_t stopNs;
  uint64_t totalAllocations;  // blocks allocated while recording (realloc counts as one)
  uint64_t totalBytes;
  uint64_t trackedFrees;  // frees of blocks allocated while recording
  uint64_t liveBlocks;    // at stop
  uint64_t liveBytes;     // at stop
  uint64_t peakLiveBytes;
  uint64_t lostBlocks;     // allocations that could not be tracked (table mapping failed)
  uint64_t lostStacks;     // allocations whose stack did not fit in the stack table
  uint64_t lostFreedKeys;  // frees aggregated under UINT64_MAX (aggregate table full)
  uint64_t lostTimeline;   // timeline points that did not fit
  uint64_t stackCount;     // unique stacks
  uint64_t timelineCount;
  uint64_t markCount;
  uint64_t blockTableBytes;   // bytes mapped for the live-block tables at stop
  uint64_t stackTableBytes;   // bytes touched by the stack table (slots + frames)
  uint32_t swiftObjectSites;  // runtime call sites recognized as object allocations
  int32_t mode;
  uint64_t preexistingBlocks;  // at stop, tracked from process start (CPerfAlloc_trackAllBlocks)
  uint64_t preexistingBytes;
  uint32_t threadTables;  // per-thread tables of counts claimed (at most 256; handed on when a thread ends)
  uint32_t unused;
  uint64_t lostStackTotals;  // allocations counted under UINT64_MAX in the totals by stack (table full)
} CPerfAlloc_Stats;

/// Tracks every block from now on, before any session, so that the next session's
/// snapshot also lists the blocks allocated before it (CPerfAlloc_preexistingBlocks): the
/// leaks instrument scans them as holders. Those blocks count in no statistic. Called
/// from this target's constructor when the environment has PERFHARNESS_TRACK_ALL_BLOCKS=1
/// (the harness sets it for a scenario's child process; the constructor removes it from
/// the environment). Blocks that shared libraries' initializers allocated before that
/// constructor ran stay unknown. Returns 0 or CPerfAlloc_ErrorBusy / CPerfAlloc_ErrorSystem.
int32_t CPerfAlloc_trackAllBlocks(void);

/// While every block is tracked (CPerfAlloc_trackAllBlocks) and no session has started:
/// writes the live blocks as (address, size) pairs into `pairs` (up to `capacity` pairs;
/// NULL to count) and returns how many are live, which may exceed `capacity`. Allocates
/// nothing. Returns 0 in any other state.
uint64_t CPerfAlloc_liveBlocksBeforeSession(uint64_t *pairs, uint64_t capacity);

/// While a session records: writes its live blocks and the live preexisting ones
/// (flagged CPerfAlloc_BlockPreexistingBit) into `out`, up to `capacity` (NULL to count),
/// and returns how many are live, which may exceed `capacity`. `metadata` is read now.
/// Allocates nothing. Returns 0 when no session records.
uint64_t CPerfAlloc_liveBlocksNow(CPerfAlloc_Block *out, uint64_t capacity);

/// Starts a session. Returns 0, or an error code with details in *error.
int32_t CPerfAlloc_start(const CPerfAlloc_Config *config, CPerfAlloc_Error *error);

/// Opens the next generation: later allocations carry its index. Fills *mark (may be NULL).
int32_t CPerfAlloc_markGeneration(CPerfAlloc_Mark *mark);

/// Stops recording and snapshots the live blocks. After it, the accessors below read an
/// immutable snapshot until CPerfAlloc_release.
int32_t CPerfAlloc_stop(CPerfAlloc_Error *error);
/// CPerfAlloc_stop, listing the session's live blocks into the caller's `out` when they
/// fit in `capacity` (CPerfAlloc_blocks then returns `out`), else into memory of its own:
/// a caller that keeps the listing in its own array is spared a copy of it (a big heap's
/// listing is hundreds of megabytes). `out` must outlive the snapshot.
int32_t CPerfAlloc_stopInto(CPerfAlloc_Block *out, uint64_t capacity, CPerfAlloc_Error *error);
/// The size of a listing into the caller's memory from which a second thread populates its
/// pages ahead of the stop's writes (32 MiB unless set; tests set 0). Returns the previous.
uint64_t CPerfAlloc_setPopulateAheadBytes(uint64_t bytes);

/// True while a session records.
int32_t CPerfAlloc_isRecording(void);

/// While nonzero, no thread's allocations are the session's (ScenarioContext.stopRecording):
/// they are not counted, and with blocks tracked from process start (the leaks instrument)
/// they are kept as blocks from before the session, for the scan. Frees are recorded
/// throughout, so a session block freed while paused leaves the counts. Returns the
/// previous value; does nothing outside a running session.
int32_t CPerfAlloc_setPaused(int32_t paused);

/// While nonzero, the calling thread's allocations are not recorded (its frees still
/// are): the harness's own objects made while a scenario records are not the scenario's.
/// Returns the previous value, for nesting.
int32_t CPerfAlloc_setIgnoringAllocations(int32_t ignoring);

/// The allocator the malloc family forwards to: each name's next definition after the image
/// that links this target (glibc's, or one the program links or preloads, e.g. jemalloc).
typedef struct CPerfAlloc_Allocator {
  /// The file of the library that defines its malloc; NULL when unknown.
  const char *path;
  /// That library's load address.
  const void *object;
  /// 1 when it is glibc's own.
  int32_t isGlibc;
  /// The first of free, calloc, realloc, memalign and malloc_usable_size that another
  /// library defines (blocks would pass between two allocators), or NULL.
  const char *missing;
  /// Its code, where a thread inside it may hold its locks: glibc's malloc entry points, or
  /// the whole executable segment of another allocator's library; both 0 when unknown.
  uintptr_t textStart, textEnd;
} CPerfAlloc_Allocator;

/// Fills `out`.
void CPerfAlloc_nextAllocator(CPerfAlloc_Allocator *out);

/// The calling thread is ending: its table of young blocks goes to the next new thread at
/// once (the blocks in it stay tracked there), instead of waiting for the next mark to find
/// the thread gone. Called by the pthread_create hook's thread-exit destructor
/// (CPerfSampler/threads.c); what the thread still allocates afterwards is tracked without
/// a table of its own.
void CPerfAlloc_threadEnding(void);

/// What CPerfAlloc_reserveAddresses did, returned by CPerfAlloc_releaseReservedAddresses.
typedef struct CPerfAlloc_Reserved {
  uint64_t addresses;   // reserved
  uint64_t heldBlocks;  // blocks glibc returned over one of them, kept unused
  uint64_t heldBytes;
  uint64_t notAvoided;  // blocks handed out over one anyway (no room to hold more)
} CPerfAlloc_Reserved;

/// The leaks instrument's guard against dangling pointers older than the recording: while
/// a session records with every block tracked (CPerfAlloc_trackAllBlocks), no block it
/// hands out covers one of `addresses` (sorted ascending; the values are copied). A block
/// glibc returns over one of them is held aside, unrecorded and unused, and the call
/// allocates again. So a word that named freed memory when the recording started can
/// never name a block allocated later: it cannot keep a leak looking reachable. Call it
/// before CPerfAlloc_start.
void CPerfAlloc_reserveAddresses(const uint64_t *addresses, uint64_t count);
/// Frees the blocks held aside and forgets the addresses (after the leak scan).
void CPerfAlloc_releaseReservedAddresses(CPerfAlloc_Reserved *out);

/// Frees after a listing, for the leak scan: it reads the blocks of a listing (the stop's,
/// or CPerfAlloc_liveBlocksNow's) some time later, and meanwhile the harness's own analysis
/// frees some of them and glibc hands their addresses to new blocks, whose words the scan
/// would read as the listed block's. Call CPerfAlloc_watchFrees before the listing (before
/// CPerfAlloc_stop, or before CPerfAlloc_liveBlocksNow): from the listing on (CPerfAlloc_stop
/// starts the log under its locks, so it holds exactly the frees after its snapshot), every
/// free and every realloc of a block logs the block's address.
void CPerfAlloc_watchFrees(void);
/// The addresses logged so far (*addresses; returns how many) and how many frees there
/// were (*frees: more than that if the log overflowed). Allocates nothing.
uint64_t CPerfAlloc_watchedFrees(const uint64_t **addresses, uint64_t *frees);
/// Stops logging (after the scan), and keeping freed blocks' words.
void CPerfAlloc_endWatchingFrees(void);
/// While frees are watched, a block of `listing` (the stop's, in address order; it must
/// outlive the watch) that the calling thread frees from now on leaves a copy of its words
/// (at most 64 KiB, and no more than the allocator's usable size), taken before the
/// allocator's free: a table the harness's own work grows between the stop and the scan (the
/// Swift runtime's cache of type names, when the analysis names a type) moves to a block no
/// listing holds and frees the listed one, and what it named would read as leaked. Only the
/// calling thread copies (one such thread at a time), and only the scan it runs reads the
/// copies: the program's threads never touch the listing or the copies, and a block they
/// free is left out as before. Ends with CPerfAlloc_endWatchingFrees on the same thread.
void CPerfAlloc_keepFreedWords(const CPerfAlloc_Block *listing, uint64_t count);
/// The copies so far, for the scan the keeping thread runs (and waits for): records of
/// [address, position of the free in the watch log, word count n, n words] from *words,
/// back to back (returns the words they take; none while no thread keeps copies).
/// *dropped: listed blocks freed that did not fit.
uint64_t CPerfAlloc_keptFreedWords(const uint64_t **words, uint64_t *dropped);

/// Valid only between stop and release. Counts are returned through the out parameters.
void CPerfAlloc_stats(CPerfAlloc_Stats *stats);
const CPerfAlloc_Block *CPerfAlloc_blocks(uint64_t *count);
/// Gives the memory of the listed blocks before `index` back to the kernel (whole pages):
/// for a caller that has copied them, so that the two copies are not held whole together.
/// Those blocks read as zeros afterwards. Nothing for a listing in the caller's memory.
void CPerfAlloc_releaseBlocksBefore(uint64_t index);
/// Blocks allocated before the session (tracked since CPerfAlloc_trackAllBlocks) and still
/// live at stop, flagged CPerfAlloc_BlockPreexistingBit and without a stack id.
/// NULL when not tracked.
const CPerfAlloc_Block *CPerfAlloc_preexistingBlocks(uint64_t *count);
const CPerfAlloc_Freed *CPerfAlloc_freed(uint64_t *count);
/// Full stacks only: every allocation while recording (freed or not) by stack, for the
/// total-bytes views and pprof's alloc_objects/alloc_space. `key` is the stack id (see
/// CPerfAlloc_stackFrames), UINT64_MAX for allocations whose stack found no room
/// (stats.lostStackTotals). One entry per stack per internal table: merge equal keys.
const CPerfAlloc_Freed *CPerfAlloc_allocationsByStack(uint64_t *count);
const CPerfAlloc_Mark *CPerfAlloc_marks(uint64_t *count);
const CPerfAlloc_TimelinePoint *CPerfAlloc_timeline(uint64_t *count);
/// Leaf first: frames[0] is the return address in malloc's caller. NULL for id 0 or an
/// unknown id. Readable while recording too.
const uint64_t *CPerfAlloc_stackFrames(uint32_t stackId, uint32_t *depth);

/// Unmaps every table; a new session may start afterwards.
void CPerfAlloc_release(void);

/// Power-of-two size classes: 0 for <= 16 bytes, c for (16 << (c-1)) < size <= (16 << c).
uint32_t CPerfAlloc_sizeClass(uint64_t size);

/// The kernel thread id of the calling thread.
int32_t CPerfAlloc_gettid(void);

#ifdef __cplusplus
}
#endif

#endif

// The stack table: every distinct allocation stack once, by id, in a lock-free hash table
// over an append-only arena of frames.
#ifndef CPERFALLOC_STACK_TABLE_H
#define CPERFALLOC_STACK_TABLE_H

#include "alloc_internal.h"

// MARK: - Stack table
//
// Lock-free open addressing (inserts also happen inside a thread table's busy section, which is what
// makes stop and fork see a quiescent table). Frames live in an append-only arena.

#define STACK_SLOTS        (1u << 20)
#define STACK_ARENA_FRAMES (64ull << 20)
#define STACK_BUSY         1ull

typedef struct StackSlot {
  _Atomic uint64_t hash;  // 0 empty, 1 being written, else the stack's hash (>= 2)
  uint32_t offset;        // in frames
  uint32_t depth;
} StackSlot;
_Static_assert(sizeof(StackSlot) == 16, "stack slot layout");

extern ALLOC_HIDDEN StackSlot *g_stackSlots;
extern ALLOC_HIDDEN uint64_t *g_stackArena;
extern ALLOC_HIDDEN _Atomic uint64_t g_stackArenaUsed;
extern ALLOC_HIDDEN _Atomic uint64_t g_stackCount;
extern ALLOC_HIDDEN _Atomic uint64_t g_lostStacks;

// `partial` is the rotate-xor of the frames, accumulated by the walk (stackHashStep).
static inline uint64_t stackHashStep(uint64_t h, uint64_t frame) { return ((h << 7) | (h >> 57)) ^ frame; }

ALLOC_HIDDEN uint32_t stackIntern(const uint64_t *frames, uint32_t depth, uint64_t partial);

#endif

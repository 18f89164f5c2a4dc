#ifndef HEAP_SCAN_CASES_H
#define HEAP_SCAN_CASES_H
#include <stdint.h>

// Threads in the states the leak scan must read right, for the leaks corpus tests.

/// Starts a thread that keeps `word` only in its red zone (64 bytes below its stack
/// pointer; no register, no other copy) and blocks in read(2) on a pipe: the shape of an
/// idle Dispatch worker whose finished block left the last object it made below its stack
/// pointer. Returns once the thread is blocked in the system call, or NULL on failure.
void *_Nullable HeapScanCases_blockWithWordInRedZone(uint64_t word);

/// Wakes the thread `handle` names and joins it. Returns 0 on success.
int HeapScanCases_release(void *_Nullable handle);

/// How many 8-byte words of the loaded images' writable segments (their data and bss: what
/// the leak scan reads as global roots) hold `value`.
uint64_t HeapScanCases_globalWordsEqualTo(uint64_t value);

/// Writes `word` into a global of this image's data (0 clears it): a root the scan reads.
void HeapScanCases_setGlobalWord(uint64_t word);

/// Writes `word` into a section named .rodata of this image's writable segment (0 clears it).
void HeapScanCases_setRodataWord(uint64_t word);

#endif

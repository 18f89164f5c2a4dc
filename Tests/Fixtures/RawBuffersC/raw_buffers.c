// Heap buffers a C program loses, for the leak scan's tests (RawBufferLeakTests,
// scripts/raw-buffer-leaks.sh). Not a package target: the tests build it with Debian's cc
// and the flags under test (-O2, where gcc omits frame pointers and keeps data in rbp;
// -O2 -fomit-frame-pointer), as a program and, with -DRAW_BUFFERS_LIBRARY -shared -fPIC,
// as a library that a scenario loads before it records.
//   raw-buffers SHAPE COUNT SIZE [ROUNDS]
// Allocates COUNT blocks of SIZE bytes, fills each and loses it, then spins ROUNDS rounds
// (default 20,000,000; the Time Profiler samples it) and exits. SHAPE: where the program
// last held each block's address:
//   plain: nowhere but the loop's own registers (the compiler's choice);
//   rbp:   in rbp while the next block is allocated, and the last one while the program
//          prints and spins, as gcc keeps data in rbp when it omits frame pointers;
//   rbx:   the same in rbx, a register no frame-pointer walk reads.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void fill(unsigned char *block, size_t size, int value) {
  memset(block, value, size);
  __asm__ volatile("" ::"r"(block) : "memory");
}

__attribute__((noinline)) static unsigned long spin(unsigned long rounds) {
  unsigned long x = 1;
  for (unsigned long i = 0; i < rounds; i++) x = x * 6364136223846793005UL + i;
  return x;
}

__attribute__((noinline)) static unsigned long losePlain(int count, size_t size, unsigned long rounds) {
  for (int i = 0; i < count; i++) fill(malloc(size), size, i + 1);
  return spin(rounds);
}

// The block's address is moved into the named register after each fill and kept there
// (the empty asm says the register is read and written) across the next malloc and the spin.
#define LOSE_KEPT_IN(name, reg)                                                                       \
  __attribute__((noinline)) static unsigned long name(int count, size_t size, unsigned long rounds) { \
    register unsigned char *kept __asm__(reg) = NULL;                                                 \
    for (int i = 0; i < count; i++) {                                                                 \
      unsigned char *block = malloc(size);                                                            \
      fill(block, size, i + 1);                                                                       \
      kept = block;                                                                                   \
      __asm__ volatile("" : "+r"(kept));                                                              \
    }                                                                                                 \
    printf("lost %d blocks of %zu bytes\n", count, size);                                             \
    fflush(stdout);                                                                                   \
    unsigned long result = spin(rounds);                                                              \
    __asm__ volatile("" : "+r"(kept));                                                                \
    return result;                                                                                    \
  }
LOSE_KEPT_IN(loseKeptInRbp, "rbp")
LOSE_KEPT_IN(loseKeptInRbx, "rbx")

/// Loses `count` blocks of `size` bytes as `shape` says; -1 for an unknown shape.
long RawBuffers_lose(const char *shape, int count, size_t size, unsigned long rounds) {
  if (!strcmp(shape, "plain")) return (long)(losePlain(count, size, rounds) & 1);
  if (!strcmp(shape, "rbp")) return (long)(loseKeptInRbp(count, size, rounds) & 1);
  if (!strcmp(shape, "rbx")) return (long)(loseKeptInRbx(count, size, rounds) & 1);
  return -1;
}

#ifndef RAW_BUFFERS_LIBRARY
int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: raw-buffers plain|rbp|rbx COUNT SIZE [ROUNDS]\n");
    return 64;
  }
  unsigned long rounds = argc > 4 ? strtoul(argv[4], NULL, 10) : 20000000UL;
  long result = RawBuffers_lose(argv[1], atoi(argv[2]), (size_t)atol(argv[3]), rounds);
  if (result < 0) {
    fprintf(stderr, "unknown shape %s\n", argv[1]);
    return 64;
  }
  printf("%ld\n", result);
  return 0;
}
#endif

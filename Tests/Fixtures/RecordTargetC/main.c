// An ordinary C program for `perfharness record`'s tests: it keeps a growing list, leaks
// blocks it loses the pointer to, marks generations through the optional perfharness_mark
// (declared weak: without the harness it is never called), and spends its CPU in one
// function.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void perfharness_mark(const char *label) __attribute__((weak));

struct node {
  struct node *next;
  char payload[240];
};

// Globals with external linkage, and a volatile sink: an optimizer may drop a malloc whose
// block nobody can observe, and release builds did.
struct node *g_list;
void *volatile g_sink;

__attribute__((noinline)) static void growList(int count) {
  for (int i = 0; i < count; i++) {
    struct node *n = malloc(sizeof *n);
    memset(n->payload, i, sizeof n->payload);
    n->next = g_list;
    g_list = n;
  }
}

__attribute__((noinline)) static void leakBlocks(int count) {
  for (int i = 0; i < count; i++) {
    char *lost = malloc(100);
    memset(lost, 1, 100);
    // Published, then the only pointer to it is overwritten.
    g_sink = lost;
  }
  g_sink = NULL;
}

__attribute__((noinline)) static unsigned long spin(unsigned long rounds) {
  unsigned long x = 1;
  for (unsigned long i = 0; i < rounds; i++) x = x * 6364136223846793005UL + i;
  return x;
}

int main(void) {
  for (int generation = 0; generation < 3; generation++) {
    growList(100);
    if (perfharness_mark) perfharness_mark(generation == 0 ? "first" : generation == 1 ? "second" : "third");
  }
  leakBlocks(7);
  printf("%lu\n", spin(300000000UL) & 1);
  return 0;
}

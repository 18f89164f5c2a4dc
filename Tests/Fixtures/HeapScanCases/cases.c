#define _GNU_SOURCE
#include "HeapScanCases.h"

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  pthread_t thread;
  int fds[2];
  volatile int32_t tid;
  char byte;
} Blocked;

// Where the word waits for the thread: cleared by the thread before it blocks.
static volatile uint64_t g_word;

static void *blockedThread(void *argument) {
  Blocked *blocked = argument;
  blocked->tid = (int32_t)syscall(SYS_gettid);
  long result;
  // The word goes from the cell into the red zone through rax, which the system call number
  // then overwrites: the red zone holds the only copy while the thread waits.
  __asm__ volatile(
      "movq (%[cell]), %%rax\n\t"
      "movq %%rax, -64(%%rsp)\n\t"
      "movq $0, (%[cell])\n\t"
      "xorl %%eax, %%eax\n\t"  // SYS_read
      "syscall\n\t"
      : "=&a"(result)
      : [cell] "r"(&g_word), "D"((long)blocked->fds[0]), "S"(&blocked->byte), "d"(1L)
      : "rcx", "r11", "memory");
  return (void *)result;
}

// Whether /proc says the thread waits in read(2) (system call 0).
static int inRead(int32_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[8] = {0};
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  return n >= 2 && text[0] == '0' && text[1] == ' ';
}

void *HeapScanCases_blockWithWordInRedZone(uint64_t word) {
  Blocked *blocked = calloc(1, sizeof *blocked);
  if (!blocked || pipe2(blocked->fds, O_CLOEXEC) != 0) {
    free(blocked);
    return NULL;
  }
  g_word = word;
  if (pthread_create(&blocked->thread, NULL, blockedThread, blocked) != 0) {
    g_word = 0;
    close(blocked->fds[0]);
    close(blocked->fds[1]);
    free(blocked);
    return NULL;
  }
  for (int tries = 0; tries < 5000 && !(blocked->tid && g_word == 0 && inRead(blocked->tid)); tries++) {
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  return blocked;
}

int HeapScanCases_release(void *handle) {
  Blocked *blocked = handle;
  if (!blocked) return -1;
  char byte = 1;
  if (write(blocked->fds[1], &byte, 1) != 1) return -1;
  pthread_join(blocked->thread, NULL);
  close(blocked->fds[0]);
  close(blocked->fds[1]);
  free(blocked);
  return 0;
}

typedef struct {
  uint64_t value, found;
} WordSearch;

static int searchSegments(struct dl_phdr_info *info, size_t size, void *context) {
  (void)size;
  WordSearch *search = context;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *header = &info->dlpi_phdr[i];
    if (header->p_type != PT_LOAD || !(header->p_flags & PF_W)) continue;
    uint64_t start = (info->dlpi_addr + header->p_vaddr + 7) & ~7ull;
    uint64_t end = info->dlpi_addr + header->p_vaddr + header->p_memsz;
    for (uint64_t a = start; a + 8 <= end; a += 8) {
      if (*(const volatile uint64_t *)a == search->value) search->found++;
    }
  }
  return 0;
}

uint64_t HeapScanCases_globalWordsEqualTo(uint64_t value) {
  WordSearch search = {value, 0};
  dl_iterate_phdr(searchSegments, &search);
  return search.found;
}

static volatile uint64_t g_globalWord;

void HeapScanCases_setGlobalWord(uint64_t word) { g_globalWord = word; }

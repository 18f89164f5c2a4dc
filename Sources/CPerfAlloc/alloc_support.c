// The /proc/self/maps reader behind the stack walk's bounds; the other shared primitives
// are inline in alloc_support.h.
#include "alloc_support.h"

static uint64_t parseHex(const char **cursor) {
  uint64_t value = 0;
  const char *p = *cursor;
  for (;; p++) {
    char c = *p;
    if (c >= '0' && c <= '9') value = value * 16 + (uint64_t)(c - '0');
    else if (c >= 'a' && c <= 'f') value = value * 16 + (uint64_t)(c - 'a' + 10);
    else break;
  }
  *cursor = p;
  return value;
}

// The mapping that holds `sp`, read from /proc/self/maps with raw syscalls: no malloc,
// no stdio lock, no pthread lock (pthread_getattr_np takes the thread's lock and
// reallocs, so it could deadlock if the hooked malloc came from inside it).
ALLOC_HIDDEN void lookUpStackBounds(uintptr_t sp) {
  t_stackHi = 1;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buffer[4096];
  size_t have = 0;
  for (;;) {
    ssize_t got = read(fd, buffer + have, sizeof(buffer) - 1 - have);
    if (got <= 0) break;
    have += (size_t)got;
    buffer[have] = 0;
    char *line = buffer;
    char *newline;
    while ((newline = memchr(line, '\n', have - (size_t)(line - buffer)))) {
      const char *p = line;
      uint64_t start = parseHex(&p);
      if (*p == '-') {
        p++;
        uint64_t end = parseHex(&p);
        if (sp >= start && sp < end) {
          // The main thread's [stack] grows down: allow up to 1 GiB below its top.
          bool mainStack = memmem(line, (size_t)(newline - line), "[stack]", 7) != NULL;
          t_stackLo = mainStack ? (end > (1ull << 30) ? end - (1ull << 30) : 0) : start;
          t_stackHi = end;
          close(fd);
          return;
        }
      }
      line = newline + 1;
    }
    size_t rest = have - (size_t)(line - buffer);
    memmove(buffer, line, rest);
    have = rest;
    if (have >= sizeof(buffer) - 1) have = 0;  // an absurdly long line: drop it
  }
  close(fd);
}

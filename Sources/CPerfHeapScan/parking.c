// Thread parking: every other thread waits in a signal handler, its registers saved,
// while the scan reads the heap and the stacks.
#include "heap_scan_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "CPerfSupport.h"

Slot *g_slots;
_Atomic uint64_t g_slotCount;
_Atomic int32_t g_release;
_Atomic int32_t g_active;
struct sigaction g_previous;

void park_handler(int sig, siginfo_t *info, void *context) {
  int savedErrno = errno;
  if (!atomic_load(&g_active)) {
    CPerfSupport_forwardSignal(&g_previous, sig, info, context);
    errno = savedErrno;
    return;
  }
  int32_t tid = (int32_t)syscall(SYS_gettid);
  uint64_t n = atomic_load(&g_slotCount);
  Slot *slot = NULL;
  for (uint64_t i = 0; i < n; i++) {
    if (atomic_load(&g_slots[i].tid) == tid) {
      slot = &g_slots[i];
      break;
    }
  }
  if (!slot || atomic_load(&slot->state) != 0) {
    CPerfSupport_forwardSignal(&g_previous, sig, info, context);
    errno = savedErrno;
    return;
  }
  ucontext_t *uc = context;
  for (int r = 0; r < NGREG; r++) slot->regs[r] = (uint64_t)uc->uc_mcontext.gregs[r];
  slot->rsp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
  // A signal that interrupts a blocking system call leaves the PC right after the syscall
  // instruction (0f 05), or on it when the call will be restarted.
  const uint8_t *pc = (const uint8_t *)uc->uc_mcontext.gregs[REG_RIP];
  slot->inSyscall =
      (pc[0] == 0x0f && pc[1] == 0x05) || (((uint64_t)pc & 4095) >= 2 && pc[-2] == 0x0f && pc[-1] == 0x05);
  uint64_t tp;
  __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
  slot->tp = tp;
  atomic_store(&slot->state, 1);
  while (!atomic_load(&g_release)) {
    syscall(SYS_futex, &g_release, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  }
  atomic_store(&slot->state, 2);
  errno = savedErrno;
}

int list_threads(Vec *tids, int32_t self) {
  tids->elementSize = sizeof(int32_t);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long pos = 0; pos < n;) {
      struct dirent64 *d = (struct dirent64 *)(buf + pos);
      pos += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      int32_t tid = (int32_t)strtol(d->d_name, NULL, 10);
      if (tid != self) vec_push(tids, &tid);
    }
  }
  syscall(SYS_close, fd);
  return 0;
}

uint64_t blocked_thread_sp(int32_t tid) {
  char path[64] = "/proc/self/task/";
  char digits[16];
  int len = 0;
  for (int32_t t = tid; t > 0; t /= 10) digits[len++] = (char)('0' + t % 10);
  size_t p = strlen(path);
  while (len > 0) path[p++] = digits[--len];
  memcpy(path + p, "/syscall", 9);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[256];
  ssize_t n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  if (buf[0] < '0' || buf[0] > '9') return 0;  // "running"
  // "nr a1 a2 a3 a4 a5 a6 sp pc": the 8th field.
  char *s = buf;
  for (int field = 0; field < 7; field++) {
    while (*s && *s != ' ') s++;
    while (*s == ' ') s++;
  }
  if (s[0] != '0' || s[1] != 'x') return 0;
  return strtoull(s, NULL, 16);
}

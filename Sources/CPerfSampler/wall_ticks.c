// Wall-clock mode without EINTR in the program.
//
// A signal handled while a thread sleeps in nanosleep, clock_nanosleep, poll, epoll_wait,
// select, sigtimedwait or a futex wait with a timeout makes that call return EINTR, with
// SA_RESTART or not (measured: per-thread CLOCK_MONOTONIC timers interrupted 199 of 200
// 1.5 ms nanosleeps). So wall-clock ticks are sent by the sampler's ticker thread, one
// thread at a time, and only where the handler cannot show: to a thread that is running,
// or blocked in a call the kernel restarts under SA_RESTART (a futex wait without a
// timeout, as mutexes, condition variables, joins and Dispatch's waits use; wait4,
// waitid). A thread blocked anywhere else is not signalled; its time is counted per thread
// as wall time that was not sampled, with the call it was in.
#include "sampler_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int open_task_file(pid_t tid, const char *name) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, name);
  return open(path, O_RDONLY | O_CLOEXEC);
}

// Reads a /proc file again from its start (the kernel regenerates it on each read).
static ssize_t reread(int fd, char *buffer, size_t size) {
  ssize_t got = pread(fd, buffer, size - 1, 0);
  if (got < 0) return got;
  buffer[got] = 0;
  return got;
}

// Whether the kernel restarts `number(arguments)` transparently after a handler installed
// with SA_RESTART (it returns ERESTARTSYS or ERESTARTNOINTR there, never EINTR).
static bool restarts(long number, const unsigned long arguments[6]) {
  switch (number) {
    case SYS_futex: {
      unsigned long command = arguments[1] & 127u;  // without FUTEX_PRIVATE_FLAG
      // FUTEX_WAIT, FUTEX_WAIT_BITSET: only without a timeout (with one: EINTR).
      if (command == 0 || command == 9) return arguments[3] == 0;
      return command == 6;  // FUTEX_LOCK_PI restarts always
    }
    case SYS_wait4:
    case SYS_waitid:
      return true;
    default:
      return false;
  }
}

WallState wall_thread_state(pid_t tid, int *statFd, int *syscallFd, int32_t *syscallNumber) {
  char text[512];
  if (*statFd < 0) *statFd = open_task_file(tid, "stat");
  if (*statFd < 0 || reread(*statFd, text, sizeof(text)) <= 0) return WALL_GONE;
  const char *close = strrchr(text, ')');
  if (!close || close[1] != ' ') return WALL_GONE;
  char state = close[2];
  if (state == 'R') return WALL_RUNNING;
  if (state == 'Z' || state == 'X') return WALL_GONE;
  // Blocked (S, D, t, ...): in which call?
  if (*syscallFd < 0) *syscallFd = open_task_file(tid, "syscall");
  if (*syscallFd < 0 || reread(*syscallFd, text, sizeof(text)) <= 0) return WALL_BLOCKED_UNSAFE;
  if (strncmp(text, "running", 7) == 0) return WALL_RUNNING;  // woke meanwhile
  char *end;
  long number = strtol(text, &end, 10);
  unsigned long arguments[6] = {0};
  for (int i = 0; i < 6; i++) arguments[i] = strtoul(end, &end, 16);
  *syscallNumber = (int32_t)number;
  if (number < 0) return WALL_BLOCKED_UNSAFE;  // blocked outside a system call (stopped)
  return restarts(number, arguments) ? WALL_BLOCKED_SAFE : WALL_BLOCKED_UNSAFE;
}

bool wall_signal(pid_t tid, uint64_t cookie, uint32_t weightNs) {
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  info.si_signo = SIGPROF;
  info.si_code = SI_QUEUE;  // a process may queue any negative code to its own threads
  info.si_value.sival_ptr = (void *)(uintptr_t)cookie;
  info.si_uid = weightNs;  // the time this tick stands for, read back by the handler
  return syscall(SYS_rt_tgsigqueueinfo, getpid(), tid, SIGPROF, &info) == 0;
}

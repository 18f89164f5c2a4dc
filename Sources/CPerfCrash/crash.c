// The crash handler behind CPerfCrash.h. Everything the handler does is async-signal-safe
// (atomics, sem_post, clock_gettime, nanosleep, sigaction, tgkill): the signalled thread
// may hold malloc's lock or the recorder's, so the handler itself allocates nothing and
// every wait it makes is bounded.
#include "CPerfCrash.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { Armed = 0, Signalled = 1, Disarmed = 2, Idle = 3 };

static const int k_fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT};
// The harness passes a Ctrl-C or SIGTERM on to the scenario's process group: the run so far
// is reported, then the signal goes on to its previous owner (by default, the end).
static const int k_interrupts[] = {SIGINT, SIGTERM};
enum {
  FatalCount = sizeof k_fatal / sizeof k_fatal[0],
  InterruptCount = sizeof k_interrupts / sizeof k_interrupts[0],
  HandledMax = FatalCount + InterruptCount + 1
};

static int g_signals[HandledMax];
static int g_signalCount;
static struct sigaction g_previous[HandledMax];
static int g_stopSignal;
static int64_t g_handlerWaitMs;
static sem_t g_wake;
static _Atomic int g_state = Idle;
static _Atomic int g_signal;
static _Atomic int g_signalledTid;
static _Atomic int g_reporterTid;
static _Atomic int g_mainParked;
static _Atomic int g_done;
static _Atomic int g_restored;
static sigset_t g_savedMask;
static int32_t (*_Atomic g_startReporter)(int32_t sig, int32_t tid);

static int current_tid(void) { return (int)syscall(SYS_gettid); }

static uint64_t now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

static void wait_until_done(int64_t timeoutMs) {
  uint64_t deadline = now_ms() + (uint64_t)timeoutMs;
  struct timespec pause = {0, 1000000};
  while (!atomic_load(&g_done) && now_ms() < deadline) nanosleep(&pause, NULL);
}

static void restore_previous(void) {
  if (atomic_exchange(&g_restored, 1)) return;
  for (int i = 0; i < g_signalCount; i++) sigaction(g_signals[i], &g_previous[i], NULL);
}

// A fault the kernel raised for the instruction itself happens again when the handler
// returns, now in the previous owner's hands; anything else (abort's raise, int3, a
// kill) has to be sent again.
static int refaults(int sig, const siginfo_t *info) {
  if (info->si_code <= 0) return 0;
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE;
}

static void handler(int sig, siginfo_t *info, void *context) {
  (void)context;  // SA_SIGINFO's signature: the reporter reads the stack itself
  int savedErrno = errno;
  int tid = current_tid();
  int isMain = tid == getpid();
  if (tid != atomic_load(&g_reporterTid)) {
    int expected = Armed;
    if (atomic_compare_exchange_strong(&g_state, &expected, Signalled)) {
      atomic_store(&g_signal, sig);
      atomic_store(&g_signalledTid, tid);
      if (isMain) atomic_store(&g_mainParked, 1);
      int32_t (*start)(int32_t, int32_t) = atomic_load(&g_startReporter);
      int waits = !start || atomic_load(&g_reporterTid) != 0 || start(sig, tid) == 0;
      sem_post(&g_wake);
      if (waits) wait_until_done(g_handlerWaitMs);
    } else if (expected == Signalled) {
      // Another thread's signal is being reported: stay out of the recording's way.
      if (isMain) atomic_store(&g_mainParked, 1);
      wait_until_done(g_handlerWaitMs);
      if (sig == g_stopSignal && info->si_code <= 0) {
        // The reporter's (or the harness's) request to hold still: the first signal ends
        // the process; this one is not passed on.
        wait_until_done(g_handlerWaitMs);
        errno = savedErrno;
        return;
      }
    }
  }
  restore_previous();
  if (!refaults(sig, info)) syscall(SYS_tgkill, getpid(), tid, sig);
  errno = savedErrno;
}

int32_t CPerfCrash_arm(int32_t stopSignal, int64_t handlerWaitMs, int32_t interrupts) {
  if (atomic_load(&g_state) != Idle) return EBUSY;
  g_stopSignal = stopSignal;
  g_handlerWaitMs = handlerWaitMs;
  g_signalCount = 0;
  for (int i = 0; i < FatalCount; i++) g_signals[g_signalCount++] = k_fatal[i];
  for (int i = 0; interrupts && i < InterruptCount; i++) {
    // Ignored, it would be ignored again after the report, and the scenario would go on.
    struct sigaction current;
    if (sigaction(k_interrupts[i], NULL, &current) == 0 && current.sa_handler != SIG_IGN)
      g_signals[g_signalCount++] = k_interrupts[i];
  }
  int listed = 0;
  for (int i = 0; i < g_signalCount; i++) listed |= g_signals[i] == stopSignal;
  if (stopSignal > 0 && !listed) g_signals[g_signalCount++] = stopSignal;
  if (sem_init(&g_wake, 0, 0) != 0) return errno;
  atomic_store(&g_signal, 0);
  atomic_store(&g_signalledTid, 0);
  atomic_store(&g_reporterTid, 0);
  atomic_store(&g_mainParked, 0);
  atomic_store(&g_done, 0);
  atomic_store(&g_restored, 1);

  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = handler;
  // SA_ONSTACK: a stack overflow's SIGSEGV needs the alternate stack the Swift runtime sets up.
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  // No sample of the parked thread, and no second handled signal nested on it.
  sigaddset(&action.sa_mask, SIGPROF);
  for (int i = 0; i < g_signalCount; i++) sigaddset(&action.sa_mask, g_signals[i]);
  atomic_store(&g_state, Armed);
  for (int i = 0; i < g_signalCount; i++) {
    if (sigaction(g_signals[i], &action, &g_previous[i]) != 0) {
      int error = errno;
      for (int j = 0; j < i; j++) sigaction(g_signals[j], &g_previous[j], NULL);
      atomic_store(&g_state, Idle);
      sem_destroy(&g_wake);
      return error;
    }
  }
  atomic_store(&g_restored, 0);
  // A process spawned from a thread that blocks signals (a Dispatch worker's mask is
  // inherited through posix_spawn) would never see the harness's stop.
  sigset_t handled;
  sigemptyset(&handled);
  for (int i = 0; i < g_signalCount; i++) sigaddset(&handled, g_signals[i]);
  pthread_sigmask(SIG_UNBLOCK, &handled, &g_savedMask);
  return 0;
}

int32_t CPerfCrash_waitForSignal(int32_t *tid) {
  atomic_store(&g_reporterTid, current_tid());
  prctl(PR_SET_NAME, "crash-reporter");
  while (sem_wait(&g_wake) != 0 && errno == EINTR) {}
  if (tid) *tid = atomic_load(&g_signalledTid);
  return atomic_load(&g_state) == Signalled ? atomic_load(&g_signal) : 0;
}

int32_t CPerfCrash_parkMainThread(int64_t timeoutMs) {
  if (atomic_load(&g_mainParked)) return 1;
  if (g_stopSignal > 0) syscall(SYS_tgkill, getpid(), getpid(), g_stopSignal);
  uint64_t deadline = now_ms() + (uint64_t)timeoutMs;
  struct timespec pause = {0, 1000000};
  while (!atomic_load(&g_mainParked) && now_ms() < deadline) nanosleep(&pause, NULL);
  return atomic_load(&g_mainParked);
}

void CPerfCrash_setReporterStarter(int32_t (*start)(int32_t sig, int32_t tid)) {
  atomic_store(&g_startReporter, start);
}

void CPerfCrash_reportDone(void) { atomic_store(&g_done, 1); }

int32_t CPerfCrash_disarm(void) {
  int expected = Armed;
  int signalled = !atomic_compare_exchange_strong(&g_state, &expected, Disarmed);
  if (!signalled) sem_post(&g_wake);
  return signalled;
}

void CPerfCrash_release(void) {
  int expected = Disarmed;
  if (!atomic_compare_exchange_strong(&g_state, &expected, Idle)) return;
  restore_previous();
  pthread_sigmask(SIG_SETMASK, &g_savedMask, NULL);
  sem_destroy(&g_wake);
}

int32_t CPerfCrash_signalMainThread(int32_t pid, int32_t signal) {
  return syscall(SYS_tgkill, pid, pid, signal) == 0 ? 0 : errno;
}

// The harness's side: a Ctrl-C reaches the terminal's foreground group, which the
// scenario's own group is not; the handler passes it on (kill is async-signal-safe).
static _Atomic int g_interruption;
static _Atomic int g_childGroup;

static void interrupt_handler(int sig) {
  int savedErrno = errno;
  int expected = 0;
  atomic_compare_exchange_strong(&g_interruption, &expected, sig);
  int group = atomic_load(&g_childGroup);
  if (group > 0) kill(-group, sig);
  errno = savedErrno;
}

int32_t CPerfCrash_catchInterrupts(void) {
  static const int interrupts[] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    struct sigaction previous;
    if (sigaction(interrupts[i], NULL, &previous) != 0) return errno;
    if (previous.sa_handler == SIG_IGN) continue;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = interrupt_handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(interrupts[i], &action, NULL) != 0) return errno;
  }
  // Started from a thread that blocks them (a Dispatch worker's mask is inherited through
  // posix_spawn), the harness would never see them.
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, SIGINT);
  sigaddset(&unblock, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
  return 0;
}

int32_t CPerfCrash_interruption(void) { return atomic_load(&g_interruption); }

void CPerfCrash_setChildGroup(int32_t pgid) { atomic_store(&g_childGroup, pgid); }

int32_t CPerfCrash_becomeSubreaper(void) { return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : errno; }

int32_t CPerfCrash_dieWithParent(int32_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return -errno;
  // The parent may have died before the signal was set: then it never comes.
  return getppid() != parent ? 1 : 0;
}

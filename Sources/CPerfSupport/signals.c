// Signal chaining shared by the sampler's SIGPROF handler and the leak scan's parking
// handler: both were installed over whatever the program had.
#include "CPerfSupport.h"

bool CPerfSupport_startQuietThread(int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                                   pthread_t *thread, void *(*start)(void *), void *argument) {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  bool started = (create ? create : pthread_create)(thread, NULL, start, argument) == 0;
  pthread_sigmask(SIG_SETMASK, &previous, NULL);
  return started;
}

void CPerfSupport_forwardSignal(const struct sigaction *previous, int sig, siginfo_t *info, void *context) {
  if (previous->sa_flags & SA_SIGINFO) {
    if (previous->sa_sigaction) previous->sa_sigaction(sig, info, context);
  } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN && previous->sa_handler) {
    previous->sa_handler(sig);
  }
}

// Signal chaining shared by the sampler's SIGPROF handler and the leak scan's parking
// handler: both were installed over whatever the program had.
#include "CPerfSupport.h"

void CPerfSupport_forwardSignal(const struct sigaction *previous, int sig, siginfo_t *info, void *context) {
  if (previous->sa_flags & SA_SIGINFO) {
    if (previous->sa_sigaction) previous->sa_sigaction(sig, info, context);
  } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN && previous->sa_handler) {
    previous->sa_handler(sig);
  }
}

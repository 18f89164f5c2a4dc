// An ordinary C program for `perfharness record`'s tests: it keeps a growing list, leaks
// blocks it loses the pointer to, marks generations through the optional perfharness_mark
// (declared weak: without the harness it is never called), and spends its CPU in one
// function. It says on stdout whether glibc still ran it single-threaded at the end.
//   record-target-c [--churn SECONDS] [--thread] [--long-labels] [--dlopen]
//                   [--double-free | --underscore-exit]
//   record-target-c --alarm-exit
// --churn: first allocates and frees for SECONDS, inside malloc most of the time (its pid on
//   stderr before); --thread: first runs one thread that allocates, and lists the process's
//   threads by name once it has ended; --double-free: ends freeing a block twice (glibc
//   aborts inside free); --underscore-exit: ends with _exit(0), past the exit handlers;
//   --long-labels: marks with labels of 16 bytes or more (heap strings in Swift);
//   --dlopen: first dlopens libraries the process has already loaded (libm, libstdc++).
// --alarm-exit: allocates and frees on the main thread and one more until a SIGALRM 100 ms
//   in, whose handler calls _exit(0) (the signal lands inside malloc most of the time).
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

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

__attribute__((noinline)) static void churn(double seconds) {
  void *slots[64] = {0};
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (unsigned long i = 0;; i++) {
    if ((i & 1023) == 0) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 > seconds) break;
    }
    free(slots[i & 63]);
    slots[i & 63] = malloc(16 + i % 200);
  }
  for (int i = 0; i < 64; i++) free(slots[i]);
}

static void *allocateOnThread(void *unused) {
  (void)unused;
  g_sink = malloc(64);
  free(g_sink);
  g_sink = NULL;
  return NULL;
}

static void exitNow(int sig) {
  (void)sig;
  _exit(0);
}

static void *churnForever(void *unused) {
  (void)unused;
  void *slots[64] = {0};
  for (unsigned long i = 0;; i++) {
    free(slots[i & 63]);
    slots[i & 63] = malloc(16 + i % 200);
  }
  return NULL;
}

__attribute__((noreturn)) static void alarmExit(void) {
  signal(SIGALRM, exitNow);
  struct itimerval in100ms = {.it_value = {0, 100000}};
  setitimer(ITIMER_REAL, &in100ms, NULL);
  pthread_t thread;
  pthread_create(&thread, NULL, churnForever, NULL);
  churnForever(NULL);
  abort();
}

// Every thread of the process by name, on one line.
static void listThreads(void) {
  printf("threads:");
  DIR *tasks = opendir("/proc/self/task");
  struct dirent *entry;
  while (tasks && (entry = readdir(tasks))) {
    if (entry->d_name[0] == '.') continue;
    char path[300], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", entry->d_name);
    FILE *comm = fopen(path, "r");
    if (comm && fgets(name, sizeof name, comm)) name[strcspn(name, "\n")] = 0;
    if (comm) fclose(comm);
    printf(" %s", name);
  }
  if (tasks) closedir(tasks);
  printf("\n");
}

int main(int argc, char **argv) {
  int doubleFree = 0, underscoreExit = 0, longLabels = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--churn") && i + 1 < argc) {
      fprintf(stderr, "record-target-c ready, pid %d\n", (int)getpid());
      churn(atof(argv[++i]));
    } else if (!strcmp(argv[i], "--thread")) {
      pthread_t thread;
      if (pthread_create(&thread, NULL, allocateOnThread, NULL) == 0) pthread_join(thread, NULL);
      listThreads();
    } else if (!strcmp(argv[i], "--long-labels")) {
      longLabels = 1;
    } else if (!strcmp(argv[i], "--dlopen")) {
      // Already loaded: ld.so only adds the handle's dependency lists, which it keeps.
      const char *libraries[] = {"libm.so.6", "libstdc++.so.6", "libc.so.6"};
      for (size_t k = 0; k < sizeof libraries / sizeof libraries[0]; k++) {
        if (!dlopen(libraries[k], RTLD_NOW)) fprintf(stderr, "dlopen %s: %s\n", libraries[k], dlerror());
      }
    } else if (!strcmp(argv[i], "--double-free")) {
      doubleFree = 1;
    } else if (!strcmp(argv[i], "--alarm-exit")) {
      alarmExit();
    } else if (!strcmp(argv[i], "--underscore-exit")) {
      underscoreExit = 1;
    } else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  for (int generation = 0; generation < 3; generation++) {
    growList(100);
    static const char *const labels[2][3] = {{"first", "second", "third"},
                                             {"the first generation", "the second generation", "the third generation"}};
    if (perfharness_mark) perfharness_mark(labels[longLabels][generation]);
  }
  leakBlocks(7);
  printf("%lu\n", spin(300000000UL) & 1);
  printf("single-threaded: %d\n", (int)__libc_single_threaded);
  fflush(stdout);
  if (doubleFree) {
    char *volatile block = malloc(40);
    free(block);
    free(block);
  }
  if (underscoreExit) _exit(0);
  return 0;
}

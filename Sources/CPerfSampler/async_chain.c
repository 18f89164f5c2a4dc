// Swift concurrency's logical call chains: the executor's code range and the mappings an
// async context may be read from (discovery thread and start; the handler's side is in
// async_chain.h).
//
// On Linux x86-64 the Swift compiler does not mark async frames in the saved frame pointer
// (bit 60, as on Apple platforms): Swift 6.3's async functions set up `push rbp; push r14;
// lea 8(rsp), rbp` and no `bts $60`. What marks the one async frame a thread's stack holds
// is its caller: the runtime's job-running function, which calls the task's resume
// function (ResumeTask(ResumeContext), swiftasync). Its frame record holds the context of
// the function running now at rbp - 8 (Swift stores the projected context there), and the
// contexts of the functions awaiting it follow through Parent (offset 0), each with the
// function that resumes in its caller, ResumeParent (offset 8), as the Swift ABI's
// AsyncContext lays them out.
#include "async_chain.h"

#include <elfutils/libdwfl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

SAMPLER_HIDDEN AsyncRanges g_asyncRanges;
SAMPLER_HIDDEN _Atomic int32_t g_asyncRangesWanted;
SAMPLER_HIDDEN _Atomic uint64_t g_asyncChains;
SAMPLER_HIDDEN _Atomic uint64_t g_asyncUnread;

// swift::runJobInEstablishedExecutorContext(swift::Job*): every job the runtime runs,
// tasks' partial functions included, is called from it (swift_job_run and the global
// executor's drain call it).
static const char kExecutorSymbol[] = "_ZN5swift34runJobInEstablishedExecutorContextEPNS_3JobE";
// The runtime's thread-local running task (ActiveTask::Value, a TLS symbol: its value is
// its offset in the module's TLS block).
static const char kActiveTaskSymbol[] = "_ZN12_GLOBAL__N_110ActiveTask5ValueE";

typedef struct ExecutorSearch {
  bool concurrencyOnly;  // first pass: the Swift concurrency library; second: every module
  uint64_t low, high;
  uint64_t bias;       // the module's load bias, which names it to dl_iterate_phdr
  int64_t taskOffset;  // the running task's offset in the module's TLS block; -1 unknown
} ExecutorSearch;

static int find_in_module(Dwfl_Module *module, void **userdata, const char *name, Dwarf_Addr base, void *arg) {
  (void)userdata;
  (void)base;
  ExecutorSearch *search = arg;
  if (search->concurrencyOnly && (!name || !strstr(name, "swift_Concurrency"))) return DWARF_CB_OK;
  int symbols = dwfl_module_getsymtab(module);
  uint64_t low = 0, high = 0;
  int64_t taskOffset = -1;
  for (int i = 1; i < symbols && (!low || taskOffset < 0); i++) {
    GElf_Sym symbol;
    GElf_Addr address;
    const char *symbolName = dwfl_module_getsym_info(module, i, &symbol, &address, NULL, NULL, NULL);
    if (!symbolName) continue;
    if (symbol.st_size > 0 && strcmp(symbolName, kExecutorSymbol) == 0) {
      low = address;
      high = address + symbol.st_size;
    } else if (GELF_ST_TYPE(symbol.st_info) == STT_TLS && strcmp(symbolName, kActiveTaskSymbol) == 0) {
      taskOffset = (int64_t)symbol.st_value;
    }
  }
  if (!low) return DWARF_CB_OK;
  Dwarf_Addr bias = 0;
  (void)dwfl_module_getelf(module, &bias);
  *search = (ExecutorSearch){.low = low, .high = high, .bias = bias, .taskOffset = taskOffset};
  return DWARF_CB_ABORT;
}

static uint64_t g_foundLow, g_foundHigh;
static int64_t g_foundTaskOffset;  // of the running task's slot from the thread pointer; 0 none

typedef struct TlsSearch {
  uint64_t bias;
  uint64_t blockAddress;  // the calling thread's TLS block of that module; 0 none
  bool found;
} TlsSearch;

static int find_tls_block(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  TlsSearch *search = arg;
  if ((uint64_t)info->dlpi_addr != search->bias) return 0;
  search->found = true;
  search->blockAddress = info->dlpi_tls_modid ? (uint64_t)(uintptr_t)info->dlpi_tls_data : 0;
  return 1;
}

// The module's TLS block from this thread's pointer: the same on every thread when the
// block is in static TLS (a library loaded with the program); 0 when it is not allocated
// on this thread (loaded later, with dlopen).
static int64_t tls_block_offset(uint64_t bias) {
  TlsSearch search = {.bias = bias};
  dl_iterate_phdr(find_tls_block, &search);
  if (!search.found || !search.blockAddress) return 0;
  return (int64_t)(search.blockAddress - (uint64_t)(uintptr_t)__builtin_thread_pointer());
}

typedef struct OffsetCheck {
  uint64_t bias;
  int64_t offset;
} OffsetCheck;

static void *check_offset(void *arg) {
  OffsetCheck *check = arg;
  check->offset = tls_block_offset(check->bias);
  return NULL;
}

// Once per process: the runtime is loaded with the program (or not at all) and its code
// does not move.
static void find_executor(void) {
  static bool searched;
  if (searched) return;
  searched = true;
  static const Dwfl_Callbacks callbacks = {.find_elf = dwfl_linux_proc_find_elf,
                                           .find_debuginfo = dwfl_standard_find_debuginfo};
  Dwfl *dwfl = dwfl_begin(&callbacks);
  if (!dwfl) return;
  dwfl_report_begin(dwfl);
  int reported = dwfl_linux_proc_report(dwfl, getpid());
  if (dwfl_report_end(dwfl, NULL, NULL) == 0 && reported == 0) {
    // A program linked with -static-stdlib has the runtime in its own executable.
    ExecutorSearch search = {.concurrencyOnly = true};
    dwfl_getmodules(dwfl, find_in_module, &search, 0);
    if (!search.low) {
      search.concurrencyOnly = false;
      dwfl_getmodules(dwfl, find_in_module, &search, 0);
    }
    g_foundLow = search.low;
    g_foundHigh = search.high;
    // Static TLS is where every thread's block lies at one offset from its thread pointer:
    // checked on this thread and a fresh one (which the runtime has not touched).
    int64_t offset = search.low && search.taskOffset >= 0 ? tls_block_offset(search.bias) : 0;
    if (offset) {
      OffsetCheck check = {.bias = search.bias};
      pthread_t thread;
      if (sampler_create_unwatched(&thread, check_offset, &check) == 0) {
        pthread_join(thread, NULL);
        if (check.offset == offset) g_foundTaskOffset = offset + search.taskOffset;
      }
    }
  }
  dwfl_end(dwfl);
}

SAMPLER_HIDDEN void publish_executor(void) {
  if (g_config.physicalStacksOnly || atomic_load_explicit(&g_executorLow, memory_order_relaxed)) return;
  find_executor();
  if (!g_foundLow) return;
  atomic_store(&g_taskSlotOffset, g_foundTaskOffset);
  atomic_store(&g_executorHigh, g_foundHigh);
  atomic_store(&g_executorLow, g_foundLow);
}

SAMPLER_HIDDEN void refresh_async_ranges(bool force) {
  if (!force && !atomic_exchange(&g_asyncRangesWanted, 0)) return;
  CPerfSupport_MapsReader reader;
  if (!CPerfSupport_mapsOpen(&reader)) return;
  // Odd while rewritten: a handler that reads across it discards what it read.
  atomic_fetch_add_explicit(&g_asyncRanges.sequence, 1, memory_order_acq_rel);
  atomic_thread_fence(memory_order_release);
  uint32_t count = 0;
  CPerfSupport_Mapping mapping;
  while (CPerfSupport_mapsNext(&reader, &mapping)) {
    if (!mapping.readable || !mapping.writable) continue;
    if (count > 0 && g_asyncRanges.end[count - 1] == mapping.start) {
      g_asyncRanges.end[count - 1] = mapping.end;  // one range: a context may straddle them
    } else if (count < ASYNC_RANGES_MAX) {
      g_asyncRanges.start[count] = mapping.start;
      g_asyncRanges.end[count] = mapping.end;
      count++;
    }
  }
  CPerfSupport_mapsClose(&reader);
  g_asyncRanges.count = count;
  atomic_fetch_add_explicit(&g_asyncRanges.sequence, 1, memory_order_release);
}

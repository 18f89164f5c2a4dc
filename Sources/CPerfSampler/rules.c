// The rule cache's storage, and the rule learning that runs out of line: the TSC
// calibration, inserting a rule, and the frame-pointer rule of a caller without an FDE.
#include "rules.h"

#include "CPerfSupport.h"

#include <stdatomic.h>

// The tables (see TABLES in rules.h).
SAMPLER_HIDDEN uint8_t g_tableStorage[TABLES_SPAN + HUGE_PAGE_BYTES] __attribute__((aligned(4096)));

// Calibrates now_ns against CLOCK_MONOTONIC, if the TSC runs at a constant rate in every
// power state; start only.
SAMPLER_HIDDEN void calibrate_tsc(Tables *t) {
  t->useTsc = CPerfSupport_tscIsInvariant() && CPerfSupport_calibrate(&t->nsPerTsc32, &t->nsBase, &t->tscBase);
}

uint64_t CPerfSampler_nowNs(void) { return now_ns(); }

SAMPLER_HIDDEN bool rule_insert_tagged(uint64_t address, uint64_t tag, uint32_t rule, bool evict) {
  _Atomic uint64_t *set = &g_rules[rule_set(address) * RULE_WAYS];
  uint64_t word = (tag << RULE_BITS) | rule;
  for (int w = 0; w < RULE_WAYS; w++) {
    uint64_t expected = 0;
    if (atomic_compare_exchange_strong(&set[w], &expected, word)) return true;
    if ((expected >> RULE_BITS) == tag) return false;  // another thread learned it
  }
  if (!evict) return false;
  // Full set: replace a way (rules are immutable facts, any entry may be evicted), a
  // granule's if there is one: those are given from rows' ranges, and this rule was met.
  int way = (int)((tag * 0x9E3779B97F4A7C15ull) >> 61);
  for (int w = 0; w < RULE_WAYS; w++) {
    if ((atomic_load_explicit(&set[w], memory_order_relaxed) >> RULE_BITS) & 1) {
      way = w;
      break;
    }
  }
  atomic_store_explicit(&set[way], word, memory_order_relaxed);
  return true;
}

// The range of the FDE (libunwind's procedure) that covers lookup address `address`;
// false when there is none.
static bool fde_range(uint64_t address, uint64_t *start, uint64_t *end) {
  unw_context_t ctx;
  unw_cursor_t cursor;
  unw_proc_info_t info;
  if (unw_getcontext(&ctx) != 0) return false;
  ctx.uc_mcontext.gregs[REG_RIP] = (greg_t)address;
  // As a signal frame, the lookup is at the address itself (not the one before it).
  if (unw_init_local2(&cursor, &ctx, UNW_INIT_SIGNAL_FRAME) < 0 || unw_get_proc_info(&cursor, &info) < 0) return false;
  // Without an FDE, libunwind describes a one-byte procedure at the address.
  if (info.format != UNW_INFO_FORMAT_TABLE && info.end_ip - info.start_ip <= 1) return false;
  *start = info.start_ip;
  *end = info.end_ip;
  return true;
}

// A caller frame without unwind information (the Swift runtime's metadata accessor
// thunks have none) is stepped by libunwind along the frame-pointer chain, with a
// made-up sp (the frame's own sp + 16 in libunwind 1.6), which no rule shape fits. At a
// return address the frame is set up (the call comes after the prologue), so the chain
// gives the real caller: a frame-pointer rule reads the same return address and rbp as
// libunwind did, and gives the caller its true sp. Without it, every sample under such
// a frame was deferred with a copy of the whole stack.
SAMPLER_HIDDEN uint32_t chain_rule(uint64_t ip, uint64_t sp, uint64_t bp, uint64_t high, uint64_t cip, uint64_t cbp,
                                   const unw_save_loc_t *loc) {
  if (bp < sp || bp > high - 16 || (bp & 7)) return 0;
  if (loc->type != UNW_SLT_MEMORY || loc->u.addr != bp) return 0;
  if (*(const uint64_t *)(uintptr_t)bp != cbp || *(const uint64_t *)(uintptr_t)(bp + 8) != cip) return 0;
  uint64_t start, end;
  return fde_range(rule_address(ip, false), &start, &end) ? 0 : RULE_FP;
}

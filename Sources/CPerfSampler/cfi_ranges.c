// Rules for a CFI row's whole range: a rule learned on a stack copy is given to the other
// addresses its CFI row (read with libdw) holds for. Discovery thread and stop only.
#include "rules.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

// MARK: - Rules for a CFI row's whole range
//
// Rules are learned one lookup address at a time, from a frame met on a stack. The
// interrupted PC is a new address on most samples at first, so most of a session's
// early samples were deferred (70-75 % in a 1-second session of a 42-frame stack). A
// rule is a fact about the CFI row that holds at its address, though, and the row holds
// for a range of addresses (a function's body after its prologue, usually): after
// learning a rule on a stack copy, the discovery thread reads that row with libdw, and
// when the row says what libunwind's step said, gives the rule to the row's whole range
// (whole granules as one entry each, the bytes around them one by one). The rule stays
// libunwind's; libdw only tells where else it holds. (Giving every row of the function
// its rule as well, unchecked by a step, deferred no fewer samples in the bench.)

// The addresses around a learned one that get its rule, in a long row: more would push
// other rules out of the cache.
#define RULE_EXTEND_BYTES 2048

SAMPLER_HIDDEN LearnedRule g_learned[LEARNED_MAX];
SAMPLER_HIDDEN int g_learnedCount;
SAMPLER_HIDDEN _Atomic uint64_t g_rangeRules;  // entries given from CFI rows' ranges this session

// Discovery thread only, for one session: libdwfl's view of the loaded modules.
SAMPLER_HIDDEN Dwfl *g_dwfl;
static const Dwfl_Callbacks g_dwflCallbacks = {.find_elf = dwfl_linux_proc_find_elf,
                                               .find_debuginfo = dwfl_standard_find_debuginfo};

static uint64_t g_dwflReportedNs;

// Reads the loaded modules again, at most every 100 ms: code outside any module (JIT
// code) must not cost a read of /proc/self/maps per rule.
static bool report_modules(void) {
  uint64_t now = CPerfSupport_monotonicNs();
  if (g_dwfl && now - g_dwflReportedNs < 100000000) return false;
  g_dwflReportedNs = now;
  if (!g_dwfl) g_dwfl = dwfl_begin(&g_dwflCallbacks);
  if (!g_dwfl) return false;
  dwfl_report_begin(g_dwfl);
  int reported = dwfl_linux_proc_report(g_dwfl, getpid());
  return dwfl_report_end(g_dwfl, NULL, NULL) == 0 && reported == 0;
}

enum { SAVED_SAME, SAVED_AT_CFA, SAVED_OTHER };

// Where a row keeps register regno of the caller: SAVED_AT_CFA with *offset from the CFA,
// SAVED_SAME when it is unchanged, SAVED_OTHER for any other rule.
static int saved_register(Dwarf_Frame *frame, int regno, int64_t *offset) {
  Dwarf_Op storage[3], *ops = NULL;
  size_t count = 0;
  if (dwarf_frame_register(frame, regno, storage, &ops, &count) != 0) return SAVED_OTHER;
  if (count == 0) return ops == NULL ? SAVED_SAME : SAVED_OTHER;  // same value : undefined
  if (ops[0].atom != DW_OP_call_frame_cfa) return SAVED_OTHER;
  if (count == 1) {
    *offset = 0;
    return SAVED_AT_CFA;
  }
  if (count == 2 && ops[1].atom == DW_OP_plus_uconst) {
    *offset = (int64_t)ops[1].number;
    return SAVED_AT_CFA;
  }
  return SAVED_OTHER;
}

// The rule a CFI row describes, in the handler's rule shapes; 0 if none fits.
static uint32_t row_rule(Dwarf_Frame *frame) {
  Dwarf_Op *ops = NULL;
  size_t count = 0;
  if (dwarf_frame_cfa(frame, &ops, &count) != 0 || count != 1) return 0;
  int64_t reg, cfaOffset;
  if (ops[0].atom == DW_OP_bregx) {
    reg = (int64_t)ops[0].number;
    cfaOffset = (int64_t)ops[0].number2;
  } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
    reg = ops[0].atom - DW_OP_breg0;
    cfaOffset = (int64_t)ops[0].number;
  } else {
    return 0;
  }
  int64_t ra = 0, rbp = 0;  // DWARF registers: 6 rbp, 7 rsp, 16 the return address
  if (saved_register(frame, 16, &ra) != SAVED_AT_CFA || ra != -8) return 0;
  int rbpSaved = saved_register(frame, 6, &rbp);
  if (reg == 6) return cfaOffset == 16 && rbpSaved == SAVED_AT_CFA && rbp == -16 ? RULE_FP : 0;
  if (reg != 7 || cfaOffset <= 0 || cfaOffset % 8 || cfaOffset / 8 > RULE_FIELD_MASK) return 0;
  uint32_t k = (uint32_t)(cfaOffset / 8), j = 0;
  if (rbpSaved == SAVED_AT_CFA) {
    int64_t fromSp = cfaOffset + rbp;  // the slot, from the frame's sp
    if (fromSp < 0 || fromSp >= cfaOffset || fromSp % 8) return 0;
    j = (uint32_t)(fromSp / 8) + 1;
  } else if (rbpSaved != SAVED_SAME) {
    return 0;
  }
  return RULE_SP | (k << 2) | (j << (2 + RULE_FIELD_BITS));
}

// The CFI row that holds at lookup address `address`: its range [*start, *end) and the
// rule it describes (0 if no rule shape fits); false if libdw finds none.
static bool cfi_row(uint64_t address, uint64_t *start, uint64_t *end, uint32_t *rule) {
  if (!g_dwfl && !report_modules()) return false;
  Dwfl_Module *module = dwfl_addrmodule(g_dwfl, address);
  if (!module && report_modules()) module = dwfl_addrmodule(g_dwfl, address);  // loaded since
  if (!module) return false;
  Dwarf_Addr bias = 0;
  Dwarf_CFI *cfi = dwfl_module_eh_cfi(module, &bias);
  Dwarf_Frame *frame = NULL;
  if (!cfi || dwarf_cfi_addrframe(cfi, address - bias, &frame) != 0) return false;
  Dwarf_Addr low = 0, high = 0;
  bool signal = false;
  int returnColumn = dwarf_frame_info(frame, &low, &high, &signal);
  *start = low + bias;
  *end = high + bias;
  *rule = returnColumn == 16 && !signal ? row_rule(frame) : 0;
  free(frame);
  return *start <= address && address < *end;
}

// Gives rule to every lookup address in [start, end) that finds a free way in its set.
// A range's entries are a guess at which addresses samples will meet, and one learned rule
// gives up to 290 of them (4 KB of a row) to a cache of 16 K entries: allowed to evict,
// they pushed out the rules of frames the walks had met. On Foundation's JSON coding (1.5 s,
// 26-64 K range entries given), 53-240 of the about 375 samples in a run's last quarter
// were deferred at a caller frame, 126 or more in 7 runs of 8; taking only free ways, 3-11,
// and 75-81 % of those samples took the fast path instead of 22-55 %.
static void give_rule(uint64_t start, uint64_t end, uint32_t rule) {
  const uint64_t granule = 1u << RULE_GRANULE_BITS;
  uint64_t first = (start + granule - 1) & ~(granule - 1), last = end & ~(granule - 1);
  if (first >= last) first = last = end;  // no whole granule: every byte on its own
  uint64_t given = 0;
  for (uint64_t a = start; a < first; a++) given += rule_insert_tagged(a, rule_address_tag(a), rule, false);
  for (uint64_t a = first; a < last; a += granule) given += rule_insert_tagged(a, rule_granule_tag(a), rule, false);
  for (uint64_t a = last; a < end; a++) given += rule_insert_tagged(a, rule_address_tag(a), rule, false);
  atomic_fetch_add_explicit(&g_rangeRules, given, memory_order_relaxed);
}

// Gives each noted rule to the rest of its row (near it).
SAMPLER_HIDDEN void extend_learned_rules(void) {
  for (int i = 0; i < g_learnedCount; i++) {
    uint64_t address = g_learned[i].address, start, end;
    uint32_t rule = 0;
    if (!cfi_row(address, &start, &end, &rule) || rule != g_learned[i].rule) continue;
    if (address - start > RULE_EXTEND_BYTES) start = address - RULE_EXTEND_BYTES;
    if (end - address > RULE_EXTEND_BYTES) end = address + RULE_EXTEND_BYTES;
    give_rule(start, end, rule);
  }
  g_learnedCount = 0;
}

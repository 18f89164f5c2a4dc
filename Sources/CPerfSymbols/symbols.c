// See CPerfSymbols.h. Everything here runs after recording, on one thread.

#include "CPerfSymbols.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Weak so that a C-only link of this target does not fail; every Swift process loads
// libswiftCore (and, through it, libstdc++), so both resolve at run time.
extern char *swift_demangle(const char *mangledName, size_t mangledNameLength, char *outputBuffer,
                            size_t *outputBufferSize, uint32_t flags) __attribute__((weak));
extern char *__cxa_demangle(const char *mangled, char *buffer, size_t *length, int *status) __attribute__((weak));

struct CPerfSymbols_Session {
  Dwfl *dwfl;
  // Kept alive for the session: libdwfl stores the pointer, not a copy.
  Dwfl_Callbacks callbacks;
  char *debuginfoPath;
};

// Per-module table of compile-unit address ranges, used when the image has no
// .debug_aranges: elfutils 0.188's dwfl_module_addrdie relies on that section, and
// swiftc/clang do not emit it by default, so without this there would be no file:line
// for Swift code at all.
typedef struct {
  Dwarf_Addr low, high;  // DWARF addresses (without bias), [low, high)
  Dwarf_Off cuOffset;    // offset of the CU DIE
} CURange;

typedef struct FunctionTable FunctionTable;

// Sorted function symbols of a module: dwfl_module_addrinfo scans the whole symbol table
// on every call (about 0.7 ms per address in libswiftCore), a binary search does not.
typedef struct {
  GElf_Addr start, size;  // absolute addresses
  const char *name;
  int rank;  // lower is preferred among aliases: global, weak, local
} SymbolEntry;

typedef struct {
  int symbolsBuilt;
  SymbolEntry *symbols;
  size_t symbolCount;
  char *pltNames;  // the "<symbol>@plt" names of the PLT's stubs, back to back
  int built;
  CURange *ranges;
  size_t count;
  // Per-CU function tables, sorted by CU offset, filled as CUs are first asked about.
  FunctionTable *tables;
  size_t tableCount, tableCapacity;
} ModuleData;

static void freeFunctionTables(ModuleData *data);

static ModuleData *moduleData(void **userdata) {
  if (*userdata == NULL) *userdata = calloc(1, sizeof(ModuleData));
  return *userdata;
}

static void freeModuleData(void **userdata) {
  if (userdata == NULL || *userdata == NULL) return;
  ModuleData *data = *userdata;
  freeFunctionTables(data);
  free(data->symbols);
  free(data->pltNames);
  free(data->ranges);
  free(data);
  *userdata = NULL;
}

static int compareRanges(const void *a, const void *b) {
  const CURange *x = a, *y = b;
  if (x->low != y->low) return x->low < y->low ? -1 : 1;
  return x->high < y->high ? -1 : (x->high > y->high);
}

static int compareSymbols(const void *a, const void *b) {
  const SymbolEntry *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->rank != y->rank) return x->rank - y->rank;
  return x->size > y->size ? -1 : (x->size < y->size);
}

// The PLT's stubs have no symbols: the nearest symbol before them is _init (whose section
// precedes .plt), and a sample in a stub was charged to it, or kept a bare address. Each
// stub is named "<symbol>@plt" after the .rela.plt entry it jumps through, as objdump and
// perf name them: in .plt.sec (IBT) stub i is entry i, in .plt stub i + 1 is (stub 0
// calls the lazy binder). Returns how many entries it added after data->symbolCount.
static size_t addPltStubs(ModuleData *data, Dwfl_Module *module) {
  Dwarf_Addr bias = 0;
  Elf *elf = dwfl_module_getelf(module, &bias);
  size_t sectionNames;
  if (elf == NULL || elf_getshdrstrndx(elf, &sectionNames) != 0) return 0;
  GElf_Shdr plt = {0}, pltSec = {0}, relaPlt = {0};
  Elf_Scn *relaSection = NULL;
  for (Elf_Scn *section = elf_nextscn(elf, NULL); section != NULL; section = elf_nextscn(elf, section)) {
    GElf_Shdr header;
    if (gelf_getshdr(section, &header) == NULL) continue;
    const char *name = elf_strptr(elf, sectionNames, header.sh_name);
    if (name == NULL) continue;
    if (strcmp(name, ".plt") == 0) plt = header;
    if (strcmp(name, ".plt.sec") == 0) pltSec = header;
    if (strcmp(name, ".rela.plt") == 0 && header.sh_type == SHT_RELA) {
      relaPlt = header;
      relaSection = section;
    }
  }
  GElf_Shdr stubs = pltSec.sh_size ? pltSec : plt;
  size_t first = pltSec.sh_size ? 0 : 1;
  if (relaSection == NULL || stubs.sh_size == 0 || relaPlt.sh_entsize == 0) return 0;
  Elf_Scn *dynsymSection = elf_getscn(elf, relaPlt.sh_link);
  GElf_Shdr dynsym;
  Elf_Data *relocations = elf_getdata(relaSection, NULL);
  Elf_Data *symbols = dynsymSection ? elf_getdata(dynsymSection, NULL) : NULL;
  if (relocations == NULL || symbols == NULL || gelf_getshdr(dynsymSection, &dynsym) == NULL) return 0;
  size_t relocationCount = relaPlt.sh_size / relaPlt.sh_entsize;
  size_t stubCount = stubs.sh_size / 16;
  size_t count = 0, bytes = 0;
  // Names first (one buffer), then entries pointing into it.
  for (int pass = 0; pass < 2; pass++) {
    size_t used = 0;
    count = 0;
    for (size_t i = 0; i < relocationCount && first + i < stubCount; i++) {
      GElf_Rela relocation;
      GElf_Sym symbol;
      if (gelf_getrela(relocations, (int)i, &relocation) == NULL) continue;
      const char *name = NULL;
      if (GELF_R_SYM(relocation.r_info) != 0 && gelf_getsym(symbols, (int)GELF_R_SYM(relocation.r_info), &symbol))
        name = elf_strptr(elf, dynsym.sh_link, symbol.st_name);
      if (name == NULL || name[0] == '\0') name = "*ifunc*";  // IRELATIVE: no symbol
      size_t length = strlen(name) + sizeof("@plt");
      if (pass == 1) {
        char *copy = data->pltNames + used;
        memcpy(copy, name, strlen(name));
        memcpy(copy + strlen(name), "@plt", sizeof("@plt"));
        data->symbols[data->symbolCount + count] = (SymbolEntry){bias + stubs.sh_addr + 16 * (first + i), 16, copy, 3};
      }
      used += length;
      count++;
    }
    if (pass == 0) {
      bytes = used;
      SymbolEntry *grown = realloc(data->symbols, (data->symbolCount + count) * sizeof(SymbolEntry));
      if (grown == NULL) return 0;
      data->symbols = grown;
      data->pltNames = malloc(bytes ? bytes : 1);
      if (data->pltNames == NULL) return 0;
    }
  }
  return count;
}

static void buildSymbols(ModuleData *data, Dwfl_Module *module) {
  data->symbolsBuilt = 1;
  int count = dwfl_module_getsymtab(module);
  if (count <= 0) return;
  data->symbols = malloc((size_t)count * sizeof(SymbolEntry));
  if (data->symbols == NULL) return;
  for (int i = 1; i < count; i++) {
    GElf_Sym sym;
    GElf_Addr address;
    GElf_Word section;
    const char *name = dwfl_module_getsym_info(module, i, &sym, &address, &section, NULL, NULL);
    int type = GELF_ST_TYPE(sym.st_info);
    if (name == NULL || name[0] == '\0' || section == SHN_UNDEF || address == 0 ||
        (type != STT_FUNC && type != STT_GNU_IFUNC))
      continue;
    int binding = GELF_ST_BIND(sym.st_info);
    int rank = binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2;
    data->symbols[data->symbolCount++] = (SymbolEntry){address, sym.st_size, name, rank};
  }
  data->symbolCount += addPltStubs(data, module);
  qsort(data->symbols, data->symbolCount, sizeof(SymbolEntry), compareSymbols);
}

// The function symbol covering an absolute address, like dwfl_module_addrinfo.
static const SymbolEntry *symbolForAddress(ModuleData *data, Dwfl_Module *module, GElf_Addr address) {
  if (!data->symbolsBuilt) buildSymbols(data, module);
  size_t lo = 0, hi = data->symbolCount;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (data->symbols[mid].start <= address)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NULL;
  // Back to the first (preferred) alias of the nearest start.
  size_t best = lo - 1;
  while (best > 0 && data->symbols[best - 1].start == data->symbols[best].start) best--;
  const SymbolEntry *nearest = &data->symbols[best];
  if (nearest->size == 0 || address < nearest->start + nearest->size) return nearest;
  // Past its end: an enclosing larger symbol may still cover the address.
  for (size_t i = best, steps = 0; i > 0 && steps < 16; i--, steps++) {
    const SymbolEntry *candidate = &data->symbols[i - 1];
    if (candidate->size > 0 && address < candidate->start + candidate->size) return candidate;
  }
  return NULL;
}

static void buildRanges(ModuleData *data, Dwarf *dwarf) {
  data->built = 1;
  if (dwarf == NULL) return;
  size_t capacity = 0;
  Dwarf_Off offset = 0, next;
  size_t headerSize;
  while (dwarf_nextcu(dwarf, offset, &next, &headerSize, NULL, NULL, NULL) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(dwarf, offset + headerSize, &cu) != NULL) {
      Dwarf_Addr base, low, high;
      ptrdiff_t it = 0;
      while ((it = dwarf_ranges(&cu, it, &base, &low, &high)) > 0) {
        if (low >= high) continue;
        if (data->count == capacity) {
          capacity = capacity ? capacity * 2 : 64;
          CURange *grown = realloc(data->ranges, capacity * sizeof(CURange));
          if (grown == NULL) return;
          data->ranges = grown;
        }
        data->ranges[data->count++] = (CURange){low, high, dwarf_dieoffset(&cu)};
      }
    }
    offset = next;
  }
  qsort(data->ranges, data->count, sizeof(CURange), compareRanges);
}

// The CU DIE covering `address` (absolute), or NULL. *bias receives the DWARF bias.
static Dwarf_Die *cuForAddress(Dwfl_Module *module, Dwarf_Addr address, Dwarf_Die *storage, Dwarf_Addr *bias) {
  Dwarf_Die *cu = dwfl_module_addrdie(module, address, bias);
  if (cu != NULL) return cu;

  void **userdata = NULL;
  dwfl_module_info(module, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
  if (userdata == NULL) return NULL;
  Dwarf *dwarf = dwfl_module_getdwarf(module, bias);
  if (dwarf == NULL) return NULL;
  ModuleData *data = moduleData(userdata);
  if (data == NULL) return NULL;
  if (!data->built) buildRanges(data, dwarf);

  Dwarf_Addr pc = address - *bias;
  // Rightmost range starting at or before pc; ranges may nest or overlap (rare), so scan
  // back a little for one that contains pc.
  size_t lo = 0, hi = data->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (data->ranges[mid].low <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (size_t i = lo, steps = 0; i > 0 && steps < 8; i--, steps++) {
    const CURange *range = &data->ranges[i - 1];
    if (pc >= range->low && pc < range->high) return dwarf_offdie(dwarf, range->cuOffset, storage);
  }
  return NULL;
}

static int freeModuleCallback(Dwfl_Module *module, void **userdata, const char *name, Dwarf_Addr start, void *arg) {
  (void)module;
  (void)name;
  (void)start;
  (void)arg;
  freeModuleData(userdata);
  return DWARF_CB_OK;
}

static int removedModuleCallback(Dwfl_Module *module, void *userdata, const char *name, Dwarf_Addr start, void *arg) {
  (void)module;
  (void)name;
  (void)start;
  (void)arg;
  // libdwfl passes &module->userdata here (a void ** typed as void *), not the value.
  freeModuleData((void **)userdata);
  return DWARF_CB_OK;
}

static int report(CPerfSymbols_Session *session) {
  dwfl_report_begin(session->dwfl);
  int result = dwfl_linux_proc_report(session->dwfl, getpid());
  if (dwfl_report_end(session->dwfl, removedModuleCallback, NULL) != 0) return -1;
  return result == 0 ? 0 : -1;
}

CPerfSymbols_Session *CPerfSymbols_open(void) {
  CPerfSymbols_Session *session = calloc(1, sizeof(CPerfSymbols_Session));
  if (session == NULL) return NULL;
  session->callbacks.find_elf = dwfl_linux_proc_find_elf;
  session->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
  session->callbacks.debuginfo_path = &session->debuginfoPath;
  session->dwfl = dwfl_begin(&session->callbacks);
  if (session->dwfl == NULL || report(session) != 0) {
    CPerfSymbols_close(session);
    return NULL;
  }
  return session;
}

int CPerfSymbols_refresh(CPerfSymbols_Session *session) { return report(session); }

void CPerfSymbols_close(CPerfSymbols_Session *session) {
  if (session == NULL) return;
  if (session->dwfl != NULL) {
    dwfl_getmodules(session->dwfl, freeModuleCallback, NULL, 0);
    dwfl_end(session->dwfl);
  }
  free(session);
}

const char *CPerfSymbols_lastError(void) {
  const char *message = dwfl_errmsg(-1);
  return message != NULL ? message : "unknown libdwfl error";
}

int CPerfSymbols_lookup(CPerfSymbols_Session *session, uint64_t address, CPerfSymbols_Location *out) {
  memset(out, 0, sizeof *out);
  Dwfl_Module *module = dwfl_addrmodule(session->dwfl, address);
  if (module == NULL) return -1;
  out->hasModule = 1;
  Dwarf_Addr start = 0;
  out->modulePath = dwfl_module_info(module, NULL, &start, NULL, NULL, NULL, NULL, NULL);
  out->moduleStart = start;

  void **userdata = NULL;
  dwfl_module_info(module, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
  ModuleData *data = userdata != NULL ? moduleData(userdata) : NULL;
  const SymbolEntry *symbol = data != NULL ? symbolForAddress(data, module, address) : NULL;
  if (symbol != NULL) {
    out->symbolName = symbol->name;
    out->symbolOffset = address - symbol->start;
  }

  Dwarf_Die storage;
  Dwarf_Addr bias = 0;
  Dwarf_Die *cu = cuForAddress(module, address, &storage, &bias);
  Dwarf_Addr moduleBias = 0;
  out->moduleHasDebugInfo = cu != NULL || dwfl_module_getdwarf(module, &moduleBias) != NULL;
  if (cu != NULL) {
    out->hasDebugInfo = 1;
    Dwarf_Line *line = dwarf_getsrc_die(cu, address - bias);
    if (line != NULL) {
      out->sourceFile = dwarf_linesrc(line, NULL, NULL);
      int lineNumber = 0, column = 0;
      dwarf_lineno(line, &lineNumber);
      dwarf_linecol(line, &column);
      out->line = lineNumber;
      out->column = column;
    }
  }
  return 0;
}

// Function ranges of one compile unit, built on first use. dwarf_getscopes cannot be used
// for Swift: swiftc nests every subprogram inside a DW_TAG_module DIE that has no address
// range, and libdw prunes the walk at any scope DIE that does not contain the PC, so it
// finds nothing below the CU.
struct FunctionTable {
  Dwarf_Off cuOffset;
  CURange *functions;  // low/high of a subprogram, cuOffset = the subprogram DIE's offset
  size_t count, capacity;
};

static void freeFunctionTables(ModuleData *data) {
  for (size_t i = 0; i < data->tableCount; i++) free(data->tables[i].functions);
  free(data->tables);
}

static int isContainer(int tag) {
  // DIEs without code of their own under which compilers put function definitions.
  return tag == DW_TAG_module || tag == DW_TAG_namespace || tag == DW_TAG_structure_type || tag == DW_TAG_class_type ||
         tag == DW_TAG_union_type || tag == DW_TAG_enumeration_type;
}

static void addFunction(FunctionTable *table, Dwarf_Die *die) {
  Dwarf_Addr base, low, high;
  ptrdiff_t it = 0;
  while ((it = dwarf_ranges(die, it, &base, &low, &high)) > 0) {
    if (low >= high) continue;
    if (table->count == table->capacity) {
      size_t capacity = table->capacity ? table->capacity * 2 : 32;
      CURange *grown = realloc(table->functions, capacity * sizeof(CURange));
      if (grown == NULL) return;
      table->functions = grown;
      table->capacity = capacity;
    }
    table->functions[table->count++] = (CURange){low, high, dwarf_dieoffset(die)};
  }
}

static void collectFunctions(FunctionTable *table, Dwarf_Die *parent, int depth) {
  Dwarf_Die child;
  if (depth > 16 || dwarf_child(parent, &child) != 0) return;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point)
      addFunction(table, &child);
    else if (isContainer(tag))
      collectFunctions(table, &child, depth + 1);
  } while (dwarf_siblingof(&child, &child) == 0);
}

static FunctionTable *functionTable(ModuleData *data, Dwarf_Die *cu) {
  Dwarf_Off offset = dwarf_dieoffset(cu);
  size_t lo = 0, hi = data->tableCount;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (data->tables[mid].cuOffset < offset)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < data->tableCount && data->tables[lo].cuOffset == offset) return &data->tables[lo];

  if (data->tableCount == data->tableCapacity) {
    size_t capacity = data->tableCapacity ? data->tableCapacity * 2 : 16;
    FunctionTable *grown = realloc(data->tables, capacity * sizeof(FunctionTable));
    if (grown == NULL) return NULL;
    data->tables = grown;
    data->tableCapacity = capacity;
  }
  memmove(&data->tables[lo + 1], &data->tables[lo], (data->tableCount - lo) * sizeof(FunctionTable));
  data->tableCount++;
  FunctionTable *table = &data->tables[lo];
  memset(table, 0, sizeof *table);
  table->cuOffset = offset;
  collectFunctions(table, cu, 0);
  qsort(table->functions, table->count, sizeof(CURange), compareRanges);
  return table;
}

static const char *integratedString(Dwarf_Die *die, unsigned int attribute) {
  Dwarf_Attribute storage;
  return dwarf_formstring(dwarf_attr_integrate(die, attribute, &storage));
}

static int isCodeScope(int tag) {
  return tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block || tag == DW_TAG_try_block ||
         tag == DW_TAG_catch_block || tag == DW_TAG_with_stmt;
}

enum { maxInlineDepth = 64 };

int CPerfSymbols_inlineFrames(CPerfSymbols_Session *session, uint64_t address, CPerfSymbols_InlineFrame *out,
                              int capacity) {
  Dwfl_Module *module = dwfl_addrmodule(session->dwfl, address);
  if (module == NULL) return 0;
  Dwarf_Die cuStorage;
  Dwarf_Addr bias = 0;
  Dwarf_Die *cu = cuForAddress(module, address, &cuStorage, &bias);
  if (cu == NULL) return 0;
  void **userdata = NULL;
  dwfl_module_info(module, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
  if (userdata == NULL) return -1;
  ModuleData *data = moduleData(userdata);
  if (data == NULL) return -1;
  FunctionTable *table = functionTable(data, cu);
  if (table == NULL) return -1;

  Dwarf_Addr pc = address - bias;
  size_t lo = 0, hi = table->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (table->functions[mid].low <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  const CURange *function = NULL;
  for (size_t i = lo, steps = 0; i > 0 && steps < 8; i--, steps++) {
    const CURange *range = &table->functions[i - 1];
    if (pc >= range->low && pc < range->high) {
      function = range;
      break;
    }
  }
  if (function == NULL) return 0;

  Dwarf_Die scope;
  if (dwarf_offdie(dwarf_cu_getdwarf(cu->cu), function->cuOffset, &scope) == NULL) return -1;

  // Descend through the code scopes containing pc, outermost first.
  Dwarf_Die chain[maxInlineDepth];
  int depth = 0;
  for (;;) {
    Dwarf_Die child;
    int descended = 0;
    if (dwarf_child(&scope, &child) == 0) {
      do {
        if (isCodeScope(dwarf_tag(&child)) && dwarf_haspc(&child, pc) == 1) {
          if (dwarf_tag(&child) == DW_TAG_inlined_subroutine && depth < maxInlineDepth) chain[depth++] = child;
          scope = child;
          descended = 1;
          break;
        }
      } while (dwarf_siblingof(&child, &child) == 0);
    }
    if (!descended) break;
  }

  Dwarf_Files *files = NULL;
  size_t fileCount = 0;
  dwarf_getsrcfiles(cu, &files, &fileCount);

  for (int found = 0; found < depth && out != NULL && found < capacity; found++) {
    Dwarf_Die *die = &chain[depth - 1 - found];  // innermost first
    CPerfSymbols_InlineFrame *frame = &out[found];
    memset(frame, 0, sizeof *frame);
    frame->linkageName = integratedString(die, DW_AT_linkage_name);
    if (frame->linkageName == NULL) frame->linkageName = integratedString(die, DW_AT_MIPS_linkage_name);
    frame->name = integratedString(die, DW_AT_name);
    Dwarf_Attribute attribute;
    Dwarf_Word value;
    if (files != NULL && dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attribute), &value) == 0 &&
        value < fileCount)
      frame->callFile = dwarf_filesrc(files, value, NULL, NULL);
    if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attribute), &value) == 0) frame->callLine = (int32_t)value;
    if (dwarf_formudata(dwarf_attr(die, DW_AT_call_column, &attribute), &value) == 0)
      frame->callColumn = (int32_t)value;
  }
  return depth;
}

char *CPerfSymbols_swiftDemangle(const char *mangled, size_t length) {
  if (swift_demangle == NULL) return NULL;
  return swift_demangle(mangled, length, NULL, NULL, 0);
}

char *CPerfSymbols_cxxDemangle(const char *mangled) {
  if (__cxa_demangle == NULL || strncmp(mangled, "_Z", 2) != 0) return NULL;
  int status = 0;
  char *result = __cxa_demangle(mangled, NULL, NULL, &status);
  if (status != 0) {
    free(result);
    return NULL;
  }
  return result;
}

// Test support: a PC inside code that the C compiler inlined (always_inline is honoured
// even at -O0, where swiftc produces no inlined scopes at all), so the inline walker can be
// tested in debug builds.
__attribute__((noinline)) static uint64_t CPerfSymbols_returnAddressOfCaller(void) {
  return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

static inline __attribute__((always_inline)) uint64_t CPerfSymbols_inlinedProbe(void) {
  uint64_t address = CPerfSymbols_returnAddressOfCaller();
  // Code after the call keeps it from becoming a tail call out of the inlined scope.
  __asm__ volatile("" ::: "memory");
  return address;
}

uint64_t CPerfSymbols_selfTestInlinedReturnAddress(void) { return CPerfSymbols_inlinedProbe(); }

// The image whose PT_LOAD segments (their memory size, .bss included) cover an address.
typedef struct ImageSearch {
  uint64_t address;
  uint64_t fileStart;  // an address of the image that lies in its file mapping
} ImageSearch;

static int findImage(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  ImageSearch *search = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *phdr = &info->dlpi_phdr[i];
    if (phdr->p_type != PT_LOAD) continue;
    uint64_t start = info->dlpi_addr + phdr->p_vaddr;
    if (search->address >= start && search->address < start + phdr->p_memsz) {
      search->fileStart = start;
      return 1;
    }
  }
  return 0;
}

const char *CPerfSymbols_dataSymbol(CPerfSymbols_Session *session, uint64_t address, const char **modulePath) {
  if (modulePath) *modulePath = NULL;
  Dwfl_Module *module = dwfl_addrmodule(session->dwfl, address);
  if (module == NULL) {
    // libdwfl's modules span the image's file mappings from /proc/self/maps; a global in
    // .bss lies in the anonymous mapping after them.
    ImageSearch search = {address, 0};
    if (dl_iterate_phdr(findImage, &search) != 0) module = dwfl_addrmodule(session->dwfl, search.fileStart);
  }
  if (module == NULL) return NULL;
  if (modulePath) *modulePath = dwfl_module_info(module, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char *name = dwfl_module_addrinfo(module, address, &offset, &sym, NULL, NULL, NULL);
  if (name == NULL || name[0] == '\0') return NULL;
  // The nearest symbol before an address is not its name when the address lies past it.
  if (sym.st_size != 0 && offset >= sym.st_size) return NULL;
  return name;
}

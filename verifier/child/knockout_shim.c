/* The knockout shim (verifier/execute/knockout.py): skips every kernel launch made by the candidate's own extension.

   km_knockout_patch(path) rewrites the relocation slots (GOT entries: JUMP_SLOT, GLOB_DAT, and ABS64 without an
   addend) of one loaded library, the candidate's built extension, for the CUDA launch entry points: each slot
   then holds a function here that counts the launch and returns 0 (cudaSuccess / CUDA_SUCCESS) without
   launching anything. Only that library's own slots change, so its calls into PyTorch (at::matmul, whose cuBLAS
   kernels launch from libcublas's own slots) run as before: "own" is decided by whose relocation it is, not by a
   kernel's name. The entry-point getters (cuGetProcAddress, cudaGetDriverEntryPoint...) are rewritten too:
   asked from the candidate's library for a launch function, they hand out the skipping one.

   Why each skipping function ignores its arguments: the caller owns its argument registers and stack (SysV
   x86-64, AAPCS64), so a callee that reads none of them and returns an int 0 is a valid stand-in for any of the
   launch prototypes below, all of which return a 32-bit error code.

   Does NOT see: a runtime linked statically into the extension (no relocation to rewrite), a function pointer
   obtained from dlsym (the source scan flags dlsym), raw driver ioctls. Launches it does not skip still run; the
   verifier sees that (the profiler shows own kernels in the knockout run) and calls the knockout inconclusive.
   Assumes the library was loaded with RTLD_NOW (Python's default dlopen flags): a getter's slot then holds the
   real function, which the rewritten getter calls. Needs only libc and libdl: it builds and runs without CUDA. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define KM_JUMP_SLOT R_X86_64_JUMP_SLOT
#define KM_GLOB_DAT R_X86_64_GLOB_DAT
#define KM_ABS64 R_X86_64_64
#elif defined(__aarch64__)
#define KM_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define KM_GLOB_DAT R_AARCH64_GLOB_DAT
#define KM_ABS64 R_AARCH64_ABS64
#else
#error "knockout shim: x86-64 and aarch64 only"
#endif

/* the launch entry points of the CUDA runtime (13 adds __cudaLaunchKernel, what <<<>>> calls) and driver */
#define KM_LAUNCHES(X)                                                                                         \
    X(0, cudaLaunchKernel) X(1, cudaLaunchKernel_ptsz) X(2, __cudaLaunchKernel) X(3, __cudaLaunchKernel_ptsz)   \
    X(4, cudaLaunchKernelExC) X(5, cudaLaunchKernelExC_ptsz) X(6, cudaLaunchCooperativeKernel)                  \
    X(7, cudaLaunchCooperativeKernel_ptsz) X(8, cudaLaunchCooperativeKernelMultiDevice) X(9, cudaGraphLaunch)   \
    X(10, cudaGraphLaunch_ptsz) X(11, cuLaunchKernel) X(12, cuLaunchKernel_ptsz) X(13, cuLaunchKernelEx)        \
    X(14, cuLaunchKernelEx_ptsz) X(15, cuLaunchCooperativeKernel) X(16, cuLaunchCooperativeKernel_ptsz)         \
    X(17, cuLaunchCooperativeKernelMultiDevice) X(18, cuGraphLaunch) X(19, cuGraphLaunch_ptsz) X(20, cuLaunch)  \
    X(21, cuLaunchGrid) X(22, cuLaunchGridAsync)
#define KM_N_LAUNCHES 23

static atomic_long km_skipped[KM_N_LAUNCHES];
static atomic_long km_redirected;  /* launch functions handed out by a rewritten getter */
static char km_error[512];

#define KM_SKIP_FN(i, name) \
    static int km_skip_##name(void) { atomic_fetch_add(&km_skipped[i], 1); return 0; }
KM_LAUNCHES(KM_SKIP_FN)
#define KM_SKIP_ADDR(i, name) (void *)km_skip_##name,
static void *const KM_SKIP[KM_N_LAUNCHES] = {KM_LAUNCHES(KM_SKIP_ADDR)};
#define KM_NAME(i, name) #name,
static const char *const KM_NAMES[KM_N_LAUNCHES] = {KM_LAUNCHES(KM_NAME)};

static int launch_index(const char *name) {
    for (int i = 0; i < KM_N_LAUNCHES; ++i)
        if (strcmp(name, KM_NAMES[i]) == 0) return i;
    return -1;
}

/* a getter asked for a launch function by its base name ("cuLaunchKernel", or with a _v2/_ptsz suffix) */
static void redirect(const char *symbol, void **pfn, int rc) {
    if (rc != 0 || !symbol || !pfn || !*pfn) return;
    char base[128];
    snprintf(base, sizeof base, "%s", symbol);
    char *v = strstr(base, "_v");
    if (v && v[2] >= '0' && v[2] <= '9') *v = 0;
    int i = launch_index(base);
    if (i >= 0) {
        *pfn = KM_SKIP[i];
        atomic_fetch_add(&km_redirected, 1);
    }
}

typedef unsigned long long km_u64;
static int (*real_cuGetProcAddress)(const char *, void **, int, km_u64);
static int (*real_cuGetProcAddress_v2)(const char *, void **, int, km_u64, void *);
static int (*real_cudaGetDriverEntryPoint)(const char *, void **, km_u64, void *);
static int (*real_cudaGetDriverEntryPoint_ptsz)(const char *, void **, km_u64, void *);
static int (*real_cudaGetDriverEntryPointByVersion)(const char *, void **, unsigned, km_u64, void *);
static int (*real_cudaGetDriverEntryPointByVersion_ptsz)(const char *, void **, unsigned, km_u64, void *);

#define KM_NOT_FOUND 500 /* CUDA_ERROR_NOT_FOUND / cudaErrorSymbolNotFound */
static int hook_cuGetProcAddress(const char *s, void **p, int ver, km_u64 flags) {
    int rc = real_cuGetProcAddress ? real_cuGetProcAddress(s, p, ver, flags) : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}
static int hook_cuGetProcAddress_v2(const char *s, void **p, int ver, km_u64 flags, void *status) {
    int rc = real_cuGetProcAddress_v2 ? real_cuGetProcAddress_v2(s, p, ver, flags, status) : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}
static int hook_cudaGetDriverEntryPoint(const char *s, void **p, km_u64 flags, void *status) {
    int rc = real_cudaGetDriverEntryPoint ? real_cudaGetDriverEntryPoint(s, p, flags, status) : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}
static int hook_cudaGetDriverEntryPoint_ptsz(const char *s, void **p, km_u64 flags, void *status) {
    int rc = real_cudaGetDriverEntryPoint_ptsz ? real_cudaGetDriverEntryPoint_ptsz(s, p, flags, status)
                                                : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}
static int hook_cudaGetDriverEntryPointByVersion(const char *s, void **p, unsigned ver, km_u64 flags, void *st) {
    int rc = real_cudaGetDriverEntryPointByVersion ? real_cudaGetDriverEntryPointByVersion(s, p, ver, flags, st)
                                                    : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}
static int hook_cudaGetDriverEntryPointByVersion_ptsz(const char *s, void **p, unsigned ver, km_u64 flags,
                                                      void *st) {
    int rc = real_cudaGetDriverEntryPointByVersion_ptsz
                 ? real_cudaGetDriverEntryPointByVersion_ptsz(s, p, ver, flags, st) : KM_NOT_FOUND;
    redirect(s, p, rc);
    return rc;
}

struct km_getter {
    const char *name;
    void **real;
    void *hook;
};
static const struct km_getter KM_GETTERS[] = {
    {"cuGetProcAddress", (void **)&real_cuGetProcAddress, (void *)hook_cuGetProcAddress},
    {"cuGetProcAddress_v2", (void **)&real_cuGetProcAddress_v2, (void *)hook_cuGetProcAddress_v2},
    {"cudaGetDriverEntryPoint", (void **)&real_cudaGetDriverEntryPoint, (void *)hook_cudaGetDriverEntryPoint},
    {"cudaGetDriverEntryPoint_ptsz", (void **)&real_cudaGetDriverEntryPoint_ptsz,
     (void *)hook_cudaGetDriverEntryPoint_ptsz},
    {"cudaGetDriverEntryPointByVersion", (void **)&real_cudaGetDriverEntryPointByVersion,
     (void *)hook_cudaGetDriverEntryPointByVersion},
    {"cudaGetDriverEntryPointByVersion_ptsz", (void **)&real_cudaGetDriverEntryPointByVersion_ptsz,
     (void *)hook_cudaGetDriverEntryPointByVersion_ptsz},
};
#define KM_N_GETTERS (sizeof KM_GETTERS / sizeof KM_GETTERS[0])

/* the library's read-only-after-relocation range (PT_GNU_RELRO), to put back its protection after a write */
struct km_relro {
    ElfW(Addr) base, start, end;
};
static int find_relro(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct km_relro *r = data;
    if (info->dlpi_addr != r->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            r->start = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            r->end = r->start + info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

static int write_slot(void **slot, void *value, const struct km_relro *relro) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)slot & ~(page - 1);
    if (mprotect((void *)lo, page, PROT_READ | PROT_WRITE) != 0) return -1;
    *slot = value;
    /* the loader protects RELRO rounded down to whole pages: a slot past that stays writable, as it was */
    if ((uintptr_t)slot >= relro->start && (uintptr_t)slot < (relro->end & ~(page - 1)))
        mprotect((void *)lo, page, PROT_READ);
    return 0;
}

static ElfW(Addr) dyn_ptr(ElfW(Addr) value, ElfW(Addr) base) {
    return value < base ? value + base : value; /* glibc relocates these in place on x86-64/aarch64 */
}

/* Rewrite the launch and getter slots of the loaded library at `path`; returns how many, -1 on an error
   (km_knockout_error says which). */
int km_knockout_patch(const char *path) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!handle) {
        snprintf(km_error, sizeof km_error, "%s is not loaded in this process", path);
        return -1;
    }
    struct link_map *lm = NULL;
    int got = dlinfo(handle, RTLD_DI_LINKMAP, &lm);
    dlclose(handle); /* RTLD_NOLOAD took a reference */
    if (got != 0 || !lm || !lm->l_ld) {
        snprintf(km_error, sizeof km_error, "no link map for %s", path);
        return -1;
    }
    ElfW(Addr) base = lm->l_addr;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tables[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_JMPREL: tables[0] = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tables[1] = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab) {
        snprintf(km_error, sizeof km_error, "%s has no dynamic symbol table", path);
        return -1;
    }
    struct km_relro relro = {base, 0, 0};
    dl_iterate_phdr(find_relro, &relro);
    int patched = 0;
    for (int t = 0; t < 2; ++t) {
        for (size_t k = 0; tables[t] && k < sizes[t] / sizeof(ElfW(Rela)); ++k) {
            const ElfW(Rela) *r = &tables[t][k];
            unsigned long type = ELF64_R_TYPE(r->r_info), sym = ELF64_R_SYM(r->r_info);
            if (!sym || !(type == KM_JUMP_SLOT || type == KM_GLOB_DAT || (type == KM_ABS64 && r->r_addend == 0)))
                continue;
            const char *name = strtab + symtab[sym].st_name;
            void **slot = (void **)(base + r->r_offset);
            void *value = NULL;
            int i = launch_index(name);
            if (i >= 0) {
                value = KM_SKIP[i];
            } else {
                for (size_t g = 0; g < KM_N_GETTERS; ++g)
                    if (strcmp(name, KM_GETTERS[g].name) == 0) {
                        if (*slot != KM_GETTERS[g].hook && !*KM_GETTERS[g].real)
                            *KM_GETTERS[g].real = *slot ? *slot : dlsym(RTLD_DEFAULT, name);
                        value = KM_GETTERS[g].hook;
                    }
            }
            if (!value || *slot == value) continue;
            if (write_slot(slot, value, &relro) != 0) {
                snprintf(km_error, sizeof km_error, "mprotect failed on a relocation slot of %s", path);
                return -1;
            }
            ++patched;
        }
    }
    return patched;
}

int km_knockout_entries(void) { return KM_N_LAUNCHES; }
const char *km_knockout_name(int i) { return i >= 0 && i < KM_N_LAUNCHES ? KM_NAMES[i] : ""; }
long km_knockout_skipped(int i) { return i >= 0 && i < KM_N_LAUNCHES ? atomic_load(&km_skipped[i]) : 0; }
long km_knockout_redirected(void) { return atomic_load(&km_redirected); }
const char *km_knockout_error(void) { return km_error; }

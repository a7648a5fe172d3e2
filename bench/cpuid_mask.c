/* Preloaded into a benchmark process (LD_PRELOAD, see cpuid_mask.py): every CPUID instruction in the process
   reports x86-64-v3 (AVX2, FMA) with the AVX-512 family, the VNNI dot-product extensions and AMX cleared, so that
   onnxruntime, numpy and OpenBLAS pick the kernels they would pick on an AVX2 machine. Linux on x86-64 only: CPUID
   is made to fault (arch_prctl ARCH_SET_CPUID) and the fault handler runs the real instruction and clears the bits.
   Faults that are not a CPUID go to the handler that was installed before. Only the process whose id
   TGC_CPUID_MASK_PID names is masked: the programs it starts (the C compiler building an artifact, whose own SIGSEGV
   handler would take the faults: gcc's cc1 stopped with an internal compiler error) run as they are. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <asm/prctl.h>
#include <sys/syscall.h>

static struct sigaction previous;
static int masked;

/* 1 when CPUID faults in this process (the mask is on), 0 when the kernel or CPU cannot make it fault */
int cpuid_masked(void) { return masked; }

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
  masked = syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) == 0;
}

static void on_fault(int sig, siginfo_t *info, void *context) {
  ucontext_t *uc = context;
  greg_t *g = uc->uc_mcontext.gregs;
  const unsigned char *ip = (const unsigned char *)g[REG_RIP];
  if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
    uint32_t r[4], leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
    real_cpuid(leaf, sub, r);
    if (leaf == 7 && sub == 0) {      /* AVX-512 F DQ IFMA PF ER CD BW VL; VBMI VBMI2 VNNI BITALG VPOPCNTDQ; 4VNNIW
                                         4FMAPS VP2INTERSECT AMX-BF16 FP16 AMX-TILE AMX-INT8 */
      r[1] &= ~((1u<<16)|(1u<<17)|(1u<<21)|(1u<<26)|(1u<<27)|(1u<<28)|(1u<<30)|(1u<<31));
      r[2] &= ~((1u<<1)|(1u<<6)|(1u<<11)|(1u<<12)|(1u<<14));
      r[3] &= ~((1u<<2)|(1u<<3)|(1u<<8)|(1u<<22)|(1u<<23)|(1u<<24)|(1u<<25));
    }
    if (leaf == 7 && sub == 1) {      /* AVX-VNNI AVX512-BF16 AVX-IFMA; AVX-VNNI-INT8 AVX-NE-CONVERT AVX-VNNI-INT16 */
      r[0] &= ~((1u<<4)|(1u<<5)|(1u<<23)); r[3] &= ~((1u<<4)|(1u<<5)|(1u<<10)); }
    g[REG_RAX] = r[0]; g[REG_RBX] = r[1]; g[REG_RCX] = r[2]; g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
    return;
  }
  if (previous.sa_flags & SA_SIGINFO) { previous.sa_sigaction(sig, info, context); return; }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) { previous.sa_handler(sig); return; }
  signal(sig, SIG_DFL);
}

__attribute__((constructor)) static void mask_cpuid(void) {
  struct sigaction sa;
  const char *pid = getenv("TGC_CPUID_MASK_PID");
  if (pid == NULL || atol(pid) != (long)getpid()) return;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, &previous);
  masked = syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) == 0;
}

/* qgpu_prelude.h -- the CUDA device environment for qgpu-min, written for clang's CUDA mode.
 *
 * The front end compiles with -nocudainc (no CUDA SDK headers), so everything a kernel takes for
 * granted is declared here on top of clang's NVPTX builtins:
 *   - the qualifiers __global__, __device__, __host__, __shared__, __constant__, __forceinline__;
 *   - threadIdx, blockIdx, blockDim, gridDim (read through __nvvm_read_ptx_sreg_*), warpSize = 4;
 *   - __syncthreads, __syncwarp, __threadfence*, the votes __all/__any/__ballot_sync, __activemask, __ldg;
 *   - atomicAdd/Sub/Min/Max/Exch/CAS/And/Or/Xor/Inc/Dec for int and unsigned int, and CUDA's 64-bit
 *     forms: atomicAdd/Exch/CAS/And/Or/Xor/Min/Max for unsigned long long, atomicMin/Max for long long;
 *   - __syncthreads_count, __syncthreads_and, __syncthreads_or;
 *   - __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync (int and unsigned);
 *   - min, max, abs, __popc, __clz, __brev, __ffs (and their ...ll forms), __mulhi, __umulhi,
 *     __mul24, __umul24, __sad, __usad, __hadd, __rhadd, __uhadd, __urhadd, __byte_perm,
 *     __funnelshift_l/_r/_lc/_rc; size_t, ptrdiff_t;
 *   - INT_MIN, INT_MAX, UINT_MAX, LLONG_MAX, ... (<limits.h>) and printf (<stdio.h>), which nvcc's
 *     implicit headers also make available without an #include;
 *   - int2..int4, uint2..uint4 (and short/char forms) with make_* constructors, dim3.
 * Our machine's warp has 4 lanes, so warpSize is 4 and a shuffle's default width is 4.
 * nvcc does not use this file: it brings its own headers.
 */
#ifndef QGPU_PRELUDE_H
#define QGPU_PRELUDE_H

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict

#define QGPU_DEV static __device__ __forceinline__

/* nvcc's cuda_runtime.h pulls these in, so kernels use INT_MIN or device printf without an #include. */
#include <limits.h>
#include <stdio.h>

/* The basic C types a kernel may name without including anything (nvcc predefines them too). */
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;

/* Code that tests for a CUDA compiler (#ifdef __CUDACC__) should see one. */
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define __QGPU__ 1

/* ---- vector types (CUDA's sizes and alignments) and their make_* constructors ---- */
#define QGPU_VEC2(T, N, A)                                                                      \
  struct __attribute__((aligned(A))) N##2 { T x, y; };                                          \
  static __host__ __device__ __forceinline__ N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define QGPU_VEC3(T, N)                                                                         \
  struct N##3 { T x, y, z; };                                                                   \
  static __host__ __device__ __forceinline__ N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define QGPU_VEC4(T, N, A)                                                                      \
  struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                    \
  static __host__ __device__ __forceinline__ N##4 make_##N##4(T x, T y, T z, T w) {             \
    return N##4{x, y, z, w};                                                                    \
  }
QGPU_VEC2(int, int, 8) QGPU_VEC3(int, int) QGPU_VEC4(int, int, 16)
QGPU_VEC2(unsigned int, uint, 8) QGPU_VEC3(unsigned int, uint) QGPU_VEC4(unsigned int, uint, 16)
QGPU_VEC2(short, short, 4) QGPU_VEC4(short, short, 8)
QGPU_VEC2(unsigned short, ushort, 4) QGPU_VEC4(unsigned short, ushort, 8)
QGPU_VEC2(char, char, 2) QGPU_VEC4(char, char, 4)
QGPU_VEC2(unsigned char, uchar, 2) QGPU_VEC4(unsigned char, uchar, 4)
#undef QGPU_VEC2
#undef QGPU_VEC3
#undef QGPU_VEC4

struct dim3 {
  unsigned int x, y, z;
  __host__ __device__ constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  __host__ __device__ constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  __host__ __device__ constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* ---- built-in variables: properties whose getters read the PTX special registers ---- */
#define QGPU_BUILTIN_VAR(TYPE, NAME, SREG)                                                      \
  struct TYPE {                                                                                  \
    QGPU_DEV unsigned int get_x() { return __nvvm_read_ptx_sreg_##SREG##_x(); }                  \
    QGPU_DEV unsigned int get_y() { return __nvvm_read_ptx_sreg_##SREG##_y(); }                  \
    QGPU_DEV unsigned int get_z() { return __nvvm_read_ptx_sreg_##SREG##_z(); }                  \
    __declspec(property(get = get_x)) unsigned int x;                                            \
    __declspec(property(get = get_y)) unsigned int y;                                            \
    __declspec(property(get = get_z)) unsigned int z;                                            \
    __device__ operator uint3() const { return uint3{get_x(), get_y(), get_z()}; }              \
    __device__ operator dim3() const { return dim3(get_x(), get_y(), get_z()); }                 \
  };                                                                                             \
  extern const __device__ __attribute__((weak)) TYPE NAME

QGPU_BUILTIN_VAR(__qgpu_threadIdx_t, threadIdx, tid);
QGPU_BUILTIN_VAR(__qgpu_blockIdx_t, blockIdx, ctaid);
QGPU_BUILTIN_VAR(__qgpu_blockDim_t, blockDim, ntid);
QGPU_BUILTIN_VAR(__qgpu_gridDim_t, gridDim, nctaid);
#undef QGPU_BUILTIN_VAR

/* Our machine's warp: 4 lanes. A constant, so shuffle widths fold at compile time; a variable rather
 * than a macro so that host code may still name a struct member warpSize (cudaDeviceProp). */
static constexpr int warpSize = 4;

/* ---- barriers ---- */
/* clang's own __syncthreads builtin is not a compiler memory barrier in clang 14: it let loads of
 * __shared__ variables move above it. An asm with a memory clobber pins every memory access in place. */
QGPU_DEV void __qgpu_syncthreads(void) { asm volatile("bar.sync 0;" ::: "memory"); }
#define __syncthreads() __qgpu_syncthreads()
/* Block-wide votes (bar.red.popc/and/or). The empty asm statements around the builtin pin memory
 * accesses on their side of the barrier, as __qgpu_syncthreads does. */
#define QGPU_BAR_RED(NAME, BUILTIN)                                                             \
  QGPU_DEV int NAME(int pred) {                                                                  \
    asm volatile("" ::: "memory");                                                               \
    int r = BUILTIN(pred);                                                                       \
    asm volatile("" ::: "memory");                                                               \
    return r;                                                                                    \
  }
QGPU_BAR_RED(__syncthreads_count, __nvvm_bar0_popc)
QGPU_BAR_RED(__syncthreads_and, __nvvm_bar0_and)
QGPU_BAR_RED(__syncthreads_or, __nvvm_bar0_or)
#undef QGPU_BAR_RED
QGPU_DEV void __syncwarp(unsigned int mask = 0xffffffffu) { __nvvm_bar_warp_sync(mask); }
QGPU_DEV void __threadfence_block(void) { __nvvm_membar_cta(); }
QGPU_DEV void __threadfence(void) { __nvvm_membar_gl(); }
QGPU_DEV void __threadfence_system(void) { __nvvm_membar_sys(); }

/* ---- warp votes (vote.sync) ---- */
QGPU_DEV int __all_sync(unsigned int mask, int pred) { return __nvvm_vote_all_sync(mask, pred); }
QGPU_DEV int __any_sync(unsigned int mask, int pred) { return __nvvm_vote_any_sync(mask, pred); }
QGPU_DEV unsigned int __ballot_sync(unsigned int mask, int pred) { return __nvvm_vote_ballot_sync(mask, pred); }
/* clang 14 has no __nvvm_activemask builtin */
QGPU_DEV unsigned int __activemask(void) {
  unsigned int m;
  asm volatile("activemask.b32 %0;" : "=r"(m));
  return m;
}

/* ---- read-only loads: plain loads on our machine ---- */
template <class T> QGPU_DEV T __ldg(const T *p) { return *p; }

/* ---- atomics: return the old value, as CUDA's do ---- */
QGPU_DEV int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
QGPU_DEV unsigned int atomicAdd(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_add_gen_i((int *)p, (int)v);
}
QGPU_DEV int atomicSub(int *p, int v) { return __nvvm_atom_add_gen_i(p, -v); }
QGPU_DEV unsigned int atomicSub(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_add_gen_i((int *)p, -(int)v);
}
QGPU_DEV int atomicExch(int *p, int v) { return __nvvm_atom_xchg_gen_i(p, v); }
QGPU_DEV unsigned int atomicExch(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_xchg_gen_i((int *)p, (int)v);
}
QGPU_DEV int atomicMin(int *p, int v) { return __nvvm_atom_min_gen_i(p, v); }
QGPU_DEV unsigned int atomicMin(unsigned int *p, unsigned int v) { return __nvvm_atom_min_gen_ui(p, v); }
QGPU_DEV int atomicMax(int *p, int v) { return __nvvm_atom_max_gen_i(p, v); }
QGPU_DEV unsigned int atomicMax(unsigned int *p, unsigned int v) { return __nvvm_atom_max_gen_ui(p, v); }
/* CAS through the relaxed __atomic builtin: clang 22 turns __nvvm_atom_cas_gen_i into a seq_cst
 * cmpxchg (fence.sc.sys + atom.acquire.sys), which adds an opcode for nothing on our machine. */
QGPU_DEV int atomicCAS(int *p, int cmp, int v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}
QGPU_DEV unsigned int atomicCAS(unsigned int *p, unsigned int cmp, unsigned int v) {
  return (unsigned int)__nvvm_atom_cas_gen_i((int *)p, (int)cmp, (int)v);
}
QGPU_DEV int atomicAnd(int *p, int v) { return __nvvm_atom_and_gen_i(p, v); }
QGPU_DEV unsigned int atomicAnd(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_and_gen_i((int *)p, (int)v);
}
QGPU_DEV int atomicOr(int *p, int v) { return __nvvm_atom_or_gen_i(p, v); }
QGPU_DEV unsigned int atomicOr(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_or_gen_i((int *)p, (int)v);
}
QGPU_DEV int atomicXor(int *p, int v) { return __nvvm_atom_xor_gen_i(p, v); }
QGPU_DEV unsigned int atomicXor(unsigned int *p, unsigned int v) {
  return (unsigned int)__nvvm_atom_xor_gen_i((int *)p, (int)v);
}
/* 64-bit forms: the overloads CUDA has (no signed atomicAdd, no 64-bit atomicSub/Inc/Dec). The
 * i686 target aligns long long to 4 bytes, which clang refuses for 64-bit atomics; CUDA's are 8-aligned. */
typedef unsigned long long __qgpu_u64;
typedef long long __attribute__((aligned(8))) __qgpu_s64a;
typedef unsigned long long __attribute__((aligned(8))) __qgpu_u64a;
QGPU_DEV __qgpu_u64 atomicAdd(__qgpu_u64 *p, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_add_gen_ll((__qgpu_s64a *)p, (long long)v);
}
QGPU_DEV __qgpu_u64 atomicExch(__qgpu_u64 *p, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_xchg_gen_ll((__qgpu_s64a *)p, (long long)v);
}
/* not __atomic_compare_exchange_n as for int: with 8-byte operands clang 14 calls a libatomic function */
QGPU_DEV __qgpu_u64 atomicCAS(__qgpu_u64 *p, __qgpu_u64 cmp, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_cas_gen_ll((__qgpu_s64a *)p, (long long)cmp, (long long)v);
}
QGPU_DEV __qgpu_u64 atomicAnd(__qgpu_u64 *p, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_and_gen_ll((__qgpu_s64a *)p, (long long)v);
}
QGPU_DEV __qgpu_u64 atomicOr(__qgpu_u64 *p, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_or_gen_ll((__qgpu_s64a *)p, (long long)v);
}
QGPU_DEV __qgpu_u64 atomicXor(__qgpu_u64 *p, __qgpu_u64 v) {
  return (__qgpu_u64)__nvvm_atom_xor_gen_ll((__qgpu_s64a *)p, (long long)v);
}
QGPU_DEV long long atomicMin(long long *p, long long v) { return __nvvm_atom_min_gen_ll((__qgpu_s64a *)p, v); }
QGPU_DEV long long atomicMax(long long *p, long long v) { return __nvvm_atom_max_gen_ll((__qgpu_s64a *)p, v); }
QGPU_DEV __qgpu_u64 atomicMin(__qgpu_u64 *p, __qgpu_u64 v) { return __nvvm_atom_min_gen_ull((__qgpu_u64a *)p, v); }
QGPU_DEV __qgpu_u64 atomicMax(__qgpu_u64 *p, __qgpu_u64 v) { return __nvvm_atom_max_gen_ull((__qgpu_u64a *)p, v); }
QGPU_DEV unsigned int atomicInc(unsigned int *p, unsigned int v) { return __nvvm_atom_inc_gen_ui(p, v); }
QGPU_DEV unsigned int atomicDec(unsigned int *p, unsigned int v) { return __nvvm_atom_dec_gen_ui(p, v); }

/* ---- warp shuffles ----
 * PTX shfl.sync's c operand packs the segment mask and the clamp: c = ((32 - width) << 8) | clamp,
 * clamp = 31 for idx/down/xor and 0 for up. The default width is warpSize (4 on our machine). */
#define QGPU_SHFL_C(width, clamp) ((((32 - (width)) & 31) << 8) | (clamp))
QGPU_DEV int __shfl_sync(unsigned int m, int v, int src, int width = warpSize) {
  return __nvvm_shfl_sync_idx_i32(m, v, src, QGPU_SHFL_C(width, 0x1f));
}
QGPU_DEV int __shfl_up_sync(unsigned int m, int v, unsigned int d, int width = warpSize) {
  return __nvvm_shfl_sync_up_i32(m, v, d, QGPU_SHFL_C(width, 0));
}
QGPU_DEV int __shfl_down_sync(unsigned int m, int v, unsigned int d, int width = warpSize) {
  return __nvvm_shfl_sync_down_i32(m, v, d, QGPU_SHFL_C(width, 0x1f));
}
QGPU_DEV int __shfl_xor_sync(unsigned int m, int v, int lm, int width = warpSize) {
  return __nvvm_shfl_sync_bfly_i32(m, v, lm, QGPU_SHFL_C(width, 0x1f));
}
QGPU_DEV unsigned int __shfl_sync(unsigned int m, unsigned int v, int src, int width = warpSize) {
  return (unsigned int)__shfl_sync(m, (int)v, src, width);
}
QGPU_DEV unsigned int __shfl_up_sync(unsigned int m, unsigned int v, unsigned int d, int width = warpSize) {
  return (unsigned int)__shfl_up_sync(m, (int)v, d, width);
}
QGPU_DEV unsigned int __shfl_down_sync(unsigned int m, unsigned int v, unsigned int d, int width = warpSize) {
  return (unsigned int)__shfl_down_sync(m, (int)v, d, width);
}
QGPU_DEV unsigned int __shfl_xor_sync(unsigned int m, unsigned int v, int lm, int width = warpSize) {
  return (unsigned int)__shfl_xor_sync(m, (int)v, lm, width);
}
#undef QGPU_SHFL_C

/* ---- integer helpers ---- */
QGPU_DEV int min(int a, int b) { return a < b ? a : b; }
QGPU_DEV int max(int a, int b) { return a > b ? a : b; }
QGPU_DEV unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
QGPU_DEV unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
/* CUDA's mixed-sign overloads compare as unsigned. */
QGPU_DEV unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
QGPU_DEV unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
QGPU_DEV unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
QGPU_DEV unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
QGPU_DEV long long min(long long a, long long b) { return a < b ? a : b; }
QGPU_DEV long long max(long long a, long long b) { return a > b ? a : b; }
QGPU_DEV unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
QGPU_DEV unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
QGPU_DEV long min(long a, long b) { return a < b ? a : b; }
QGPU_DEV long max(long a, long b) { return a > b ? a : b; }
QGPU_DEV unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
QGPU_DEV unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
QGPU_DEV int abs(int a) { return a < 0 ? -a : a; }
QGPU_DEV long labs(long a) { return a < 0 ? -a : a; }
QGPU_DEV long long llabs(long long a) { return a < 0 ? -a : a; }
QGPU_DEV long abs(long a) { return labs(a); }
QGPU_DEV long long abs(long long a) { return llabs(a); }
/* clang's generic builtins map onto popc.b32, clz.b32 and brev.b32; the zero guards give CUDA's
 * results for 0 (__clz(0) = 32, __ffs(0) = 0) where the builtins leave them undefined. */
QGPU_DEV int __popc(unsigned int x) { return __builtin_popcount(x); }
QGPU_DEV int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
QGPU_DEV unsigned int __brev(unsigned int x) { return __builtin_bitreverse32(x); }
QGPU_DEV int __ffs(int x) { return __builtin_ffs(x); }
QGPU_DEV int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
QGPU_DEV int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
QGPU_DEV unsigned long long __brevll(unsigned long long x) { return __builtin_bitreverse64(x); }
QGPU_DEV int __ffsll(long long x) { return __builtin_ffsll(x); }
QGPU_DEV int __mulhi(int a, int b) { return __nvvm_mulhi_i(a, b); }
QGPU_DEV unsigned int __umulhi(unsigned int a, unsigned int b) { return __nvvm_mulhi_ui(a, b); }
/* 24-bit multiplies, sums of absolute differences and halving adds, with CUDA's integer semantics. */
QGPU_DEV int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
QGPU_DEV unsigned int __umul24(unsigned int a, unsigned int b) { return (a & 0xffffffu) * (b & 0xffffffu); }
QGPU_DEV unsigned int __sad(int a, int b, unsigned int c) { return c + (a > b ? (unsigned)a - (unsigned)b : (unsigned)b - (unsigned)a); }
QGPU_DEV unsigned int __usad(unsigned int a, unsigned int b, unsigned int c) { return c + (a > b ? a - b : b - a); }
QGPU_DEV int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
QGPU_DEV int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
QGPU_DEV unsigned int __uhadd(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a + b) >> 1); }
QGPU_DEV unsigned int __urhadd(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a + b + 1) >> 1); }
/* __byte_perm: result byte i is byte ((s >> 4i) & 7) of the pair {y:x} (x holds bytes 0-3); written in
 * plain C so any selector works, and a constant one folds to shifts and masks (or prmt). */
QGPU_DEV unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  unsigned long long pair = ((unsigned long long)y << 32) | x;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned int)((pair >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
/* Funnel shifts of the pair {hi:lo}: _l gives the high word of it << n, _r the low word of it >> n;
 * the plain forms take n & 31, the _c forms clamp n to 32. */
QGPU_DEV unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int n) {
  return (unsigned int)(((((unsigned long long)hi << 32) | lo) << (n & 31)) >> 32);
}
QGPU_DEV unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int n) {
  return (unsigned int)(((((unsigned long long)hi << 32) | lo) << (n < 32 ? n : 32)) >> 32);
}
QGPU_DEV unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int n) {
  return (unsigned int)((((unsigned long long)hi << 32) | lo) >> (n & 31));
}
QGPU_DEV unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int n) {
  return (unsigned int)((((unsigned long long)hi << 32) | lo) >> (n < 32 ? n : 32));
}

#undef QGPU_DEV
#endif /* QGPU_PRELUDE_H */

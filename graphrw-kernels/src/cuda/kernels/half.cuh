// The one f16/bf16 prelude of every CUDA source: prepended by the host to the graph-op
// kernels (with common.cuh), to sdpa.cu and to the kernels fused_kernel! generates
// (with generated.cuh). No CUDA headers (NVRTC needs no include path): f16/bf16 are raw
// 16-bit words converted with PTX instructions.
//
// When DTYPE_ID is defined (0 f32, 1 f16, 2 bf16), `elem_t` is that storage type and
// load_elem/store_elem read and write it as float.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ float bh2f(u16 h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ u16 f2bh(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

#ifdef DTYPE_ID
#if DTYPE_ID == 0
typedef float elem_t;
#else
typedef u16 elem_t;
#endif
__device__ __forceinline__ float load_elem(const elem_t* p, i64 i) {
#if DTYPE_ID == 0
    return p[i];
#elif DTYPE_ID == 1
    return h2f(p[i]);
#else
    return bh2f(p[i]);
#endif
}
__device__ __forceinline__ void store_elem(elem_t* p, i64 i, float v) {
#if DTYPE_ID == 0
    p[i] = v;
#elif DTYPE_ID == 1
    p[i] = f2h(v);
#else
    p[i] = f2bh(v);
#endif
}
#endif

// Shared prelude of the graph-op kernels (prepended to each source by the host, after
// half.cuh, which holds the f16/bf16 conversions; NVRTC needs no include path).
//
// Dtype ids (the host's `dtype_id`): 0 f32, 1 f16, 2 bf16, 3 i64, 4 i32, 5 bool (one
// byte), 6 f64. `ACC` picks the arithmetic type: 0 float, 1 double, 2 long long.

typedef unsigned char u8;
typedef unsigned long long u64;

#ifndef ACC
#define ACC 0
#endif
#if ACC == 0
typedef float acc_t;
#elif ACC == 1
typedef double acc_t;
#else
typedef long long acc_t;
#endif

// The most dims a strided layout carries (after merging contiguous dims on the host).
#define MAXR 8

// A strided iteration space: `n` elements of shape `shape[0..rank]`, and for each of up
// to 4 operands its element strides and base offset. Passed by value.
struct Layout {
    i64 n;
    i64 rank;
    i64 shape[MAXR];
    i64 st[4][MAXR];
    i64 off[4];
};

// Element offsets of linear index `i` for the first `K` operands.
template <int K>
__device__ __forceinline__ void offsets(const Layout& L, i64 i, i64* o) {
#pragma unroll
    for (int k = 0; k < K; ++k) o[k] = L.off[k];
    for (int d = (int)L.rank - 1; d >= 0; --d) {
        const i64 s = L.shape[d];
        const i64 c = i % s;
        i /= s;
#pragma unroll
        for (int k = 0; k < K; ++k) o[k] += c * L.st[k][d];
    }
}

// Loads element `i` of a buffer of dtype `TY` as acc_t.
template <int TY>
__device__ __forceinline__ acc_t ld(const void* p, i64 i) {
    if (TY == 0) return (acc_t)((const float*)p)[i];
    if (TY == 1) return (acc_t)h2f(((const u16*)p)[i]);
    if (TY == 2) return (acc_t)bh2f(((const u16*)p)[i]);
    if (TY == 3) return (acc_t)((const i64*)p)[i];
    if (TY == 4) return (acc_t)((const int*)p)[i];
    if (TY == 5) return (acc_t)(((const u8*)p)[i] != 0);
    return (acc_t)((const double*)p)[i];
}

// Float to integer as Rust's `as` does it: truncation, saturation, NaN to 0.
template <typename I>
__device__ __forceinline__ I sat_int(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (I)lo;
    if (v >= hi) return (I)hi;
    return (I)v;
}

// Stores `v` as element `i` of a buffer of dtype `TY`.
template <int TY>
__device__ __forceinline__ void st(void* p, i64 i, acc_t v) {
    if (TY == 0) ((float*)p)[i] = (float)v;
    else if (TY == 1) ((u16*)p)[i] = f2h((float)v);
    else if (TY == 2) ((u16*)p)[i] = f2bh((float)v);
#if ACC == 2
    else if (TY == 3) ((i64*)p)[i] = (i64)v;
    else if (TY == 4) ((int*)p)[i] = (int)v;
#else
    else if (TY == 3) ((i64*)p)[i] = sat_int<i64>((double)v, -9223372036854775808.0, 9223372036854775807.0);
    else if (TY == 4) ((int*)p)[i] = sat_int<int>((double)v, -2147483648.0, 2147483647.0);
#endif
    else if (TY == 5) ((u8*)p)[i] = (v != (acc_t)0) ? 1 : 0;
    else ((double*)p)[i] = (double)v;
}

// Block-wide reductions of one float per thread (blockDim.x a multiple of 32, <= 1024).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float block_sum(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    v = l < nw ? part[l] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v) {
    __shared__ float part[32];
    v = warp_max(v);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    v = l < nw ? part[l] : -__int_as_float(0x7f800000);
    return warp_max(v);
}

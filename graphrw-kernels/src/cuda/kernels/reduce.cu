// Row-wise kernels: softmax / log_softmax along one dim, layer_norm and rms_norm over
// trailing dims, and sum / mean / amax reductions. One block per output row; float
// arithmetic for every float dtype (f64 too: these kernels are for f32/f16/bf16 models).
//
// Defines: DT (dtype id of data and output), DT_W (dtype of weight/bias), HAS_W, HAS_B,
// LOG (log_softmax), RMS (rms_norm), RED (0 sum, 1 mean, 2 amax).

#ifndef DT
#define DT 0
#endif
#ifndef DT_W
#define DT_W DT
#endif
#ifndef HAS_W
#define HAS_W 0
#endif
#ifndef HAS_B
#define HAS_B 0
#endif
#ifndef LOG
#define LOG 0
#endif
#ifndef RMS
#define RMS 0
#endif
#ifndef RED
#define RED 0
#endif

// Softmax of x viewed as [outer, len, inner] along `len`; block b handles row
// (b / inner, :, b % inner).
extern "C" __global__ void softmax(void* out, const void* x, i64 len, i64 inner) {
    const i64 row = blockIdx.x;
    const i64 base = (row / inner) * len * inner + row % inner;
    float m = -__int_as_float(0x7f800000);
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, ld<DT>(x, base + j * inner));
    m = block_max(m);
    float s = 0.0f;
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) s += expf(ld<DT>(x, base + j * inner) - m);
    s = block_sum(s);
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = ld<DT>(x, base + j * inner) - m;
#if LOG
        st<DT>(out, base + j * inner, v - logf(s));
#else
        st<DT>(out, base + j * inner, expf(v) / s);
#endif
    }
}

// layer_norm (or rms_norm with RMS) of contiguous rows of `len` elements; weight and
// bias have `len` elements.
extern "C" __global__ void norm_rows(void* out, const void* x, const void* w, const void* b,
                                i64 len, float eps) {
    const i64 base = (i64)blockIdx.x * len;
    float mean = 0.0f;
#if !RMS
    float s = 0.0f;
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) s += ld<DT>(x, base + j);
    mean = block_sum(s) / (float)len;
#endif
    float q = 0.0f;
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) {
        const float d = ld<DT>(x, base + j) - mean;
        q += d * d;
    }
    const float inv = rsqrtf(block_sum(q) / (float)len + eps);
    for (i64 j = threadIdx.x; j < len; j += blockDim.x) {
        float v = (ld<DT>(x, base + j) - mean) * inv;
#if HAS_W
        v *= (float)ld<DT_W>(w, j);
#endif
#if HAS_B
        v += (float)ld<DT_W>(b, j);
#endif
        st<DT>(out, base + j, v);
    }
}

// Reduction: output element `blockIdx.x` (its input offset from layout K's operand 0)
// combines the R elements at offsets given by layout Rl's operand 0.
extern "C" __global__ void reduce(void* out, const void* x, const Layout K, const Layout Rl) {
    i64 base[1];
    offsets<1>(K, blockIdx.x, base);
#if RED == 2
    float acc = -__int_as_float(0x7f800000);
    bool nan = false;
#else
    float acc = 0.0f;
#endif
    for (i64 r = threadIdx.x; r < Rl.n; r += blockDim.x) {
        i64 o[1];
        offsets<1>(Rl, r, o);
        const float v = ld<DT>(x, base[0] + o[0]);
#if RED == 2
        nan |= v != v;
        acc = fmaxf(acc, v);
#else
        acc += v;
#endif
    }
#if RED == 2
    acc = block_max(acc);
    nan = block_sum(nan ? 1.0f : 0.0f) > 0.0f;
    if (threadIdx.x == 0) st<DT>(out, blockIdx.x, nan ? __int_as_float(0x7fc00000) : acc);
#else
    acc = block_sum(acc);
#if RED == 1
    acc /= (float)Rl.n;
#endif
    if (threadIdx.x == 0) st<DT>(out, blockIdx.x, acc);
#endif
}

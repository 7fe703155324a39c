// Fused scaled dot-product attention (flash-attention-2 style), compiled by NVRTC.
//
// No CUDA headers are included (so NVRTC needs no include path): the host prepends
// half.cuh (f16/bf16 as raw 16-bit words with PTX conversions, elem_t, load_elem and
// store_elem for DTYPE_ID), and the tensor-core path issues `ldmatrix` and
// `mma.sync.m16n8k16` directly.
//
// The host specialises every build with these macros:
//   DTYPE_ID     0 = f32, 1 = f16, 2 = bf16 (storage of q, k, v and the output)
//   HEAD_DIM     D of q and k;  HEAD_DIM_V: Dv of v and the output
//   MASK_KIND    0 none, 1 bool (one byte), 2 f32, 3 f16, 4 bf16 (additive)
//   IS_CAUSAL    0 or 1 (top-left aligned: key j is masked for query i when j > i)
//   NUM_WARPS    warps per block; BLOCK_N: keys per streamed k/v tile
//   (tensor-core kernel only) Q_IN_REGS: 1 keeps the q fragments in registers;
//   M_TILES: 16-row query tiles per warp (2 halves the shared-memory reads per MMA)
//
// Layouts (contiguous): q [BH, Sq, D], k [BHkv, Skv, D], v [BHkv, Skv, Dv],
// out [BH, Sq, Dv], where BH = batch * Hq and query head h reads kv head h / (Hq / Hkv).
// The mask is read at mask_head_off[bh] + row * mask_row_stride + col * mask_col_stride
// (element offsets; broadcast dims have stride 0).

#ifndef DTYPE_ID
#error "DTYPE_ID must be defined (half.cuh reads it before this file)"
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef MASK_KIND
#define MASK_KIND 0
#endif
#ifndef IS_CAUSAL
#define IS_CAUSAL 0
#endif
#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef Q_IN_REGS
#define Q_IN_REGS 1
#endif
#ifndef M_TILES
#define M_TILES 1
#endif

#define LOG2E 1.4426950408889634f
#define NEG_INF (__int_as_float(0xff800000))

// Mask value for (row, col) in log2 units: 0 to keep, -inf to drop, else the additive
// bias times log2(e).
#if MASK_KIND != 0
__device__ __forceinline__ float mask_log2(const void* mask, i64 off) {
#if MASK_KIND == 1
    return ((const unsigned char*)mask)[off] ? 0.0f : NEG_INF;
#elif MASK_KIND == 2
    return ((const float*)mask)[off] * LOG2E;
#elif MASK_KIND == 3
    return h2f(((const u16*)mask)[off]) * LOG2E;
#else
    return bh2f(((const u16*)mask)[off]) * LOG2E;
#endif
}
#endif

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---------------------------------------------------------------------------------------
// Generic kernel: any dtype, any head dims (up to 256). One warp per query row; a block of
// NUM_WARPS rows shares each k/v tile of 32 keys in shared memory (as f32).
// ---------------------------------------------------------------------------------------
#define GEN_TILE 32
#define GEN_DQ ((HEAD_DIM + 31) / 32)
#define GEN_DV ((HEAD_DIM_V + 31) / 32)

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32)
sdpa_generic(const elem_t* __restrict__ q, const elem_t* __restrict__ k,
             const elem_t* __restrict__ v, elem_t* __restrict__ out,
             const void* __restrict__ mask, const i64* __restrict__ mask_head_off,
             i64 mask_row_stride, i64 mask_col_stride, int hq, int hkv, int sq, int skv,
             float scale_log2) {
    extern __shared__ float gsmem[];
    float* ks = gsmem;                                  // [GEN_TILE][HEAD_DIM + 1]
    float* vs = ks + GEN_TILE * (HEAD_DIM + 1);         // [GEN_TILE][HEAD_DIM_V]
    float* qs = vs + GEN_TILE * HEAD_DIM_V;             // [NUM_WARPS][HEAD_DIM]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int bh = blockIdx.y;
    const int bkv = (bh / hq) * hkv + (bh % hq) / (hq / hkv);
    const int row0 = blockIdx.x * NUM_WARPS;
    const int row = row0 + warp;
    const bool active = row < sq;

    const elem_t* qp = q + ((i64)bh * sq + (active ? row : 0)) * HEAD_DIM;
    const elem_t* kp = k + (i64)bkv * skv * HEAD_DIM;
    const elem_t* vp = v + (i64)bkv * skv * HEAD_DIM_V;
    for (int d = lane; d < HEAD_DIM; d += 32) qs[warp * HEAD_DIM + d] = load_elem(qp, d);

    float o[GEN_DV];
#pragma unroll
    for (int i = 0; i < GEN_DV; ++i) o[i] = 0.f;
    float m = NEG_INF, l = 0.f;

    int kv_end = skv;
#if IS_CAUSAL
    kv_end = min(skv, row0 + NUM_WARPS);
#endif
#if MASK_KIND != 0
    const i64 moff = mask_head_off[bh] + (i64)(active ? row : 0) * mask_row_stride;
#endif
    for (int t0 = 0; t0 < kv_end; t0 += GEN_TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < GEN_TILE * HEAD_DIM; i += NUM_WARPS * 32) {
            int r = i / HEAD_DIM, c = i % HEAD_DIM;
            ks[r * (HEAD_DIM + 1) + c] =
                (t0 + r < skv) ? load_elem(kp, (i64)(t0 + r) * HEAD_DIM + c) : 0.f;
        }
        for (int i = threadIdx.x; i < GEN_TILE * HEAD_DIM_V; i += NUM_WARPS * 32) {
            int r = i / HEAD_DIM_V, c = i % HEAD_DIM_V;
            vs[i] = (t0 + r < skv) ? load_elem(vp, (i64)(t0 + r) * HEAD_DIM_V + c) : 0.f;
        }
        __syncthreads();
        if (!active) continue;
        const int j = t0 + lane;
        float s = 0.f;
        const float* qw = qs + warp * HEAD_DIM;
        const float* kr = ks + lane * (HEAD_DIM + 1);
#pragma unroll 8
        for (int d = 0; d < HEAD_DIM; ++d) s = fmaf(qw[d], kr[d], s);
        s *= scale_log2;
        if (j >= skv) s = NEG_INF;
#if IS_CAUSAL
        if (j > row) s = NEG_INF;
#endif
#if MASK_KIND != 0
        if (j < skv) s += mask_log2(mask, moff + (i64)j * mask_col_stride);
#endif
        float mx = s;
#pragma unroll
        for (int w = 16; w > 0; w >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
        const float m_new = fmaxf(m, mx);
        const float m_use = (m_new == NEG_INF) ? 0.f : m_new;
        const float alpha = fast_exp2(m - m_use);
        const float p = fast_exp2(s - m_use);
        float ps = p;
#pragma unroll
        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
        l = l * alpha + ps;
        m = m_new;
#pragma unroll
        for (int i = 0; i < GEN_DV; ++i) o[i] *= alpha;
        for (int jj = 0; jj < GEN_TILE; ++jj) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
            for (int i = 0; i < GEN_DV; ++i) {
                const int d = lane + 32 * i;
                if (d < HEAD_DIM_V) o[i] = fmaf(pj, vs[jj * HEAD_DIM_V + d], o[i]);
            }
        }
    }
    if (!active) return;
    elem_t* op = out + ((i64)bh * sq + row) * HEAD_DIM_V;
    const float inv = 1.f / l;  // l == 0 (every key masked) gives NaN, like the reference
#pragma unroll
    for (int i = 0; i < GEN_DV; ++i) {
        const int d = lane + 32 * i;
        if (d < HEAD_DIM_V) store_elem(op, d, o[i] * inv);
    }
}

// ---------------------------------------------------------------------------------------
// Tensor-core kernel: f16/bf16, HEAD_DIM and HEAD_DIM_V multiples of 16 (<= 256).
// Each warp owns WARP_M query rows; S = Q K^T and O += P V run on mma.sync m16n8k16 with f32
// accumulation; k/v tiles are double-buffered through cp.async.
// ---------------------------------------------------------------------------------------
#if DTYPE_ID != 0

#define WARP_M (16 * M_TILES)
#define BLOCK_M (WARP_M * NUM_WARPS)
#define NTHREADS (32 * NUM_WARPS)
#define QK_STRIDE (HEAD_DIM + 8)   // row pitch in halves (+16 bytes: no ldmatrix conflicts)
#define V_STRIDE (HEAD_DIM_V + 8)
#define KSTEPS (HEAD_DIM / 16)
#define NTILES (BLOCK_N / 8)
#define DTILES (HEAD_DIM_V / 8)

__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
#if DTYPE_ID == 1
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Packs two floats into one register of two halves (lo in the low 16 bits).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
#if DTYPE_ID == 1
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

// Copies `rows` rows of `cols` halves (a multiple of 8) from global memory into a shared
// tile of pitch `pitch` halves, zero-filling rows at or past `valid_rows`.
__device__ __forceinline__ void load_tile(u16* smem, const u16* g, int rows, int cols,
                                          int pitch, int valid_rows) {
    const int chunks_per_row = cols / 8;
    for (int c = threadIdx.x; c < rows * chunks_per_row; c += NTHREADS) {
        const int r = c / chunks_per_row, col = (c % chunks_per_row) * 8;
        const bool ok = r < valid_rows;
        const u16* src = ok ? g + (i64)r * cols + col : g;
        cp_async16(smem_u32(smem + r * pitch + col), src, ok);
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
sdpa_mma(const u16* __restrict__ q, const u16* __restrict__ k, const u16* __restrict__ v,
         u16* __restrict__ out, const void* __restrict__ mask,
         const i64* __restrict__ mask_head_off, i64 mask_row_stride, i64 mask_col_stride,
         int hq, int hkv, int sq, int skv, float scale_log2) {
    extern __shared__ __align__(16) u16 smem[];
    u16* qs = smem;                                 // [BLOCK_M][QK_STRIDE]
    u16* kbuf = qs + BLOCK_M * QK_STRIDE;           // 2 x [BLOCK_N][QK_STRIDE]
    u16* vbuf = kbuf + 2 * BLOCK_N * QK_STRIDE;     // 2 x [BLOCK_N][V_STRIDE]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tig = lane & 3;
    const int bh = blockIdx.y;
    const int bkv = (bh / hq) * hkv + (bh % hq) / (hq / hkv);
#if IS_CAUSAL
    // heaviest query blocks first
    const int m_block = gridDim.x - 1 - blockIdx.x;
#else
    const int m_block = blockIdx.x;
#endif
    const int q0 = m_block * BLOCK_M;

    const u16* qp = q + ((i64)bh * sq + q0) * HEAD_DIM;
    const u16* kp = k + (i64)bkv * skv * HEAD_DIM;
    const u16* vp = v + (i64)bkv * skv * HEAD_DIM_V;

    int kv_end = skv;
#if IS_CAUSAL
    kv_end = min(skv, q0 + BLOCK_M);
#endif
    const int n_blocks = (kv_end + BLOCK_N - 1) / BLOCK_N;

    load_tile(qs, qp, BLOCK_M, HEAD_DIM, QK_STRIDE, sq - q0);
    if (n_blocks > 0) {
        load_tile(kbuf, kp, BLOCK_N, HEAD_DIM, QK_STRIDE, skv);
        load_tile(vbuf, vp, BLOCK_N, HEAD_DIM_V, V_STRIDE, skv);
    }
    cp_async_commit();

    float o[M_TILES][DTILES][4];
    float m_r[M_TILES][2], l_r[M_TILES][2];
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
        for (int i = 0; i < DTILES; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
        m_r[mt][0] = m_r[mt][1] = NEG_INF;
        l_r[mt][0] = l_r[mt][1] = 0.f;
    }

    // this thread's rows in m-tile mt: row_a + 16 * mt and row_a + 16 * mt + 8
    const int row_a = q0 + warp * WARP_M + g;
#if MASK_KIND != 0
    const i64 mbase = mask_head_off[bh];
#endif

#if Q_IN_REGS
    u32 qa[M_TILES][KSTEPS][4];
#endif
    const u32 qs_lane =
        smem_u32(qs + (warp * WARP_M + (lane % 16)) * QK_STRIDE + (lane / 16) * 8);

    for (int nb = 0; nb < n_blocks; ++nb) {
        cp_async_wait_all();
        __syncthreads();
        const int stage = nb & 1;
        if (nb + 1 < n_blocks) {
            const int n1 = (nb + 1) * BLOCK_N;
            load_tile(kbuf + (stage ^ 1) * BLOCK_N * QK_STRIDE, kp + (i64)n1 * HEAD_DIM, BLOCK_N,
                      HEAD_DIM, QK_STRIDE, skv - n1);
            load_tile(vbuf + (stage ^ 1) * BLOCK_N * V_STRIDE, vp + (i64)n1 * HEAD_DIM_V,
                      BLOCK_N, HEAD_DIM_V, V_STRIDE, skv - n1);
        }
        cp_async_commit();
#if Q_IN_REGS
        if (nb == 0) {
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ++ks)
                    ldsm_x4(qs_lane + (mt * 16 * QK_STRIDE + ks * 16) * 2, qa[mt][ks][0],
                            qa[mt][ks][1], qa[mt][ks][2], qa[mt][ks][3]);
        }
#endif
        const u16* kt = kbuf + stage * BLOCK_N * QK_STRIDE;
        const u16* vt = vbuf + stage * BLOCK_N * V_STRIDE;
        const int n0 = nb * BLOCK_N;
#if IS_CAUSAL
        // every key of this tile is after every row of this warp: nothing to add
        if (n0 > q0 + warp * WARP_M + WARP_M - 1) continue;
#endif

        // S = Q K^T for this warp's 16 rows and BLOCK_N keys.
        float s[M_TILES][NTILES][4];
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
            for (int j = 0; j < NTILES; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
        const u32 k_lane =
            smem_u32(kt + ((lane / 16) * 8 + (lane % 8)) * QK_STRIDE + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
#if Q_IN_REGS
#define QA(mt) qa[mt][ks]
#else
            u32 qf[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt)
                ldsm_x4(qs_lane + (mt * 16 * QK_STRIDE + ks * 16) * 2, qf[mt][0], qf[mt][1],
                        qf[mt][2], qf[mt][3]);
#define QA(mt) qf[mt]
#endif
#pragma unroll
            for (int j2 = 0; j2 < NTILES / 2; ++j2) {
                u32 b0, b1, b2, b3;
                ldsm_x4(k_lane + (j2 * 16 * QK_STRIDE + ks * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < M_TILES; ++mt) {
                    mma16816(s[mt][2 * j2], QA(mt), b0, b1);
                    mma16816(s[mt][2 * j2 + 1], QA(mt), b2, b3);
                }
            }
#undef QA
        }

        // Scale (into log2 units) and mask.
        const bool edge = (n0 + BLOCK_N > skv)
#if IS_CAUSAL
                          || (n0 + BLOCK_N - 1 > q0 + warp * WARP_M)
#endif
            ;
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int j = 0; j < NTILES; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                float x = s[mt][j][c] * scale_log2;
#if MASK_KIND != 0 || IS_CAUSAL
                const int row = row_a + 16 * mt + (c >= 2 ? 8 : 0);
#endif
                const int col = n0 + j * 8 + tig * 2 + (c & 1);
                if (edge) {
                    if (col >= skv) x = NEG_INF;
#if IS_CAUSAL
                    if (col > row) x = NEG_INF;
#endif
                }
#if MASK_KIND != 0
                if (col < skv && row < sq)
                    x += mask_log2(mask, mbase + (i64)row * mask_row_stride +
                                             (i64)col * mask_col_stride);
#endif
                s[mt][j][c] = x;
            }
        }

        // Online softmax: each row lives in the 4 threads of a quad.
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = NEG_INF;
#pragma unroll
            for (int j = 0; j < NTILES; ++j)
                mx = fmaxf(mx, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_r[mt][r], mx);
            const float m_use = (m_new == NEG_INF) ? 0.f : m_new;
            const float alpha = fast_exp2(m_r[mt][r] - m_use);
            m_r[mt][r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < NTILES; ++j) {
                const float p0 = fast_exp2(s[mt][j][2 * r] - m_use);
                const float p1 = fast_exp2(s[mt][j][2 * r + 1] - m_use);
                s[mt][j][2 * r] = p0;
                s[mt][j][2 * r + 1] = p1;
                sum += p0 + p1;
            }
            l_r[mt][r] = l_r[mt][r] * alpha + sum;
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                o[mt][i][2 * r] *= alpha;
                o[mt][i][2 * r + 1] *= alpha;
            }
        }

        // O += P V.
        const u32 v_lane =
            smem_u32(vt + (((lane / 8) % 2) * 8 + (lane % 8)) * V_STRIDE + (lane / 16) * 8);
#pragma unroll
        for (int t = 0; t < BLOCK_N / 16; ++t) {
            u32 a[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; ++mt) {
                a[mt][0] = pack2(s[mt][2 * t][0], s[mt][2 * t][1]);
                a[mt][1] = pack2(s[mt][2 * t][2], s[mt][2 * t][3]);
                a[mt][2] = pack2(s[mt][2 * t + 1][0], s[mt][2 * t + 1][1]);
                a[mt][3] = pack2(s[mt][2 * t + 1][2], s[mt][2 * t + 1][3]);
            }
#pragma unroll
            for (int d2 = 0; d2 < DTILES / 2; ++d2) {
                u32 b0, b1, b2, b3;
                ldsm_x4_t(v_lane + (t * 16 * V_STRIDE + d2 * 16) * 2, b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < M_TILES; ++mt) {
                    mma16816(o[mt][2 * d2], a[mt], b0, b1);
                    mma16816(o[mt][2 * d2 + 1], a[mt], b2, b3);
                }
            }
        }
    }
    cp_async_wait_all();

    // Normalise and store.
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_r[mt][r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = 1.f / l;  // 0 when every key is masked: 0 * inf = NaN, as the reference
        const int row = row_a + 16 * mt + 8 * r;
        if (row < sq) {
            u16* op = out + ((i64)bh * sq + row) * HEAD_DIM_V;
#pragma unroll
            for (int i = 0; i < DTILES; ++i) {
                const u32 packed = pack2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
                *(u32*)(op + i * 8 + tig * 2) = packed;
            }
        }
    }
}
#endif

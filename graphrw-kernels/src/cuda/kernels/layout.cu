// Data movement by element size only (any dtype): strided copies (permute, expand,
// slice, concat, split, contiguous) and gathers by index.
//
// Defines: ESZ (element size in bytes: 1, 2, 4 or 8), IDX_DT (index dtype: 3 i64, 4 i32).
// Indices out of range never read outside the data: the element is zeroed and
// `*err` is set to 1 + the flat position of an offending index.

#ifndef ESZ
#define ESZ 4
#endif
#ifndef IDX_DT
#define IDX_DT 3
#endif

#if ESZ == 1
typedef u8 word_t;
#elif ESZ == 2
typedef u16 word_t;
#elif ESZ == 4
typedef u32 word_t;
#else
typedef u64 word_t;
#endif

__device__ __forceinline__ i64 load_index(const void* idx, i64 i) {
#if IDX_DT == 3
    return ((const i64*)idx)[i];
#else
    return (i64)((const int*)idx)[i];
#endif
}

// Resolves a possibly negative index against `size`; -1 when out of range.
__device__ __forceinline__ i64 resolve(i64 v, i64 size) {
    if (v < 0) v += size;
    return (v < 0 || v >= size) ? -1 : v;
}

__device__ __forceinline__ void flag(int* err, i64 pos) {
    atomicCAS(err, 0, (int)((pos < 0x7ffffffe ? pos : 0x7ffffffe) + 1));
}

// out[o0] = in[o1] over the layout (operand 0 the output, 1 the input).
extern "C" __global__ void copy_strided(word_t* out, const word_t* in, const Layout L) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < L.n; i += stride) {
        i64 o[2];
        offsets<2>(L, i, o);
        out[o[0]] = in[o[1]];
    }
}

// Gather along one axis (ONNX Gather, index_select): data viewed as [outer, axis, inner],
// out as [outer, nidx, inner].
extern "C" __global__ void gather_axis(word_t* out, const word_t* x, const void* idx,
                                       i64 outer, i64 axis, i64 inner, i64 nidx, int* err) {
    const i64 n = outer * nidx * inner;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const i64 r = i % inner;
        const i64 j = (i / inner) % nidx;
        const i64 o = i / (inner * nidx);
        const i64 v = resolve(load_index(idx, j), axis);
        if (v < 0) {
            flag(err, j);
            out[i] = 0;
        } else {
            out[i] = x[(o * axis + v) * inner + r];
        }
    }
}

// GatherElements: out has the index's shape (layout rank/shape); operand 0 of the layout
// gives the data offset of the coordinates with the gathered dim's stride zeroed,
// `dim_stride` and `axis` that dim's data stride and size.
extern "C" __global__ void gather_elements(word_t* out, const word_t* x, const void* idx,
                                           const Layout L, i64 dim_stride, i64 axis,
                                           int* err) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < L.n; i += stride) {
        i64 o[1];
        offsets<1>(L, i, o);
        const i64 v = resolve(load_index(idx, i), axis);
        if (v < 0) {
            flag(err, i);
            out[i] = 0;
        } else {
            out[i] = x[o[0] + v * dim_stride];
        }
    }
}

// GatherND: `tuples` index tuples of `k` entries each, `per_batch` tuples per batch of
// `batch_elems` data elements; tuple entry j indexes a dim of size sizes[j] and stride
// strides[j]; each tuple copies `inner` contiguous elements.
struct NdDims {
    i64 sizes[MAXR];
    i64 strides[MAXR];
};
extern "C" __global__ void gather_nd(word_t* out, const word_t* x, const void* idx,
                                     i64 tuples, i64 k, i64 per_batch, i64 batch_elems,
                                     i64 inner, const NdDims D, int* err) {
    const i64 n = tuples * inner;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const i64 t = i / inner, r = i % inner;
        i64 off = (t / per_batch) * batch_elems;
        bool ok = true;
        for (int j = 0; j < k; ++j) {
            const i64 v = resolve(load_index(idx, t * k + j), D.sizes[j]);
            if (v < 0) {
                flag(err, t * k + j);
                ok = false;
                break;
            }
            off += v * D.strides[j];
        }
        out[i] = ok ? x[off + r] : (word_t)0;
    }
}

// Helpers of the kernels fused_kernel! generates (after half.cuh; DTYPE_ID is always
// defined by the host: 0 f32, 1 f16, 2 bf16).
__device__ __forceinline__ float max_nan(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : (b > a ? b : a); }
__device__ __forceinline__ float min_nan(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : (b < a ? b : a); }
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float round_f16(float x) { return h2f(f2h(x)); }
__device__ __forceinline__ float round_bf16(float x) { return bh2f(f2bh(x)); }
// Block-wide reductions (blockDim.x a power of two, `sh` blockDim.x floats).
__device__ float block_sum(float v, float* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); }
    float r = sh[0]; __syncthreads(); return r;
}
__device__ float block_max(float v, float* sh) {
    sh[threadIdx.x] = v; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if ((int)threadIdx.x < s) sh[threadIdx.x] = max_nan(sh[threadIdx.x], sh[threadIdx.x + s]); __syncthreads(); }
    float r = sh[0]; __syncthreads(); return r;
}

// Elementwise ops with broadcasting (and dtype casts), over a strided Layout: operand 0
// is the output, 1..NIN the inputs (stride 0 along broadcast dims).
//
// Defines: NIN (1, 2 or 3 inputs), OP (the op code, see `apply`), DT_O, DT_A, DT_B, DT_C
// (dtype ids of the output and inputs), ACC (arithmetic type, see common.cuh).

#ifndef NIN
#define NIN 1
#endif
#ifndef OP
#define OP 0
#endif
#ifndef DT_O
#define DT_O 0
#endif
#ifndef DT_A
#define DT_A DT_O
#endif
#ifndef DT_B
#define DT_B DT_A
#endif
#ifndef DT_C
#define DT_C DT_B
#endif

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// Op codes: unary 0 copy/cast, 1 neg, 2 abs, 3 reciprocal, 4 sqrt, 5 rsqrt, 6 exp, 7 log,
// 8 sin, 9 cos, 10 erf, 11 tanh, 12 sigmoid, 13 relu, 14 gelu, 15 gelu_tanh, 16 silu,
// 17 not, 18 isnan; binary 20 add, 21 sub, 22 mul, 23 div, 24 pow, 25 maximum,
// 26 minimum, 27 and, 28 or, 29 eq, 30 ne, 31 lt, 32 le, 33 gt, 34 ge;
// ternary 40 where(cond, a, b).
__device__ __forceinline__ acc_t apply(acc_t a, acc_t b, acc_t c) {
#if OP == 0
    return a;
#elif OP == 1
    return -a;
#elif OP == 2
    return a < (acc_t)0 ? -a : a;
#elif OP == 3
    return (acc_t)1 / a;
#elif OP == 4
    return sqrt(a);
#elif OP == 5
    return (acc_t)1 / sqrt(a);
#elif OP == 6
    return exp(a);
#elif OP == 7
    return log(a);
#elif OP == 8
    return sin(a);
#elif OP == 9
    return cos(a);
#elif OP == 10
    return erf(a);
#elif OP == 11
    return tanh(a);
#elif OP == 12
    return (acc_t)1 / ((acc_t)1 + exp(-a));
#elif OP == 13
    return a < (acc_t)0 ? (acc_t)0 : a;  // NaN stays NaN
#elif OP == 14
    return (acc_t)0.5 * a * ((acc_t)1 + erf(a * (acc_t)0.7071067811865476));
#elif OP == 15
    return (acc_t)gelu_tanh((float)a);
#elif OP == 16
    return a / ((acc_t)1 + exp(-a));
#elif OP == 17
    return a == (acc_t)0 ? (acc_t)1 : (acc_t)0;
#elif OP == 18
    return a != a ? (acc_t)1 : (acc_t)0;
#elif OP == 20
    return a + b;
#elif OP == 21
    return a - b;
#elif OP == 22
    return a * b;
#elif OP == 23
    return a / b;
#elif OP == 24
    return pow(a, b);
#elif OP == 25
    return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
#elif OP == 26
    return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b);
#elif OP == 27
    return (a != (acc_t)0 && b != (acc_t)0) ? (acc_t)1 : (acc_t)0;
#elif OP == 28
    return (a != (acc_t)0 || b != (acc_t)0) ? (acc_t)1 : (acc_t)0;
#elif OP == 29
    return a == b ? (acc_t)1 : (acc_t)0;
#elif OP == 30
    return a != b ? (acc_t)1 : (acc_t)0;
#elif OP == 31
    return a < b ? (acc_t)1 : (acc_t)0;
#elif OP == 32
    return a <= b ? (acc_t)1 : (acc_t)0;
#elif OP == 33
    return a > b ? (acc_t)1 : (acc_t)0;
#elif OP == 34
    return a >= b ? (acc_t)1 : (acc_t)0;
#elif OP == 40
    return a != (acc_t)0 ? b : c;
#else
#error unknown OP
#endif
}

extern "C" __global__ void ew(void* out, const void* a, const void* b, const void* c,
                              const Layout L) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < L.n; i += stride) {
        i64 o[NIN + 1];
        offsets<NIN + 1>(L, i, o);
        const acc_t x = ld<DT_A>(a, o[1]);
#if NIN >= 2
        const acc_t y = ld<DT_B>(b, o[2]);
#else
        const acc_t y = (acc_t)0;
#endif
#if NIN >= 3
        const acc_t z = ld<DT_C>(c, o[3]);
#else
        const acc_t z = (acc_t)0;
#endif
        st<DT_O>(out, o[0], apply(x, y, z));
    }
}

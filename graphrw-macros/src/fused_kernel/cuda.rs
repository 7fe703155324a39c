//! The CUDA C source of a fused expression, without its prelude: the runtime
//! (`graphrw_kernels::cuda::generated_source`) puts `half.cuh` (the one f16/bf16
//! load/store prelude of every CUDA source) and `generated.cuh` (the helpers used here:
//! `max_nan`, `sigmoidf_`, `round_f16`, `block_sum`, ...) before it, and NVRTC compiles it
//! at first use.

use std::fmt::Write;

use super::cpu::{levels, row_constant};
use super::ir::{Bin, Dag, Dt, Id, Node, Red, Un};
use super::walk::{has_rot, lower_rot, operands, topo};

fn lit(x: f64) -> String {
    if x.is_nan() {
        "__int_as_float(0x7fc00000)".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "__int_as_float(0x7f800000)".into()
        } else {
            "__int_as_float(0xff800000)".into()
        }
    } else {
        format!("{:e}f", x as f32)
    }
}

fn expr(dag: &Dag, id: Id) -> String {
    let v = |i: Id| format!("v{i}");
    match dag.nodes[id] {
        Node::Input(k) => format!("load_elem(in{k}, o{k})"),
        // Row launch only: `j` the row position, `hh = n / 2`.
        Node::InputRot(k) => format!("load_elem(in{k}, base{k} + ((j + hh) % n) * st{k})"),
        Node::HalfNeg(a) => format!("(j < hh ? -{} : {})", v(a), v(a)),
        Node::Scalar(k) => format!("sc[{k}]"),
        Node::Lit(b) => lit(f64::from_bits(b)),
        Node::Un(op, a) => {
            let a = v(a);
            match op {
                Un::Neg => format!("-{a}"),
                Un::Abs => format!("fabsf({a})"),
                Un::Reciprocal => format!("1.0f / {a}"),
                Un::Sqrt => format!("sqrtf({a})"),
                Un::Rsqrt => format!("1.0f / sqrtf({a})"),
                Un::Exp => format!("expf({a})"),
                Un::Log => format!("logf({a})"),
                Un::Sin => format!("sinf({a})"),
                Un::Cos => format!("cosf({a})"),
                Un::Erf => format!("erff({a})"),
                Un::Tanh => format!("tanhf({a})"),
                Un::Sigmoid => format!("sigmoidf_({a})"),
                Un::Relu => format!("({a} < 0.0f ? 0.0f : {a})"),
                Un::Silu => format!("({a} * sigmoidf_({a}))"),
                // Rows a body cannot call (`un_op`); their formulas all the same.
                Un::Gelu => format!("(0.5f * {a} * (1.0f + erff({a} * 0.70710678f)))"),
                Un::GeluTanh => format!(
                    "(0.5f * {a} * (1.0f + tanhf(0.79788456f * ({a} + 0.044715f * {a} * {a} * {a}))))"
                ),
                Un::Not => format!("(float)({a} == 0.0f)"),
                Un::IsNan => format!("(float)({a} != {a})"),
            }
        }
        Node::Bin(op, a, b) => {
            let (a, b) = (v(a), v(b));
            match op {
                Bin::Add => format!("{a} + {b}"),
                Bin::Sub => format!("{a} - {b}"),
                Bin::Mul => format!("{a} * {b}"),
                Bin::Div => format!("{a} / {b}"),
                Bin::Pow => format!("powf({a}, {b})"),
                Bin::Maximum => format!("max_nan({a}, {b})"),
                Bin::Minimum => format!("min_nan({a}, {b})"),
                Bin::Eq => format!("(float)({a} == {b})"),
                Bin::Ne => format!("(float)({a} != {b})"),
                Bin::Lt => format!("(float)({a} < {b})"),
                Bin::Le => format!("(float)({a} <= {b})"),
                Bin::Gt => format!("(float)({a} > {b})"),
                Bin::Ge => format!("(float)({a} >= {b})"),
                // Not callable from a body (`bin_op`); on 0/1 values all the same.
                Bin::And => format!("(float)({a} != 0.0f && {b} != 0.0f)"),
                Bin::Or => format!("(float)({a} != 0.0f || {b} != 0.0f)"),
            }
        }
        Node::Where(c, a, b) => format!("({} != 0.0f ? {} : {})", v(c), v(a), v(b)),
        Node::Cast(a, dt) => match dt {
            Dt::F16 => format!("round_f16({})", v(a)),
            Dt::BF16 => format!("round_bf16({})", v(a)),
            Dt::Bool => format!("(float)({} != 0.0f)", v(a)),
            Dt::I64 => format!("truncf({})", v(a)),
            Dt::F32 | Dt::F64 => v(a),
        },
        Node::Reduce(..) => unreachable!("reductions are computed per row"),
        Node::Rot(_) | Node::RotT(_) => unreachable!("rotations are lowered first"),
    }
}

fn stmts(dag: &Dag, root: Id, avail: &[bool], out: &mut String, indent: &str) {
    let mut seen = vec![false; dag.nodes.len()];
    let mut order = Vec::new();
    fn visit(dag: &Dag, n: Id, avail: &[bool], seen: &mut Vec<bool>, order: &mut Vec<Id>) {
        if seen[n] || avail[n] {
            return;
        }
        seen[n] = true;
        for c in operands(&dag.nodes[n]) {
            visit(dag, c, avail, seen, order);
        }
        order.push(n);
    }
    visit(dag, root, avail, &mut seen, &mut order);
    for n in order {
        let _ = writeln!(out, "{indent}float v{n} = {};", expr(dag, n));
    }
}

/// The launch shape convention of the generated kernel (documented in the source).
pub enum Launch {
    Elementwise,
    Rows,
}

/// `(source, launch)` of the kernel named `entry`.
pub fn source(dag: &Dag, root: Id, ntensors: usize, name: &str, entry: &str) -> (String, Launch) {
    let (lowered, root) = lower_rot(dag, root);
    let dag = &lowered;
    let rotates = has_rot(dag, root);
    let nodes = topo(dag, root);
    let reds: Vec<Id> = nodes
        .iter()
        .copied()
        .filter(|&n| matches!(dag.nodes[n], Node::Reduce(..)))
        .collect();
    let mut s = String::new();
    let launch = if reds.is_empty() && !rotates {
        Launch::Elementwise
    } else {
        Launch::Rows
    };
    let _ = writeln!(s, "// Generated by graphrw::fused_kernel! for `{name}`.");
    let _ = writeln!(s, "// Every tensor operand and the output are stored as DTYPE_ID (0 f32, 1 f16, 2 bf16); math is f32.");
    let _ = writeln!(s, "// Arguments: (elem_t* out, const elem_t* in0 .. in{}, const float* scalars, const i64* meta, i64 count)", ntensors.saturating_sub(1));
    let _ = writeln!(s, "// meta = [rank, out_shape[rank], then per operand its strides over out_shape[rank]] (elements; 0 = broadcast).");
    match launch {
        Launch::Elementwise => {
            let _ = writeln!(s, "// Launch: elementwise, grid-stride over count = numel(out); any grid, e.g. 256 threads x min(ceil(count/256), 65535) blocks.");
        }
        Launch::Rows => {
            let _ = writeln!(s, "// Launch: one block per row of the last dimension, count = rows, grid.x = rows, blockDim.x = 256 (a power of two), 256 floats of shared memory.");
            if rotates {
                let _ = writeln!(s, "// rotate_half reads position (j + n/2) mod n of a row: the last dimension n must be even, and the rotated operands span it (stride 1).");
            }
        }
    }
    let _ = writeln!(s, "// Compiled after graphrw-kernels' GENERATED_PRELUDE (half.cuh: elem_t, load_elem, store_elem; generated.cuh: helpers).");
    let params: Vec<String> = (0..ntensors)
        .map(|k| format!("const elem_t* __restrict__ in{k}"))
        .collect();
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void {entry}(elem_t* __restrict__ out, {}, const float* __restrict__ sc, const i64* __restrict__ meta, i64 count) {{",
        params.join(", ")
    );
    s.push_str("    const int rank = (int)meta[0];\n    const i64* shape = meta + 1;\n");
    let all = vec![false; dag.nodes.len()];
    match launch {
        Launch::Elementwise => {
            s.push_str("    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (i64)gridDim.x * blockDim.x) {\n");
            for k in 0..ntensors {
                let _ = writeln!(s, "        i64 o{k} = 0;");
            }
            s.push_str("        i64 rem = i;\n        for (int d = rank - 1; d >= 0; --d) {\n            i64 idx = rem % shape[d]; rem /= shape[d];\n");
            for k in 0..ntensors {
                let _ = writeln!(
                    s,
                    "            o{k} += idx * meta[1 + rank * {} + d];",
                    k + 1
                );
            }
            s.push_str("        }\n");
            stmts(dag, root, &all, &mut s, "        ");
            let _ = writeln!(s, "        store_elem(out, i, v{root});\n    }}\n}}");
        }
        Launch::Rows => {
            s.push_str("    __shared__ float sh[256]; (void)sh;\n    const i64 row = blockIdx.x;\n    if (row >= count) return;\n    const i64 n = rank > 0 ? shape[rank - 1] : 1;\n    const i64 hh = n / 2; (void)hh;\n");
            for k in 0..ntensors {
                let _ = writeln!(s, "    i64 base{k} = 0; const i64 st{k} = rank > 0 ? meta[1 + rank * {} + rank - 1] : 0;", k + 1);
            }
            s.push_str("    { i64 rem = row;\n      for (int d = rank - 2; d >= 0; --d) {\n        i64 idx = rem % shape[d]; rem /= shape[d];\n");
            for k in 0..ntensors {
                let _ = writeln!(
                    s,
                    "        base{k} += idx * meta[1 + rank * {} + d];",
                    k + 1
                );
            }
            s.push_str("      }\n    }\n");
            let offs: String = (0..ntensors)
                .map(|k| format!("i64 o{k} = base{k} + j * st{k}; (void)o{k}; "))
                .collect();
            let rowc = row_constant(dag);
            let lv = levels(dag);
            let mut avail = vec![false; dag.nodes.len()];
            let max_level = reds.iter().map(|&r| lv[r]).max().unwrap_or(0);
            let ready = |avail: &mut Vec<bool>, s: &mut String, lvl: usize| {
                for &n in &nodes {
                    if rowc[n]
                        && !avail[n]
                        && lv[n] <= lvl
                        && !matches!(dag.nodes[n], Node::Reduce(..))
                    {
                        let _ = writeln!(s, "    float v{n} = {};", expr(dag, n));
                        avail[n] = true;
                    }
                }
            };
            ready(&mut avail, &mut s, 0);
            for level in 1..=max_level {
                for &r in reds.iter().filter(|&&r| lv[r] == level) {
                    let Node::Reduce(kind, arg) = dag.nodes[r] else {
                        continue;
                    };
                    let init = if kind == Red::Amax {
                        "__int_as_float(0xff800000)"
                    } else {
                        "0.0f"
                    };
                    let _ = writeln!(s, "    float acc{r} = {init};");
                    let _ = writeln!(
                        s,
                        "    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {{\n        {offs}"
                    );
                    stmts(dag, arg, &avail, &mut s, "        ");
                    if kind == Red::Amax {
                        let _ = writeln!(s, "        acc{r} = max_nan(acc{r}, v{arg});\n    }}");
                        let _ = writeln!(s, "    float v{r} = block_max(acc{r}, sh);");
                    } else {
                        let _ = writeln!(s, "        acc{r} += v{arg};\n    }}");
                        let div = if kind == Red::Mean { " / (float)n" } else { "" };
                        let _ = writeln!(s, "    float v{r} = block_sum(acc{r}, sh){div};");
                    }
                }
                for &r in reds.iter().filter(|&&r| lv[r] == level) {
                    avail[r] = true;
                }
                ready(&mut avail, &mut s, level);
            }
            let _ = writeln!(
                s,
                "    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {{\n        {offs}"
            );
            stmts(dag, root, &avail, &mut s, "        ");
            let _ = writeln!(
                s,
                "        store_elem(out, row * n + j, v{root});\n    }}\n}}"
            );
        }
    }
    (s, launch)
}

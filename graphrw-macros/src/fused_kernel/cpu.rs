//! The CPU kernel of a fused expression: generic Rust over the compute type, calling
//! `graphrw::kernels::elementwise` for plans, loads, tiles, stores and threads.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::ir::{Bin, Dag, Id, Node, Red, Un};
use super::walk::{has_rot, lower_rot, operands, rotation_inputs, topo};

/// Which nodes are constant along a row (no tensor read outside a reduction).
pub fn row_constant(dag: &Dag) -> Vec<bool> {
    let mut out = vec![false; dag.nodes.len()];
    for (id, n) in dag.nodes.iter().enumerate() {
        // Nodes are added operands first, so one forward sweep suffices.
        out[id] = match n {
            // Position-dependent: reads along the row and the rotations.
            Node::Input(_)
            | Node::InputRot(_)
            | Node::Rot(_)
            | Node::RotT(_)
            | Node::HalfNeg(_) => false,
            Node::Scalar(_) | Node::Lit(_) | Node::Reduce(..) => true,
            _ => operands(n).iter().all(|&o| out[o]),
        };
    }
    out
}

/// Reduction nesting level of every node (0: no reduction inside).
pub fn levels(dag: &Dag) -> Vec<usize> {
    let mut lv = vec![0; dag.nodes.len()];
    for (id, n) in dag.nodes.iter().enumerate() {
        let inner = operands(n).iter().map(|&o| lv[o]).max().unwrap_or(0);
        lv[id] = match n {
            Node::Reduce(..) => inner + 1,
            _ => inner,
        };
    }
    lv
}

/// The tensor parameters read (outside nested reductions) by the elementwise part
/// of `root`, treating `avail` nodes as known: `(k, rotated)`, `rotated` for the reads
/// at positions rotated by half a row (`InputRot`).
fn inputs_of(dag: &Dag, root: Id, avail: &[bool]) -> Vec<(usize, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = vec![false; dag.nodes.len()];
    while let Some(n) = stack.pop() {
        if seen[n] || avail[n] {
            continue;
        }
        seen[n] = true;
        let read = match dag.nodes[n] {
            Node::Input(k) => Some((k, false)),
            Node::InputRot(k) => Some((k, true)),
            _ => None,
        };
        if let Some(r) = read {
            if !out.contains(&r) {
                out.push(r);
            }
        }
        stack.extend(operands(&dag.nodes[n]));
    }
    out.sort();
    out
}

fn v(id: Id) -> proc_macro2::Ident {
    format_ident!("v{}", id)
}

/// One statement computing node `id` from its operands (`F` is the compute type).
fn stmt(dag: &Dag, id: Id) -> TokenStream {
    let out = v(id);
    let e = match dag.nodes[id] {
        Node::Input(k) => {
            let a = format_ident!("a{}", k);
            quote!(#a[__j])
        }
        Node::InputRot(k) => {
            let a = format_ident!("r{}", k);
            quote!(#a[__j])
        }
        Node::HalfNeg(a) => {
            let a = v(a);
            quote!(if __j0 + __j < __h { -#a } else { #a })
        }
        Node::Scalar(k) => {
            let s = format_ident!("s{}", k);
            quote!(#s)
        }
        Node::Lit(b) => {
            let x = f64::from_bits(b);
            quote!(<F as __rt::Compute>::lit(#x))
        }
        Node::Un(op, a) => {
            let a = v(a);
            match op {
                Un::Neg => quote!(-#a),
                Un::Abs => quote!(__Real::abs(#a)),
                Un::Reciprocal => quote!(<F as __Real>::ONE / #a),
                Un::Sqrt => quote!(__Real::sqrt(#a)),
                Un::Rsqrt => quote!(<F as __Real>::ONE / __Real::sqrt(#a)),
                Un::Exp => quote!(<F as __rt::Compute>::exp_vec::<FMA>(#a)),
                Un::Log => quote!(__Real::ln(#a)),
                Un::Sin => quote!(__Real::sin(#a)),
                Un::Cos => quote!(__Real::cos(#a)),
                Un::Erf => quote!(<F as __rt::Compute>::erf_vec::<FMA>(#a)),
                Un::Tanh => quote!(<F as __rt::Compute>::tanh_vec::<FMA>(#a)),
                Un::Sigmoid => quote!(<F as __rt::Compute>::sigmoid::<FMA>(#a)),
                Un::Relu => quote!(__rt::Compute::relu(#a)),
                Un::Silu => quote!(#a * <F as __rt::Compute>::sigmoid::<FMA>(#a)),
                // Rows a body cannot call (`un_op`); their formulas all the same.
                Un::Gelu => quote!(
                    #a * <F as __rt::Compute>::lit(0.5)
                        * (<F as __Real>::ONE
                            + <F as __rt::Compute>::erf_vec::<FMA>(
                                #a * <F as __rt::Compute>::lit(::std::f64::consts::FRAC_1_SQRT_2)
                            ))
                ),
                Un::GeluTanh => quote!(
                    #a * <F as __rt::Compute>::lit(0.5)
                        * (<F as __Real>::ONE
                            + <F as __rt::Compute>::tanh_vec::<FMA>(
                                <F as __rt::Compute>::lit(0.7978845608028654)
                                    * (#a + <F as __rt::Compute>::lit(0.044715) * #a * #a * #a)
                            ))
                ),
                Un::Not => {
                    quote!(<F as __rt::Compute>::from_bool(#a == <F as __rt::Compute>::lit(0.0)))
                }
                Un::IsNan => quote!(<F as __rt::Compute>::from_bool(#a != #a)),
            }
        }
        Node::Bin(op, a, b) => {
            let lit_b = match dag.nodes[b] {
                Node::Lit(bits) => Some(f64::from_bits(bits)),
                _ => None,
            };
            let (a, b) = (v(a), v(b));
            match op {
                Bin::Add => quote!(#a + #b),
                Bin::Sub => quote!(#a - #b),
                Bin::Mul => quote!(#a * #b),
                Bin::Div => quote!(#a / #b),
                Bin::Pow if lit_b == Some(1.0) => quote!(#a),
                Bin::Pow if lit_b == Some(2.0) => quote!(#a * #a),
                Bin::Pow if lit_b == Some(3.0) => quote!(#a * #a * #a),
                Bin::Pow => quote!(__Real::powf(#a, #b)),
                Bin::Maximum => quote!(__rt::Compute::max_nan(#a, #b)),
                Bin::Minimum => quote!(__rt::Compute::min_nan(#a, #b)),
                Bin::Eq => quote!(<F as __rt::Compute>::from_bool(#a == #b)),
                Bin::Ne => quote!(<F as __rt::Compute>::from_bool(#a != #b)),
                Bin::Lt => quote!(<F as __rt::Compute>::from_bool(#a < #b)),
                Bin::Le => quote!(<F as __rt::Compute>::from_bool(#a <= #b)),
                Bin::Gt => quote!(<F as __rt::Compute>::from_bool(#a > #b)),
                Bin::Ge => quote!(<F as __rt::Compute>::from_bool(#a >= #b)),
                // Not callable from a body (`bin_op`); on 0/1 values all the same.
                Bin::And => quote!(<F as __rt::Compute>::from_bool(
                    #a != <F as __rt::Compute>::lit(0.0) && #b != <F as __rt::Compute>::lit(0.0)
                )),
                Bin::Or => quote!(<F as __rt::Compute>::from_bool(
                    #a != <F as __rt::Compute>::lit(0.0) || #b != <F as __rt::Compute>::lit(0.0)
                )),
            }
        }
        Node::Where(c, a, b) => {
            let (c, a, b) = (v(c), v(a), v(b));
            quote!(if __rt::Compute::truthy(#c) { #a } else { #b })
        }
        Node::Cast(a, dt) => {
            let a = v(a);
            let d = format_ident!("{}", dt.variant());
            quote!(__rt::round_as(#a, graphrw::DType::#d))
        }
        Node::Reduce(..) => unreachable!("reductions are computed per row"),
        Node::Rot(_) | Node::RotT(_) => unreachable!("rotations are lowered first"),
    };
    quote!(let #out: F = #e;)
}

/// Statements computing `root` per element, given `avail` nodes already bound.
fn elem_stmts(dag: &Dag, root: Id, avail: &[bool]) -> Vec<TokenStream> {
    let mut out = Vec::new();
    for id in topo_avail(dag, root, avail) {
        out.push(stmt(dag, id));
    }
    out
}

fn topo_avail(dag: &Dag, root: Id, avail: &[bool]) -> Vec<Id> {
    let mut seen = vec![false; dag.nodes.len()];
    let mut out = Vec::new();
    fn visit(dag: &Dag, n: Id, avail: &[bool], seen: &mut Vec<bool>, out: &mut Vec<Id>) {
        if seen[n] || avail[n] {
            return;
        }
        seen[n] = true;
        for c in operands(&dag.nodes[n]) {
            visit(dag, c, avail, seen, out);
        }
        out.push(n);
    }
    visit(dag, root, avail, &mut seen, &mut out);
    out
}

/// Loads of tensor parameters `ks` for a tile at row position `__j0` of `__len` values
/// (rotated reads into their own buffers).
fn loads(ks: &[(usize, bool)]) -> TokenStream {
    let ls = ks.iter().map(|&(k, rot)| {
        if rot {
            let a = format_ident!("r{}", k);
            let b = format_ident!("c{}", k);
            quote!(let #a = &__row.load_rot(#k, __j0, &mut #b[..__len])[..__len];)
        } else {
            let a = format_ident!("a{}", k);
            let b = format_ident!("b{}", k);
            quote!(let #a = &__row.load(#k, __j0, &mut #b[..__len])[..__len];)
        }
    });
    quote!(#(#ls)*)
}

/// The generated `cpu` function and what it needs.
pub struct CpuKernel {
    pub tokens: TokenStream,
    /// Per reduction, the tensor parameters it reads (for the row-length check).
    pub reduction_inputs: Vec<Vec<usize>>,
    /// Per rotation, the tensor parameters it reads (one must span the output's row).
    pub rotate_inputs: Vec<Vec<usize>>,
    pub has_reductions: bool,
}

/// Generates `pub fn cpu(inputs, scalars, out_dtype) -> Result<Tensor, KernelError>`.
pub fn kernel(dag: &Dag, root: Id, ntensors: usize, nscalars: usize, name: &str) -> CpuKernel {
    let rotate_inputs = rotation_inputs(dag, root);
    let (lowered, root) = lower_rot(dag, root);
    let dag = &lowered;
    let rotates = has_rot(dag, root);
    let rowc = row_constant(dag);
    let lv = levels(dag);
    let nodes = topo(dag, root);
    let reds: Vec<Id> = nodes
        .iter()
        .copied()
        .filter(|&n| matches!(dag.nodes[n], Node::Reduce(..)))
        .collect();
    let max_level = reds.iter().map(|&r| lv[r]).max().unwrap_or(0);
    let nred = reds.len();
    let nrot = if rotates { ntensors } else { 0 };
    let scratch_tiles = ntensors + nrot + nred;
    let scalars_bind = (0..nscalars).map(|k| {
        let s = format_ident!("s{}", k);
        quote!(let #s: F = <F as __rt::Compute>::lit(__sc[#k]);)
    });
    let bufs = (0..ntensors).map(|k| {
        let b = format_ident!("b{}", k);
        quote!(let (#b, __s) = __s.split_at_mut(__tile);)
    });
    let cbufs = (0..nrot).map(|k| {
        let c = format_ident!("c{}", k);
        quote!(let (#c, __s) = __s.split_at_mut(__tile);)
    });
    let tbufs = reds.iter().map(|&r| {
        let t = format_ident!("t{}", r);
        quote!(let (#t, __s) = __s.split_at_mut(__tile);)
    });
    // The driver sizes the scratch tiles to what its rows and chunks need (at most
    // `TILE` values each): `__tile` values per scratch tile.
    let prologue = quote! {
        #(#scalars_bind)*
        let __tile = if #scratch_tiles == 0 {
            __rt::TILE
        } else {
            __scratch.len() / #scratch_tiles
        };
        let _ = __tile;
        let __s = __scratch;
        #(#bufs)*
        #(#cbufs)*
        #(#tbufs)*
        let _ = __s;
    };
    let mut reduction_inputs = Vec::new();
    // Rows of the last dimension when reducing or rotating along it.
    let row_mode = !reds.is_empty() || rotates;
    let body = if !row_mode {
        // Elementwise: `__j0`, `__len` come from the driver.
        let avail = vec![false; dag.nodes.len()];
        let ins = inputs_of(dag, root, &avail);
        let ld = loads(&ins);
        // Hoist row-constant nodes (scalars, literals and what they compute).
        let mut hoisted = vec![false; dag.nodes.len()];
        let mut hoist = Vec::new();
        for &n in &nodes {
            if rowc[n] {
                hoist.push(stmt(dag, n));
                hoisted[n] = true;
            }
        }
        let st = elem_stmts(dag, root, &hoisted);
        let r = v(root);
        quote! {
            #prologue
            #(#hoist)*
            let __len = __out.len();
            #ld
            for __j in 0..__len {
                #(#st)*
                __out[__j] = #r;
            }
        }
    } else {
        let mut avail = vec![false; dag.nodes.len()];
        let mut parts = Vec::new();
        // Row constants computable before any reduction.
        let emit_ready = |avail: &mut Vec<bool>, parts: &mut Vec<TokenStream>, lvl: usize| {
            for &n in &nodes {
                if rowc[n] && !avail[n] && lv[n] <= lvl && !matches!(dag.nodes[n], Node::Reduce(..))
                {
                    parts.push(stmt(dag, n));
                    avail[n] = true;
                }
            }
        };
        emit_ready(&mut avail, &mut parts, 0);
        for level in 1..=max_level {
            let here: Vec<Id> = reds.iter().copied().filter(|&r| lv[r] == level).collect();
            let mut accs = Vec::new();
            let mut inner = Vec::new();
            let mut finals = Vec::new();
            let mut ins_all: Vec<(usize, bool)> = Vec::new();
            for &r in &here {
                let Node::Reduce(kind, arg) = dag.nodes[r] else {
                    continue;
                };
                let acc = format_ident!("acc{}", r);
                let t = format_ident!("t{}", r);
                let ty = match kind {
                    Red::Amax => quote!(__rt::Max::<F>),
                    _ => quote!(__rt::Sum::<F>),
                };
                accs.push(quote!(let mut #acc = <#ty>::default();));
                let ins = inputs_of(dag, arg, &avail);
                let mut ks: Vec<usize> = ins.iter().map(|&(k, _)| k).collect();
                ks.dedup();
                reduction_inputs.push(ks);
                for k in ins {
                    if !ins_all.contains(&k) {
                        ins_all.push(k);
                    }
                }
                let st = elem_stmts(dag, arg, &avail);
                let va = v(arg);
                inner.push(quote! {
                    for __j in 0..__len {
                        #(#st)*
                        #t[__j] = #va;
                    }
                    #acc.add(&#t[..__len]);
                });
                let out = v(r);
                finals.push(match kind {
                    Red::Mean => {
                        quote!(let #out: F = #acc.total() / <F as __rt::Compute>::lit(__n as f64);)
                    }
                    _ => quote!(let #out: F = #acc.total();),
                });
            }
            ins_all.sort();
            let ld = loads(&ins_all);
            parts.push(quote! {
                #(#accs)*
                let mut __j0 = 0;
                while __j0 < __n {
                    let __len = __tile.min(__n - __j0);
                    #ld
                    #(#inner)*
                    __j0 += __len;
                }
                #(#finals)*
            });
            for &r in &here {
                avail[r] = true;
            }
            emit_ready(&mut avail, &mut parts, level);
        }
        let ins = inputs_of(dag, root, &avail);
        let ld = loads(&ins);
        let st = elem_stmts(dag, root, &avail);
        let r = v(root);
        let tail = if avail[root] {
            quote!(__out.fill(#r);)
        } else {
            quote! {
                let mut __j0 = 0;
                while __j0 < __n {
                    let __len = __tile.min(__n - __j0);
                    #ld
                    let __o = &mut __out[__j0..__j0 + __len];
                    for __j in 0..__len {
                        #(#st)*
                        __o[__j] = #r;
                    }
                    __j0 += __len;
                }
            }
        };
        quote! {
            #prologue
            let __n = __row.len();
            let __h = __n / 2;
            #(#parts)*
            #tail
        }
    };
    let has_reductions = !reds.is_empty();
    // The body is a method of a local type implementing the driver's kernel trait, so
    // that the driver can compile it once per instruction set (`FMA`: AVX2+FMA).
    let (kernel_impl, driver) = if row_mode {
        (
            quote! {
                impl<F: __rt::Compute> __rt::RowKernel<F> for __Kernel<'_> {
                    #[allow(unused_variables, unused_mut, clippy::all)]
                    #[inline(always)]
                    fn row<const FMA: bool>(&self, __row: &__rt::Row<'_, '_>, __scratch: &mut [F], __out: &mut [F]) {
                        let __sc = self.0;
                        #body
                    }
                }
            },
            quote!(run_rows),
        )
    } else {
        (
            quote! {
                impl<F: __rt::Compute> __rt::MapKernel<F> for __Kernel<'_> {
                    #[allow(unused_variables, unused_mut, clippy::all)]
                    #[inline(always)]
                    fn tile<const FMA: bool>(&self, __row: &__rt::Row<'_, '_>, __j0: usize, __scratch: &mut [F], __out: &mut [F]) {
                        let __sc = self.0;
                        #body
                    }
                }
            },
            quote!(run_map),
        )
    };
    let keep_last = row_mode;
    let has_amax = reds
        .iter()
        .any(|&r| matches!(dag.nodes[r], Node::Reduce(Red::Amax, _)));
    let empty_check = if has_amax {
        quote! {
            if __plan.inner == 0 && __plan.rows > 0 {
                return Err(graphrw::kernels::KernelError::InvalidArgument {
                    op: #name,
                    msg: ::std::format!("amax cannot reduce over zero elements (output shape {:?})", __plan.out_shape),
                });
            }
        }
    } else {
        quote!()
    };
    let red_checks = reduction_inputs.iter().filter(|ins| !ins.is_empty()).map(|ins| {
        quote! {
            if !__plan.out_shape.is_empty() && __plan.inner != 1 && ![#(#ins),*].iter().any(|&k: &usize| inputs[k].shape().last().copied().unwrap_or(1) == __plan.inner) {
                return Err(graphrw::kernels::KernelError::Unsupported {
                    op: #name,
                    msg: ::std::format!("a reduction of this kernel reads only operands broadcast along the last dimension (output row of {}), so it would not reduce what the decomposition reduces", __plan.inner),
                });
            }
        }
    });
    let rot_checks = rotate_inputs.iter().map(|ins| {
        quote! {
            if ![#(#ins),*].iter().any(|&k: &usize| inputs[k].shape().last().copied() == Some(__plan.inner)) {
                return Err(graphrw::kernels::KernelError::Unsupported {
                    op: #name,
                    msg: ::std::format!("a rotate_half of this kernel reads only operands broadcast along the last dimension (output row of {}), so it would not rotate what the decomposition rotates", __plan.inner),
                });
            }
        }
    });
    let rot_check = if rotates {
        quote! {
            if __plan.out_shape.is_empty() || __plan.inner % 2 != 0 {
                return Err(graphrw::kernels::KernelError::Unsupported {
                    op: #name,
                    msg: ::std::format!("rotate_half needs an even last dimension (output shape {:?})", __plan.out_shape),
                });
            }
            #(#rot_checks)*
        }
    } else {
        quote!()
    };
    let tokens = quote! {
        /// The CPU kernel: one pass over the inputs per reduction level plus one to write,
        /// f32 arithmetic for f16/bf16 storage (f64 for f64), no intermediate tensors.
        pub fn cpu(
            inputs: &[&graphrw::Tensor],
            scalars: &[f64],
            out_dtype: graphrw::DType,
        ) -> ::core::result::Result<graphrw::Tensor, graphrw::kernels::KernelError> {
            use graphrw::kernels::elementwise as __rt;
            #[allow(unused_imports)]
            use graphrw::kernels::Real as __Real;
            /// The scalar attributes.
            struct __Kernel<'s>(&'s [f64]);
            #kernel_impl
            if inputs.len() != #ntensors || scalars.len() != #nscalars {
                return Err(graphrw::kernels::KernelError::InvalidArgument {
                    op: #name,
                    msg: ::std::format!("takes {} tensors and {} scalars, got {} and {}", #ntensors, #nscalars, inputs.len(), scalars.len()),
                });
            }
            let __shapes: ::std::vec::Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
            let __plan = __rt::Plan::new(#name, &__shapes, #keep_last)?;
            #(#red_checks)*
            #rot_check
            #empty_check
            let __srcs = inputs
                .iter()
                .map(|t| __rt::Src::of(t, #name))
                .collect::<::core::result::Result<::std::vec::Vec<_>, _>>()?;
            let __shape = __plan.out_shape.clone();
            let __kernel = __Kernel(scalars);
            match out_dtype {
                graphrw::DType::F32 => {
                    type F = f32;
                    graphrw::Tensor::from_vec(__shape, __rt::#driver::<F, f32, _>(#name, &__plan, &__srcs, #scratch_tiles, &__kernel)?)
                }
                graphrw::DType::F16 => {
                    type F = f32;
                    graphrw::Tensor::from_vec(__shape, __rt::#driver::<F, __rt::f16, _>(#name, &__plan, &__srcs, #scratch_tiles, &__kernel)?)
                }
                graphrw::DType::BF16 => {
                    type F = f32;
                    graphrw::Tensor::from_vec(__shape, __rt::#driver::<F, __rt::bf16, _>(#name, &__plan, &__srcs, #scratch_tiles, &__kernel)?)
                }
                graphrw::DType::F64 => {
                    type F = f64;
                    graphrw::Tensor::from_vec(__shape, __rt::#driver::<F, f64, _>(#name, &__plan, &__srcs, #scratch_tiles, &__kernel)?)
                }
                dtype => Err(graphrw::kernels::KernelError::UnsupportedDType {
                    op: #name,
                    dtype,
                    expected: "an f32, f16, bf16 or f64 output",
                }),
            }
        }
    };
    CpuKernel {
        tokens,
        reduction_inputs,
        rotate_inputs,
        has_reductions,
    }
}

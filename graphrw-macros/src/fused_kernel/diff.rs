//! Symbolic differentiation: the vjp of a fused expression, by reverse mode over its
//! DAG, as new expressions (one per tensor parameter) over the parameters and the
//! output gradient `g`. Row reductions become sums of adjoints over the row; a value
//! constant along the row that elementwise nodes read gets the row sum of their
//! adjoints. Scalar parameters and literals get no gradient.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};

use super::cpu::{kernel, row_constant};
use super::ir::{Bin, Dag, Dt, Id, Kernel, Node, Red, Un};
use super::walk::topo;

/// The vjp module items and the list of `VjpKernel`s.
pub struct Vjp {
    pub items: TokenStream,
    pub list: TokenStream,
}

struct Builder {
    dag: Dag,
}

impl Builder {
    fn lit(&mut self, v: f64) -> Id {
        self.dag.lit(v)
    }
    fn bin(&mut self, op: Bin, a: Id, b: Id) -> Id {
        let one = 1f64.to_bits();
        if op == Bin::Mul {
            if self.dag.nodes[a] == Node::Lit(one) {
                return b;
            }
            if self.dag.nodes[b] == Node::Lit(one) {
                return a;
            }
        }
        self.dag.add(Node::Bin(op, a, b))
    }
    fn un(&mut self, op: Un, a: Id) -> Id {
        self.dag.add(Node::Un(op, a))
    }
    fn wher(&mut self, c: Id, a: Id, b: Id) -> Id {
        self.dag.add(Node::Where(c, a, b))
    }
    fn sum(&mut self, a: Id) -> Id {
        self.dag.add(Node::Reduce(Red::Sum, a))
    }
}

fn no_derivative(k: &Kernel, id: Id, grad: Span, what: &str) -> syn::Error {
    let span = k.spans.get(&id).copied().unwrap_or(grad);
    syn::Error::new(
        span,
        format!("`{what}` has no derivative, so `#[grad]` cannot derive this kernel's vjp: a bool-valued op may only be a `where` condition on the gradient's path (differentiable: arithmetic, pow, exp, log, sqrt, rsqrt, erf, tanh, sigmoid, relu, silu, abs, maximum, minimum, where, float casts, sum/mean/amax)"),
    )
}

/// Derives the vjp kernels of `k` (output `root`). `op_items(dag, gradient, param)`
/// gives the items (the vjp op and its decomposition) added to each parameter's module.
pub fn vjp(
    k: &Kernel,
    root: Id,
    grad: Span,
    op_items: &dyn Fn(&Dag, Id, &str) -> TokenStream,
) -> syn::Result<Vjp> {
    let nt = k.tensors.len();
    let mut b = Builder { dag: k.dag.clone() };
    let g = b.dag.add(Node::Input(nt));
    let order = topo(&k.dag, root);
    let rowc = row_constant(&k.dag);
    let mut adj: Vec<Option<Id>> = vec![None; b.dag.nodes.len().max(k.dag.nodes.len())];
    adj[root] = Some(g);
    let add_adj = |b: &mut Builder, adj: &mut Vec<Option<Id>>, user: Id, o: Id, c: Id| {
        if matches!(b.dag.nodes[o], Node::Scalar(_) | Node::Lit(_)) {
            return;
        }
        // A row constant read by an elementwise node: the row sum of the adjoints.
        let c = if rowc[o] && !rowc[user] { b.sum(c) } else { c };
        if adj.len() <= o {
            adj.resize(o + 1, None);
        }
        adj[o] = Some(match adj[o] {
            Some(prev) => b.bin(Bin::Add, prev, c),
            None => c,
        });
    };
    for &u in order.iter().rev() {
        let Some(a_u) = adj.get(u).copied().flatten() else {
            continue;
        };
        match k.dag.nodes[u] {
            // `InputRot` exists only after lowering (code generation), never here.
            Node::Input(_) | Node::Scalar(_) | Node::Lit(_) | Node::InputRot(_) => {}
            // A permutation with signs: its adjoint is its transpose (for an even row,
            // `rotT = -rot` since `rot(rot(x)) = -x`; the transpose is exact for any row).
            Node::Rot(a) | Node::RotT(a) | Node::HalfNeg(a) => {
                // An adjoint constant along the row is spread over it first, so that the
                // rotation permutes a row of the output's length (as the kernel does).
                let a_u = if row_constant(&b.dag)[a_u] {
                    let z = b.lit(0.0);
                    let zero_row = b.bin(Bin::Mul, g, z);
                    b.bin(Bin::Add, zero_row, a_u)
                } else {
                    a_u
                };
                let c = b.dag.add(match k.dag.nodes[u] {
                    Node::Rot(_) => Node::RotT(a_u),
                    Node::RotT(_) => Node::Rot(a_u),
                    _ => Node::HalfNeg(a_u),
                });
                add_adj(&mut b, &mut adj, u, a, c);
            }
            Node::Un(op, a) => {
                let c = match op {
                    // Rows a body cannot call (`un_op`).
                    Un::Gelu | Un::GeluTanh | Un::Not | Un::IsNan => {
                        return Err(no_derivative(k, u, grad, op.op()));
                    }
                    Un::Neg => b.un(Un::Neg, a_u),
                    Un::Abs => {
                        let z = b.lit(0.0);
                        let neg = b.dag.add(Node::Bin(Bin::Lt, a, z));
                        let m = b.un(Un::Neg, a_u);
                        b.wher(neg, m, a_u)
                    }
                    Un::Reciprocal => {
                        let uu = b.bin(Bin::Mul, u, u);
                        let t = b.bin(Bin::Mul, a_u, uu);
                        b.un(Un::Neg, t)
                    }
                    Un::Sqrt => {
                        let h = b.lit(0.5);
                        let t = b.bin(Bin::Div, h, u);
                        b.bin(Bin::Mul, a_u, t)
                    }
                    Un::Rsqrt => {
                        let h = b.lit(-0.5);
                        let t = b.bin(Bin::Div, u, a);
                        let t = b.bin(Bin::Mul, h, t);
                        b.bin(Bin::Mul, a_u, t)
                    }
                    Un::Exp => b.bin(Bin::Mul, a_u, u),
                    Un::Log => b.bin(Bin::Div, a_u, a),
                    Un::Sin => {
                        let c = b.un(Un::Cos, a);
                        b.bin(Bin::Mul, a_u, c)
                    }
                    Un::Cos => {
                        let s = b.un(Un::Sin, a);
                        let t = b.bin(Bin::Mul, a_u, s);
                        b.un(Un::Neg, t)
                    }
                    Un::Erf => {
                        let sq = b.bin(Bin::Mul, a, a);
                        let n = b.un(Un::Neg, sq);
                        let e = b.un(Un::Exp, n);
                        let c = b.lit(std::f64::consts::FRAC_2_SQRT_PI);
                        let t = b.bin(Bin::Mul, c, e);
                        b.bin(Bin::Mul, a_u, t)
                    }
                    Un::Tanh => {
                        let one = b.lit(1.0);
                        let uu = b.bin(Bin::Mul, u, u);
                        let t = b.bin(Bin::Sub, one, uu);
                        b.bin(Bin::Mul, a_u, t)
                    }
                    Un::Sigmoid => {
                        let one = b.lit(1.0);
                        let t = b.bin(Bin::Sub, one, u);
                        let t = b.bin(Bin::Mul, u, t);
                        b.bin(Bin::Mul, a_u, t)
                    }
                    Un::Relu => {
                        let z = b.lit(0.0);
                        let pos = b.dag.add(Node::Bin(Bin::Gt, a, z));
                        b.wher(pos, a_u, z)
                    }
                    Un::Silu => {
                        let s = b.un(Un::Sigmoid, a);
                        let one = b.lit(1.0);
                        let oms = b.bin(Bin::Sub, one, s);
                        let t = b.bin(Bin::Mul, a, oms);
                        let t = b.bin(Bin::Add, one, t);
                        let t = b.bin(Bin::Mul, s, t);
                        b.bin(Bin::Mul, a_u, t)
                    }
                };
                add_adj(&mut b, &mut adj, u, a, c);
            }
            Node::Bin(op, x, y) => {
                if op.is_compare() || op.is_logical() {
                    return Err(no_derivative(k, u, grad, op.op()));
                }
                let z = b.lit(0.0);
                let (cx, cy) = match op {
                    Bin::Add => (a_u, a_u),
                    Bin::Sub => (a_u, b.un(Un::Neg, a_u)),
                    Bin::Mul => (b.bin(Bin::Mul, a_u, y), b.bin(Bin::Mul, a_u, x)),
                    Bin::Div => {
                        let cx = b.bin(Bin::Div, a_u, y);
                        let t = b.bin(Bin::Div, u, y);
                        let t = b.bin(Bin::Mul, a_u, t);
                        (cx, b.un(Un::Neg, t))
                    }
                    Bin::Pow => {
                        let one = b.lit(1.0);
                        let ym1 = b.bin(Bin::Sub, y, one);
                        let p = b.bin(Bin::Pow, x, ym1);
                        let t = b.bin(Bin::Mul, y, p);
                        let cx = b.bin(Bin::Mul, a_u, t);
                        let l = b.un(Un::Log, x);
                        let t = b.bin(Bin::Mul, u, l);
                        (cx, b.bin(Bin::Mul, a_u, t))
                    }
                    Bin::Maximum | Bin::Minimum => {
                        let cmp = if op == Bin::Maximum { Bin::Ge } else { Bin::Le };
                        let c = b.dag.add(Node::Bin(cmp, x, y));
                        (b.wher(c, a_u, z), b.wher(c, z, a_u))
                    }
                    _ => unreachable!("comparisons and logical ops handled above"),
                };
                add_adj(&mut b, &mut adj, u, x, cx);
                add_adj(&mut b, &mut adj, u, y, cy);
            }
            Node::Where(c, x, y) => {
                let z = b.lit(0.0);
                let cx = b.wher(c, a_u, z);
                let cy = b.wher(c, z, a_u);
                add_adj(&mut b, &mut adj, u, x, cx);
                add_adj(&mut b, &mut adj, u, y, cy);
            }
            Node::Cast(a, dt) => {
                if matches!(dt, Dt::Bool | Dt::I64) {
                    return Err(no_derivative(k, u, grad, "cast"));
                }
                add_adj(&mut b, &mut adj, u, a, a_u);
            }
            Node::Reduce(r, a) => {
                let c = match r {
                    Red::Sum => a_u,
                    Red::Mean => {
                        let one = b.lit(1.0);
                        let n = b.sum(one);
                        b.bin(Bin::Div, a_u, n)
                    }
                    Red::Amax => {
                        let z = b.lit(0.0);
                        let at = b.dag.add(Node::Bin(Bin::Eq, a, u));
                        b.wher(at, a_u, z)
                    }
                };
                // The adjoint of a reduction is row-level; its operand is per element.
                if matches!(b.dag.nodes[a], Node::Scalar(_) | Node::Lit(_)) {
                    continue;
                }
                if adj.len() <= a {
                    adj.resize(a + 1, None);
                }
                adj[a] = Some(match adj[a] {
                    Some(prev) => b.bin(Bin::Add, prev, c),
                    None => c,
                });
            }
        }
    }
    let mut items = TokenStream::new();
    let mut list = Vec::new();
    for (i, t) in k.tensors.iter().enumerate() {
        let input = k.dag.nodes.iter().position(|n| *n == Node::Input(i));
        let gi = match input.and_then(|x| adj.get(x).copied().flatten()) {
            Some(x) => x,
            None => {
                let z = b.lit(0.0);
                b.bin(Bin::Mul, g, z)
            }
        };
        // A gradient that is constant along the row: spread it over the row.
        let gi = if row_constant(&b.dag)[gi] {
            let z = b.lit(0.0);
            let zero_row = b.bin(Bin::Mul, g, z);
            b.bin(Bin::Add, zero_row, gi)
        } else {
            gi
        };
        let name = format!("vjp.{t}");
        let cpu = kernel(
            &b.dag,
            gi,
            k.tensors.len() + 1,
            k.scalars.len(),
            "fused.vjp",
        );
        let entry = format!("vjp_{t}");
        let (src, launch) = super::cuda::source(&b.dag, gi, k.tensors.len() + 1, &name, &entry);
        let launch = super::launch_tokens(launch);
        let tokens = &cpu.tokens;
        let m = format_ident!("{}", t);
        let doc = format!("The gradient of `{t}`.");
        let op_tokens = op_items(&b.dag, gi, &t.to_string());
        let red_inputs = cpu.reduction_inputs.iter().map(|v| quote!(&[#(#v),*]));
        let rot_inputs = cpu.rotate_inputs.iter().map(|v| quote!(&[#(#v),*]));
        items.extend(quote! {
            #[doc = #doc]
            pub mod #m {
                #tokens
                #op_tokens
                /// Its CUDA C source.
                pub const CUDA_SOURCE: &str = #src;
            }
        });
        let tn = t.to_string();
        list.push(quote!(graphrw::generated::VjpKernel { param: #tn, op: &vjp::#m::OP, cpu: vjp::#m::cpu, reduction_inputs: &[#(#red_inputs),*], rotate_inputs: &[#(#rot_inputs),*], cuda: graphrw::generated::CudaSource { source: vjp::#m::CUDA_SOURCE, entry: #entry, launch: #launch } }));
    }
    Ok(Vjp {
        items,
        list: quote!(#(#list),*),
    })
}

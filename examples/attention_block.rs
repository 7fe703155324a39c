//! Builds a GPT-style attention block by hand with graphrw's builder, verifies it and
//! prints it as a program.
//!
//! `cargo run --release --example attention_block`

use graphrw::{verify, Builder, DType, GraphError, Shape, TensorMeta, Var};

/// `[b, s, h*d]` to `[b, h, s, d]`.
fn split_heads<'b>(t: Var<'b>, shape: &[i64]) -> Result<Var<'b>, GraphError> {
    t.reshape(shape)?.transpose(1, 2)
}

fn main() -> Result<(), GraphError> {
    let (batch, seq, heads, head_dim) = (1u64, 128u64, 12u64, 64u64);
    let hidden = heads * head_dim;
    let g = Builder::new();
    let x = g.input(
        "x",
        TensorMeta::new(DType::F32, Shape::known(&[batch, seq, hidden])),
    );
    let w_qkv = g.input(
        "w_qkv",
        TensorMeta::new(DType::F32, Shape::known(&[hidden, 3 * hidden])),
    );
    let w_out = g.input(
        "w_out",
        TensorMeta::new(DType::F32, Shape::known(&[hidden, hidden])),
    );
    let mask = g.input(
        "causal_mask",
        TensorMeta::new(DType::Bool, Shape::known(&[seq, seq])),
    );

    let heads_shape = [batch as i64, seq as i64, heads as i64, head_dim as i64];
    let split_heads = |t| split_heads(t, &heads_shape);
    let qkv = x.matmul(w_qkv)?.split_with(&[hidden as i64; 3], -1)?;
    let (q, k, v) = (
        split_heads(qkv[0])?,
        split_heads(qkv[1])?,
        split_heads(qkv[2])?,
    );
    let scores = q
        .matmul(k.transpose(-2, -1)?)?
        .div((head_dim as f64).sqrt())?;
    let probs = scores
        .masked_fill(mask.not()?, f64::NEG_INFINITY)?
        .softmax(-1)?;
    let attn =
        probs
            .matmul(v)?
            .transpose(1, 2)?
            .reshape(&[batch as i64, seq as i64, hidden as i64])?;
    let out = attn.matmul(w_out)?.add(x)?;
    g.output(&[out])?;

    let graph = g.finish();
    verify(&graph)?;
    println!("{graph}");
    println!("{} nodes, ops: {:?}", graph.node_count(), graph.op_counts());
    Ok(())
}

//! Op-info style tests of the CPU kernels: every op over several shapes (including
//! size-0 and size-1 dims and broadcasting) and every dtype it accepts, against plain
//! f64 loops written here; plus bad inputs that must come back as errors.

mod common;

mod attention;
mod conv_creation;
mod elementwise;
mod indexing;
mod layout;
mod matmul;
mod props;
mod reduce_norm;
mod tensor;

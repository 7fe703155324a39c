//! [`Broadcast`]: the two forms of the packed AVX-512 kernel's depth loop, named apart
//! from the products (`super`) and the kernel (`cpu::packed_gemm`) that both read it.

/// How the packed AVX-512 kernel reads each left-operand element of a depth step, which
/// both of the step's FMAs multiply (the two forms compute the same sums in the same
/// order: only their speed differs, by CPU). [`crate::cpu::choice`] measures which is
/// faster on this CPU; the fused attention's AVX-512 kernels read it too, through
/// [`SdpaTuning::broadcast`](crate::SdpaTuning::broadcast), with their own chooser.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Broadcast {
    /// Broadcast inside each FMA (`{1to16}`): one load per FMA and the fewest
    /// instructions, where the load ports keep up (a core running one 512-bit FMA a
    /// cycle, as Zen 4).
    #[default]
    InFma,
    /// Broadcast into a register once, read by both FMAs: half the loads, for a core
    /// with two 512-bit FMA ports and two load ports (Intel's server cores), which the
    /// first form leaves waiting on its loads.
    InRegister,
}

//! Shape arithmetic: the exporters' `Shape`/`Gather`/`Concat` chains folded into
//! symbolic attributes at import ([`fold`]), and symbolic attributes written back as such
//! chains at export ([`write`]).

pub(crate) mod fold;
pub(crate) mod write;

pub(crate) use fold::*;

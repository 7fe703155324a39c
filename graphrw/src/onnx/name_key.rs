//! Hash-map keys for names read from a model, compared in line.
//!
//! The loader looks every node's op type and operand names up in hash maps whose keys
//! point into the model's bytes. `str`'s equality calls `memcmp`, and on these lookups
//! (a few to a few dozen bytes, in a mapped file) the call measured slower than the
//! comparison itself: a tenth of the load's time went to `memcmp` on op types alone.
//! [`NameKey`] compares eight bytes at a time in line instead.

use std::hash::{Hash, Hasher};

/// A name as a hash-map key: hashes as `str` does, compares in line ([`same_bytes`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameKey<'a>(pub(crate) &'a str);

impl Hash for NameKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for NameKey<'_> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        same_bytes(self.0.as_bytes(), other.0.as_bytes())
    }
}

impl Eq for NameKey<'_> {}

/// Whether `a` and `b` hold the same bytes, compared eight at a time in line.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (words_a, words_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let (rest_a, rest_b) = (words_a.remainder(), words_b.remainder());
    words_a.zip(words_b).all(|(x, y)| word(x) == word(y))
        && rest_a.iter().zip(rest_b).all(|(x, y)| x == y)
}

/// Eight bytes as one word (`chunk` is one of `chunks_exact(8)`'s).
fn word(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(chunk);
    u64::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Equal exactly when the strings are, at every length around the word size and
    /// for a difference at every position.
    #[test]
    fn keys_are_equal_exactly_when_the_names_are() {
        for len in 0..=20 {
            let a: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            assert_eq!(NameKey(&a), NameKey(&a.clone()));
            for at in 0..len {
                let mut b = a.clone().into_bytes();
                b[at] = b'#';
                let b = String::from_utf8(b).unwrap();
                assert_ne!(NameKey(&a), NameKey(&b), "{a} vs {b}");
            }
            let longer = format!("{a}x");
            assert_ne!(NameKey(&a), NameKey(&longer));
        }
        let set: HashSet<NameKey> = ["MatMul", "Add", "", "MatMulInteger"].map(NameKey).into();
        assert!(set.contains(&NameKey("MatMul")));
        assert!(!set.contains(&NameKey("Matmul")));
        assert!(set.contains(&NameKey("")));
    }
}

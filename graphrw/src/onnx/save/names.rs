//! Names the exporter gives: an arena of spans of one string, value names by node, and
//! the set of names taken (printed names `t12` kept as numbers), and the names of the
//! symbols and lists written as shape arithmetic ([`ShapeCache`]).

use crate::graph::Value;
use crate::meta::{SymExpr, Symbol};
use foldhash::HashMap as FastMap;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// A name the exporter gave (a value's or a node's): a span of its [`Arena`], so that
/// names are copied as two numbers, not as strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Name {
    pub(crate) start: u32,
    pub(crate) len: u32,
}

impl Name {
    /// `""`: an absent optional input.
    pub(crate) const EMPTY: Name = Name { start: 0, len: 0 };
}

/// Every name the exporter gave, end to end in one string.
#[derive(Default)]
pub(crate) struct Arena {
    pub(crate) text: String,
    /// Set when the text passed `u32::MAX` bytes (then names read as empty; the
    /// export is refused, such a model passes protobuf's limit anyway).
    pub(crate) overflow: bool,
}

impl Arena {
    pub(crate) fn add(&mut self, s: &str) -> Name {
        let start = self.text.len();
        match (u32::try_from(start), u32::try_from(s.len())) {
            (Ok(start), Ok(len)) if start.checked_add(len).is_some() => {
                self.text.push_str(s);
                Name { start, len }
            }
            _ => {
                self.overflow = true;
                Name::EMPTY
            }
        }
    }

    pub(crate) fn get(&self, n: Name) -> &str {
        let start = n.start as usize;
        self.text.get(start..start + n.len as usize).unwrap_or("")
    }

    /// Forgets `n` when it is the last name added (a node's name, written already).
    pub(crate) fn drop_last(&mut self, n: Name) {
        if n.len > 0 && (n.start + n.len) as usize == self.text.len() {
            self.text.truncate(n.start as usize);
        }
    }
}

/// A node's input or output names.
pub(crate) type Names8 = SmallVec<[Name; 8]>;

/// The name of each value named so far: first outputs in a list by node index (read
/// in the order nodes are written, so mostly in memory order), other outputs in a map.
#[derive(Default)]
pub(crate) struct ValueNames {
    pub(crate) first: Vec<Option<Name>>,
    pub(crate) more: FastMap<Value, Name>,
}

impl ValueNames {
    pub(crate) fn with_capacity(nodes: usize) -> ValueNames {
        ValueNames {
            first: Vec::with_capacity(nodes),
            more: FastMap::default(),
        }
    }

    pub(crate) fn get(&self, v: Value) -> Option<Name> {
        if v.output == 0 {
            self.first.get(v.node.index()).copied().flatten()
        } else {
            self.more.get(&v).copied()
        }
    }

    pub(crate) fn insert(&mut self, v: Value, name: Name) {
        if v.output == 0 {
            let i = v.node.index();
            if self.first.len() <= i {
                self.first.resize(i + 1, None);
            }
            self.first[i] = Some(name);
        } else {
            self.more.insert(v, name);
        }
    }
}

/// Names given so far, kept as 64-bit fingerprints rather than strings: a big model
/// names a million values and nodes, and a set of strings would copy and free every
/// one of them. Two names sharing a fingerprint (odds about 2^-64 per pair; the seed is
/// fixed, so the names written are the same on every run) only make the second one
/// look taken, so it gets a `_k` suffix: names stay unique whatever the fingerprints.
///
/// The printer's names (`t<n>`, `c<n>`: most value names of a big graph) are kept
/// apart, as bits by number: whatever gave a name of that spelling, it goes to the
/// bits, so the set holds the same names, and the exporter's own printed names are
/// neither spelled out nor hashed to be checked.
#[derive(Default)]
pub(crate) struct NameSet {
    pub(crate) hashed: HashSet<u64, std::hash::BuildHasherDefault<Fingerprint>>,
    /// Bit `n` of `printed[0]` is `t<n>`, of `printed[1]` `c<n>`.
    pub(crate) printed: [Vec<u64>; 2],
    /// Set by [`NameSet::defer`].
    pub(crate) deferred: Option<Deferred>,
    /// Per base name that needed a suffix ([`unique`]), the next `k` to try: every
    /// `base_j` below it is taken, so a thousand `x`s are named in linear time.
    pub(crate) next_suffix: HashMap<String, u64>,
}

/// The fingerprints of a deferred [`NameSet`]: every one taken, in order, and those
/// of the current group (one graph node's names).
#[derive(Default)]
pub(crate) struct Deferred {
    pub(crate) all: Vec<u64>,
    pub(crate) group: SmallVec<[u64; 8]>,
}

/// The hasher of fingerprints, which are hashes already: the value itself.
#[derive(Default)]
pub(crate) struct Fingerprint(u64);

impl std::hash::Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Printed names kept as bits go up to this number (a name beyond is hashed).
pub(crate) const PRINTED_BITS: u32 = 1 << 28;

/// `name` as a printer's name: `t<n>` (kind 0) or `c<n>` (kind 1), `n` in decimal
/// without leading zeros and below [`PRINTED_BITS`].
pub(crate) fn printed_number(name: &str) -> Option<(usize, u32)> {
    let b = name.as_bytes();
    let kind = match b.first()? {
        b't' => 0,
        b'c' => 1,
        _ => return None,
    };
    let digits = &b[1..];
    if digits.is_empty() || digits.len() > 9 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    let mut n: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(d - b'0');
    }
    (n < PRINTED_BITS).then_some((kind, n))
}

impl NameSet {
    pub(crate) fn with_capacity(n: usize) -> NameSet {
        NameSet {
            hashed: HashSet::with_capacity_and_hasher(n, Default::default()),
            printed: Default::default(),
            deferred: None,
            next_suffix: HashMap::new(),
        }
    }

    /// From now on a name (other than a printed one) is taken when it was given in the
    /// current group ([`NameSet::group`]), and otherwise counted as fresh without a
    /// look-up in a big table (a cache miss per name on a big graph; `capacity`: the
    /// names expected); whether every
    /// name so counted was fresh is [`NameSet::deferred_unique`]'s answer. Where it is
    /// yes, every answer was the one the hashed set gives: a name counted fresh was
    /// given by nothing before it, and one taken in its group was taken.
    pub(crate) fn defer(&mut self, capacity: usize) {
        self.deferred = Some(Deferred {
            all: Vec::with_capacity(capacity),
            group: SmallVec::new(),
        });
    }

    /// Starts a new group of deferred names.
    pub(crate) fn group(&mut self) {
        if let Some(d) = &mut self.deferred {
            d.group.clear();
        }
    }

    /// False when names counted fresh by a deferred set were the same (sorts them).
    pub(crate) fn deferred_unique(&mut self) -> bool {
        let Some(d) = &mut self.deferred else {
            return true;
        };
        d.all.sort_unstable();
        d.all.windows(2).all(|w| w[0] != w[1])
    }

    /// Adds `name`; false when it was there already.
    pub(crate) fn insert(&mut self, name: impl AsRef<str>) -> bool {
        use std::hash::BuildHasher;
        let name = name.as_ref();
        if let Some((kind, n)) = printed_number(name) {
            return self.insert_printed(kind, n);
        }
        let h = foldhash::quality::FixedState::with_seed(0x9e37_79b9_7f4a_7c15).hash_one(name);
        match &mut self.deferred {
            None => self.hashed.insert(h),
            Some(d) if d.group.contains(&h) => false,
            Some(d) => {
                d.group.push(h);
                d.all.push(h);
                true
            }
        }
    }

    /// Adds the printed name of `kind` (0: `t`, 1: `c`) and number `n` (below
    /// [`PRINTED_BITS`]); false when it was there already.
    pub(crate) fn insert_printed(&mut self, kind: usize, n: u32) -> bool {
        let bits = &mut self.printed[kind];
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if bits.len() <= word {
            bits.resize((word + 1).next_power_of_two(), 0);
        }
        let fresh = bits[word] & bit == 0;
        bits[word] |= bit;
        fresh
    }
}

/// Appends the decimal digits of `n`.
pub(crate) fn push_decimal(s: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        s.push(char::from(d));
    }
}

/// `base`, or `base_1`, `base_2`, ... whichever `taken` does not have yet, added to
/// `taken` and to `arena`.
pub(crate) fn unique_in(taken: &mut NameSet, arena: &mut Arena, base: &str) -> Name {
    if taken.insert(base) {
        return arena.add(base);
    }
    arena.add(&unique(taken, base))
}

pub(crate) fn unique(taken: &mut NameSet, base: &str) -> String {
    if taken.insert(base) {
        return base.to_string();
    }
    // Names are never given back, so the suffixes tried for `base` before stay taken.
    let mut k = taken.next_suffix.get(base).copied().unwrap_or(1);
    loop {
        let name = format!("{base}_{k}");
        k += 1;
        if taken.insert(&name) {
            taken.next_suffix.insert(base.to_string(), k);
            return name;
        }
    }
}

/// The names of the symbols and lists written as shape arithmetic so far
/// (`ops/shape_arith/write.rs`), so that each is written once.
#[derive(Default)]
pub(crate) struct ShapeCache {
    /// Where each symbol first appears as a whole dim: (value, axis).
    pub(crate) sources: Option<HashMap<Symbol, (Value, usize)>>,
    /// The `[1]` int64 value of each expression written.
    pub(crate) exprs: HashMap<SymExpr, Name>,
    /// The 1-D value of each list written.
    pub(crate) lists: HashMap<Vec<SymExpr>, Name>,
}

#[cfg(test)]
mod tests {
    use super::{unique, NameSet};

    /// Suffixes count up per base, past the ones something else took, and the next
    /// call for a base starts where the last one stopped (the same names as trying
    /// from `_1` each time).
    #[test]
    fn unique_names_count_up_per_base() {
        let mut taken = NameSet::default();
        assert!(taken.insert("x_2"));
        let names: Vec<String> = (0..5).map(|_| unique(&mut taken, "x")).collect();
        assert_eq!(names, ["x", "x_1", "x_3", "x_4", "x_5"]);
        assert_eq!(unique(&mut taken, "y"), "y");
        assert_eq!(unique(&mut taken, "y"), "y_1");
        // A name given outside `unique` after a base's run is skipped too.
        assert!(taken.insert("x_6"));
        assert_eq!(unique(&mut taken, "x"), "x_7");
        for _ in 0..10_000 {
            unique(&mut taken, "z");
        }
        assert_eq!(unique(&mut taken, "z"), "z_10000");
    }
}

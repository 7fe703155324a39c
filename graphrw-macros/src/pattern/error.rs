//! Error collection: every error of one expansion is reported, merged with
//! `syn::Error::combine`, each spanned at the user's token.

use std::fmt::Display;

use proc_macro2::Span;

/// Collected errors of one expansion.
#[derive(Default)]
pub struct Errors {
    err: Option<syn::Error>,
    count: usize,
}

impl Errors {
    /// Adds an error at `span`.
    pub fn at(&mut self, span: Span, msg: impl Display) {
        self.push(syn::Error::new(span, msg));
    }

    /// Adds an error spanning the tokens of `node`.
    pub fn spanned(&mut self, node: &impl quote::ToTokens, msg: impl Display) {
        self.push(syn::Error::new_spanned(node, msg));
    }

    /// Adds an error.
    pub fn push(&mut self, e: syn::Error) {
        self.count += 1;
        match &mut self.err {
            Some(all) => all.combine(e),
            None => self.err = Some(e),
        }
    }

    /// How many errors were pushed so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// True when nothing went wrong.
    pub fn is_empty(&self) -> bool {
        self.err.is_none()
    }

    /// The errors as one `syn::Error`, if any.
    pub fn take(&mut self) -> Option<syn::Error> {
        self.err.take()
    }
}

/// The closest candidate within a small edit distance, for "did you mean".
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= name.len().max(c.len()).div_ceil(3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// "; did you mean `x`?" or nothing.
pub fn hint<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(name, candidates)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

/// "a" or "an" before a word.
pub fn article(word: &str) -> &'static str {
    match word.trim_start_matches('`').chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u' | 'A' | 'E' | 'I' | 'O' | 'U') => "an",
        _ => "a",
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

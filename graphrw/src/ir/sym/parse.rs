//! Reading a [`SymExpr`] back from the text its `Display` writes.
//!
//! An ONNX file keeps a symbolic dim as a `dim_param` string; graphrw writes an
//! expression there as its `Display` form (`past + 1`, `(s + 1) // 2`, `min(a, b)*3`).
//! [`parse`] reads exactly that grammar, so that saving and loading keep the relations
//! between dims:
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '//' | '%') unary)*        left to right, as in Python
//! unary   := '-' unary | primary
//! primary := integer | identifier | ('min' | 'max' | 'broadcast') '(' expr (',' expr)+ ')'
//!          | '(' expr ')'
//! ```
//!
//! Identifiers are `[A-Za-z_][A-Za-z0-9_]*`; an integer may not run into an identifier
//! (`1_dim_2` is no token). Every operation goes through the checked algebra, so a
//! division by a symbol that does not divide exactly, a `%` by anything but a positive
//! constant, an overflow or an expression past the algebra's limits is "not an
//! expression" (`None`), never an error. So is any text longer than [`MAX_LEN`] bytes or
//! nested deeper than [`MAX_NESTING`] levels of parentheses and calls, or any text the
//! grammar does not cover: names exporters write (`unk__7`,
//! `Concatpast_sequence_length+1_dim_2`) stay what they were, plain symbols.

use super::SymExpr;

/// The longest text [`parse`] reads; longer is not an expression.
pub const MAX_LEN: usize = 1024;
/// The deepest nesting of parentheses, `min(..)` and `max(..)` (and unary minus)
/// [`parse`] follows; deeper is not an expression (the recursion stays bounded).
pub const MAX_NESTING: usize = 32;

/// The expression `text` writes, in canonical form, or `None` where `text` is not one
/// (see the module docs). A lone identifier parses as that symbol.
pub fn parse(text: &str) -> Option<SymExpr> {
    if text.len() > MAX_LEN {
        return None;
    }
    let tokens = lex(text)?;
    let mut p = Parser { tokens, pos: 0 };
    let e = p.expr(0)?;
    (p.pos == p.tokens.len()).then_some(e)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token<'a> {
    Int(i64),
    Ident(&'a str),
    Plus,
    Minus,
    Star,
    SlashSlash,
    Percent,
    Open,
    Close,
    Comma,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn lex(text: &str) -> Option<Vec<Token<'_>>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        i += 1;
        let tok = match c {
            b' ' => continue,
            b'+' => Token::Plus,
            b'-' => Token::Minus,
            b'*' => Token::Star,
            b'%' => Token::Percent,
            b'(' => Token::Open,
            b')' => Token::Close,
            b',' => Token::Comma,
            b'/' if bytes.get(i) == Some(&b'/') => {
                i += 1;
                Token::SlashSlash
            }
            b'0'..=b'9' => {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                if i < bytes.len() && is_ident_char(bytes[i]) {
                    return None;
                }
                Token::Int(text[start..i].parse().ok()?)
            }
            c if is_ident_start(c) => {
                while i < bytes.len() && is_ident_char(bytes[i]) {
                    i += 1;
                }
                Token::Ident(&text[start..i])
            }
            _ => return None,
        };
        out.push(tok);
    }
    Some(out)
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, t: &Token<'_>) -> bool {
        let hit = self.peek() == Some(t);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expr(&mut self, depth: usize) -> Option<SymExpr> {
        let mut e = self.term(depth)?;
        loop {
            if self.eat(&Token::Plus) {
                e = e.add(&self.term(depth)?)?;
            } else if self.eat(&Token::Minus) {
                e = e.sub(&self.term(depth)?)?;
            } else {
                return Some(e);
            }
        }
    }

    fn term(&mut self, depth: usize) -> Option<SymExpr> {
        let mut e = self.unary(depth)?;
        loop {
            if self.eat(&Token::Star) {
                e = e.mul(&self.unary(depth)?)?;
            } else if self.eat(&Token::SlashSlash) {
                e = e.div_floor(&self.unary(depth)?)?;
            } else if self.eat(&Token::Percent) {
                let d = self.unary(depth)?.as_const().filter(|d| *d > 0)?;
                e = e.rem_const(d)?;
            } else {
                return Some(e);
            }
        }
    }

    fn unary(&mut self, depth: usize) -> Option<SymExpr> {
        if depth >= MAX_NESTING {
            return None;
        }
        if self.eat(&Token::Minus) {
            return self.unary(depth + 1)?.neg();
        }
        self.primary(depth)
    }

    fn primary(&mut self, depth: usize) -> Option<SymExpr> {
        let tok = self.peek()?.clone();
        self.pos += 1;
        match tok {
            Token::Int(n) => Some(SymExpr::int(n)),
            Token::Ident(name)
                if matches!(name, "min" | "max" | "broadcast") && self.eat(&Token::Open) =>
            {
                let mut args = vec![self.expr(depth + 1)?];
                while self.eat(&Token::Comma) {
                    args.push(self.expr(depth + 1)?);
                }
                if !self.eat(&Token::Close) || args.len() < 2 {
                    return None;
                }
                match name {
                    "broadcast" => SymExpr::broadcast(&args),
                    _ => SymExpr::extreme_of(&args, name == "min"),
                }
            }
            Token::Ident(name) => Some(SymExpr::sym(name)),
            Token::Open => {
                let e = self.expr(depth + 1)?;
                self.eat(&Token::Close).then_some(e)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &str) -> SymExpr {
        SymExpr::sym(n)
    }
    fn k(n: i64) -> SymExpr {
        SymExpr::int(n)
    }

    #[test]
    fn reads_what_display_writes() {
        let past1 = s("past").add(&k(1)).unwrap();
        assert_eq!(parse("past + 1"), Some(past1.clone()));
        assert_eq!(parse("past+1"), Some(past1.clone()), "spaces are optional");
        assert_eq!(parse("1 + past"), Some(past1.clone()));
        let half = past1.div_floor(&k(2)).unwrap();
        assert_eq!(parse("(past + 1) // 2"), Some(half));
        let m = s("a").minimum(&s("b")).unwrap().scale(3).unwrap();
        assert_eq!(parse("min(a, b)*3"), Some(m));
        assert_eq!(
            parse("max(a, b, 7)"),
            SymExpr::extreme_of(&[s("a"), s("b"), k(7)], false)
        );
        assert_eq!(
            parse("batch*seq*12 - past"),
            s("batch")
                .mul(&s("seq"))
                .unwrap()
                .scale(12)
                .unwrap()
                .sub(&s("past"))
        );
        assert_eq!(parse("s % 4"), s("s").rem_const(4));
        assert_eq!(
            parse("seq"),
            Some(s("seq")),
            "a lone identifier is a symbol"
        );
        assert_eq!(parse("-(s // 2)"), s("s").div_floor(&k(2)).unwrap().neg());
        // Python's reading: unary minus binds tighter than `//`.
        assert_eq!(parse("-s // 2"), s("s").neg().unwrap().div_floor(&k(2)));
    }

    #[test]
    fn names_exporters_write_are_not_expressions_unless_they_are_identifiers() {
        for text in [
            "Concatpast_sequence_length+1_dim_2",
            "1_dim",
            "batch size",
            "a / 2",
            "a // b",
            "s % b",
            "s % 0",
            "min(a)",
            "min a",
            "(a + 1",
            "a + 1)",
            "a +",
            "",
            "  ",
            "ü",
            "a.b",
            "99999999999999999999",
            "9223372036854775807 + 1",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        for text in ["unk__7", "batch_size", "s0", "_x"] {
            assert_eq!(parse(text), Some(s(text)));
        }
    }

    #[test]
    fn hostile_text_is_refused_without_deep_recursion() {
        let deep = format!("{}a{}", "(".repeat(100_000), ")".repeat(100_000));
        assert_eq!(parse(&deep), None, "too long");
        let deep_short = format!("{}a{}", "(".repeat(400), ")".repeat(400));
        assert_eq!(parse(&deep_short), None, "too deep");
        let minus = "-".repeat(900) + "a";
        assert_eq!(parse(&minus), None, "too deep");
        let calls = "min(".repeat(200) + "a" + &", a)".repeat(200);
        assert_eq!(parse(&calls), None);
        let ok = format!("{}a{}", "(".repeat(10), ")".repeat(10));
        assert_eq!(parse(&ok), Some(s("a")));
        let wide = vec!["a"; 400].join(" * ");
        assert_eq!(parse(&wide), None, "past the algebra's limits");
    }
}

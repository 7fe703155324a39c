//! No import circles between the modules of a library crate.
//!
//! For each library crate of the workspace this test walks the module tree from
//! `src/lib.rs` (following `mod x;` declarations, `#[path]` included, and inline
//! `mod x { .. }` blocks), reads the module-to-module references of each module and fails
//! listing every circle: every strongly connected component of more than one module.
//!
//! A reference is a `use` item (every leaf of its tree, renames and globs included) or a
//! path in code that starts with `crate::`, `$crate::`, `super::` or `self::`
//! (`crate::x::y::f(..)`); comments and string literals are left out, so a doc link is
//! not a reference. A path is resolved to the module that defines its item: through child
//! modules, and through the `use` bindings of the modules it passes (so `super::Value`,
//! where the parent re-exports `value::Value`, is a reference to the module `value`).
//! Paths into other crates are not followed.
//!
//! What is not an edge:
//! - a module's `mod` declarations: a module declaring its children does not depend on
//!   them;
//! - a reference from a module to itself or to one of its ancestors (child → parent). A
//!   module's ancestors are the rooms it lives in: their own items (the error type of
//!   `exec`, the shared vocabulary a `mod.rs` defines) are the context its children are
//!   written in, as a `tests` module's `use super::*` is. A reference that goes through
//!   an ancestor to a sibling (`super::sibling::f`, or a name the ancestor re-exports from
//!   a sibling) is resolved to that sibling and counts. References from a parent down to
//!   its descendants count too.
//!
//! There are none, and a new one fails this test with the arrows inside it. Run it
//! alone with `cargo test --test module_cycles -- --nocapture` (it prints the number of
//! circles and the modules checked).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The library crates whose module graphs are checked (their folder names).
const CRATES: &[&str] = &[
    "graphrw-ops",
    "graphrw-macros",
    "graphrw-kernels",
    "graphrw",
    "graphrw-cli",
    "graphrw-python",
];

/// Every strongly connected component of the module graph of every library crate: none
/// may hold more than one module.
#[test]
fn no_import_circles_between_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut circles: Vec<String> = Vec::new();
    let mut modules = 0;
    for krate in CRATES {
        let tree = ModuleTree::read(&root.join(krate).join("src/lib.rs"), krate)
            .unwrap_or_else(|e| panic!("{krate}: {e}"));
        modules += tree.modules.len();
        let lib = krate.replace('-', "_");
        for component in tree.circles() {
            let named: Vec<String> = component
                .iter()
                .map(|m| m.replacen("crate", &lib, 1))
                .collect();
            let mut text = format!("circle: {}\n", named.join(" <-> "));
            // The arrows inside the circle, to show where to cut it.
            for from in &component {
                let inside = tree.edges(tree.index[from]).into_iter().filter_map(|t| {
                    let to = tree.modules[t].path.join("::");
                    component.contains(&to).then_some(to)
                });
                let to: Vec<String> = inside.collect();
                text.push_str(&format!("  {lib}: {from} -> {}\n", to.join(", ")));
            }
            circles.push(text);
        }
    }
    println!("{} import circle(s) among {modules} modules", circles.len());
    for c in &circles {
        print!("{c}");
    }
    assert!(
        circles.is_empty(),
        "{} import circle(s) between modules.\n\
         How to read them: after each circle's modules, one line per module of the circle \
         names the modules of the circle it refers to: `a -> b, c` means that a `use` item \
         or a `crate::`/`super::`/`self::` path in `a` names an item that `b` or `c` \
         defines (a re-export is followed to the module that defines the item). Break the \
         circle by moving the items behind one arrow to where they belong: a vocabulary \
         both sides read goes down to a module below both, or up into their common parent \
         (ARCHITECTURE.md, \"No import circles\").\n{}",
        circles.len(),
        circles.join("")
    );
}

/// The checker's own tests: each builds a small crate in a temporary folder.
#[test]
fn a_circle_through_a_reexport_is_found_and_a_child_parent_reference_is_not() {
    let dir = std::env::temp_dir().join(format!("module_cycles_{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("exec")).unwrap();
    let write = |p: &str, s: &str| fs::write(dir.join(p), s).unwrap();
    write("lib.rs", "pub mod exec;\npub mod ir;\n");
    write(
        "exec/mod.rs",
        "mod plan;\nmod value;\npub use value::Value;\npub struct ExecError;\n",
    );
    // `plan` names its parent's error (not an edge) and, through the parent's re-export,
    // `value` (an edge); `value` calls into `plan` by a full path (an edge): a circle.
    write(
        "exec/plan.rs",
        "use super::{ExecError, Value};\n// crate::ir::Graph in a comment is no reference\n",
    );
    write(
        "exec/value.rs",
        "pub struct Value;\nfn f() { let s = \"crate::ir::X\"; crate::exec::plan::g(); }\n",
    );
    write(
        "ir.rs",
        "pub struct Graph;\n#[cfg(test)]\nmod tests { use super::*; }\n",
    );
    let tree = ModuleTree::read(&dir.join("lib.rs"), "toy").unwrap();
    assert_eq!(
        tree.circles(),
        vec![vec![
            "crate::exec::plan".to_string(),
            "crate::exec::value".to_string()
        ]]
    );
    let ir = tree.index["crate::ir"];
    assert!(tree.edges(ir).is_empty(), "{:?}", tree.edges(ir));
    let _ = fs::remove_dir_all(&dir);
}

/// One module: its path, its children, its `use` bindings and the items it defines.
#[derive(Default, Debug)]
struct Module {
    path: Vec<String>,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// `name -> absolute path` of each `use` leaf (and rename).
    uses: BTreeMap<String, Vec<String>>,
    /// The absolute paths of `use x::*` globs.
    globs: Vec<Vec<String>>,
    /// Names of the items defined here (fn, struct, enum, trait, type, const, static, ...).
    items: BTreeSet<String>,
    /// Every path referenced, relative as written (`crate`, `super`, `self` or a name
    /// first).
    refs: Vec<Vec<String>>,
}

struct ModuleTree {
    modules: Vec<Module>,
    index: BTreeMap<String, usize>,
}

impl ModuleTree {
    fn read(lib: &Path, _name: &str) -> Result<Self, String> {
        let mut tree = ModuleTree {
            modules: vec![Module {
                path: vec!["crate".into()],
                ..Default::default()
            }],
            index: BTreeMap::new(),
        };
        let dir = lib.parent().unwrap().to_path_buf();
        tree.read_file(0, lib, &dir)?;
        for (i, m) in tree.modules.iter().enumerate() {
            tree.index.insert(m.path.join("::"), i);
        }
        Ok(tree)
    }

    /// Reads the file of module `id`; `dir` is where its children's files are.
    fn read_file(&mut self, id: usize, file: &Path, dir: &Path) -> Result<(), String> {
        let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let tokens = lex(&text);
        let file_dir = file.parent().unwrap().to_path_buf();
        self.parse(id, &tokens, dir, &file_dir)
    }

    fn add_child(&mut self, parent: usize, name: &str) -> usize {
        let mut path = self.modules[parent].path.clone();
        path.push(name.to_string());
        self.modules.push(Module {
            path,
            parent: Some(parent),
            ..Default::default()
        });
        let id = self.modules.len() - 1;
        self.modules[parent].children.insert(name.to_string(), id);
        id
    }

    fn parse(&mut self, id: usize, t: &[Tok], dir: &Path, file_dir: &Path) -> Result<(), String> {
        // The stack of (module, brace depth of its body, dir of its children).
        let mut stack: Vec<(usize, usize, PathBuf)> = vec![(id, 0, dir.to_path_buf())];
        let mut depth = 0usize;
        let mut path_attr: Option<String> = None;
        let mut i = 0;
        while i < t.len() {
            let (cur, body_depth, cur_dir) = stack.last().cloned().unwrap();
            match &t[i] {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    if depth == body_depth && stack.len() > 1 {
                        stack.pop();
                    }
                    depth = depth.saturating_sub(1);
                }
                Tok::Punct('#') => {
                    // `#[path = "x.rs"]`
                    if let (Some(Tok::Ident(p)), Some(Tok::Str(s))) = (t.get(i + 2), t.get(i + 4)) {
                        if p == "path" {
                            path_attr = Some(s.clone());
                        }
                    }
                }
                Tok::Ident(k) if k == "mod" => {
                    if let Some(Tok::Ident(name)) = t.get(i + 1) {
                        let child = self.add_child(cur, name);
                        match t.get(i + 2) {
                            Some(Tok::Punct(';')) => {
                                let (file, child_dir) = match path_attr.take() {
                                    Some(p) => {
                                        let f = file_dir.join(p);
                                        let d = f.with_extension("");
                                        (f, d)
                                    }
                                    None => {
                                        let a = cur_dir.join(format!("{name}.rs"));
                                        if a.exists() {
                                            (a, cur_dir.join(name))
                                        } else {
                                            (cur_dir.join(name).join("mod.rs"), cur_dir.join(name))
                                        }
                                    }
                                };
                                self.read_file(child, &file, &child_dir)?;
                                i += 3;
                                continue;
                            }
                            Some(Tok::Punct('{')) => {
                                path_attr = None;
                                depth += 1;
                                stack.push((child, depth, cur_dir.join(name)));
                                i += 3;
                                continue;
                            }
                            _ => {}
                        }
                    }
                }
                Tok::Ident(k) if k == "use" => {
                    // A `use` in a block references; only a module-level one binds.
                    let binds = depth == body_depth;
                    let end = t[i..]
                        .iter()
                        .position(|x| *x == Tok::Punct(';'))
                        .map(|p| i + p);
                    let end = end.ok_or("a use without ';'")?;
                    let mut leaves = Vec::new();
                    use_tree(&t[i + 1..end], &[], &mut leaves);
                    for (path, binding) in leaves {
                        let abs = self.absolute(cur, &path);
                        if let Some(abs) = abs {
                            match binding {
                                _ if !binds => {}
                                Binding::Glob => self.modules[cur].globs.push(abs.clone()),
                                Binding::Name(n) if n != "_" => {
                                    self.modules[cur].uses.insert(n, abs.clone());
                                }
                                Binding::Name(_) => {}
                            }
                            self.modules[cur].refs.push(abs);
                        }
                    }
                    i = end + 1;
                    continue;
                }
                Tok::Ident(k)
                    if depth == body_depth
                        && matches!(
                            k.as_str(),
                            "fn" | "struct"
                                | "enum"
                                | "trait"
                                | "type"
                                | "const"
                                | "static"
                                | "union"
                        ) =>
                {
                    if let Some(Tok::Ident(name)) = t.get(i + 1) {
                        self.modules[cur].items.insert(name.clone());
                    }
                }
                Tok::Ident(k) if k == "macro_rules" => {
                    if let Some(Tok::Ident(name)) = t.get(i + 2) {
                        self.modules[cur].items.insert(name.clone());
                    }
                }
                Tok::Ident(k)
                    if matches!(k.as_str(), "crate" | "$crate" | "super" | "self")
                        && t.get(i + 1) == Some(&Tok::Sep)
                        && (i == 0 || t[i - 1] != Tok::Sep) =>
                {
                    let mut path = vec![k.trim_start_matches('$').to_string()];
                    let mut j = i + 1;
                    while t.get(j) == Some(&Tok::Sep) {
                        match t.get(j + 1) {
                            Some(Tok::Ident(s)) => path.push(s.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    if let Some(abs) = self.absolute(cur, &path) {
                        self.modules[cur].refs.push(abs);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        Ok(())
    }

    /// The absolute path (`crate` first) of a path written in module `m`; `None` for a path
    /// into another crate. A first segment that is neither `crate`, `super` nor `self` is a
    /// child of `m` or a name `m` binds (the 2018 uniform paths).
    fn absolute(&self, m: usize, path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut base = self.modules[m].path.clone();
        let mut rest = path;
        match first.as_str() {
            "crate" => {
                base = vec!["crate".into()];
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                if rest.first().map(String::as_str) == Some("self") {
                    rest = &rest[1..];
                }
            }
            name => {
                if self.modules[m].children.contains_key(name) {
                } else if let Some(bound) = self.modules[m].uses.get(name) {
                    base = bound.clone();
                    rest = &path[1..];
                } else {
                    return None;
                }
            }
        }
        base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
        Some(base)
    }

    /// The module that defines what an absolute path names (or the module it names).
    fn resolve(&self, path: &[String], hops: usize) -> Option<usize> {
        let mut m = 0usize;
        for (k, seg) in path.iter().enumerate().skip(1) {
            let module = &self.modules[m];
            if let Some(&c) = module.children.get(seg) {
                m = c;
                continue;
            }
            if module.items.contains(seg) {
                return Some(m);
            }
            if hops > 0 {
                if let Some(bound) = module.uses.get(seg) {
                    let mut p = bound.clone();
                    p.extend(path[k + 1..].iter().cloned());
                    return self.resolve(&p, hops - 1).or(Some(m));
                }
                for glob in &module.globs {
                    let mut p = glob.clone();
                    p.extend(path[k..].iter().cloned());
                    if let Some(found) = self.resolve(&p, hops - 1) {
                        if self.defines(found, &path[k]) {
                            return Some(found);
                        }
                    }
                }
            }
            return Some(m);
        }
        Some(m)
    }

    fn defines(&self, m: usize, name: &str) -> bool {
        let module = &self.modules[m];
        module.items.contains(name) || module.children.contains_key(name)
    }

    fn is_ancestor(&self, a: usize, mut b: usize) -> bool {
        while let Some(p) = self.modules[b].parent {
            if p == a {
                return true;
            }
            b = p;
        }
        false
    }

    /// The modules `m` references (itself and its ancestors left out).
    fn edges(&self, m: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for r in &self.modules[m].refs {
            if r.first().map(String::as_str) != Some("crate") {
                continue;
            }
            if let Some(target) = self.resolve(r, 8) {
                if target != m && !self.is_ancestor(target, m) {
                    out.insert(target);
                }
            }
        }
        out
    }

    /// Every strongly connected component of more than one module, as sorted paths.
    fn circles(&self) -> Vec<Vec<String>> {
        let n = self.modules.len();
        let adj: Vec<Vec<usize>> = (0..n)
            .map(|m| self.edges(m).into_iter().collect())
            .collect();
        let mut out: Vec<Vec<String>> = tarjan(&adj)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut names: Vec<String> =
                    c.iter().map(|&m| self.modules[m].path.join("::")).collect();
                names.sort();
                names
            })
            .collect();
        out.sort();
        out
    }
}

/// Tarjan's strongly connected components (iterative).
fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, usize)> = vec![(start, 0)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&(v, e)) = call.last() {
            if e < adj[v].len() {
                let w = adj[v][e];
                if let Some(top) = call.last_mut() {
                    top.1 += 1;
                }
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    Sep,
    Punct(char),
}

/// Rust source to the tokens this check needs: comments dropped, string and char literals
/// kept as `Str` (their text only matters for `#[path]`), lifetimes dropped.
fn lex(s: &str) -> Vec<Tok> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut nest = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    nest += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    nest -= 1;
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == 'r' && matches!(c.get(i + 1), Some('#') | Some('"')) && raw_start(&c, i) {
            // r"..." or r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1;
            let start = j;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    break;
                }
                j += 1;
            }
            out.push(Tok::Str(c[start..j.min(c.len())].iter().collect()));
            i = j + 1 + hashes;
        } else if ch == '"' || (ch == 'b' && c.get(i + 1) == Some(&'"')) {
            let mut j = if ch == 'b' { i + 2 } else { i + 1 };
            let start = j;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            out.push(Tok::Str(c[start..j.min(c.len())].iter().collect()));
            i = j + 1;
        } else if ch == '\'' {
            // A char literal ('a', '\n', '\'', '\u{..}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' || ch == '$' {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            out.push(Tok::Ident(word.trim_start_matches("r#").to_string()));
            continue;
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::Sep);
            i += 2;
        } else {
            if !ch.is_whitespace() {
                out.push(Tok::Punct(ch));
            }
            i += 1;
        }
        if i > c.len() {
            break;
        }
    }
    out
}

/// Whether the `r` at `i` starts a raw string (and is not the end of an identifier).
fn raw_start(c: &[char], i: usize) -> bool {
    let prev_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    if prev_ident {
        return false;
    }
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    c.get(j) == Some(&'"')
}

#[derive(Debug)]
enum Binding {
    Name(String),
    Glob,
}

/// The leaves of a `use` tree (after `use`, before `;`): each leaf's path and binding.
fn use_tree(t: &[Tok], prefix: &[String], out: &mut Vec<(Vec<String>, Binding)>) {
    // Skip a visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in ..)`.
    let mut t = t;
    if let Some(Tok::Ident(p)) = t.first() {
        if p == "pub" {
            t = &t[1..];
            if t.first() == Some(&Tok::Punct('(')) {
                let close = t.iter().position(|x| *x == Tok::Punct(')')).unwrap_or(0);
                t = &t[close + 1..];
            }
        }
    }
    // Split the top level at commas.
    let mut parts: Vec<&[Tok]> = Vec::new();
    let mut nest = 0;
    let mut start = 0;
    for (k, tok) in t.iter().enumerate() {
        match tok {
            Tok::Punct('{') => nest += 1,
            Tok::Punct('}') => nest -= 1,
            Tok::Punct(',') if nest == 0 => {
                parts.push(&t[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&t[start..]);
    for part in parts {
        let mut path = prefix.to_vec();
        let mut k = 0;
        if part.first() == Some(&Tok::Sep) {
            k = 1; // `::std::..`: another crate
            path.push("::".into());
        }
        while k < part.len() {
            match &part[k] {
                Tok::Ident(s) if s == "as" => {
                    if let Some(Tok::Ident(n)) = part.get(k + 1) {
                        out.push((path.clone(), Binding::Name(n.clone())));
                    }
                    break;
                }
                Tok::Ident(s) => {
                    path.push(s.clone());
                    k += 1;
                    if k == part.len() {
                        let name = if s == "self" {
                            path.pop();
                            path.last().cloned().unwrap_or_default()
                        } else {
                            s.clone()
                        };
                        out.push((path.clone(), Binding::Name(name)));
                    }
                }
                Tok::Sep => k += 1,
                Tok::Punct('*') => {
                    out.push((path.clone(), Binding::Glob));
                    break;
                }
                Tok::Punct('{') => {
                    let inner = &part[k + 1..part.len() - 1];
                    use_tree(inner, &path, out);
                    break;
                }
                _ => break,
            }
        }
    }
}

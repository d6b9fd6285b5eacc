//! The import graph runs one way (ARCHITECTURE.md, "Layers"): leaf types at the bottom,
//! selection and manifest editing over them, the edges beside those, planning above, the
//! Argo CD sources above that, the report of a cycle, the write-back, the engine, the service,
//! and the command line on top. This test reads every `crate::`/`super::`
//! path in `src/` (test modules and comments left out) and fails on an import against the
//! layering or on a circle between modules, naming the file and the path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// Image references, versions, YAML error rendering, configuration and policy types, the
    /// change model.
    Leaf,
    /// Tag selection and YAML editing: pure functions over leaf types.
    Core,
    /// I/O with the outside world: registries, git, forges, the Kubernetes API, the rendering
    /// tools.
    Edge,
    /// The planner and the local writer.
    Planning,
    /// Argo CD Applications as a source of policies.
    Sources,
    /// The report of a cycle: one model over the plan and the Applications, and its renderings.
    Report,
    /// What a cycle planned, written: pushes, pull requests, Application patches, records.
    WriteBack,
    /// One cycle over every source and target.
    Engine,
    /// The long-running mode: its loop, webhooks, metrics and lock, calling only the engine.
    Service,
    /// The command line: flags and a runner per command, beside the binary; may use anything.
    Cli,
}

/// The unit a module belongs to, and its layer.
fn unit_of(module: &str) -> Option<(&'static str, Layer)> {
    let units: &[(&str, &str, Layer)] = &[
        ("image", "image", Layer::Leaf),
        ("version", "version", Layer::Leaf),
        ("yaml_error", "yaml_error", Layer::Leaf),
        ("error_chain", "error_chain", Layer::Leaf),
        ("testing", "testing", Layer::Leaf),
        ("provenance", "provenance", Layer::Leaf),
        ("config", "config", Layer::Leaf),
        ("policy", "policy", Layer::Leaf),
        ("files", "files", Layer::Leaf),
        ("holds", "holds", Layer::Leaf),
        ("change", "change", Layer::Leaf),
        ("application", "application", Layer::Leaf),
        ("affected", "affected", Layer::Leaf),
        ("clock", "clock", Layer::Leaf),
        ("windows", "windows", Layer::Leaf),
        ("select", "select", Layer::Core),
        ("manifest", "manifest", Layer::Core),
        ("verification", "verification", Layer::Core),
        ("promotion", "promotion", Layer::Core),
        ("registry", "registry", Layer::Edge),
        ("git", "git", Layer::Edge),
        ("forge", "forge", Layer::Edge),
        ("kubernetes", "kubernetes", Layer::Edge),
        ("render", "render", Layer::Edge),
        ("state", "state", Layer::Edge),
        ("plan", "plan", Layer::Planning),
        ("apply", "apply", Layer::Planning),
        ("report", "report", Layer::Report),
        ("argocd", "argocd", Layer::Sources),
        ("writeback", "writeback", Layer::WriteBack),
        ("engine", "engine", Layer::Engine),
        ("session", "session", Layer::Engine),
        ("run", "run", Layer::Service),
        ("cli", "cli", Layer::Cli),
    ];
    // The longest prefix wins.
    units
        .iter()
        .filter(|(prefix, _, _)| module == *prefix || module.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _, _)| prefix.len())
        .map(|(_, unit, layer)| (*unit, *layer))
}

/// What each layer may import besides itself. Edges stand beside the core, not on it.
fn may_import(from: Layer, to: Layer, to_unit: &str) -> bool {
    match from {
        Layer::Leaf => to == Layer::Leaf,
        Layer::Core => matches!(to, Layer::Leaf | Layer::Core),
        Layer::Edge => matches!(to, Layer::Leaf | Layer::Edge),
        // The planner reaches the registry only through its trait; never git, a forge or
        // Kubernetes.
        Layer::Planning => {
            matches!(to, Layer::Leaf | Layer::Core | Layer::Planning) || to_unit == "registry"
        }
        Layer::Sources => !matches!(
            to,
            Layer::Report | Layer::Engine | Layer::Service | Layer::Cli
        ),
        Layer::Report => !matches!(
            to,
            Layer::WriteBack | Layer::Engine | Layer::Service | Layer::Cli
        ),
        // It writes what it is given: never the planner's caller, the report or above.
        Layer::WriteBack => !matches!(
            to,
            Layer::Report | Layer::Engine | Layer::Service | Layer::Cli
        ),
        Layer::Engine => !matches!(to, Layer::Service | Layer::Cli),
        Layer::Service => to != Layer::Cli,
        Layer::Cli => true,
    }
}

/// The Argo CD source's inner layers (ARCHITECTURE.md, "Layers"), bottom up: `read`
/// (annotations, `ImageUpdater` resources, settings, loading, credentials), `resolve` (with the
/// model it gives, `resolved`), `plan`, `write`. What each must never import, and why; `None`
/// when `from` may import `to`.
fn argocd_forbids(from: &str, to: &str) -> Option<&'static str> {
    let under = |m: &str, p: &str| m == p || m.starts_with(&format!("{p}::"));
    let rules: &[(&str, &[&str], &str)] = &[
        (
            "argocd::read",
            &[
                "argocd::resolve",
                "argocd::resolved",
                "argocd::plan",
                "argocd::write",
                "plan",
            ],
            "read never resolves, plans or writes, nor takes what resolving gives",
        ),
        (
            "argocd::resolved",
            &["argocd::resolve", "argocd::plan", "argocd::write"],
            "the resolved model is data: writing takes it without the resolver",
        ),
        (
            "argocd::resolve",
            &["argocd::plan", "argocd::write", "kubernetes"],
            "resolve is pure: it never plans, writes or talks to the cluster",
        ),
        (
            "argocd::plan",
            &[
                "kubernetes",
                "argocd::read::cluster",
                "argocd::read::credentials",
                "argocd::write",
            ],
            "plan never talks to the cluster and never writes",
        ),
        (
            "argocd::write",
            &["argocd::resolve"],
            "write never resolves",
        ),
    ];
    rules
        .iter()
        .find(|(layer, forbidden, _)| under(from, layer) && forbidden.iter().any(|f| under(to, f)))
        .map(|(_, _, why)| *why)
}

/// `src/a/b.rs` → `a::b`; `src/a/mod.rs` → `a`.
fn module_path(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|c| c != "mod")
        .collect();
    parts.join("::")
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path a file names through `crate::` or `super::` (`super::super::` climbing
/// one module per `super`).
fn imports(module: &str, text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)").unwrap();
    // Inside `use crate::{a::x, b}` (or `super::{…}`) the braces hold more paths.
    let braced =
        regex::Regex::new(r"\b((?:crate|super)(?:::super)*(?:::[a-z_][a-z0-9_]*)*)::\{([^}]*)\}")
            .unwrap();
    let mut out = BTreeSet::new();
    // `crate::a::b` → `a::b`; `super::super::a` from `x::y::z` → `x::a`.
    let absolute = |head: &str, rest: &str| -> String {
        let mut parts: Vec<&str> = head
            .split("::")
            .chain(rest.split("::"))
            .filter(|p| !p.is_empty())
            .collect();
        let mut base: Vec<&str> = Vec::new();
        if parts.first() == Some(&"super") {
            base = module.split("::").collect();
            while parts.first() == Some(&"super") {
                parts.remove(0);
                base.pop();
            }
        } else {
            parts.remove(0);
        }
        base.extend(parts);
        base.join("::")
    };
    for c in re.captures_iter(text) {
        out.insert(absolute(&c[1], &c[2]));
    }
    for c in braced.captures_iter(text) {
        for item in c[2].split(',') {
            let item = item.trim();
            if !item.is_empty() && item != "self" {
                let item = item.split(" as ").next().unwrap().trim();
                out.insert(absolute(&c[1], item));
            }
        }
    }
    out
}

#[test]
fn modules_import_only_along_the_layers_and_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    support::rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for file in &files {
        let module = module_path(&src, file);
        if module == "main" || module == "lib" || module.ends_with("tests") {
            continue;
        }
        let Some((unit, layer)) = unit_of(&module) else {
            violations.push(format!(
                "{}: module `{module}` is in no layer; add it to tests/it/layers.rs and ARCHITECTURE.md",
                file.display()
            ));
            continue;
        };
        let text = code(&std::fs::read_to_string(file).unwrap());
        for path in imports(&module, &text) {
            let Some((to_unit, to_layer)) = unit_of(&path) else {
                continue;
            };
            if to_unit == unit {
                continue;
            }
            graph.entry(unit).or_default().insert(to_unit);
            if !may_import(layer, to_layer, to_unit) {
                violations.push(format!(
                    "{}: `{unit}` ({layer:?}) imports `{path}` ({to_layer:?})",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    // A circle between units, found by depth-first search.
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        circles: &mut Vec<String>,
    ) {
        if let Some(i) = stack.iter().position(|n| *n == node) {
            let mut circle = stack[i..].to_vec();
            circle.push(node);
            circles.push(circle.join(" -> "));
            return;
        }
        if !done.insert(node) {
            return;
        }
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, circles);
        }
        stack.pop();
    }
    let mut circles = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut circles);
    }
    violations.extend(circles.into_iter().map(|c| format!("circle: {c}")));
    assert!(
        violations.is_empty(),
        "imports against the layering:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_layer_check_sees_imports_in_every_form() {
    let found = imports(
        "argocd::plan",
        "use crate::plan::{self, Change};\nuse super::resolve::Unit;\nuse crate::{image::Repository, git};\nlet x = crate::engine::run;",
    );
    for want in [
        "plan",
        "argocd::resolve",
        "image::Repository",
        "git",
        "engine::run",
    ] {
        assert!(found.iter().any(|f| f == want), "{want} in {found:?}");
    }
    assert!(!may_import(Layer::Leaf, Layer::Sources, "argocd"));
    assert!(!may_import(Layer::Planning, Layer::Edge, "git"));
    assert!(may_import(Layer::Planning, Layer::Edge, "registry"));
    assert!(!may_import(Layer::Edge, Layer::Core, "manifest"));
    assert!(may_import(Layer::Report, Layer::Sources, "argocd"));
    assert!(!may_import(Layer::Engine, Layer::Cli, "cli"));
    assert!(!may_import(Layer::Service, Layer::Cli, "cli"));
}

#[test]
fn the_argocd_source_keeps_its_inner_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    support::rust_files(&src.join("argocd"), &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let module = module_path(&src, file);
        if module.ends_with("tests") {
            continue;
        }
        let text = code(&std::fs::read_to_string(file).unwrap());
        for path in imports(&module, &text) {
            if let Some(why) = argocd_forbids(&module, &path) {
                violations.push(format!(
                    "{}: `{module}` imports `{path}`: {why}",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the Argo CD source's inner layers:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_inner_layer_check_catches_a_violating_import() {
    let violating = |module: &str, text: &str| -> Vec<String> {
        imports(module, text)
            .into_iter()
            .filter(|path| argocd_forbids(module, path).is_some())
            .collect()
    };
    // Write reaching the resolver, however the path is spelt.
    assert_eq!(
        violating(
            "argocd::write::patch",
            "use super::super::resolve::resolve_selected;"
        ),
        ["argocd::resolve::resolve_selected"]
    );
    assert_eq!(
        violating(
            "argocd::write",
            "use crate::argocd::{plan::patch, resolve::Resolved};"
        ),
        ["argocd::resolve::Resolved"]
    );
    // Read planning; plan talking to the cluster, through the client or the reader's side.
    assert_eq!(
        violating(
            "argocd::read::load",
            "let e = crate::plan::PlanError::from(e);"
        ),
        ["plan"]
    );
    // Read taking the resolved model (the credentials it reads are handed back instead).
    assert_eq!(
        violating(
            "argocd::read::credentials",
            "use crate::argocd::resolved::Resolved;"
        ),
        ["argocd::resolved"]
    );
    assert_eq!(
        violating("argocd::plan::patch", "use crate::kubernetes::Cluster;"),
        ["kubernetes"]
    );
    assert_eq!(
        violating("argocd::plan", "use super::read::cluster::Loaded;"),
        ["argocd::read::cluster"]
    );
    // What each may import.
    let write = "use super::super::resolved::Resolved;\n\
                 use super::super::plan::outcome::ImageOutcome;\n\
                 use crate::kubernetes::Cluster;";
    assert!(violating("argocd::write::updater_status", write).is_empty());
    assert!(
        violating(
            "argocd::plan::added",
            "use super::super::resolve::{self, SourceKind};\nuse crate::plan::{self, Change};"
        )
        .is_empty()
    );
    assert!(
        violating(
            "argocd::read::settings",
            "use crate::argocd::read::annotations;"
        )
        .is_empty()
    );
}

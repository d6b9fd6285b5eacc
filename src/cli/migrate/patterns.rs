//! `tagpilot migrate-patterns`: the pattern policies (issue 31) that could replace many exact
//! policies with the same settings. Offline, and it writes nothing: it prints the proposals, each
//! naming the policies it replaces, for a person to review.
//!
//! Only policies whose every setting can be carried over as written are grouped: the strategy
//! (semver, newestBuild, digest, alphabetical), `allowTags`, `ignoreTags`, `platforms`,
//! `pinDigest`, `allowDowngrade`, `replaceUnreadableTags` and targets of `paths` and
//! `repository`. A policy with anything else (a regex strategy, `minAge`, `verify`, `signatures`,
//! `versionLabels`, `promote`, Helm or kustomize target settings, a namespace) is kept, named with
//! the reason: never a proposal that follows an image differently than its policy does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::policy::{ImagePolicy, Strategy};

/// One proposed pattern policy and the exact policies it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub name: String,
    /// `registry/prefix/*`.
    pub pattern: String,
    /// The policies replaced, as `name (file:line)`.
    pub replaces: Vec<String>,
    /// Their names.
    pub replaced: Vec<String>,
    /// The document, without the leading comments.
    pub document: String,
}

/// The proposals for `policies`, and the policies kept with why (`name (file:line): reason`).
pub fn propose(policies: &[ImagePolicy]) -> (Vec<Proposal>, Vec<String>) {
    let mut kept = Vec::new();
    // (registry, parent path, spec without image) → the policies sharing them.
    let mut groups: BTreeMap<(String, String, String), Vec<&ImagePolicy>> = BTreeMap::new();
    for p in policies.iter().filter(|p| p.pattern.is_none()) {
        match spec_without_image(p) {
            Err(why) => kept.push(format!("{}: {why}", label(p))),
            Ok(spec) => {
                let Some((parent, _)) = p.image.path.rsplit_once('/') else {
                    kept.push(format!(
                        "{}: {} has no parent path to share",
                        label(p),
                        p.image
                    ));
                    continue;
                };
                groups
                    .entry((p.image.registry.clone(), parent.to_string(), spec))
                    .or_default()
                    .push(p);
            }
        }
    }
    let taken: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
    let mut proposals = Vec::new();
    for ((registry, parent, spec), members) in groups {
        if members.len() < 2 {
            continue;
        }
        let mut name = parent.replace('/', "-");
        while taken.contains(&name.as_str()) || proposals.iter().any(|p: &Proposal| p.name == name)
        {
            name.push_str("-pattern");
        }
        let pattern = format!("{registry}/{parent}/*");
        let document = format!(
            "apiVersion: {}\nkind: {}\nmetadata:\n  name: {name}\nspec:\n  image: {pattern}\n{spec}",
            crate::policy::API_VERSION,
            crate::policy::KIND
        );
        proposals.push(Proposal {
            name,
            pattern,
            replaces: members.iter().map(|p| label(p)).collect(),
            replaced: members.iter().map(|p| p.name.clone()).collect(),
            document,
        });
    }
    (proposals, kept)
}

/// What `migrate-patterns` prints: each proposal with the policies it replaces, then the
/// policies kept and why.
pub fn render(proposals: &[Proposal], kept: &[String]) -> String {
    let mut out = String::new();
    for (i, p) in proposals.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let _ = writeln!(
            out,
            "# Replaces {} policies with the same settings: {}.",
            p.replaces.len(),
            p.replaces.join(", ")
        );
        let _ = writeln!(
            out,
            "# It also follows any other image matching {} that its targets hold; a policy \
             naming an image exactly still wins over it.",
            p.pattern
        );
        out.push_str(&p.document);
    }
    for k in kept {
        let _ = writeln!(out, "# kept: {k}");
    }
    out
}

fn label(p: &ImagePolicy) -> String {
    format!("{} ({}:{})", p.name, p.source.file.display(), p.source.line)
}

/// The policy's `spec` after `image:`, as YAML, or why it cannot be carried over as written.
fn spec_without_image(p: &ImagePolicy) -> Result<String, &'static str> {
    let refuse = [
        (p.namespace.is_some(), "sets a namespace"),
        (p.min_age.is_some(), "sets minAge"),
        (p.verify.is_some(), "sets verify"),
        (p.signatures.is_some(), "sets signatures"),
        (p.version_labels.is_some(), "sets versionLabels"),
        (p.promote.is_some(), "promotes"),
        (p.instance.is_some(), "is a pattern's image"),
    ];
    if let Some((_, why)) = refuse.iter().find(|(set, _)| *set) {
        return Err(why);
    }
    let mut spec = String::from("  strategy:\n");
    match &p.strategy {
        Strategy::Semver { range, prerelease } => {
            let _ = write!(spec, "    semver: {{");
            let mut parts = Vec::new();
            if let Some(r) = range {
                parts.push(format!("range: {}", quoted(&r.to_string())));
            }
            if *prerelease {
                parts.push("prerelease: true".to_string());
            }
            let _ = writeln!(spec, "{}}}", parts.join(", "));
        }
        Strategy::NewestBuild => spec.push_str("    newestBuild: {}\n"),
        Strategy::Digest { tag } => {
            let _ = writeln!(spec, "    digest: {{tag: {}}}", quoted(tag));
        }
        Strategy::Alphabetical { descending } => {
            let order = if *descending { "desc" } else { "asc" };
            let _ = writeln!(spec, "    alphabetical: {{order: {order}}}");
        }
        Strategy::Regex { .. } => return Err("its regex strategy is kept as written"),
    }
    if let Some(a) = &p.allow_tags {
        let _ = writeln!(spec, "  allowTags: {}", quoted(a.as_str()));
    }
    list(
        &mut spec,
        "ignoreTags",
        p.ignore_tags.iter().map(|g| quoted(g)),
    );
    list(
        &mut spec,
        "platforms",
        p.platforms.iter().map(|x| quoted(&x.to_string())),
    );
    for (set, key) in [
        (p.pin_digest, "pinDigest"),
        (p.allow_downgrade, "allowDowngrade"),
        (p.replace_unreadable_tags, "replaceUnreadableTags"),
    ] {
        if set {
            let _ = writeln!(spec, "  {key}: true");
        }
    }
    if !p.targets.is_empty() {
        spec.push_str("  targets:\n");
    }
    for t in &p.targets {
        if t.helm.is_some() || t.kustomize_image_name.is_some() || t.literal {
            return Err("a target sets Helm paths or a kustomize image name");
        }
        let paths: Vec<String> = t.paths.iter().map(|x| quoted(x)).collect();
        let _ = write!(spec, "    - paths: [{}]", paths.join(", "));
        match &t.repository {
            Some(r) => {
                let _ = writeln!(spec, "\n      repository: {}", quoted(r));
            }
            None => spec.push('\n'),
        }
    }
    Ok(spec)
}

fn list(spec: &mut String, key: &str, items: impl Iterator<Item = String>) {
    let items: Vec<String> = items.collect();
    if !items.is_empty() {
        let _ = writeln!(spec, "  {key}: [{}]", items.join(", "));
    }
}

/// A YAML double-quoted scalar.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn doc(name: &str, image: &str, extra: &str) -> String {
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n  strategy:\n    semver: {{range: \"1.x\"}}\n  ignoreTags: [\"*-rc\"]\n  targets:\n    - paths: [\"apps/**\"]\n{extra}---\n"
        )
    }

    /// Policies that differ only in their image under one prefix become one pattern, which
    /// reads back as a valid policy following each of them alike; the others are kept, named.
    #[test]
    fn policies_differing_only_in_image_become_one_pattern_and_the_rest_are_named() {
        let yaml = [
            doc("api", "r.example/shop/api", ""),
            doc("web", "r.example/shop/web", ""),
            doc("cart", "r.example/shop/cart", "  minAge: 1h\n"),
            doc("tool", "r.example/ops/tool", ""),
        ]
        .concat();
        let policies = crate::policy::parse_file(Path::new("p.yaml"), &yaml).unwrap();
        let (proposals, kept) = propose(&policies);
        assert_eq!(proposals.len(), 1, "{proposals:?}");
        let p = &proposals[0];
        assert_eq!(p.name, "shop");
        assert_eq!(p.pattern, "r.example/shop/*");
        assert_eq!(p.replaces, ["api (p.yaml:4)", "web (p.yaml:16)"]);
        assert_eq!(kept, ["cart (p.yaml:28): sets minAge"]);
        let read = crate::policy::parse_file(Path::new("proposal.yaml"), &p.document)
            .expect("the proposal is a valid policy");
        let pattern = &read[0];
        for exact in &policies[..2] {
            assert!(pattern.follows(&exact.image));
            assert_eq!(spec_without_image(pattern), spec_without_image(exact));
        }
        let text = render(&proposals, &kept);
        assert!(text.starts_with("# Replaces 2 policies"), "{text}");
        assert!(
            text.ends_with("# kept: cart (p.yaml:28): sets minAge\n"),
            "{text}"
        );
    }
}

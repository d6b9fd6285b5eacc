//! What a pull request says: its branch name and title (from the user's templates), its body (a
//! Markdown table of the changes), and the hidden marker by which tagpilot recognises its own
//! pull requests and remembers what it proposed.
//!
//! Pure: strings in, strings out.

use serde::Serialize;
use sha2::Digest as _;

use crate::git::{Change, ChangeGroup};

/// The branch used when `write.branch` is not set in pull-request mode.
pub const DEFAULT_BRANCH: &str = "tagpilot/{{ group }}";

/// The title used when `write.title` is not set. Variables as for the branch: `group`,
/// `repository`, `changes` (list of `{policy, image, file, line, from, to, strategy}`),
/// `policies`.
pub const DEFAULT_TITLE: &str = "chore(images): update {{ group }}\
{% if changes | length == 1 %} to {{ changes[0].to }}{% endif %}";

/// What the marker at the end of a body records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The group key (policy, repository or path).
    pub group: String,
    /// [`proposal_id`] of the changes proposed.
    pub proposal: String,
    /// The commit tagpilot last pushed to the branch.
    pub head: String,
    /// A foreign tip tagpilot already said it would not overwrite, so it says so only once.
    pub noted: Option<String>,
}

impl Marker {
    pub fn render(&self) -> String {
        let mut text = format!(
            "<!-- tagpilot:group={} proposal={} head={}",
            encode(&self.group),
            self.proposal,
            self.head
        );
        if let Some(noted) = &self.noted {
            text.push_str(&format!(" noted={noted}"));
        }
        text.push_str(" -->");
        text
    }

    /// The marker in a pull request body, if tagpilot wrote it.
    pub fn find(body: &str) -> Option<Marker> {
        let start = body.rfind("<!-- tagpilot:")?;
        let rest = &body[start + "<!-- tagpilot:".len()..];
        let inner = &rest[..rest.find("-->")?];
        let mut marker = Marker {
            group: String::new(),
            proposal: String::new(),
            head: String::new(),
            noted: None,
        };
        for field in inner.split_whitespace() {
            match field.split_once('=')? {
                ("group", v) => marker.group = decode(v)?,
                ("proposal", v) => marker.proposal = v.to_owned(),
                ("head", v) => marker.head = v.to_owned(),
                ("noted", v) => marker.noted = Some(v.to_owned()),
                _ => {}
            }
        }
        (!marker.group.is_empty() && !marker.proposal.is_empty()).then_some(marker)
    }
}

/// Group keys can be paths: spaces, `-->` and `%` are percent-encoded so the marker stays one
/// HTML comment that splits on whitespace.
fn encode(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars() {
        match c {
            '%' | '>' | '<' | '=' => out.push_str(&format!("%{:02X}", c as u32)),
            c if c.is_whitespace() || c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn decode(text: &str) -> Option<String> {
    let mut bytes = Vec::new();
    let mut iter = text.bytes();
    while let Some(b) = iter.next() {
        if b == b'%' {
            let hex = [iter.next()?, iter.next()?];
            bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok()
}

/// Names what a group proposes: the images and the tags they move to. Two runs proposing the
/// same tags for the same images get the same id, so a proposal a reviewer declined is
/// recognised until a newer tag arrives.
pub fn proposal_id(changes: &[Change]) -> String {
    let mut lines: Vec<String> = changes
        .iter()
        .map(|c| format!("{}\t{}", c.image, c.to))
        .collect();
    lines.sort();
    lines.dedup();
    let hash = sha2::Sha256::digest(lines.join("\n").as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[derive(Serialize)]
struct TemplateContext<'a> {
    group: &'a str,
    repository: &'a str,
    changes: &'a [Change],
    policies: Vec<&'a str>,
}

fn render(
    name: &str,
    template: &str,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, String> {
    let mut policies: Vec<&str> = group.changes.iter().map(|c| c.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template(name, template)
        .map_err(|e| format!("invalid `write.{name}` template: {e}"))?;
    let context = TemplateContext {
        group: &group.key,
        repository,
        changes: &group.changes,
        policies,
    };
    let text = env
        .get_template(name)
        .and_then(|t| t.render(minijinja::value::Serde(&context)))
        .map_err(|e| {
            format!(
                "cannot render `write.{name}` for group `{}`: {e}",
                group.key
            )
        })?;
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(format!(
            "`write.{name}` rendered nothing for group `{}`",
            group.key
        ));
    }
    Ok(text)
}

/// The branch for `group` from the `write.branch` template; it must be a valid branch name.
pub fn branch_name(
    template: Option<&str>,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, String> {
    let name = render(
        "branch",
        template.unwrap_or(DEFAULT_BRANCH),
        repository,
        group,
    )?;
    if !git2::Reference::is_valid_name(&format!("refs/heads/{name}")) {
        return Err(format!(
            "`write.branch` gives `{name}` for group `{}`, which is not a valid branch name",
            group.key
        ));
    }
    Ok(name)
}

/// The pull request title from the `write.title` template.
pub fn title(
    template: Option<&str>,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, String> {
    let title = render(
        "title",
        template.unwrap_or(DEFAULT_TITLE),
        repository,
        group,
    )?;
    // A title is one line; a template with a trailing `{% for %}` should not break the forge.
    Ok(title.lines().next().unwrap_or_default().to_owned())
}

/// The pull request body: a sentence, the table of changes, and the marker.
pub fn body(repository: &str, base: &str, group: &ChangeGroup, marker: &Marker) -> String {
    let mut out = format!(
        "tagpilot proposes {} in `{}` (base `{}`):\n\n",
        if group.changes.len() == 1 {
            "this image update".to_owned()
        } else {
            format!("these {} image updates", group.changes.len())
        },
        cell(repository),
        cell(base),
    );
    out.push_str("| Image | From | To | File | Policy | Strategy |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for c in &group.changes {
        out.push_str(&format!(
            "| `{}` | `{}` | `{}` | `{}:{}` | `{}` | {} |\n",
            cell(&c.image),
            cell(&c.from),
            cell(&c.to),
            cell(&c.file.to_string_lossy().replace('\\', "/")),
            c.line,
            cell(&c.policy),
            cell(&c.strategy),
        ));
    }
    out.push_str(
        "\nA newer tag updates this pull request in place. Commits pushed here by anyone \
         else stop tagpilot from updating it.\n\n",
    );
    out.push_str(&marker.render());
    out.push('\n');
    out
}

/// Table cells cannot hold `|`, newlines or backticks inside code spans.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r', '`'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn change(image: &str, to: &str) -> Change {
        Change {
            policy: "api".into(),
            image: image.into(),
            file: PathBuf::from("apps/a.yaml"),
            line: 3,
            from: "1.0.0".into(),
            to: to.into(),
            strategy: "semver".into(),
        }
    }

    fn group(key: &str, changes: Vec<Change>) -> ChangeGroup {
        ChangeGroup {
            key: key.into(),
            files: Default::default(),
            changes,
        }
    }

    #[test]
    fn marker_round_trips_odd_group_keys() {
        for key in ["api", "apps/a b.yaml", "x-->y", "100%=<"] {
            let marker = Marker {
                group: key.into(),
                proposal: "0123abcd".into(),
                head: "f".repeat(40),
                noted: Some("e".repeat(40)),
            };
            let body = format!("text\n\n{}\n", marker.render());
            assert_eq!(Marker::find(&body), Some(marker), "{key}");
        }
        assert_eq!(Marker::find("a pull request a human wrote"), None);
    }

    #[test]
    fn proposal_id_names_images_and_tags_not_order_or_files() {
        let a = proposal_id(&[change("r/api", "1.2.0"), change("r/web", "2.0.0")]);
        let b = proposal_id(&[change("r/web", "2.0.0"), change("r/api", "1.2.0")]);
        assert_eq!(a, b);
        assert_ne!(
            a,
            proposal_id(&[change("r/api", "1.3.0"), change("r/web", "2.0.0")])
        );
    }

    #[test]
    fn branch_and_title_templates() {
        let g = group("api", vec![change("r/api", "1.2.0")]);
        assert_eq!(branch_name(None, "m", &g).unwrap(), "tagpilot/api");
        assert_eq!(
            title(None, "m", &g).unwrap(),
            "chore(images): update api to 1.2.0"
        );
        assert_eq!(
            title(Some("Update {{ group }} to {{ changes[0].to }}"), "m", &g).unwrap(),
            "Update api to 1.2.0"
        );
        let err = branch_name(Some("bad..{{ group }}"), "m", &g).unwrap_err();
        assert!(err.contains("not a valid branch name"), "{err}");
        let err = title(Some("{{ nope }}"), "m", &g).unwrap_err();
        assert!(
            err.contains("write.title") && err.contains("`api`"),
            "{err}"
        );
    }
}

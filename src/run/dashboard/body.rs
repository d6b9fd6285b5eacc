//! The dashboard issue's text, and the boxes ticked in it. Pure: what to show comes in as the
//! status page's data ([`super::super::status::Status`]) and the candidates refused, already
//! narrowed to one repository.
//!
//! Each hold's box carries the hold's id in an HTML comment (`<!-- tagpilot:release:<id> -->`),
//! which the forge does not show: a person ticks the box, the next cycle reads the id back.
//! Nothing else in the text is read back, so editing it does nothing but get overwritten.

use std::fmt::Write as _;

use crate::run::status::{Field, Hold, Promotion, PullRequest};

/// In the body of tagpilot's dashboard issue, how it is found again without its number.
pub const MARKER: &str = "<!-- tagpilot:dashboard -->";

/// The title.
pub const TITLE: &str = "tagpilot dashboard";

const RELEASE: &str = "<!-- tagpilot:release:";

/// What one repository's dashboard lists.
#[derive(Debug, Default)]
pub struct Board<'a> {
    pub repository: &'a str,
    /// Fields with a candidate not written yet, and fields held by the plan (`minAge`, …).
    pub pending: Vec<&'a Field>,
    pub pull_requests: Vec<&'a PullRequest>,
    /// Held tags, each with its id ([`crate::holds::FieldKey::id`]).
    pub holds: Vec<(String, &'a Hold)>,
    pub promotions: Vec<&'a Promotion>,
    /// `policy image: tag — why`.
    pub refused: Vec<String>,
    pub problems: Vec<&'a str>,
}

/// The body.
pub fn render(board: &Board<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{MARKER}");
    let _ = writeln!(
        out,
        "tagpilot rewrites this issue every cycle for repository `{}`. Tick a hold's box to \
         release it: tagpilot acts on it in its next cycle. Whoever can edit this issue can \
         release holds.\n",
        board.repository
    );
    section(&mut out, "Pending updates", &board.pending, |f| {
        let to = f.candidate.as_deref().unwrap_or("—");
        format!(
            "`{}` {}:{} (policy {}): `{}` → `{to}`, {}",
            f.image.as_deref().unwrap_or("?"),
            f.file,
            f.line,
            f.policy,
            f.current,
            f.state
        )
    });
    section(&mut out, "Open pull requests", &board.pull_requests, |p| {
        let reference = p.reference.as_deref().unwrap_or("?");
        match &p.url {
            Some(url) => format!("{} [{reference}]({url}): {}", p.group, p.status),
            None => format!("{} {reference}: {}", p.group, p.status),
        }
    });
    let _ = writeln!(out, "## Holds\n");
    if board.holds.is_empty() {
        let _ = writeln!(out, "None.\n");
    } else {
        for (id, h) in &board.holds {
            let _ = writeln!(
                out,
                "- [ ] {RELEASE}{id} --> release hold on {} (policy {}): `{}` held: {}, since {}",
                h.file,
                h.policy,
                h.tag,
                one_line(&h.why),
                h.since
            );
        }
        let _ = writeln!(out);
    }
    section(&mut out, "Promotions waiting", &board.promotions, |p| {
        format!(
            "`{}` (policy {}): `{}` → `{}`, waits for {}",
            p.image,
            p.policy,
            p.current,
            p.tag.as_deref().unwrap_or("—"),
            p.waits.join("; ")
        )
    });
    let problems: Vec<String> = board
        .refused
        .iter()
        .cloned()
        .chain(board.problems.iter().map(|p| p.to_string()))
        .collect();
    section(
        &mut out,
        "Refused candidates and problems",
        &problems,
        |p| one_line(p),
    );
    out
}

fn section<T>(out: &mut String, title: &str, items: &[T], line: impl Fn(&T) -> String) {
    let _ = writeln!(out, "## {title}\n");
    if items.is_empty() {
        let _ = writeln!(out, "None.\n");
        return;
    }
    for item in items {
        let _ = writeln!(out, "- {}", line(item));
    }
    let _ = writeln!(out);
}

/// A text on one list line: a line break would end the item.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The ids of the holds whose box is ticked (`- [x]`, `* [X]`), in the order they appear.
pub fn ticked_releases(body: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for line in body.lines() {
        let line = line.trim_start();
        let Some(rest) = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .map(str::trim_start)
        else {
            continue;
        };
        let Some(rest) = rest
            .strip_prefix("[x]")
            .or_else(|| rest.strip_prefix("[X]"))
        else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix(RELEASE) else {
            continue;
        };
        let Some((id, _)) = rest.split_once("-->") else {
            continue;
        };
        let id = id.trim();
        if !id.is_empty()
            && id.chars().all(|c| c.is_ascii_hexdigit())
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_string());
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold() -> Hold {
        Hold {
            id: "0123456789ab".into(),
            repository: Some("deploy".into()),
            policy: "api".into(),
            file: "apps/api.yaml".into(),
            tag: "1.4.0".into(),
            why: "deployment failed\nin app api".into(),
            since: "2026-01-02T03:04:05Z".parse().unwrap(),
        }
    }

    #[test]
    fn every_section_is_rendered_and_a_hold_has_a_box_with_its_id() {
        let held = hold();
        let field = Field {
            repository: Some("deploy".into()),
            policy: "web".into(),
            image: Some("ghcr.io/acme/web".into()),
            file: "apps/web.yaml".into(),
            line: 12,
            current: "1.0.0".into(),
            candidate: Some("1.1.0".into()),
            state: "pull request".into(),
        };
        let board = Board {
            repository: "deploy",
            pending: vec![&field],
            holds: vec![(held.id.clone(), &held)],
            refused: vec!["web ghcr.io/acme/web: 1.2.0 — no valid signature".into()],
            ..Board::default()
        };
        let body = render(&board);
        assert!(body.starts_with(MARKER), "{body}");
        assert!(
            body.contains("- `ghcr.io/acme/web` apps/web.yaml:12 (policy web): `1.0.0` → `1.1.0`, pull request"),
            "{body}"
        );
        assert!(
            body.contains(
                "- [ ] <!-- tagpilot:release:0123456789ab --> release hold on apps/api.yaml (policy api): `1.4.0` held: deployment failed in app api, since 2026-01-02T03:04:05Z"
            ),
            "{body}"
        );
        assert!(body.contains("## Open pull requests\n\nNone."), "{body}");
        assert!(body.contains("## Promotions waiting\n\nNone."), "{body}");
        assert!(
            body.contains("- web ghcr.io/acme/web: 1.2.0 — no valid signature"),
            "{body}"
        );
        // Nothing rendered is ticked.
        assert!(ticked_releases(&body).is_empty());
    }

    #[test]
    fn only_ticked_release_boxes_are_read() {
        let body = "<!-- tagpilot:dashboard -->\n\
            - [x] <!-- tagpilot:release:aaaaaaaaaaaa --> release hold on a\n\
            - [ ] <!-- tagpilot:release:bbbbbbbbbbbb --> release hold on b\n\
            * [X]  <!-- tagpilot:release:cccccccccccc --> release hold on c\n\
            - [x] release hold on d, without an id\n\
            - [x] <!-- tagpilot:release:not-hex --> e\n\
            text [x] <!-- tagpilot:release:dddddddddddd -->\n\
            - [x] <!-- tagpilot:release:aaaaaaaaaaaa --> again\n";
        assert_eq!(ticked_releases(body), ["aaaaaaaaaaaa", "cccccccccccc"]);
    }
}

//! The status page as HTML: one document, its CSS inline, no script; every value escaped.

use std::fmt::Write;

use super::Status;

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f5f6f8}
header{background:#1d2430;color:#fff;padding:12px 24px}
header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c6ccd6}
main{padding:8px 24px 24px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;margin:16px 0;padding:8px 16px}
h2{font-size:16px;margin:8px 0}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef0f3;vertical-align:top}
th{color:#5b6573;font-weight:600}
.empty{color:#8a93a0}
.up{color:#137333;font-weight:600}
.down{color:#b3261e;font-weight:600}
.state-held,.state-failed{color:#b3261e}
.state-pushed,.state-pull{color:#0b57d0}
code{font:12px ui-monospace,monospace}
";

/// `s` with HTML's special characters escaped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn opt(s: Option<&str>) -> String {
    s.map_or_else(String::new, esc)
}

/// A link to `url` reading `text`, only for http(s) URLs (nothing else is a link here).
fn link(text: &str, url: Option<&str>) -> String {
    match url {
        Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
            format!("<a href=\"{}\">{}</a>", esc(u), esc(text))
        }
        _ => esc(text),
    }
}

/// One section: a table of `rows` under `headers`, or a line saying there is nothing.
fn section(out: &mut String, id: &str, title: &str, headers: &[&str], rows: &[Vec<String>]) {
    let _ = write!(
        out,
        "<section id=\"{id}\"><h2>{} ({})</h2>",
        esc(title),
        rows.len()
    );
    if rows.is_empty() {
        out.push_str("<p class=\"empty\">none</p></section>");
        return;
    }
    out.push_str("<table><thead><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>");
}

fn state_class(state: &str) -> &'static str {
    match state.split([':', ' ']).next().unwrap_or("") {
        "held" => "state-held",
        "failed" => "state-failed",
        "pushed" => "state-pushed",
        "pull" => "state-pull",
        _ => "",
    }
}

/// The whole page.
pub(super) fn render(status: &Status) -> String {
    let mut out = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tagpilot status</title><style>",
    );
    out.push_str(STYLE);
    out.push_str("</style></head><body><header><h1>tagpilot</h1><p>");
    let down = status.endpoints.iter().filter(|e| !e.up).count();
    let last = status
        .cycles
        .first()
        .map_or("no cycle yet".to_string(), |c| {
            format!("last {} {} at {}", c.kind, c.result, c.ended)
        });
    let _ = write!(
        out,
        "{} fields · {} open pull requests · {} holds · {} down · {}",
        status.fields.len(),
        status.pull_requests.len(),
        status.holds.len(),
        down,
        esc(&last)
    );
    out.push_str("</p></header><main>");
    for why in &status.unknown {
        let _ = write!(
            out,
            "<section class=\"down\">unknown: {}</section>",
            esc(why)
        );
    }
    let fields: Vec<Vec<String>> = status
        .fields
        .iter()
        .map(|f| {
            vec![
                esc(&f.policy),
                opt(f.image.as_deref()),
                opt(f.repository.as_deref()),
                format!("<code>{}:{}</code>", esc(&f.file), f.line),
                esc(&f.current),
                opt(f.candidate.as_deref()),
                format!(
                    "<span class=\"{}\">{}</span>",
                    state_class(&f.state),
                    esc(&f.state)
                ),
            ]
        })
        .collect();
    section(
        &mut out,
        "fields",
        "Policies and images",
        &[
            "policy",
            "image",
            "repository",
            "field",
            "current",
            "candidate",
            "state",
        ],
        &fields,
    );
    let prs: Vec<Vec<String>> = status
        .pull_requests
        .iter()
        .map(|p| {
            let name = p.reference.as_deref().unwrap_or(&p.group);
            vec![
                esc(&p.repository),
                link(name, p.url.as_deref()),
                esc(&p.group),
                esc(&p.status),
            ]
        })
        .collect();
    section(
        &mut out,
        "pull-requests",
        "Open pull requests",
        &["repository", "pull request", "group", "status"],
        &prs,
    );
    let verifications: Vec<Vec<String>> = status
        .verifications
        .iter()
        .map(|v| {
            vec![
                esc(&v.application),
                esc(&v.repository),
                format!("<code>{}</code>", esc(&v.commit)),
                esc(&v.changes.join("; ")),
                esc(&v.since.to_string()),
            ]
        })
        .collect();
    section(
        &mut out,
        "verifications",
        "Verifications under way",
        &["Application", "repository", "commit", "changes", "since"],
        &verifications,
    );
    let holds: Vec<Vec<String>> = status
        .holds
        .iter()
        .map(|h| {
            vec![
                esc(&h.policy),
                opt(h.repository.as_deref()),
                format!("<code>{}</code>", esc(&h.file)),
                esc(&h.tag),
                esc(&h.why),
                esc(&h.since.to_string()),
            ]
        })
        .collect();
    section(
        &mut out,
        "holds",
        "Holds",
        &["policy", "repository", "file", "tag held", "why", "since"],
        &holds,
    );
    let promotions: Vec<Vec<String>> = status
        .promotions
        .iter()
        .map(|p| {
            vec![
                esc(&p.policy),
                esc(&p.image),
                esc(&p.current),
                opt(p.tag.as_deref()),
                esc(&p.waits.join("; ")),
            ]
        })
        .collect();
    section(
        &mut out,
        "promotions",
        "Promotions waiting",
        &["policy", "image", "current", "waits to take", "why"],
        &promotions,
    );
    let endpoints: Vec<Vec<String>> = status
        .endpoints
        .iter()
        .map(|e| {
            let (class, word) = if e.up { ("up", "up") } else { ("down", "down") };
            vec![
                esc(e.kind),
                esc(&e.name),
                format!("<span class=\"{class}\">{word}</span>"),
                e.since.map_or_else(String::new, |s| esc(&s.to_string())),
            ]
        })
        .collect();
    section(
        &mut out,
        "endpoints",
        "Registries and remotes",
        &["kind", "name", "", "failing since"],
        &endpoints,
    );
    let problems: Vec<Vec<String>> = status.problems.iter().map(|p| vec![esc(p)]).collect();
    section(&mut out, "problems", "Problems", &["problem"], &problems);
    let cycles: Vec<Vec<String>> = status
        .cycles
        .iter()
        .map(|c| {
            vec![
                esc(c.kind),
                esc(&c.ended.to_string()),
                format!("{:.1}s", c.took_seconds),
                esc(c.result),
                c.changes.to_string(),
                c.holds.to_string(),
                c.problems.to_string(),
            ]
        })
        .collect();
    section(
        &mut out,
        "cycles",
        "Last cycles",
        &["", "ended", "took", "result", "changes", "held", "problems"],
        &cycles,
    );
    out.push_str("</main></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::status::{Field, Status};

    #[test]
    fn every_value_is_escaped_and_an_empty_section_says_none() {
        let status = Status {
            fields: vec![Field {
                repository: Some("m".into()),
                policy: "<script>alert(1)</script>".into(),
                image: None,
                file: "a.yaml".into(),
                line: 3,
                current: "1.0.0".into(),
                candidate: Some("1.1.0".into()),
                state: "held: \"x\" & y".into(),
            }],
            ..Status::default()
        };
        let html = render(&status);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("held: &quot;x&quot; &amp; y"));
        assert!(html.contains("<h2>Holds (0)</h2><p class=\"empty\">none</p>"));
        assert_eq!(link("x", Some("javascript:alert(1)")), "x");
    }
}

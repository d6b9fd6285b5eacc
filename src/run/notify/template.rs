//! The words of a message: one line per event, from a minijinja template per event type (a
//! sink's own, else the default, which a person reads in one glance), and a title line when a
//! burst of events is one message.

use std::collections::BTreeMap;

use super::event::{Kind, Notice};

/// Each type's default line. The event's fields are the variables (`policy`, `image`, `from`,
/// `to`, `repository`, `link`, `why`, `by`, `reason`, `at`, `type`); a field the event lacks is
/// empty.
pub fn default_template(kind: Kind) -> &'static str {
    match kind {
        Kind::UpdateWritten => {
            "{{ policy }}: {{ image }} {{ from }} → {{ to }} written to {{ repository }} ({{ link }})"
        }
        Kind::PullRequestMerged => {
            "{{ policy }}: {{ image }} {{ from }} → {{ to }} merged in {{ repository }} ({{ link }})"
        }
        Kind::Verified => "{{ policy }}: {{ image }} {{ to }} runs healthy in {{ by }}",
        Kind::Failed => "{{ policy }}: {{ image }} {{ to }} failed in {{ by }}: {{ why }}",
        Kind::Reverted => {
            "{{ policy }}: {{ image }} {{ from }} → {{ to }} reverted in {{ repository }}{% if link %} ({{ link }}){% endif %}: {{ why }}"
        }
        Kind::Held => "{{ policy }}: {{ from }} held{% if by %} by {{ by }}{% endif %}: {{ why }}",
        Kind::PromotionWaiting => {
            "{{ policy }}: promoting {{ image }} {{ from }} → {{ to }} waits: {{ why }}"
        }
        Kind::PromotionWritten => {
            "{{ policy }}: promoted {{ image }} {{ from }} → {{ to }} in {{ repository }} ({{ link }})"
        }
        Kind::CandidateRefused => {
            "{{ policy }}: {{ image }} {{ to }} refused ({{ reason }}): {{ why }}"
        }
        Kind::Unreachable => "{{ reason }} {{ repository or image }} unreachable since {{ at }}",
        Kind::Recovered => {
            "{{ reason }} {{ repository or image }} answers again (failing since {{ at }})"
        }
    }
}

/// Why a sink's template cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("templates.{kind}: no such event type")]
    UnknownType { kind: String },
    #[error("templates.{kind}")]
    Invalid {
        kind: String,
        #[source]
        source: minijinja::Error,
    },
}

/// A sink's templates, checked.
#[derive(Debug, Clone, Default)]
pub struct Templates {
    own: BTreeMap<Kind, String>,
}

impl Templates {
    /// A sink's `templates:`, each parsed and rendered once with a sample event, so a broken
    /// one stops the start rather than a message.
    pub fn new(own: &BTreeMap<String, String>) -> Result<Templates, TemplateError> {
        let mut checked = BTreeMap::new();
        for (name, text) in own {
            let kind = Kind::from_name(name)
                .ok_or_else(|| TemplateError::UnknownType { kind: name.clone() })?;
            let sample = Notice::new(kind, jiff::Timestamp::UNIX_EPOCH);
            render(text, &sample).map_err(|source| TemplateError::Invalid {
                kind: name.clone(),
                source,
            })?;
            checked.insert(kind, text.clone());
        }
        Ok(Templates { own: checked })
    }

    /// The line of one event: its sink's template, else the default.
    pub fn line(&self, notice: &Notice) -> String {
        let own = self.own.get(&notice.kind);
        let text = own.map_or(default_template(notice.kind), String::as_str);
        render(text, notice)
            .or_else(|_| render(default_template(notice.kind), notice))
            .unwrap_or_else(|_| notice.kind.name().to_string())
    }

    /// The text of a message of `notices`: one line, or a title and a line per event.
    pub fn message(&self, notices: &[Notice]) -> String {
        match notices {
            [one] => self.line(one),
            many => {
                let mut text = format!("tagpilot: {} events", many.len());
                for n in many {
                    text.push_str("\n• ");
                    text.push_str(&self.line(n));
                }
                text
            }
        }
    }
}

fn render(template: &str, notice: &Notice) -> Result<String, minijinja::Error> {
    let env = minijinja::Environment::new();
    let text = env.render_str(template, minijinja::value::Serde(notice))?;
    Ok(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update() -> Notice {
        let mut n = Notice::new(Kind::UpdateWritten, jiff::Timestamp::UNIX_EPOCH);
        n.repository = Some("manifests".into());
        n.policy = Some("api".into());
        n.image = Some("ghcr.io/shop/api".into());
        n.from = Some("1.0.0".into());
        n.to = Some("1.1.0".into());
        n.link = Some("abc123".into());
        n.with_id(None)
    }

    #[test]
    fn a_default_line_reads_in_one_glance_and_a_burst_gets_a_title() {
        let t = Templates::default();
        assert_eq!(
            t.line(&update()),
            "api: ghcr.io/shop/api 1.0.0 → 1.1.0 written to manifests (abc123)"
        );
        let mut held = Notice::new(Kind::Held, jiff::Timestamp::UNIX_EPOCH);
        held.policy = Some("api".into());
        held.from = Some("1.1.0".into());
        held.why = Some("rolled back".into());
        assert_eq!(t.line(&held), "api: 1.1.0 held: rolled back");
        let text = t.message(&[update(), held]);
        assert!(text.starts_with("tagpilot: 2 events\n• api: "), "{text}");
    }

    #[test]
    fn a_sinks_own_template_is_checked_at_start() {
        let own = BTreeMap::from([("update_written".to_string(), "{{ to }}!".to_string())]);
        assert_eq!(Templates::new(&own).unwrap().line(&update()), "1.1.0!");
        let broken = BTreeMap::from([("failed".to_string(), "{{ to ".to_string())]);
        assert!(matches!(
            Templates::new(&broken),
            Err(TemplateError::Invalid { .. })
        ));
        let unknown = BTreeMap::from([("fail".to_string(), "x".to_string())]);
        assert_eq!(
            Templates::new(&unknown).unwrap_err().to_string(),
            "templates.fail: no such event type"
        );
    }
}

//! The hidden marker at the end of a pull request's body: by it tagpilot recognises its own
//! pull requests among a human's, and remembers what it proposed, what it last pushed, and which
//! foreign commit it already spoke about. An HTML comment, so reviewers do not see it.
//!
//! Pure: strings in, strings out.

/// What the marker at the end of a body records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The group key (policy, repository or path).
    pub group: String,
    /// [`proposal_id`](super::body::proposal_id) of the changes proposed.
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

    /// `text` with its marker replaced by this one, or this one appended if it has none.
    pub fn replace_in(&self, text: &str) -> String {
        match text.rfind("<!-- tagpilot:") {
            Some(start) => {
                let end = text[start..]
                    .find("-->")
                    .map_or(text.len(), |e| start + e + 3);
                format!("{}{}{}", &text[..start], self.render(), &text[end..])
            }
            None => format!("{text}\n\n{}\n", self.render()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn replace_marker_keeps_the_text_around_it() {
        let old = Marker {
            group: "api".into(),
            proposal: "p".into(),
            head: "a".into(),
            noted: None,
        };
        let body = format!("table\n\n{}\n", old.render());
        let new = Marker {
            noted: Some("b".into()),
            ..old
        };
        assert_eq!(
            new.replace_in(&body),
            format!("table\n\n{}\n", new.render())
        );
    }
}

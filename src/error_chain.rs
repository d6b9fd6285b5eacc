//! An error and its causes as one line, `what failed: why: why that`, for every place a user
//! reads an error: the command's `error:` line, problems and findings in reports, log fields,
//! pull request bodies and `ImageUpdater` status.
//!
//! tagpilot's errors say their own part only and return their cause from `source()` (a test in
//! `tests/it/errors.rs` holds every `#[error]` to that), so the whole story is the chain, never
//! one `Display`. Some foreign errors do quote their cause as well (kube-client's
//! `HyperError: {0}`, walkdir's `IO error for operation on …: {err}`); a cause whose text the
//! line already shows is left out, so nothing is read twice.

use std::error::Error;
use std::fmt;

/// `error` and each of its causes, joined with `: `.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    Chain(error).to_string()
}

/// [`chain`] as a `Display`, for `format!` and log fields (`error = %Chain(&e)`).
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            let text = c.to_string();
            // A foreign error that quotes its own cause: the cause is already on the line.
            if !text.is_empty() && !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown = text;
            }
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot read a.yaml")]
        Read(#[source] std::io::Error),
        /// Like kube-client's `HyperError: {0}`, which is also its source.
        #[error("foreign: {0}")]
        Quoting(#[source] std::io::Error),
    }

    #[test]
    fn each_cause_is_joined_once() {
        let read = Outer::Read(std::io::Error::other("no such file"));
        assert_eq!(chain(&read), "cannot read a.yaml: no such file");
        let quoting = Outer::Quoting(std::io::Error::other("refused"));
        assert_eq!(chain(&quoting), "foreign: refused");
        assert_eq!(Chain(&read).to_string(), chain(&read));
    }
}

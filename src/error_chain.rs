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

/// An error kept as a value in what a plan or report holds (a problem, a hold): cheap to
/// clone, its type intact for whoever inspects it ([`Failure::error`]), and rendered with its
/// causes ([`Chain`]) only where it is shown. Two are equal when they say the same.
#[derive(Clone)]
pub struct Failure(std::sync::Arc<dyn Error + Send + Sync + 'static>);

impl Failure {
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Failure(std::sync::Arc::new(error))
    }

    /// The error itself (its causes through `source()`).
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error: &(dyn Error + 'static) = &*self.0;
        Chain(error).fmt(f)
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for Failure {
    fn eq(&self, other: &Failure) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for Failure {}

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

    #[test]
    fn a_failure_keeps_its_error_and_shows_the_chain() {
        let failure = Failure::new(Outer::Read(std::io::Error::other("no such file")));
        assert_eq!(failure.to_string(), "cannot read a.yaml: no such file");
        assert!(failure.error().downcast_ref::<Outer>().is_some());
        assert_eq!(failure.clone(), failure);
    }
}

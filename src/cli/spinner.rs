//! The progress a person at a terminal sees while a command asks registries.

use std::io::IsTerminal;

use crate::plan;

/// A spinner on stderr while a plan runs, only when stderr is a terminal.
pub struct Spinner(Option<indicatif::ProgressBar>);

impl Spinner {
    pub fn new() -> Self {
        if !std::io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Spinner(Some(bar))
    }
}

impl plan::Progress for Spinner {
    fn phase(&self, name: &str, total: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(total);
            bar.set_position(0);
            bar.set_message(name.to_string());
        }
    }
    fn advance(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }
    fn done(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

//! Live progress: an indicatif line on a terminal, plain periodic lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress output.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    plain_every: Duration,
    last_plain: Option<Instant>,
}

impl Progress {
    /// A progress line; plain lines every `plain_every` when stdout is not a terminal.
    pub(crate) fn new(plain_every: Duration) -> Self {
        let bar = std::io::stdout().is_terminal().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Self {
            bar,
            plain_every,
            last_plain: None,
        }
    }

    /// Shows `line` (always on a terminal; at most every `plain_every` otherwise unless `force`).
    pub(crate) fn update(&mut self, line: &str, force: bool) {
        match &self.bar {
            Some(b) => b.set_message(line.to_owned()),
            None => {
                let due = self
                    .last_plain
                    .is_none_or(|t| t.elapsed() >= self.plain_every);
                if due || force {
                    println!("{line}");
                    self.last_plain = Some(Instant::now());
                }
            }
        }
    }

    /// Prints a message above the progress line.
    pub(crate) fn note(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => println!("{line}"),
        }
    }

    /// Removes the progress line.
    pub(crate) fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

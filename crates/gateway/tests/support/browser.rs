//! What the browser tests share: whether to skip them, and where their Node packages and
//! Chromium are (with a clear failure when they are missing).

use std::path::{Path, PathBuf};

/// Whether `HERALD_SKIP_BROWSER=1` asks to skip the browser tests (said on stderr).
pub fn skip() -> bool {
    let skip = std::env::var("HERALD_SKIP_BROWSER").as_deref() == Ok("1");
    if skip {
        eprintln!("HERALD_SKIP_BROWSER=1: browser test skipped");
    }
    skip
}

/// The browser tests' directory, once Chromium and playwright-core are known to be there.
pub fn browser_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var("HERALD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: run deploy/test.sh (installs Debian's chromium) or set HERALD_SKIP_BROWSER=1"
    );
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "run `npm ci` in {} (deploy/test.sh does) or set HERALD_SKIP_BROWSER=1",
        dir.display()
    );
    dir
}

//! Reports: the data model, the text summary, JSON and HTML output.

pub(crate) mod html;
pub(crate) mod model;
pub(crate) mod svg;
pub(crate) mod text;

use std::path::Path;

use anyhow::Context as _;

use self::model::Report;

/// Writes the JSON and/or HTML report files.
pub(crate) fn write_files(
    r: &Report,
    json: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(p) = json {
        let s = serde_json::to_string_pretty(r)?;
        std::fs::write(p, s).with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = html {
        std::fs::write(p, html::render(r))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

//! The one font every chart uses, compiled into the binary.
//!
//! plotters' default `ttf` feature asks fontconfig for a system font at run
//! time, so a PNG drawn on a bare CI machine or a minimal container loses all
//! its text (or fails with "No such font"). jsbench builds plotters with
//! `ab_glyph` instead and registers DejaVu Sans (licence beside it in
//! `assets/fonts/`) under the family name the charts ask for. SVGs name the
//! same family and leave the choice of glyphs to the browser.

use std::sync::OnceLock;

use anyhow::{Result, bail};
use plotters::style::{FontStyle, register_font};

/// The family name the charts use; registered for every style plotters
/// may look up, so a bold title finds the same glyphs.
pub const FAMILY: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Registers the bundled font once per process; later calls return the
/// first outcome.
pub fn ensure_registered() -> Result<()> {
    // Whether the font parsed: the one way registering can fail.
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let parsed = *REGISTERED.get_or_init(|| {
        [
            FontStyle::Normal,
            FontStyle::Bold,
            FontStyle::Italic,
            FontStyle::Oblique,
        ]
        .into_iter()
        .all(|style| register_font(FAMILY, style, DEJAVU_SANS).is_ok())
    });
    if !parsed {
        bail!("the bundled DejaVu Sans font does not parse");
    }
    Ok(())
}

//! The one font every chart uses, compiled into the binary.
//!
//! plotters' default `ttf` feature asks fontconfig for a system font at run
//! time, so a PNG drawn on a bare CI machine or a minimal container loses all
//! its text (or fails with "No such font"). jsbench builds plotters with
//! `ab_glyph` instead and registers DejaVu Sans (licence beside it in
//! `assets/fonts/`) under the family name the charts ask for. SVGs name the
//! same family and leave the choice of glyphs to the browser.

use std::sync::OnceLock;

use anyhow::{Result, anyhow};
use plotters::style::{FontStyle, register_font};

/// The family name the charts use; registered for every style plotters
/// may look up, so a bold title finds the same glyphs.
pub const FAMILY: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Registers the bundled font once per process; later calls return the
/// first outcome.
pub fn ensure_registered() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for style in [
                FontStyle::Normal,
                FontStyle::Bold,
                FontStyle::Italic,
                FontStyle::Oblique,
            ] {
                register_font(FAMILY, style, DEJAVU_SANS)
                    .map_err(|_| "the bundled DejaVu Sans font does not parse".to_string())?;
            }
            Ok(())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

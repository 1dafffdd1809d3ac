//! The sans-serif face every chart is laid out and rendered with: found once
//! among the system's fonts, registered with plotters (which measures text
//! with it) and named for resvg (which draws the PNG with it).

use std::sync::OnceLock;

use resvg::usvg::fontdb;

/// The system's fonts with "sans-serif" mapped to the face `ready` found.
pub struct Fonts {
    pub db: fontdb::Database,
}

static FONTS: OnceLock<Result<Fonts, String>> = OnceLock::new();

/// The fonts, loaded and registered on first use.
pub fn ready() -> Result<&'static Fonts, String> {
    FONTS.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Fonts, String> {
    let mut db = fontdb::Database::new();
    db.load_system_fonts();
    // "sans-serif" maps to Arial by default, rarely installed on Linux: take
    // the first upright sans face the system has (Debian: DejaVu Sans).
    let face = db
        .faces()
        .filter(|f| f.style == fontdb::Style::Normal && f.weight == fontdb::Weight::NORMAL)
        .find(|f| f.families.iter().any(|(name, _)| name.contains("Sans") && !name.contains("Mono")))
        .ok_or("no sans-serif font on this system (Debian: apt-get install fonts-dejavu-core)")?;
    let family = face.families[0].0.clone();
    let bytes = match &face.source {
        fontdb::Source::File(path) => std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
        _ => return Err(format!("font '{family}' is not a file")),
    };
    // plotters keeps the face for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
        .map_err(|_| format!("font '{family}' cannot be parsed"))?;
    db.set_sans_serif_family(family);
    Ok(Fonts { db })
}

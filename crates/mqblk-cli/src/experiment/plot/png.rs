//! A chart's SVG rendered to PNG (a repository page shows PNG, not SVG).

use std::sync::Arc;

pub fn write(svg_text: &str, path: &std::path::Path) -> Result<(), String> {
    let fonts = super::font::ready()?;
    let options = resvg::usvg::Options { fontdb: Arc::new(fonts.db.clone()), ..Default::default() };
    let tree = resvg::usvg::Tree::from_str(svg_text, &options).map_err(|e| format!("bad SVG: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot make a {}x{} image", size.width(), size.height()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(&tree, resvg::tiny_skia::Transform::identity(), &mut pixmap.as_mut());
    pixmap.save_png(path).map_err(|e| e.to_string())
}

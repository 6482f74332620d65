//! The report's PNG plots, drawn with `plotters` (bitmap backend, `ab_glyph` text).
//!
//! Text needs a font but no system library: DejaVu Sans comes from the `dejavu` crate (the
//! TTF is embedded in its source) and is registered with `plotters::style::register_font`,
//! so the report builds on a fresh Debian with only Rust and gcc (no fontconfig, freetype).
//!
//! Every plot is log-log: title, axis labels with units, tick values, a legend naming each
//! series, lines through the medians and min-max error bars around them. Points at x = 0
//! (0 bytes, D = 0) cannot sit on a log axis: they are in the tables only.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// (x, median, min, max) points of one line.
pub type Series = Vec<(u64, f64, f64, f64)>;

/// One named line of a plot.
pub struct Line<'a> {
    pub name: &'a str,
    pub color: RGBColor,
    pub points: Series,
}

/// Axis texts of a plot.
pub struct Labels<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
    /// Tick values of x as binary sizes (1K = 1024) instead of decimal.
    pub x_binary: bool,
    /// Leave room right of the data for the legend (plots with many lines).
    pub legend_right: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("the embedded DejaVu Sans font could not be parsed")]
    Font,
    #[error("drawing {0}: {1}")]
    Draw(String, String),
}

/// Series colours: tmpi / tm-engine, Open MPI / list, MPICH, then extra lines.
pub const COLORS: [RGBColor; 4] = [
    RGBColor(0, 90, 200),
    RGBColor(210, 40, 40),
    RGBColor(30, 150, 60),
    RGBColor(230, 140, 0),
];

/// Colours for plots with many lines (the collectives' ratios).
pub const MANY: [RGBColor; 10] = [
    RGBColor(0, 90, 200),
    RGBColor(210, 40, 40),
    RGBColor(30, 150, 60),
    RGBColor(230, 140, 0),
    RGBColor(140, 60, 170),
    RGBColor(0, 170, 190),
    RGBColor(150, 100, 40),
    RGBColor(230, 90, 170),
    RGBColor(110, 110, 110),
    RGBColor(170, 170, 0),
];

const FONT: &str = "sans-serif";

fn register() -> Result<(), PlotError> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = OK.get_or_init(|| {
        use plotters::style::register_font;
        register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if *ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// 1, 10, 100, 1k, 10k, 1M (decimal) or 1, 16, 1K, 64K, 1M (binary).
fn tick(v: f64, binary: bool) -> String {
    let (k, units) = if binary {
        (1024.0, ["", "K", "M", "G"])
    } else {
        (1000.0, ["", "k", "M", "G"])
    };
    let mut v = v;
    let mut u = 0;
    while v >= k && u < 3 {
        v /= k;
        u += 1;
    }
    if v >= 10.0 || (v - v.round()).abs() < 1e-6 {
        format!("{v:.0}{}", units[u])
    } else if v >= 1.0 {
        format!("{v:.1}{}", units[u])
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// `(x min, x max, y min, y max)` over the drawable points of `lines` (x > 0 and
/// a positive minimum: log axes), `None` when there is none.
fn extent<'a>(lines: impl Iterator<Item = &'a Line<'a>>) -> Option<(f64, f64, f64, f64)> {
    let pts: Vec<_> = lines
        .flat_map(|l| l.points.iter())
        .filter(|p| p.0 > 0 && p.2 > 0.0)
        .collect();
    if pts.is_empty() {
        return None;
    }
    let x0 = pts.iter().map(|p| p.0).min().unwrap_or(1) as f64;
    let x1 = pts.iter().map(|p| p.0).max().unwrap_or(1) as f64;
    let y0 = pts.iter().map(|p| p.2).fold(f64::MAX, f64::min);
    let y1 = pts.iter().map(|p| p.3).fold(f64::MIN, f64::max);
    Some((x0, x1, y0, y1))
}

/// Draws `lines` to `path` (900 × 560 PNG). Nothing is written when no line has a point.
pub fn plot(path: &Path, labels: &Labels<'_>, lines: &[Line<'_>]) -> Result<(), PlotError> {
    let Some((x0, x1, y0, y1)) = extent(lines.iter()) else {
        return Ok(());
    };
    register()?;
    // A little room either side on the log axes.
    let xr = (x0 / 1.5)..(x1 * if labels.legend_right { 6.0 } else { 1.5 });
    let yr = (y0 / 1.6)..(y1 * 1.6);
    let err =
        |e: &dyn std::fmt::Display| PlotError::Draw(path.display().to_string(), e.to_string());
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    // Byte sizes get tick marks at powers of 2 (1K, 4K, ...), everything else at powers of 10.
    let xr = xr
        .log_scale()
        .base(if labels.x_binary { 2.0 } else { 10.0 });
    draw(&root, labels, lines, xr, yr.log_scale()).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws one panel per `(title, lines)` of `panels`, `cols` to a row, to `path` (500 × 420
/// pixels per panel, `labels.title` above them all). Every panel has the same axis ranges, so
/// their lines compare across panels. Nothing is written when no line has a point.
pub fn plot_grid(
    path: &Path,
    labels: &Labels<'_>,
    panels: &[(String, Vec<Line<'_>>)],
    cols: usize,
) -> Result<(), PlotError> {
    let Some((x0, x1, y0, y1)) = extent(panels.iter().flat_map(|p| p.1.iter())) else {
        return Ok(());
    };
    register()?;
    let cols = cols.max(1);
    let rows = panels.len().div_ceil(cols);
    let err =
        |e: &dyn std::fmt::Display| PlotError::Draw(path.display().to_string(), e.to_string());
    let size = (500 * cols as u32, 420 * rows as u32 + 40);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let body = root
        .titled(labels.title, (FONT, 24).into_font().style(FontStyle::Bold))
        .map_err(|e| err(&e))?;
    for (area, (title, lines)) in body.split_evenly((rows, cols)).iter().zip(panels) {
        let xr = ((x0 / 1.5)..(x1 * if labels.legend_right { 5.0 } else { 1.5 }))
            .log_scale()
            .base(if labels.x_binary { 2.0 } else { 10.0 });
        let yr = ((y0 / 1.6)..(y1 * 1.6)).log_scale();
        let panel = Labels {
            title,
            x: labels.x,
            y: labels.y,
            x_binary: labels.x_binary,
            legend_right: labels.legend_right,
        };
        draw(area, &panel, lines, xr, yr).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn draw<X, Y>(
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    labels: &Labels<'_>,
    lines: &[Line<'_>],
    xr: X,
    yr: Y,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(labels.title, (FONT, 22).into_font().style(FontStyle::Bold))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(72)
        .build_cartesian_2d(xr, yr)?;
    let binary = labels.x_binary;
    chart
        .configure_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .x_labels(12)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .x_label_formatter(&|v| tick(*v, binary))
        .y_label_formatter(&|v| tick(*v, false))
        .light_line_style(RGBColor(238, 238, 238))
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()?;
    for l in lines {
        let pts: Vec<_> = l
            .points
            .iter()
            .filter(|p| p.0 > 0 && p.2 > 0.0)
            .copied()
            .collect();
        if pts.is_empty() {
            continue;
        }
        let c = l.color;
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0 as f64, p.1)),
                c.stroke_width(2),
            ))?
            .label(l.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart.draw_series(
            pts.iter()
                .map(|p| ErrorBar::new_vertical(p.0 as f64, p.2, p.1, p.3, c.filled(), 8)),
        )?;
        chart.draw_series(
            pts.iter()
                .map(|p| Circle::new((p.0 as f64, p.1), 3, c.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(if labels.legend_right {
            SeriesLabelPosition::UpperRight
        } else {
            SeriesLabelPosition::UpperLeft
        })
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tick;

    #[test]
    fn tick_values() {
        assert_eq!(tick(1.0, false), "1");
        assert_eq!(tick(1000.0, false), "1k");
        assert_eq!(tick(65536.0, true), "64K");
        assert_eq!(tick(4194304.0, true), "4M");
        assert_eq!(tick(0.1, false), "0.1");
        assert_eq!(tick(2500.0, false), "2.5k");
    }
}

//! Plain-text tables and the time and duration formats of the inspection commands
//! (`runs`, `approvals`): columns padded to their widest cell, times in UTC.

use crate::core::Millis;

/// A table of text cells with a header row.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether the table has no row besides its header.
    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    /// The table as lines, each ending with a newline; the last column is not padded.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map(String::as_str).unwrap_or("");
                line.push_str(cell);
                if i + 1 < columns {
                    let pad = width - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `10:42:03`: the time of day in UTC.
pub fn clock(at: Millis) -> String {
    at.civil().1
}

/// A duration for people: `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..=86_399_999 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The time from `start` to `end` (or to `now` while it lasts, marked with `…`); `-`
/// when it never started.
pub fn span(start: Option<Millis>, end: Option<Millis>, now: Millis) -> String {
    match (start.filter(|s| s.0 > 0), end) {
        (Some(s), Some(e)) => duration(e.0.saturating_sub(s.0)),
        (Some(s), None) => format!("{}…", duration(now.0.saturating_sub(s.0))),
        _ => "-".into(),
    }
}

/// `text` on one line, cut to `max` characters with `…`.
pub fn short(text: &str, max: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::view::time;

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let mut t = Table::new(&["RUN", "STATUS", "ERROR"]);
        t.row(vec!["a".into(), "success".into(), String::new()]);
        t.row(vec!["bbbb".into(), "failure".into(), "boom".into()]);
        assert_eq!(
            t.render(),
            "RUN   STATUS   ERROR\na     success\nbbbb  failure  boom\n"
        );
    }

    #[test]
    fn times_are_utc_dates_and_durations_read_well() {
        assert_eq!(time(Some(Millis(0))), "-");
        assert_eq!(
            time(Some(Millis(1_764_153_723_000))),
            "2025-11-26 10:42:03Z"
        );
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_345), "12.3s");
        assert_eq!(duration(245_000), "4m05s");
        assert_eq!(duration(7_380_000), "2h03m");
        assert_eq!(span(Some(Millis(1)), None, Millis(501)), "500ms…");
        assert_eq!(short("a\nbcdef", 4), "a b…");
    }
}

//! `--profile FILE.svg`: a flame graph of the in-process node's threads alone, recorded by
//! `perf` while `chain` or `throughput` times its runs.
//!
//! `perf record` is given the node runtime's thread ids (`-t`, see `usage::THREAD`), so
//! the echo agents, the caller and the server stay out of it; stacks are unwound from
//! DWARF call frames (a release build keeps no frame pointers). The samples are folded
//! into `FILE.folded` (one `frame;frame;... count` line per stack, the format every flame
//! graph tool reads) and drawn into `FILE.svg` here, so no other tool is needed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

/// Samples a second per thread: enough for a few seconds of runs, little to unwind.
const FREQUENCY: &str = "499";

/// A `perf record` of the node's threads under way.
pub(crate) struct Recording {
    perf: Child,
    data: PathBuf,
    svg: PathBuf,
}

/// Starts recording the node runtime's threads into `svg`'s `.perf.data` sibling.
pub(crate) fn start(svg: &Path) -> Result<Recording> {
    let tids = super::usage::node_threads();
    if tids.is_empty() {
        bail!("no thread of the node's runtime to profile");
    }
    let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
    let data = svg.with_extension("perf.data");
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            FREQUENCY,
            "--call-graph",
            "dwarf,16384",
        ])
        .arg("-t")
        .arg(tids.join(","))
        .arg("-o")
        .arg(&data)
        .stdout(Stdio::null())
        .spawn()
        .context("starting perf record (is perf installed?)")?;
    Ok(Recording {
        perf,
        data,
        svg: svg.to_path_buf(),
    })
}

impl Recording {
    /// Stops the recording, folds its stacks and draws the flame graph; returns the
    /// number of samples.
    pub(crate) fn finish(mut self) -> Result<u64> {
        // perf writes its file on SIGINT.
        Command::new("kill")
            .arg("-INT")
            .arg(self.perf.id().to_string())
            .status()
            .context("stopping perf record")?;
        self.perf.wait()?;
        let script = Command::new("perf")
            .args(["script", "--no-inline", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output()
            .context("running perf script")?;
        if !script.status.success() {
            bail!("perf script failed on {}", self.data.display());
        }
        let stacks = fold(&String::from_utf8_lossy(&script.stdout));
        let mut folded = String::new();
        for (stack, n) in &stacks {
            let _ = writeln!(folded, "{stack} {n}");
        }
        std::fs::write(self.svg.with_extension("folded"), folded)?;
        std::fs::write(&self.svg, svg(&stacks))?;
        Ok(stacks.values().sum())
    }
}

/// `perf script`'s samples as folded stacks (root first) and their counts.
fn fold(script: &str) -> BTreeMap<String, u64> {
    let mut stacks = BTreeMap::new();
    for sample in script.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(_header) = lines.next() else {
            continue;
        };
        let mut frames: Vec<&str> = lines.map(frame_name).collect();
        if frames.is_empty() {
            continue;
        }
        frames.reverse();
        *stacks.entry(frames.join(";")).or_insert(0) += 1;
    }
    stacks
}

/// A frame line's function (`    55d1 name+0x1f (/path/to/dso)` → `name`).
fn frame_name(line: &str) -> &str {
    let rest = line.trim_start();
    let rest = rest.split_once(' ').map_or("", |(_, r)| r);
    let rest = rest.rsplit_once(" (").map_or(rest, |(f, _)| f);
    let name = rest.rsplit_once("+0x").map_or(rest, |(f, _)| f);
    if name.is_empty() || name == "[unknown]" {
        "[unknown]"
    } else {
        name
    }
}

/// One frame of the merged stacks: its samples and its callees.
#[derive(Default)]
struct Frame {
    samples: u64,
    children: BTreeMap<String, Frame>,
}

/// Width of the drawing, pixels; height of a frame.
const WIDTH: f64 = 1200.0;
const ROW: f64 = 16.0;

/// A flame graph of `stacks`: each frame as wide as its share of the samples, callees
/// above their callers; hovering shows the name and the share.
fn svg(stacks: &BTreeMap<String, u64>) -> String {
    let mut root = Frame::default();
    for (stack, n) in stacks {
        root.samples += n;
        let mut at = &mut root;
        for f in stack.split(';') {
            at = at.children.entry(f.to_string()).or_default();
            at.samples += n;
        }
    }
    fn depth(f: &Frame) -> usize {
        1 + f.children.values().map(depth).max().unwrap_or(0)
    }
    let height = depth(&root) as f64 * ROW + ROW;
    let total = root.samples.max(1) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"monospace\" font-size=\"11\">\n"
    );
    fn draw(
        out: &mut String,
        name: &str,
        f: &Frame,
        x: f64,
        level: usize,
        total: f64,
        height: f64,
    ) {
        let w = f.samples as f64 / total * WIDTH;
        if w < 0.3 {
            return;
        }
        let y = height - (level as f64 + 1.0) * ROW;
        let hue = name
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
            % 60;
        let esc = name
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        let share = f.samples as f64 / total * 100.0;
        let _ = write!(
            out,
            "<g><title>{esc} ({} samples, {share:.2}%)</title><rect x=\"{x:.1}\" y=\"{y}\" \
             width=\"{w:.1}\" height=\"{}\" fill=\"hsl({hue},80%,60%)\"/>",
            f.samples,
            ROW - 1.0
        );
        let chars = (w / 7.0) as usize;
        if chars >= 3 {
            let label: String = esc.chars().take(chars).collect();
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{}\">{label}</text>",
                x + 2.0,
                y + ROW - 4.0
            );
        }
        out.push_str("</g>\n");
        let mut cx = x;
        for (child, c) in &f.children {
            draw(out, child, c, cx, level + 1, total, height);
            cx += c.samples as f64 / total * WIDTH;
        }
    }
    draw(&mut out, "all (node threads)", &root, 0.0, 0, total, height);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_perf_script_samples() {
        let script = "mesh-node 1 1.0: 1 cpu-clock:\n\
            \t  55d1 leaf+0x1f (/bin/x)\n\t  55d2 main (/bin/x)\n\n\
            mesh-node 1 1.1: 1 cpu-clock:\n\
            \t  55d1 leaf+0x2 (/bin/x)\n\t  55d2 main+0x9 (/bin/x)\n\n\
            mesh-node 1 1.2: 1 cpu-clock:\n\t  0 [unknown] ([unknown])\n";
        let stacks = fold(script);
        assert_eq!(stacks.get("main;leaf"), Some(&2));
        assert_eq!(stacks.get("[unknown]"), Some(&1));
        assert!(svg(&stacks).contains("main"));
    }
}

//! The trace file (mount option `trace=FILE`): one CSV row per record written, for
//! `squeezefs plot` and for reading by eye or in a spreadsheet.
//!
//! Format, version 1 (UTF-8, `\n` line ends):
//!
//! ```text
//! # squeezefs trace v1
//! time_s,inode,tree,codec,why,input_bytes,stored_bytes,ratio,cpu_ns,queue_delay_ms,queued_0,queued_1
//! 0.001234,42,0,zstd:3,model,131072,33000,3.972,412500,12.300,1048576,0
//! ```
//!
//! | column | meaning |
//! |---|---|
//! | `time_s` | seconds since the trace started, when the record's level was chosen |
//! | `inode` | the file the record belongs to |
//! | `tree` | the QoS tree it was written under (the inode of the directory holding `qos`), 0 = none |
//! | `codec` | the level, as a canonical spec (`none` = stored raw without compressing) |
//! | `why` | `model`, `guard`, `explore`, `probe`, `hold` (auto's reasons), `fixed` (not auto), `qos` (the tree's QoS plan), `incompressible` (stored raw: the heuristic found nothing to gain, no policy asked) |
//! | `input_bytes`, `stored_bytes` | the record's size and what was stored (input size if the output did not save space) |
//! | `ratio` | input / stored, three decimals (redundant, for reading by eye) |
//! | `cpu_ns` | thread CPU time inside the codec |
//! | `queue_delay_ms` | the expected queue delay the decision saw (less the safety margin); empty if unknown |
//! | `queued_N` | bytes queued on device N when the level was chosen; one column per device |
//!
//! The number of `queued_N` columns is fixed by the header. Rows are written in the order
//! records finish, so `time_s` is nearly but not strictly increasing. A change of format gets
//! a new version line; this reader refuses any other.

use crate::auto::decision::Reason;
use squeezefs_codec::Codec;
use std::borrow::Cow;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::Path;

/// First line of every version-1 trace.
pub const TRACE_MAGIC: &str = "# squeezefs trace v1";
/// Columns before the per-device ones.
pub const TRACE_COLUMNS: [&str; 10] =
    ["time_s", "inode", "tree", "codec", "why", "input_bytes", "stored_bytes", "ratio", "cpu_ns", "queue_delay_ms"];

/// One record of the trace. `queued` borrows when writing (no allocation per record) and owns
/// when read back.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow<'a> {
    pub time_s: f64,
    pub inode: u64,
    pub tree: u64,
    pub codec: Codec,
    pub reason: Reason,
    pub input_bytes: u64,
    pub stored_bytes: u64,
    pub cpu_ns: u64,
    pub queue_delay_secs: Option<f64>,
    pub queued: Cow<'a, [u64]>,
}

impl TraceRow<'_> {
    /// input / stored (1 for an empty record).
    pub fn ratio(&self) -> f64 {
        if self.stored_bytes == 0 {
            1.0
        } else {
            self.input_bytes as f64 / self.stored_bytes as f64
        }
    }
}

/// Errors of reading a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a squeezefs trace: the first line is not {TRACE_MAGIC:?}")]
    NotATrace,
    #[error("line {line}: {detail}")]
    Malformed { line: usize, detail: String },
}

/// A buffered trace writer: rows go to a `BufWriter`, formatted without allocating.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    devices: usize,
}

impl TraceWriter<std::fs::File> {
    /// Create (or truncate) `path` for a pool of `devices` devices.
    pub fn create(path: &Path, devices: usize) -> io::Result<Self> {
        TraceWriter::new(std::fs::File::create(path)?, devices)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Write the header to `w`.
    pub fn new(w: W, devices: usize) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(64 << 10, w);
        writeln!(out, "{TRACE_MAGIC}")?;
        out.write_all(TRACE_COLUMNS.join(",").as_bytes())?;
        for d in 0..devices {
            write!(out, ",queued_{d}")?;
        }
        out.write_all(b"\n")?;
        Ok(TraceWriter { out, devices })
    }

    pub fn devices(&self) -> usize {
        self.devices
    }

    /// Append a row; its `queued` must have one entry per device.
    pub fn write(&mut self, r: &TraceRow) -> io::Result<()> {
        if r.queued.len() != self.devices {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("trace row with {} device queues, the trace has {}", r.queued.len(), self.devices),
            ));
        }
        write!(
            self.out,
            "{:.6},{},{},{},{},{},{},{:.3},{},",
            r.time_s,
            r.inode,
            r.tree,
            r.codec,
            r.reason.name(),
            r.input_bytes,
            r.stored_bytes,
            r.ratio(),
            r.cpu_ns
        )?;
        if let Some(q) = r.queue_delay_secs {
            write!(self.out, "{:.3}", q * 1e3)?;
        }
        for q in r.queued.iter() {
            write!(self.out, ",{q}")?;
        }
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

/// A trace read back: the number of devices and the rows in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub devices: usize,
    pub rows: Vec<TraceRow<'static>>,
}

/// Read a whole trace.
pub fn read_trace(r: impl BufRead) -> Result<Trace, TraceError> {
    let mut lines = r.lines();
    match lines.next().transpose()? {
        Some(l) if l.trim_end() == TRACE_MAGIC => {}
        _ => return Err(TraceError::NotATrace),
    }
    let bad = |line: usize, detail: String| TraceError::Malformed { line, detail };
    let header = lines.next().transpose()?.ok_or_else(|| bad(2, "no column header".into()))?;
    let cols: Vec<&str> = header.trim_end().split(',').collect();
    if cols.len() < TRACE_COLUMNS.len() || cols[..TRACE_COLUMNS.len()] != TRACE_COLUMNS {
        return Err(bad(2, format!("column header must start with {}", TRACE_COLUMNS.join(","))));
    }
    let devices = cols.len() - TRACE_COLUMNS.len();
    for (d, c) in cols[TRACE_COLUMNS.len()..].iter().enumerate() {
        if *c != format!("queued_{d}") {
            return Err(bad(2, format!("column {c:?} where queued_{d} was expected")));
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 3;
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.trim_end().split(',').collect();
        if f.len() != cols.len() {
            return Err(bad(n, format!("{} fields, the header has {}", f.len(), cols.len())));
        }
        let num =
            |k: usize| f[k].parse::<u64>().map_err(|_| bad(n, format!("{}: {:?} is not a number", cols[k], f[k])));
        let real = |k: usize| {
            f[k].parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(n, format!("{}: {:?} is not a number", cols[k], f[k])))
        };
        let codec: Codec = f[3].parse().map_err(|e| bad(n, format!("codec {:?}: {e}", f[3])))?;
        let reason = Reason::from_name(f[4]).ok_or_else(|| bad(n, format!("why: unknown reason {:?}", f[4])))?;
        let queue_delay_secs = if f[9].is_empty() { None } else { Some(real(9)? / 1e3) };
        rows.push(TraceRow {
            time_s: real(0)?,
            inode: num(1)?,
            tree: num(2)?,
            codec,
            reason,
            input_bytes: num(5)?,
            stored_bytes: num(6)?,
            cpu_ns: num(8)?,
            queue_delay_secs,
            queued: Cow::Owned((0..devices).map(|d| num(TRACE_COLUMNS.len() + d)).collect::<Result<_, _>>()?),
        });
    }
    Ok(Trace { devices, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use squeezefs_codec::Algorithm;

    fn row(t: f64, codec: Codec, queued: &[u64]) -> TraceRow<'_> {
        TraceRow {
            time_s: t,
            inode: 42,
            tree: 7,
            codec,
            reason: Reason::Model,
            input_bytes: 131072,
            stored_bytes: 33000,
            cpu_ns: 412_500,
            queue_delay_secs: Some(0.0123),
            queued: Cow::Borrowed(queued),
        }
    }

    #[test]
    fn rows_round_trip() {
        let mut w = TraceWriter::new(Vec::new(), 2).unwrap();
        let zstd3 = Codec { alg: Algorithm::Zstd, level: 3 };
        w.write(&row(0.001234, zstd3, &[1 << 20, 0])).unwrap();
        let mut raw = row(0.5, Codec::NONE, &[5, 6]);
        raw.reason = Reason::Guard;
        raw.queue_delay_secs = None;
        raw.stored_bytes = raw.input_bytes;
        w.write(&raw).unwrap();
        let lz4 = Codec { alg: Algorithm::Lz4, level: 17 };
        let mut e = row(1.25, lz4, &[0, 0]);
        e.reason = Reason::Explore;
        w.write(&e).unwrap();
        let bytes = w.into_inner().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], TRACE_MAGIC);
        assert_eq!(
            lines[1],
            "time_s,inode,tree,codec,why,input_bytes,stored_bytes,ratio,cpu_ns,queue_delay_ms,queued_0,queued_1"
        );
        assert_eq!(lines[2], "0.001234,42,7,zstd:3,model,131072,33000,3.972,412500,12.300,1048576,0");
        assert_eq!(lines[3], "0.500000,42,7,none,guard,131072,131072,1.000,412500,,5,6");
        let t = read_trace(&bytes[..]).unwrap();
        assert_eq!(t.devices, 2);
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0].codec, zstd3);
        assert!((t.rows[0].queue_delay_secs.unwrap() - 0.0123).abs() < 1e-9);
        assert_eq!(t.rows[1].queue_delay_secs, None);
        assert_eq!(t.rows[1].codec, Codec::NONE);
        assert_eq!(t.rows[2].reason, Reason::Explore);
        assert_eq!(t.rows[2].codec, lz4);
        assert_eq!(&t.rows[0].queued[..], &[1 << 20, 0]);
    }

    #[test]
    fn a_row_with_the_wrong_number_of_devices_is_refused() {
        let mut w = TraceWriter::new(Vec::new(), 2).unwrap();
        let e = w.write(&row(0.0, Codec::NONE, &[1])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn bad_traces_name_the_line_and_the_problem() {
        let head = format!("{TRACE_MAGIC}\n{},queued_0\n", TRACE_COLUMNS.join(","));
        let cases = [
            ("time_s,inode\n".to_string(), "not a squeezefs trace"),
            (format!("{TRACE_MAGIC}\n"), "line 2: no column header"),
            (format!("{TRACE_MAGIC}\ntime_s,inode\n"), "line 2: column header must start with"),
            (format!("{TRACE_MAGIC}\n{},queued_1\n", TRACE_COLUMNS.join(",")), "queued_0 was expected"),
            (format!("{head}0.1,1,0,zstd:3,model,10,5,2.0,7,1.0\n"), "line 3: 10 fields, the header has 11"),
            (format!("{head}0.1,x,0,zstd:3,model,10,5,2.0,7,1.0,0\n"), "line 3: inode: \"x\" is not a number"),
            (format!("{head}0.1,1,0,zstd:99,model,10,5,2.0,7,1.0,0\n"), "line 3: codec \"zstd:99\""),
            (format!("{head}0.1,1,0,zstd:3,maybe,10,5,2.0,7,1.0,0\n"), "unknown reason \"maybe\""),
            (
                format!("{head}\n0.1,1,0,zstd:3,model,10,5,2.0,7,1.0,0\nNaN,1,0,zstd:3,model,10,5,2.0,7,,0\n"),
                "line 5: time_s",
            ),
        ];
        for (text, want) in cases {
            let msg = read_trace(text.as_bytes()).unwrap_err().to_string();
            assert!(msg.contains(want), "{msg:?} lacks {want:?}");
        }
        assert_eq!(read_trace(head.as_bytes()).unwrap(), Trace { devices: 1, rows: vec![] });
    }
}

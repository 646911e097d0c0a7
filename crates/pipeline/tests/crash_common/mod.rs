//! Shared by the crash tests: deterministic file contents, the child's operation log, and
//! the checker that decides whether a pool image after a crash is acceptable.
//!
//! Acceptance rule (what fsync promises): for every file, every byte acknowledged by an
//! `fsync` (or a pool-wide `sync`) that returned before the crash is intact; bytes written
//! after the last acknowledgement may hold their old value or any later write's value (or
//! zero where an unacknowledged write extended the file), never anything else. A file that
//! was never acknowledged may be missing.

#![allow(dead_code)] // each test binary uses its own part of this module

use squeezefs_device::doubles::SplitMix64;
use squeezefs_pipeline::{Engine, EngineError, FileKind, InodeAttr, Timestamp, ROOT_INO};
use std::fmt;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Files the workload spreads over, named `f0`, `f1`, … in the root directory.
pub const FILES: usize = 6;
/// Writes start below this offset, so files stay around 1 MiB.
pub const MAX_OFFSET: u64 = 768 * 1024;

/// Byte `j` of the content of a write with `seed`: 16 letters drawn from a seeded stream,
/// 8 bytes per draw, so the data compresses (about 2:1) and every write differs. Seeds with
/// the low 5 bits zero give all-zero writes (holes).
pub fn content_byte(seed: u64, j: u64) -> u8 {
    if seed & 31 == 0 {
        return 0;
    }
    let mut r = SplitMix64::new(seed ^ (j / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let v = r.next_u64();
    b"abcdefghijklmnop"[((v >> ((j % 8) * 8)) & 15) as usize]
}

pub fn content(seed: u64, len: u64) -> Vec<u8> {
    (0..len).map(|j| content_byte(seed, j)).collect()
}

/// One line of the child's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRec {
    /// The child opened the pool and starts working.
    Ready,
    /// File `f{file}` was created (not yet durable).
    Create(usize),
    /// Intent: this write is about to be issued (logged before `Engine::write`).
    Write { file: usize, off: u64, len: u64, seed: u64 },
    /// `fsync` of the file returned Ok.
    Fsync(usize),
    /// `Engine::sync` returned Ok.
    SyncAll,
    /// Intent: `Engine::share_range` of `len` bytes at `off` of `f{from}` to `dst` of
    /// `f{to}` is about to be issued (the child commits everything before and after it).
    Copy { from: usize, to: usize, off: u64, dst: u64, len: u64 },
}

impl fmt::Display for LogRec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogRec::Ready => write!(f, "R"),
            LogRec::Create(i) => write!(f, "C {i}"),
            LogRec::Write { file, off, len, seed } => write!(f, "W {file} {off} {len} {seed}"),
            LogRec::Fsync(i) => write!(f, "S {i}"),
            LogRec::SyncAll => write!(f, "A"),
            LogRec::Copy { from, to, off, dst, len } => write!(f, "K {from} {to} {off} {dst} {len}"),
        }
    }
}

/// The length of one random write: 4 in 10 up to 4 KiB (inside a record), 4 in 10 up to
/// 128 KiB (across a record boundary), 2 in 10 up to 512 KiB (over whole records).
pub fn write_len(rng: &mut SplitMix64) -> u64 {
    match rng.below(10) {
        0..=3 => 1 + rng.below(4096),
        4..=7 => 4096 + rng.below(124 * 1024),
        _ => 128 * 1024 + rng.below(384 * 1024),
    }
}

/// The complete lines of a child's log, each with its `\n`: a torn last line (the child
/// died while writing it) is left out, as if never written.
pub fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n').take_while(|line| line.ends_with('\n'))
}

/// How long a child may take to reach a point of its log before the test fails.
pub const CHILD_WAIT: Duration = Duration::from_secs(60);

/// Wait until the child's log at `log` satisfies `reached`. Panics, with the child's
/// stderr (`err`), when the child exits first or [`CHILD_WAIT`] passes; `what` names the
/// round in those messages.
pub fn wait_for_log(child: &mut Child, log: &Path, err: &Path, what: &str, reached: &dyn Fn(&str) -> bool) {
    let t0 = Instant::now();
    loop {
        if reached(&std::fs::read_to_string(log).unwrap_or_default()) {
            return;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("{what}: child exited ({status}): {}", std::fs::read_to_string(err).unwrap_or_default());
        }
        assert!(t0.elapsed() < CHILD_WAIT, "{what}: the child never got there");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SIGKILL the child and reap it; panics when it had already exited by itself (a child
/// that ends on its own did not crash, and its stderr says why).
pub fn kill_child(child: &mut Child, err: &Path, what: &str) -> ExitStatus {
    let _ = child.kill();
    let status = child.wait().expect("wait child");
    if status.code().is_some() {
        panic!("{what}: child exited by itself ({status}): {}", std::fs::read_to_string(err).unwrap_or_default());
    }
    status
}

/// Parse a log; a torn last line (the child died while writing it) is ignored.
pub fn parse_log(text: &str) -> Vec<LogRec> {
    let mut out = Vec::new();
    for line in complete_lines(text) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
        let rec = match w.first().copied() {
            Some("R") => LogRec::Ready,
            Some("C") => LogRec::Create(num(1).expect("C file") as usize),
            Some("W") => LogRec::Write {
                file: num(1).expect("W file") as usize,
                off: num(2).expect("W off"),
                len: num(3).expect("W len"),
                seed: num(4).expect("W seed"),
            },
            Some("S") => LogRec::Fsync(num(1).expect("S file") as usize),
            Some("A") => LogRec::SyncAll,
            Some("K") => LogRec::Copy {
                from: num(1).expect("K from") as usize,
                to: num(2).expect("K to") as usize,
                off: num(3).expect("K off"),
                dst: num(4).expect("K dst"),
                len: num(5).expect("K len"),
            },
            other => panic!("bad log line {other:?}: {line:?}"),
        };
        out.push(rec);
    }
    out
}

/// What one file may look like after the crash.
#[derive(Clone, Debug, Default)]
pub struct FileExpect {
    /// Content as of the last acknowledgement; `None` = never durable, may be missing.
    pub acked: Option<Vec<u8>>,
    /// Writes issued after the last acknowledgement, in order: (offset, len, seed).
    pub pending: Vec<(u64, u64, u64)>,
    /// Copies into the file issued after the last acknowledgement: (offset, the bytes).
    pub pending_bytes: Vec<(u64, Vec<u8>)>,
}

/// What a copy of `len` bytes at `off` of `src` puts at `dst` of `buf`: the source's bytes up
/// to its end, as `Engine::share_range` copies them; returns them.
pub fn apply_copy(src: &[u8], buf: &mut Vec<u8>, off: u64, dst: u64, len: u64) -> Vec<u8> {
    let n = len.min((src.len() as u64).saturating_sub(off)) as usize;
    if n == 0 {
        // at or past the source's end: nothing is copied, the target is unchanged
        return Vec::new();
    }
    let bytes = src[off as usize..off as usize + n].to_vec();
    let end = dst as usize + n;
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[dst as usize..end].copy_from_slice(&bytes);
    bytes
}

/// Apply a write of `content(seed, len)` at `off` to `buf`.
pub fn apply_write(buf: &mut Vec<u8>, off: u64, len: u64, seed: u64) {
    let end = (off + len) as usize;
    if buf.len() < end {
        buf.resize(end, 0);
    }
    for j in 0..len {
        buf[(off + j) as usize] = content_byte(seed, j);
    }
}

/// Expectations per file from the state verified before this child ran (`baseline`, the
/// content each file had, `None` if absent) and this child's log.
pub fn expectations(baseline: &[Option<Vec<u8>>], log: &[LogRec]) -> Vec<FileExpect> {
    let mut cur: Vec<Option<Vec<u8>>> = baseline.to_vec();
    let mut exp: Vec<FileExpect> =
        baseline.iter().map(|b| FileExpect { acked: b.clone(), ..Default::default() }).collect();
    let ack = |i: usize, cur: &[Option<Vec<u8>>], exp: &mut [FileExpect]| {
        if cur[i].is_some() {
            exp[i].acked = cur[i].clone();
            exp[i].pending.clear();
            exp[i].pending_bytes.clear();
        }
    };
    for rec in log {
        match *rec {
            LogRec::Ready => {}
            LogRec::Create(i) => {
                if cur[i].is_none() {
                    cur[i] = Some(Vec::new());
                }
            }
            LogRec::Write { file, off, len, seed } => {
                apply_write(cur[file].get_or_insert_with(Vec::new), off, len, seed);
                exp[file].pending.push((off, len, seed));
            }
            LogRec::Copy { from, to, off, dst, len } => {
                let src = cur[from].clone().unwrap_or_default();
                let bytes = apply_copy(&src, cur[to].get_or_insert_with(Vec::new), off, dst, len);
                exp[to].pending_bytes.push((dst, bytes));
            }
            LogRec::Fsync(i) => ack(i, &cur, &mut exp),
            LogRec::SyncAll => {
                for i in 0..cur.len() {
                    ack(i, &cur, &mut exp);
                }
            }
        }
    }
    exp
}

/// Check one file's actual content (`None` = file missing) against its expectation.
pub fn check_file(name: &str, exp: &FileExpect, actual: Option<&[u8]>) -> Result<(), String> {
    let Some(data) = actual else {
        return match &exp.acked {
            None => Ok(()),
            Some(a) => Err(format!("{name}: missing, but {} bytes were acknowledged", a.len())),
        };
    };
    let acked: &[u8] = exp.acked.as_deref().unwrap_or(&[]);
    if data.len() < acked.len() {
        return Err(format!("{name}: size {} is below the acknowledged size {}", data.len(), acked.len()));
    }
    let max_end = exp
        .pending
        .iter()
        .map(|&(o, l, _)| (o + l) as usize)
        .chain(exp.pending_bytes.iter().map(|(o, b)| *o as usize + b.len()))
        .chain([acked.len()])
        .max()
        .unwrap_or(0);
    if data.len() > max_end {
        return Err(format!("{name}: size {} is beyond anything written ({} bytes at most)", data.len(), max_end));
    }
    let mut explained = vec![false; data.len()];
    for &(off, len, seed) in &exp.pending {
        for j in 0..len {
            let p = (off + j) as usize;
            if p < data.len() && !explained[p] && data[p] == content_byte(seed, j) {
                explained[p] = true;
            }
        }
    }
    for (off, bytes) in &exp.pending_bytes {
        for (j, &b) in bytes.iter().enumerate() {
            let p = *off as usize + j;
            if p < data.len() && !explained[p] && data[p] == b {
                explained[p] = true;
            }
        }
    }
    let bad = |p: usize| {
        let old = acked.get(p).copied().unwrap_or(0);
        data[p] != old && !explained[p]
    };
    if let Some(first) = (0..data.len()).find(|&p| bad(p)) {
        let end = (first..data.len()).find(|&p| !bad(p)).unwrap_or(data.len());
        let count = (first..data.len()).filter(|&p| bad(p)).count();
        let old = acked.get(first).copied().unwrap_or(0);
        let all_zero = data[first..end].iter().all(|&b| b == 0);
        return Err(format!(
            "{name} (size {}, acknowledged size {}): bytes {first}..{end} ({}{}) hold neither the acknowledged \
             data nor any later write's (first: {:#04x}, acknowledged {old:#04x}); {count} bad bytes in all; \
             {} writes pending",
            data.len(),
            acked.len(),
            end - first,
            if all_zero { ", all zero" } else { "" },
            data[first],
            exp.pending.len()
        ));
    }
    Ok(())
}

pub fn file_name(i: usize) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() }
}

/// Create a regular file `name` in the root directory; returns its inode.
pub fn create_file(engine: &Engine, name: &[u8]) -> Result<u64, EngineError> {
    engine.meta_write(|tx| {
        let ino = tx.alloc_ino()?;
        let t = now();
        tx.put_inode(&InodeAttr::new(ino, FileKind::File, 0o644, 0, 0, t))?;
        tx.dir_insert(ROOT_INO, name, ino, FileKind::File)?;
        Ok(ino)
    })
}

/// Remove file `name` from the root directory and free its inode.
pub fn delete_file(engine: &Engine, name: &[u8]) -> Result<(), EngineError> {
    engine.meta_write(|tx| {
        let (ino, _) = tx.dir_remove(ROOT_INO, name)?;
        tx.delete_inode(ino)
    })
}

/// The whole content of `ino`, read in 64 KiB pieces.
pub fn read_all(engine: &Engine, ino: u64) -> Result<Vec<u8>, EngineError> {
    let size = engine.getattr(ino)?.size;
    let mut out = vec![0u8; size as usize];
    let mut pos = 0usize;
    while pos < out.len() {
        let end = (pos + 65536).min(out.len());
        let n = engine.read(ino, pos as u64, &mut out[pos..end])?;
        assert!(n > 0, "short read at {pos} of {size}");
        pos += n;
    }
    Ok(out)
}

/// `len` seeded pseudo-random bytes: incompressible, so stored bytes = written bytes.
pub fn random_bytes(seed: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    SplitMix64::new(seed).fill(&mut v);
    v
}

/// Write `data` to a new file `name` in the root directory in 256 KiB pieces (not synced);
/// `Err` is where it failed.
pub fn write_new_file(engine: &Engine, name: &str, data: &[u8]) -> Result<u64, EngineError> {
    let ino = create_file(engine, name.as_bytes())?;
    for (k, chunk) in data.chunks(256 * 1024).enumerate() {
        engine.write(ino, (k * 256 * 1024) as u64, chunk)?;
    }
    Ok(ino)
}

/// fsck of a live engine must find nothing.
pub fn assert_fsck_clean(engine: &Engine, what: &str) {
    let r = engine.fsck().unwrap_or_else(|err| panic!("{what}: fsck failed: {err}"));
    assert!(r.is_clean(), "{what}: fsck problems: {:?}", r.problems);
}

/// Current content of every workload file (`None` = missing).
pub fn read_files(engine: &Engine) -> Result<Vec<Option<Vec<u8>>>, EngineError> {
    (0..FILES)
        .map(|i| match engine.lookup(ROOT_INO, &file_name(i))? {
            None => Ok(None),
            Some((ino, _)) => read_all(engine, ino).map(Some),
        })
        .collect()
}

/// Unit tests of the checker itself, run from each crash test binary.
pub fn self_test() {
    // content is deterministic, compressible letters, zero for seeds ≡ 0 mod 32
    assert_eq!(content(7, 100), content(7, 100));
    assert_ne!(content(7, 100), content(8, 100));
    assert!(content(7, 100).iter().all(|b| (b'a'..=b'p').contains(b)));
    assert!(content(64, 10).iter().all(|&b| b == 0));

    let log = parse_log("R\nC 0\nW 0 0 10 5\nS 0\nW 0 5 10 6\nW 0 ");
    assert_eq!(log.len(), 5, "torn last line ignored");
    let exp = expectations(&[None, None], &log);
    assert_eq!(exp[0].acked.as_deref(), Some(&content(5, 10)[..]));
    assert_eq!(exp[0].pending, vec![(5, 10, 6)]);
    assert!(exp[1].acked.is_none());

    let acked = content(5, 10);
    let mut later = acked.clone();
    apply_write(&mut later, 5, 10, 6);
    check_file("f0", &exp[0], Some(&acked)).unwrap();
    check_file("f0", &exp[0], Some(&later)).unwrap();
    // a torn mix of old and new is fine byte by byte
    let mut mixed = later.clone();
    mixed[5] = acked[5];
    check_file("f0", &exp[0], Some(&mixed)).unwrap();
    // garbage, a lost acked byte, a short file, a missing file: all refused
    let mut bad = acked.clone();
    bad[2] = b'z';
    assert!(check_file("f0", &exp[0], Some(&bad)).is_err());
    assert!(check_file("f0", &exp[0], Some(&acked[..9])).is_err());
    assert!(check_file("f0", &exp[0], None).is_err());
    check_file("f1", &exp[1], None).unwrap();
    let mut long = later.clone();
    long.push(b'a');
    assert!(check_file("f0", &exp[0], Some(&long)).is_err());
}

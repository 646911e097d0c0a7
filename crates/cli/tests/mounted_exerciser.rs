//! A random-operation exerciser (in the style of fsx) against a real mount: three files take
//! reads, writes at any offset and length (unaligned, record-spanning, record-aligned),
//! truncations that grow and shrink, punched holes, mmap reads and writes (MAP_SHARED, msync
//! now and then), `copy_file_range` between the files and within one (record-aligned ranges,
//! which share stored records, and unaligned ones, which copy data), fsync, dropped page
//! cache and close/reopen. After every operation the touched range of the changed file and
//! its size (fstat) must equal an in-memory model; every few hundred operations each whole
//! file is read back from the daemon (page cache dropped). At the end the pool is unmounted,
//! `fsck` and `scrub` must find it clean, and after a remount every file equals the model.
//!
//! Each test runs one mount configuration (codec, record size). The operation sequence is
//! deterministic from the seed; a mismatch reports the seed, the operation number, the tail
//! of the operation log and the first differing offset.
//!
//! `SQUEEZEFS_EXERCISER_OPS`: operations per configuration (default 8000: about 40 s for
//! the three configurations in a debug build on two cores). `SQUEEZEFS_EXERCISER_SEED`: the
//! seed (default: from the clock, printed). `SQUEEZEFS_EXERCISER_LOG=PATH`: every operation
//! is logged to `PATH.CONFIG`.
mod mounted_common;
use mounted_common::*;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Instant;

const FILES: usize = 3;
/// Files stay below this size (writes, copies and truncations end before it).
const MAX_SIZE: u64 = 2 << 20;
/// Operations kept for the report of a mismatch.
const LOG_TAIL: usize = 40;
/// Whole-file checks from the daemon every this many operations.
const WHOLE_EVERY: u64 = 400;

struct Rng(u64);

impl Rng {
    /// SplitMix64: small, fast and the same everywhere, so a seed replays the same run.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// 1 in `n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// How one mount is configured.
struct Config {
    name: &'static str,
    opts: &'static str,
    /// the record size the mount gives new files
    rs: u64,
}

struct Exerciser<'a> {
    m: &'a Mounted,
    cfg: &'a Config,
    seed: u64,
    rng: Rng,
    op: u64,
    files: Vec<Option<File>>,
    model: Vec<Vec<u8>>,
    log: VecDeque<String>,
    /// every operation's line, when `SQUEEZEFS_EXERCISER_LOG` names a file
    full_log: Option<File>,
    /// operations of each kind done (in `KINDS` order)
    counts: [u64; KINDS.len()],
    /// bytes `copy_file_range` copied at record-aligned offsets (shareable) and elsewhere
    aligned_copied: u64,
    unaligned_copied: u64,
}

const KINDS: [&str; 12] = [
    "read",
    "write",
    "truncate",
    "punch",
    "mmap-read",
    "mmap-write",
    "copy-aligned",
    "copy",
    "fsync",
    "drop-cache",
    "reopen",
    "whole-check",
];

fn name(i: usize) -> String {
    format!("f{i}")
}

impl<'a> Exerciser<'a> {
    fn new(m: &'a Mounted, cfg: &'a Config, seed: u64) -> Exerciser<'a> {
        let mut x = Exerciser {
            m,
            cfg,
            seed,
            rng: Rng(seed),
            op: 0,
            files: (0..FILES).map(|_| None).collect(),
            model: vec![Vec::new(); FILES],
            log: VecDeque::new(),
            full_log: std::env::var("SQUEEZEFS_EXERCISER_LOG")
                .ok()
                .map(|p| File::create(format!("{p}.{}", cfg.name)).expect("SQUEEZEFS_EXERCISER_LOG")),
            counts: [0; KINDS.len()],
            aligned_copied: 0,
            unaligned_copied: 0,
        };
        for i in 0..FILES {
            let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(m.path(&name(i)));
            x.files[i] = Some(f.unwrap_or_else(|e| x.fail(&format!("create {}: {e}", name(i)))));
        }
        x
    }

    fn fd(&self, i: usize) -> i32 {
        self.files[i].as_ref().expect("open").as_raw_fd()
    }

    fn file(&self, i: usize) -> &File {
        self.files[i].as_ref().expect("open")
    }

    fn size(&self, i: usize) -> u64 {
        self.model[i].len() as u64
    }

    fn note(&mut self, what: String) {
        if self.log.len() == LOG_TAIL {
            self.log.pop_front();
        }
        let line = format!("#{} {what}", self.op);
        if let Some(f) = &mut self.full_log {
            use std::io::Write;
            writeln!(f, "{line}").expect("writing the operation log");
        }
        self.log.push_back(line);
    }

    fn fail(&self, msg: &str) -> ! {
        let tail: Vec<&str> = self.log.iter().map(String::as_str).collect();
        panic!(
            "exerciser {} ({}): {msg}\n  seed {} (SQUEEZEFS_EXERCISER_SEED={}), operation {}\n  last operations:\n    {}",
            self.cfg.name,
            self.cfg.opts,
            self.seed,
            self.seed,
            self.op,
            tail.join("\n    ")
        );
    }

    /// `got` (read at `off` of file `i`) against the model.
    fn compare(&self, i: usize, off: u64, got: &[u8], how: &str) {
        let model = &self.model[i];
        let want = &model[(off as usize).min(model.len())..(off as usize + got.len()).min(model.len())];
        if let Some(k) = (0..want.len().min(got.len())).find(|&k| want[k] != got[k]) {
            let p = off as usize + k;
            let end = (k + 16).min(want.len()).min(got.len());
            let run = (k..want.len().min(got.len())).take_while(|&q| want[q] != got[q]).count();
            self.fail(&format!(
                "{} ({how}): first differing offset {p} (record {}, +{}), {run} bytes differ from there: read {:02x?}, model {:02x?} (size {})",
                name(i),
                p as u64 / self.cfg.rs,
                p as u64 % self.cfg.rs,
                &got[k..end],
                &want[k..end],
                model.len()
            ));
        }
        if got.len() != want.len() {
            self.fail(&format!(
                "{} ({how}): read {} bytes at {off}, the model has {} there (size {})",
                name(i),
                got.len(),
                want.len(),
                model.len()
            ));
        }
    }

    /// pread of `len` bytes at `off` (to the end of file) checked against the model.
    fn check_range(&self, i: usize, off: u64, len: u64, how: &str) {
        let mut buf = vec![0u8; len as usize];
        let mut n = 0;
        while n < buf.len() {
            match self.file(i).read_at(&mut buf[n..], off + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) => self.fail(&format!("{} ({how}): pread {len} at {off}: {e}", name(i))),
            }
        }
        buf.truncate(n);
        self.compare(i, off, &buf, how);
    }

    fn check_size(&self, i: usize) {
        let st = self.file(i).metadata().unwrap_or_else(|e| self.fail(&format!("fstat {}: {e}", name(i))));
        if st.len() != self.size(i) {
            self.fail(&format!("{}: fstat size {}, model size {}", name(i), st.len(), self.size(i)));
        }
    }

    /// Page cache of file `i` dropped: what is written back (and clean) goes, so the next
    /// reads come from the daemon.
    fn drop_cache(&self, i: usize) {
        let r = unsafe { libc::posix_fadvise(self.fd(i), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            self.fail(&format!("fadvise {}: errno {r}", name(i)));
        }
    }

    /// Every file read whole from the daemon (written back, cache dropped) against the model.
    fn check_whole(&self, how: &str) {
        for i in 0..FILES {
            if let Err(e) = self.file(i).sync_data() {
                self.fail(&format!("fdatasync {}: {e}", name(i)));
            }
            self.drop_cache(i);
            self.check_size(i);
            self.check_range(i, 0, self.size(i) + 4096, how);
        }
    }

    /// Data for a write: text-like letters, incompressible bytes, zeros or one repeated
    /// byte, different for every operation so that a stale byte shows.
    fn data(&mut self, len: u64) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        match self.rng.below(8) {
            0..=3 => {
                let mut r = Rng(self.rng.next());
                for (k, b) in v.iter_mut().enumerate() {
                    if k % 8 == 0 {
                        r.next();
                    }
                    *b = b"abcdefghijklmnop"[((r.0 >> ((k % 8) * 4)) & 15) as usize];
                }
            }
            4 | 5 => {
                let mut r = Rng(self.rng.next());
                for c in v.chunks_mut(8) {
                    let x = r.next().to_le_bytes();
                    c.copy_from_slice(&x[..c.len()]);
                }
            }
            6 => {}
            _ => v.fill(1 + self.rng.below(255) as u8),
        }
        v
    }

    /// An offset below `MAX_SIZE`: record-aligned a quarter of the time, near the end of
    /// file a quarter of the time.
    fn offset(&mut self, i: usize) -> u64 {
        let rs = self.cfg.rs;
        match self.rng.below(4) {
            0 => self.rng.below(MAX_SIZE / rs) * rs,
            1 => {
                let s = self.size(i);
                (s.saturating_sub(self.rng.below(2 * rs)) + self.rng.below(rs)).min(MAX_SIZE - 1)
            }
            _ => self.rng.below(MAX_SIZE),
        }
    }

    /// A length: short, up to two records, or up to eight records (whole records a quarter
    /// of the time).
    fn length(&mut self) -> u64 {
        let rs = self.cfg.rs;
        match self.rng.below(8) {
            0..=2 => 1 + self.rng.below(4096),
            3..=4 => 1 + self.rng.below(2 * rs),
            5 => 1 + self.rng.below(8 * rs),
            _ => (1 + self.rng.below(8)) * rs,
        }
    }

    fn step(&mut self) {
        self.op += 1;
        let kind = match self.rng.below(100) {
            0..=14 => 0,
            15..=36 => 1,
            37..=42 => 2,
            43..=48 => 3,
            49..=54 => 4,
            55..=62 => 5,
            63..=72 => 6,
            73..=82 => 7,
            83..=87 => 8,
            88..=92 => 9,
            93..=96 => 10,
            _ => 11,
        };
        self.counts[kind] += 1;
        let i = self.rng.below(FILES as u64) as usize;
        match kind {
            0 => self.read(i),
            1 => self.write(i),
            2 => self.truncate(i),
            3 => self.punch(i),
            4 => self.mmap_read(i),
            5 => self.mmap_write(i),
            6 => self.copy(i, true),
            7 => self.copy(i, false),
            8 => {
                let data_only = self.rng.one_in(2);
                self.note(format!("{} {}", if data_only { "fdatasync" } else { "fsync" }, name(i)));
                let r = if data_only { self.file(i).sync_data() } else { self.file(i).sync_all() };
                if let Err(e) = r {
                    self.fail(&format!("fsync {}: {e}", name(i)));
                }
            }
            9 => {
                self.note(format!("drop cache {}", name(i)));
                self.drop_cache(i);
            }
            10 => {
                self.note(format!("close and reopen {}", name(i)));
                self.files[i] = None;
                let f = OpenOptions::new().read(true).write(true).open(self.m.path(&name(i)));
                self.files[i] = Some(f.unwrap_or_else(|e| self.fail(&format!("reopen {}: {e}", name(i)))));
            }
            _ => {
                self.note("whole-file check".into());
                self.check_whole("whole-file check");
            }
        }
        self.check_size(i);
        if self.op.is_multiple_of(WHOLE_EVERY) {
            self.check_whole("periodic whole-file check");
        }
    }

    fn read(&mut self, i: usize) {
        let off = self.offset(i);
        let len = self.length();
        self.note(format!("read {} {off}+{len}", name(i)));
        self.check_range(i, off, len, "read");
    }

    fn write(&mut self, i: usize) {
        let off = self.offset(i);
        let len = self.length().min(MAX_SIZE - off);
        let data = self.data(len);
        self.note(format!("write {} {off}+{len} (first byte {:#04x})", name(i), data[0]));
        if let Err(e) = self.file(i).write_all_at(&data, off) {
            self.fail(&format!("pwrite {}: {e}", name(i)));
        }
        let m = &mut self.model[i];
        let end = (off + len) as usize;
        if m.len() < end {
            m.resize(end, 0);
        }
        m[off as usize..end].copy_from_slice(&data);
        self.check_range(i, off.saturating_sub(64), len + 128, "after write");
    }

    fn truncate(&mut self, i: usize) {
        let rs = self.cfg.rs;
        let to = match self.rng.below(6) {
            0 => 0,
            1 | 2 => self.rng.below(MAX_SIZE / rs) * rs,
            3 => self.size(i).saturating_sub(1 + self.rng.below(rs)),
            _ => self.rng.below(MAX_SIZE),
        };
        self.note(format!("truncate {} {} -> {to}", name(i), self.size(i)));
        if let Err(e) = self.file(i).set_len(to) {
            self.fail(&format!("ftruncate {}: {e}", name(i)));
        }
        self.model[i].resize(to as usize, 0);
        self.check_range(i, to.saturating_sub(rs + 100), 2 * rs + 200, "after truncate");
    }

    fn punch(&mut self, i: usize) {
        let off = self.offset(i);
        let len = self.length();
        self.note(format!("punch {} {off}+{len}", name(i)));
        let r = unsafe {
            libc::fallocate(self.fd(i), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off as i64, len as i64)
        };
        if r != 0 {
            self.fail(&format!("punch {}: {}", name(i), std::io::Error::last_os_error()));
        }
        let m = &mut self.model[i];
        let (a, b) = ((off as usize).min(m.len()), ((off + len) as usize).min(m.len()));
        m[a..b].fill(0);
        self.check_range(i, off.saturating_sub(64), len + 128, "after punch");
    }

    /// A shared mapping of `[off, off + len)` of file `i`; returns the mapping and where
    /// `off` is in it.
    fn map(&self, i: usize, off: u64, len: u64, write: bool) -> (*mut u8, usize, usize) {
        let page = 4096u64;
        let start = off / page * page;
        let maplen = (off + len - start) as usize;
        let prot = if write { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let p = unsafe { libc::mmap(std::ptr::null_mut(), maplen, prot, libc::MAP_SHARED, self.fd(i), start as i64) };
        if p == libc::MAP_FAILED {
            self.fail(&format!("mmap {} {start}+{maplen}: {}", name(i), std::io::Error::last_os_error()));
        }
        (p.cast(), maplen, (off - start) as usize)
    }

    /// A range inside the file (mappings reach no further than its end), `None` if empty.
    fn inside(&mut self, i: usize) -> Option<(u64, u64)> {
        let size = self.size(i);
        if size == 0 {
            return None;
        }
        let off = self.offset(i).min(size - 1);
        let len = self.length().min(size - off);
        Some((off, len))
    }

    fn mmap_read(&mut self, i: usize) {
        let Some((off, len)) = self.inside(i) else { return };
        self.note(format!("mmap read {} {off}+{len}", name(i)));
        let (p, maplen, at) = self.map(i, off, len, false);
        let got = unsafe { std::slice::from_raw_parts(p.add(at), len as usize) }.to_vec();
        unsafe { libc::munmap(p.cast(), maplen) };
        self.compare(i, off, &got, "mmap read");
    }

    fn mmap_write(&mut self, i: usize) {
        let Some((off, len)) = self.inside(i) else { return };
        let data = self.data(len);
        let sync = self.rng.below(3);
        self.note(format!(
            "mmap write {} {off}+{len} (first byte {:#04x}){}",
            name(i),
            data[0],
            ["", ", msync", ", msync async"][sync as usize]
        ));
        let (p, maplen, at) = self.map(i, off, len, true);
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(at), data.len());
            let flags = [0, libc::MS_SYNC, libc::MS_ASYNC][sync as usize];
            if flags != 0 && libc::msync(p.cast(), maplen, flags) != 0 {
                self.fail(&format!("msync {}: {}", name(i), std::io::Error::last_os_error()));
            }
            libc::munmap(p.cast(), maplen);
        }
        self.model[i][off as usize..(off + len) as usize].copy_from_slice(&data);
        self.check_range(i, off.saturating_sub(64), len + 128, "after mmap write");
    }

    /// copy_file_range from file `i` to a random file (`i` itself with ranges apart):
    /// `aligned` puts both offsets and the length on record boundaries, so that the whole
    /// records are shared.
    fn copy(&mut self, i: usize, aligned: bool) {
        let rs = self.cfg.rs;
        let j = self.rng.below(FILES as u64) as usize;
        let (mut off, mut dst, mut len) = (0, 0, 0);
        let mut found = false;
        for _ in 0..8 {
            if aligned {
                let sz = self.size(i).div_ceil(rs).max(1);
                off = self.rng.below(sz) * rs;
                dst = self.rng.below(MAX_SIZE / rs) * rs;
                len = (1 + self.rng.below(8)) * rs;
                // the source's last record, partial, is copied whole when the file ends in it
            } else {
                off = self.offset(i);
                dst = self.offset(j);
                len = self.length();
            }
            len = len.min(MAX_SIZE - dst);
            if len > 0 && (i != j || off + len <= dst || dst + len <= off) {
                found = true;
                break;
            }
        }
        if !found {
            return;
        }
        let n = len.min(self.size(i).saturating_sub(off));
        self.note(format!(
            "copy_file_range {} {off}+{len} -> {} {dst}{} ({n} bytes from the source)",
            name(i),
            name(j),
            if aligned { " aligned" } else { "" }
        ));
        let (mut oi, mut oo) = (off as i64, dst as i64);
        let mut done = 0u64;
        // asked for `len` in one call; a short count continues only up to the source's end
        // as it was (a copy within one file past its end makes more source)
        let mut want = len;
        while done < want {
            let r =
                unsafe { libc::copy_file_range(self.fd(i), &mut oi, self.fd(j), &mut oo, (want - done) as usize, 0) };
            if r < 0 {
                self.fail(&format!("copy_file_range: {}", std::io::Error::last_os_error()));
            }
            if r == 0 {
                break;
            }
            done += r as u64;
            want = n;
        }
        if done != n {
            self.fail(&format!("copy_file_range copied {done} bytes, the source holds {n} there"));
        }
        if aligned {
            self.aligned_copied += n;
        } else {
            self.unaligned_copied += n;
        }
        if n > 0 {
            let bytes = self.model[i][off as usize..(off + n) as usize].to_vec();
            let m = &mut self.model[j];
            let end = (dst + n) as usize;
            if m.len() < end {
                m.resize(end, 0);
            }
            m[dst as usize..end].copy_from_slice(&bytes);
        }
        self.check_size(j);
        self.check_range(j, dst.saturating_sub(64), len + 128, "after copy_file_range");
    }

    fn close_all(&mut self) {
        for f in &mut self.files {
            *f = None;
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

fn exercise(cfg: Config) {
    if !can_mount() {
        return;
    }
    let ops = env_u64("SQUEEZEFS_EXERCISER_OPS").unwrap_or(8000);
    let seed = env_u64("SQUEEZEFS_EXERCISER_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("exerciser {} ({}): {ops} operations, SQUEEZEFS_EXERCISER_SEED={seed}", cfg.name, cfg.opts);
    let mut m = Mounted::new(cfg.opts);
    let t = Instant::now();
    let mut x = Exerciser::new(&m, &cfg, seed);
    for _ in 0..ops {
        x.step();
    }
    x.check_whole("final whole-file check");
    x.close_all();
    let counts: Vec<String> = KINDS.iter().zip(x.counts).map(|(k, n)| format!("{k} {n}")).collect();
    eprintln!(
        "exerciser {}: {ops} operations in {:.1} s ({}); copied {} bytes record-aligned, {} unaligned; sizes {:?}",
        cfg.name,
        t.elapsed().as_secs_f64(),
        counts.join(", "),
        x.aligned_copied,
        x.unaligned_copied,
        x.model.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let (model, op) = (std::mem::take(&mut x.model), x.op);
    drop(x);
    m.umount();
    for cmd in ["fsck", "scrub"] {
        let out = run(&[cmd, m.pool.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "exerciser {} seed {seed}: {cmd} after {op} operations: {}{}",
            cfg.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.mount();
    for (i, want) in model.iter().enumerate() {
        let got = std::fs::read(m.path(&name(i))).unwrap();
        if let Some(p) = (0..want.len().min(got.len())).find(|&p| want[p] != got[p]) {
            panic!("exerciser {} seed {seed}: {} after the remount differs at offset {p}", cfg.name, name(i));
        }
        assert_eq!(got.len(), want.len(), "exerciser {} seed {seed}: {} size after the remount", cfg.name, name(i));
    }
    m.umount();
}

#[test]
fn exerciser_zstd_keeps_every_file_equal_to_the_model() {
    exercise(Config { name: "zstd", opts: "compress=zstd:3", rs: 128 << 10 });
}

#[test]
fn exerciser_lz4_keeps_every_file_equal_to_the_model() {
    exercise(Config { name: "lz4", opts: "compress=lz4", rs: 128 << 10 });
}

#[test]
fn exerciser_small_records_keeps_every_file_equal_to_the_model() {
    exercise(Config { name: "zlib-16k", opts: "compress=zlib:1,recordsize=16K", rs: 16 << 10 });
}

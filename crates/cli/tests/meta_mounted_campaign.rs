//! The corruption campaign of crates/pipeline/tests/meta_copies.rs, mounted: each trial
//! damages one 4 KiB block (any block: header, sum block or data) of one copy of a closed
//! pool's metadata store, mounts the pool with the binary, reads every file back through
//! the mount, unmounts, and expects `scrub` to repair what the mount did not (exit 0) and
//! `fsck` to find both copies intact and the pool clean. `SQUEEZEFS_META_MOUNTED_TRIALS`
//! sets the number of trials (default 10).
mod mounted_common;
use mounted_common::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// xorshift64*: the trials' choices, reproducible from the trial number.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                todo.push(r);
            } else {
                out.push(r);
            }
        }
    }
    out.sort();
    out
}

/// The tree the pool is made from: this workspace's engine and filesystem sources (many
/// small source files in a few directories) and two larger files of 3 MiB, one text,
/// one incompressible.
fn source_tree(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for crate_dir in ["pipeline/src", "fs/src", "meta/src"] {
        let from = here.join("..").join(crate_dir);
        for rel in files_under(&from) {
            let to = src.join(crate_dir).join(&rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from.join(&rel), to).unwrap();
        }
    }
    let text: String = (0..3 << 20).map(|i: u32| (b'a' + (i / 5 % 26) as u8) as char).collect();
    std::fs::write(src.join("large-text"), text).unwrap();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let noise: Vec<u8> = (0..3 << 20).map(|_| r.below(256) as u8).collect();
    std::fs::write(src.join("large-noise"), noise).unwrap();
    src
}

fn copy_pool(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn squeezefs(args: &[&str]) -> (Option<i32>, String) {
    let out = run(args);
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_block_of_one_copy_damaged_while_unmounted_mounts_reads_back_and_scrub_repairs() {
    if !can_mount() {
        return;
    }
    let trials: u64 = std::env::var("SQUEEZEFS_META_MOUNTED_TRIALS").map_or(10, |v| v.parse().unwrap());
    let d = tempfile::Builder::new().prefix("sqzmeta").tempdir_in("/tmp").unwrap();
    let src = source_tree(d.path());
    let files = files_under(&src);
    assert!(files.len() > 100, "{} files", files.len());
    let pristine = d.path().join("pristine");
    run_ok(&["mkfs", pristine.to_str().unwrap(), "--rootdir", src.to_str().unwrap(), "--no-seal", "-q"]);
    // trials whose damage the mount met (healed as read, or a header or sum block put
    // right as it opened), and trials whose damage scrub repaired
    let (mut by_mount, mut by_scrub) = (0, 0);
    for t in 0..trials {
        let mut rng = Rng(0x5eed_0000 + t * 0x1_0001);
        let trial = d.path().join(format!("trial-{t}"));
        let pool = trial.join("pool");
        let mnt = trial.join("mnt");
        std::fs::create_dir(&trial).unwrap();
        std::fs::create_dir(&mnt).unwrap();
        copy_pool(&pristine, &pool);
        let copy = pool.join(format!("meta.copy{}", t % 2));
        let blocks = std::fs::metadata(&copy).unwrap().len() / 4096;
        let block = rng.below(blocks);
        let zeros = rng.below(2) == 0;
        let bytes: Vec<u8> = if zeros { vec![0; 4096] } else { (0..4096).map(|_| rng.below(256) as u8).collect() };
        std::fs::OpenOptions::new().write(true).open(&copy).unwrap().write_all_at(&bytes, block * 4096).unwrap();
        let what = format!(
            "trial {t}: block {block} of {} of {} {}",
            blocks,
            copy.display(),
            if zeros { "zeroed" } else { "random" }
        );

        let (p, m) = (pool.to_str().unwrap(), mnt.to_str().unwrap());
        let (code, mount_out) = squeezefs(&["mount", p, m]);
        assert_eq!(code, Some(0), "{what}: mount: {mount_out}");
        let mismatch = files.iter().find(|rel| std::fs::read(mnt.join(rel)).ok() != std::fs::read(src.join(rel)).ok());
        let (ucode, uout) = squeezefs(&["umount", m]);
        assert_eq!(mismatch, None, "{what}: a file read back differs or fails");
        assert_eq!(ucode, Some(0), "{what}: umount: {uout}");
        let log = std::fs::read_to_string(pool.join("squeezefs.log")).unwrap_or_default();
        assert!(!log.contains("panicked") && !mount_out.contains("panicked"), "{what}: the daemon panicked: {log}");
        // the open logs on the mount's stderr (the daemon detaches once the mount is live)
        let said = log + &mount_out;
        if said.contains("failed its checksum") || said.contains("checking every block") {
            by_mount += 1;
        }

        let (code, out) = squeezefs(&["scrub", p]);
        assert_eq!(code, Some(0), "{what}: scrub: {out}");
        assert!(!out.contains("damaged in every copy"), "{what}: scrub: {out}");
        if out.contains("repaired copy") {
            by_scrub += 1;
        }
        let (code, out) = squeezefs(&["fsck", p]);
        assert_eq!(code, Some(0), "{what}: fsck after scrub: {out}");
        assert_eq!(out.matches(", intact\n").count(), 2, "{what}: both copies intact after scrub: {out}");
        assert!(out.contains("pool is clean"), "{what}: {out}");
        std::fs::remove_dir_all(&trial).unwrap();
    }
    eprintln!("{trials} trials: damage met by the mount in {by_mount}, repaired by scrub in {by_scrub}");
    if trials >= 10 {
        assert!(by_mount > 0 && by_scrub > 0, "mount met {by_mount}, scrub repaired {by_scrub} of {trials}");
    }
}

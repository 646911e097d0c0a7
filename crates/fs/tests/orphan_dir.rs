//! Crash recovery and checking tools: fsck on the pool a crash leaves right after
//! an `rmdir` of a directory the kernel still references (an orphan directory).
use squeezefs_fs::{Creds, Fs, FsConfig, ROOT_INO};
use squeezefs_pipeline::{Engine, MkfsOptions, OpenOptions};

#[test]
fn an_orphan_directory_left_by_a_crash_is_not_reported_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let d;
    {
        let fs = Fs::new(Engine::open(&pool, &OpenOptions::default()).unwrap(), FsConfig::default()).unwrap();
        // mkdir hands the kernel a reference; rmdir while it is held (a shell's cwd, an open
        // handle, or simply no FORGET yet) keeps the directory as an orphan
        d = fs.mkdir(&Creds::root(), ROOT_INO, b"d", 0o755).unwrap().ino;
        fs.rmdir(&Creds::root(), ROOT_INO, b"d").unwrap();
        // the daemon dies: the fs core never sees the forget
        fs.engine().close().unwrap();
    }
    let e = Engine::open(&pool, &OpenOptions { read_only: true, ..Default::default() }).unwrap();
    assert_eq!(e.orphans().unwrap(), vec![d]);
    let r = e.fsck().unwrap();
    assert!(r.is_clean(), "fsck reports damage on a healthy pool with an orphan directory: {:?}", r.problems);
}

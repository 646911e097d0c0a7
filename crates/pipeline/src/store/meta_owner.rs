//! What a metadata block lost in every copy held: the table whose pages lead to it.
//!
//! redb keeps no map from its pages to its tables, so the store is opened read-only over
//! its checked copies (meta_mirror.rs, which records every read that meets a block lost in
//! every copy) and each table is walked to its end: a lost block met during the walk of a
//! table belongs to it (one of its B-tree pages, branch or leaf). Met while redb opens the
//! store, it is one of redb's own pages; met listing the tables, the table directory. A
//! walk stops at the first lost block it meets, so a second lost block further on in the
//! same table is not reached and is reported as possibly that table's.

use crate::store::meta_mirror::{held_by, LostBlock, Mirror, Shared};
use redb::{Key, ReadableDatabase, ReadableTable, TableDefinition, TableHandle, Value};
use squeezefs_meta::tables;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Fill in `held` of every block of `lost` with what the walk found there.
pub fn name_owners(paths: &[PathBuf], lost: &mut [LostBlock]) {
    if lost.is_empty() {
        return;
    }
    let (found, rest) = owners(paths);
    for l in lost {
        l.held = if l.block == 0 { held_by(0) } else { found.get(&l.block).cloned().unwrap_or_else(|| rest.clone()) };
    }
}

/// The walk's finding per block met, and what is said of the blocks it never met.
fn owners(paths: &[PathBuf]) -> (BTreeMap<u64, String>, String) {
    let mut found = BTreeMap::new();
    let shared = match Shared::open(paths, false) {
        Ok(s) => s,
        Err(e) => return (found, format!("not known: the copies do not open to walk the tables ({e})")),
    };
    let db = match redb::Builder::new().open_read_only_with_backend(Mirror(shared.clone())) {
        Ok(db) => db,
        Err(e) => {
            for l in shared.take_lost_reads() {
                found
                    .insert(l, "a page redb reads as it opens the store (its allocator state or system tables)".into());
            }
            return (found, format!("not known: the store does not open to walk its tables ({e})"));
        }
    };
    let listed = db.begin_read().map_err(|e| e.to_string()).and_then(|rx| {
        let names: Vec<String> = rx.list_tables().map_err(|e| e.to_string())?.map(|h| h.name().to_string()).collect();
        Ok((names, rx))
    });
    let Ok((names, rx)) = listed else {
        for l in shared.take_lost_reads() {
            found.insert(l, "redb's table directory (the name and root page of every table)".into());
        }
        return (found, "not known: the table directory does not read".into());
    };
    let mut stopped = Vec::new();
    for name in names {
        let walked = walk_named(&rx, &name);
        let hit = shared.take_lost_reads();
        let what = match &walked {
            Some((_, what)) => format!("a page of the `{name}` table ({what})"),
            None => format!("a page of the `{name}` table"),
        };
        if matches!(walked, Some((Err(_), _))) && !hit.is_empty() {
            stopped.push(format!("`{name}`"));
        }
        for l in hit {
            found.entry(l).or_insert_with(|| what.clone());
        }
    }
    let rest = if stopped.is_empty() {
        "free space or redb's list of freed pages: no table of the pool reaches it".to_string()
    } else {
        format!(
            "no table reaches it as far as they could be read: free space, redb's list of freed pages, or a \
             page of the {} table beyond its first lost block",
            stopped.join(", ")
        )
    };
    (found, rest)
}

/// Walk every row of table `def`; absent is fine (the pool never needed it).
fn walk<K: Key + 'static, V: Value + 'static>(
    rx: &redb::ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<(), String> {
    let t = match rx.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    for r in t.iter().map_err(|e| e.to_string())? {
        let (k, v) = r.map_err(|e| e.to_string())?;
        let _ = (k.value(), v.value());
    }
    Ok(())
}

/// Walk the table called `name` when this build knows its types: the walk's result and
/// what the table holds. `None`: a table this build does not know (not walked).
fn walk_named(rx: &redb::ReadTransaction, name: &str) -> Option<(Result<(), String>, &'static str)> {
    macro_rules! known {
        ($($def:expr => $what:expr),* $(,)?) => {
            $(if name == $def.name() {
                return Some((walk(rx, $def), $what));
            })*
        };
    }
    known!(
        tables::SUPERBLOCK => "the superblock: the pool's geometry and features",
        tables::DEVICES => "the pool's devices",
        tables::INODES => "inode attributes",
        tables::DIRENTS => "directory entries by name",
        tables::DIR_COOKIES => "directory entries in listing order",
        tables::DIR_NEXT_COOKIE => "each directory's next listing cookie",
        tables::XATTRS => "extended attributes",
        tables::SYMLINKS => "symlink targets",
        tables::ORPHANS => "unlinked inodes still open",
        tables::EXTENTS => "where each record of each file is stored",
        tables::FREE_SPACE => "the free ranges of the devices",
        tables::RECORDSIZES => "record sizes of files with their own",
        tables::BUNDLES => "bundles of small records",
        tables::BACKGROUND => "background compression's position",
        tables::REFCOUNTS => "reference counts of shared records",
        tables::AUTO_START => "the rung each auto range starts at",
    );
    None
}

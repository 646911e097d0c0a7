//! The `user.squeezefs.usage` virtual xattr: compsize rows of one inode, as text
//! (versioned, one row per line: `ALG_ID LEVEL DISK UNCOMPRESSED REFERENCED`).
//! `squeezefs stats` reads it on every file of a tree and sums the rows.
use squeezefs_codec::Algorithm;

pub const XATTR_USAGE: &str = "user.squeezefs.usage";
const HEADER: &str = "squeezefs-usage 1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub alg: Algorithm,
    pub level: i32,
    pub disk_bytes: u64,
    pub uncompressed_bytes: u64,
    pub referenced_bytes: u64,
}

pub fn encode(rows: &[Row]) -> Vec<u8> {
    let mut s = String::from(HEADER);
    s.push('\n');
    for r in rows {
        s.push_str(&format!(
            "{} {} {} {} {}\n",
            r.alg.id(),
            r.level,
            r.disk_bytes,
            r.uncompressed_bytes,
            r.referenced_bytes
        ));
    }
    s.into_bytes()
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageDecodeError {
    #[error("usage table does not start with '{HEADER}' (daemon of another version?)")]
    BadHeader,
    #[error("malformed usage row '{0}' (expected 'ALG_ID LEVEL DISK UNCOMPRESSED REFERENCED')")]
    BadRow(String),
}

pub fn decode(bytes: &[u8]) -> Result<Vec<Row>, UsageDecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| UsageDecodeError::BadHeader)?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(UsageDecodeError::BadHeader);
    }
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let bad = || UsageDecodeError::BadRow(l.to_string());
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() != 5 {
                return Err(bad());
            }
            let alg = f[0].parse::<u8>().ok().and_then(Algorithm::from_id).ok_or_else(bad)?;
            Ok(Row {
                alg,
                level: f[1].parse().map_err(|_| bad())?,
                disk_bytes: f[2].parse().map_err(|_| bad())?,
                uncompressed_bytes: f[3].parse().map_err(|_| bad())?,
                referenced_bytes: f[4].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let rows = vec![
            Row { alg: Algorithm::Zstd, level: -5, disk_bytes: 1, uncompressed_bytes: 2, referenced_bytes: 3 },
            Row { alg: Algorithm::None, level: 0, disk_bytes: u64::MAX, uncompressed_bytes: 0, referenced_bytes: 7 },
        ];
        assert_eq!(decode(&encode(&rows)).unwrap(), rows);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(decode(b"hello"), Err(UsageDecodeError::BadHeader)));
        assert!(matches!(decode(b"squeezefs-usage 1\n9 1 2 3 4\n"), Err(UsageDecodeError::BadRow(_))));
        assert!(matches!(decode(b"squeezefs-usage 1\n4 1 2\n"), Err(UsageDecodeError::BadRow(_))));
    }
}

//! The built-in deterministic sample of `squeezefs bench` (no files needed): text-like,
//! binary-like and incompressible data from a fixed-seed generator, identical on every
//! machine and every run.

use super::Input;

/// xorshift64*: tiny, deterministic, good enough to make data look random to a compressor.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

const WORDS: [&str; 48] = [
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "I", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
    "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who",
];

/// English-like text: Zipf-skewed words, punctuation, line breaks.
fn text(len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut sentence = 0;
    while out.len() < len {
        let r = rng.next();
        // square a uniform index to skew towards the frequent words
        let u = (r % 1000) as usize;
        let w = WORDS[u * u * WORDS.len() / 1_000_000];
        if sentence == 0 {
            let mut cap = w.as_bytes().to_vec();
            cap[0] = cap[0].to_ascii_uppercase();
            out.extend_from_slice(&cap);
        } else {
            out.extend_from_slice(w.as_bytes());
        }
        sentence += 1;
        let end = (r >> 20).is_multiple_of(14);
        out.extend_from_slice(if end {
            b". "
        } else if (r >> 30).is_multiple_of(9) {
            b", "
        } else {
            b" "
        });
        if end {
            sentence = 0;
            if (r >> 40).is_multiple_of(6) {
                out.push(b'\n');
            }
        }
    }
    out.truncate(len);
    out
}

/// Binary-like: fixed-size records of ids, small counters, pointers, doubles and code-like
/// byte patterns, as found in databases and executables.
fn binary(len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut id = 100_000u32;
    while out.len() < len {
        let r = rng.next();
        id += 1 + (r % 4) as u32;
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(((r >> 8) % 1000) as u32).to_le_bytes());
        out.extend_from_slice(&(0x0040_0000u64 + ((r >> 20) % 4096) * 16).to_le_bytes());
        out.extend_from_slice(&(((r >> 32) % 100_000) as f64 / 100.0).to_le_bytes());
        out.extend_from_slice(&[0x48, 0x8b, 0x45, (r >> 44) as u8 & 0x38, 0xe8]);
        out.extend_from_slice(&((r >> 48) as u16 % 512).to_le_bytes());
        out.extend_from_slice(&[0, 0, 0xc3, 0x90, 0x90]);
    }
    out.truncate(len);
    out
}

fn random(len: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// 4 MiB text-like, 4 MiB binary-like, 2 MiB incompressible.
pub fn builtin_sample() -> Vec<Input> {
    let mut rng = Rng(0x5EED_5EED_5EED_5EED);
    vec![
        Input { name: "builtin:text".into(), data: text(4 << 20, &mut rng) },
        Input { name: "builtin:binary".into(), data: binary(4 << 20, &mut rng) },
        Input { name: "builtin:random".into(), data: random(2 << 20, &mut rng) },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_deterministic_and_has_the_three_kinds() {
        let a = builtin_sample();
        let b = builtin_sample();
        assert_eq!(a.len(), 3);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.data, y.data);
        }
        let z = zstd_safe::compress_bound(1 << 20);
        let mut dst = vec![0u8; z];
        let ratio = |d: &[u8], dst: &mut Vec<u8>| {
            d[..1 << 20].len() as f64 / zstd_safe::compress(&mut dst[..], &d[..1 << 20], 3).unwrap() as f64
        };
        assert!(ratio(&a[0].data, &mut dst) > 2.5, "text-like");
        assert!(ratio(&a[1].data, &mut dst) > 2.0, "binary-like");
        assert!(ratio(&a[2].data, &mut dst) < 1.01, "random");
    }
}

//! Every algorithm round-trips through the pool, and decode errors are typed.

use squeezefs_codec::*;

fn text_like(len: usize) -> Vec<u8> {
    let words = ["the ", "squeeze ", "record ", "of ", "zstd ", "level ", "\n", "sector ", "a "];
    let mut out = Vec::with_capacity(len);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

fn codecs() -> Vec<Codec> {
    let mut v = vec![Codec::NONE];
    v.extend([-100, -5, -1, 1, 3, 9, 15, 19, 22].map(|l| Codec::zstd(l).unwrap()));
    v.extend([1, 2, 17, 65537].map(|a| Codec::lz4(a).unwrap()));
    v.extend([1, 9, 12].map(|l| Codec::lz4hc(l).unwrap()));
    v.extend((1..=12).map(|l| Codec::deflate(l).unwrap()));
    #[cfg(feature = "lzo")]
    v.push(Codec::new(Algorithm::Lzo, 0).unwrap());
    v
}

#[test]
fn every_codec_round_trips_through_the_pool() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let src = text_like(128 << 10);
    for codec in codecs() {
        let mut dst = vec![0u8; compress_bound(codec, src.len())];
        let n = ws.compress(codec, &src, &mut dst).unwrap();
        if codec.alg != Algorithm::None {
            let limit = if codec.alg == Algorithm::Lz4 && codec.level > 100 { dst.len() + 1 } else { src.len() / 2 };
            assert!(n < limit, "{codec}: {n}");
        }
        let mut back = vec![0u8; src.len()];
        let m = ws.decompress(codec.alg, &dst[..n], &mut back).unwrap();
        assert_eq!(m, src.len(), "{codec}");
        assert!(back == src, "{codec}");
    }
}

#[test]
fn small_dst_is_dst_too_small_not_corrupt() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let src = text_like(64 << 10);
    for codec in codecs() {
        let mut dst = vec![0u8; compress_bound(codec, src.len())];
        let n = ws.compress(codec, &src, &mut dst).unwrap();
        let mut tiny = vec![0u8; 16];
        assert!(matches!(ws.compress(codec, &src, &mut tiny), Err(CodecError::DstTooSmall)), "{codec}");
        let mut short = vec![0u8; src.len() - 1];
        let r = ws.decompress(codec.alg, &dst[..n], &mut short);
        if codec.alg == Algorithm::Lzo {
            // lzo cannot tell a short buffer from a corrupt stream
            assert!(r.is_err(), "{codec}");
        } else {
            assert!(matches!(r, Err(CodecError::DstTooSmall)), "{codec}: {r:?}");
        }
    }
}

#[test]
fn garbage_is_corrupt() {
    let ws = Workspaces::new(WorkspaceConfig::default());
    let garbage: Vec<u8> = (0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    for alg in [Algorithm::Zstd, Algorithm::Deflate, Algorithm::Lz4, Algorithm::Lz4Hc] {
        let mut out = vec![0u8; 128 << 10];
        let r = ws.decompress(alg, &garbage, &mut out);
        assert!(matches!(r, Err(CodecError::Corrupt { .. })), "{alg}: {r:?}");
    }
}

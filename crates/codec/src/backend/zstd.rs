//! zstd over libzstd (zstd-safe / zstd-sys). Compression uses a *static* CCtx laid out in a
//! buffer the pool sized with `ZSTD_estimateCCtxSize_usingCParams` (as btrfs does), so the
//! pool's memory accounting is exact and the hot path never allocates: libzstd cannot grow
//! a static context, it fails instead, which the pool's sizing rules out.
//!
//! Frames are standard zstd frames, one per block: `ZSTD_compress2` with the level set, the
//! source size known (pledged = block length, recorded in the header), no checksum. Most
//! levels' frames are what `zstd -b` produces per block; [`cparams`] lists the levels whose
//! parameters are tuned for record-sized blocks.

use super::shape::Shape;
use crate::algorithm::Algorithm;
use crate::error::CodecError;
use std::ptr::NonNull;
use zstd_safe::zstd_sys as sys;

fn is_error(code: usize) -> bool {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_isError(code) != 0 }
}

fn error_name(code: usize) -> &'static str {
    zstd_safe::get_error_name(code)
}

fn is_dst_too_small(code: usize) -> bool {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_getErrorCode(code) == sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall }
}

/// `ZSTD_c_useRowMatchFinder` (experimental parameter 14).
const USE_ROW_MATCH_FINDER: sys::ZSTD_cParameter = sys::ZSTD_cParameter::ZSTD_c_experimentalParam14;

/// `ZSTD_c_splitAfterSequences` (experimental parameter 13 in libzstd 1.5.7): the post-block
/// splitter, which cuts a block where its sequences' statistics change so each part gets
/// its own entropy tables. Value 1 = `ZSTD_ps_enable`.
const SPLIT_AFTER_SEQUENCES: sys::ZSTD_cParameter = sys::ZSTD_cParameter::ZSTD_c_experimentalParam13;

/// `ZSTD_c_blockSplitterLevel` (experimental parameter 20 in libzstd 1.5.7): the pre-block
/// splitter, which cuts a source into blocks of less than 128 KiB where fingerprints of
/// its bytes change. Value 1 = off.
const BLOCK_SPLITTER_LEVEL: sys::ZSTD_cParameter = sys::ZSTD_cParameter::ZSTD_c_experimentalParam20;

/// Parameters of `level` for sources of up to `block` bytes: libzstd's own table
/// (`ZSTD_getCParams`), with one floor that buys ratio and two caps that bound workspace
/// memory on small blocks:
/// * `fast` (levels 1–2): hash log at least `windowLog − 3`. libzstd's
///   table for sources ≤ 128 KiB gives level 1 a 2^13-entry table, which on a full record
///   forgets most earlier positions; 2^14 entries (64 KiB, still far under the btrfs workspace
///   figure) measured +2.8% ratio for −11% speed on the Silesia subset (`zstd -b1 -B128K
///   --zstd=hlog=14`, docs/benchmarks-archive.md, Codecs). This is what lets packed zstd:1
///   beat btrfs by the ratio margin at the same level while staying faster than the zstd
///   CLI's level 1;
/// * `dfast` (level 4 on 128 KiB): both hash tables at most half a window's entries
///   (libzstd gives them one entry per byte: 1 MiB of tables for a 128 KiB record);
/// * `lazy2` (levels 7–10 on 128 KiB): the post-block splitter on ([`post_block_splitter`];
///   not a table parameter, so it is set beside them). These levels spend their time
///   searching matches and then code a whole record with one set of entropy tables;
///   splitting where the statistics change measured +0.45% ratio at level 9 on the Silesia
///   subset for about a fifth more CPU, and no workspace memory. libzstd makes the same
///   split on its own from btopt on (level 13+). A hash log of 18 would add 0.1% more but
///   640 KiB per workspace, past the btrfs figures.
/// * binary-tree strategies (btlazy2 and up, levels 11+): chain log at most the window log
///   (libzstd uses windowLog + 1, i.e. trees over the whole window; 2 MiB at 128 KiB).
///
/// Levels 3, 5 and 6 are untouched, so their frames are byte-identical to the zstd CLI's;
/// the capped levels lose a little ratio (docs/benchmarks-archive.md, Codecs) and their
/// workspaces stay under the btrfs figures for the same levels.
pub(crate) fn cparams(level: i32, block: usize) -> sys::ZSTD_compressionParameters {
    use sys::ZSTD_strategy::*;
    // SAFETY: pure function of its arguments.
    let mut p = unsafe { sys::ZSTD_getCParams(level, block as u64, 0) };
    match p.strategy {
        // negative levels ask for speed over ratio: left as libzstd has them
        ZSTD_fast if level >= 1 => {
            p.hashLog = p.hashLog.max(p.windowLog.saturating_sub(3)).min(p.windowLog);
        }
        ZSTD_dfast => {
            p.hashLog = p.hashLog.min(p.windowLog - 1);
            p.chainLog = p.chainLog.min(p.windowLog - 1);
        }
        ZSTD_btlazy2 | ZSTD_btopt | ZSTD_btultra | ZSTD_btultra2 => {
            p.chainLog = p.chainLog.min(p.windowLog);
        }
        _ => {}
    }
    p
}

/// Parameters of `level` for a context of `shape`: [`cparams`] of the search size, with
/// the window of the block (a window of at most the block, as libzstd's table gives it).
/// For a record context (search = block) this is `cparams(level, block)`. For a bundle's
/// (search = the record size, block = the bundle size) the level searches each position
/// as it would in one record — the match finder's tables, tree or chain depth, search
/// log and strategy are the record's — while matches may reach back over the whole
/// bundle. A level's CPU per byte is then what the user chose it for with the record
/// size, whatever the bundle size; with the bundle's own parameters a level spends more
/// per byte the longer the unit (zstd -15 on 2 MiB pieces of a source tree: +23% CPU
/// for −0.7% bytes against the 1 MiB record's search over the same 2 MiB window,
/// docs/benchmarks.md, `mkfs --rootdir`).
pub(crate) fn shaped_cparams(level: i32, shape: Shape) -> sys::ZSTD_compressionParameters {
    let mut p = cparams(level, shape.search);
    if shape.block > shape.search {
        // SAFETY: pure function of its arguments.
        let wide = unsafe { sys::ZSTD_getCParams(level, shape.block as u64, 0) };
        p.windowLog = p.windowLog.max(wide.windowLog);
    }
    p
}

/// Whether `level` on sources of up to `block` bytes runs the post-block splitter (see
/// [`cparams`]): the `lazy2` levels. libzstd's own choice stands for the others.
pub(crate) fn post_block_splitter(level: i32, block: usize) -> bool {
    // SAFETY: pure function of its arguments.
    let p = unsafe { sys::ZSTD_getCParams(level, block as u64, 0) };
    p.strategy == sys::ZSTD_strategy::ZSTD_lazy2
}

/// The explicit parameters `level` needs on top of the level itself for a context of
/// `shape` (empty when libzstd's table is used unchanged). A bundle context sets every
/// table parameter: libzstd derives the level's defaults from the source length, which is
/// the bundle's, not the record's.
fn overrides(level: i32, shape: Shape) -> Vec<(sys::ZSTD_cParameter, i32)> {
    use sys::ZSTD_cParameter::*;
    let p = shaped_cparams(level, shape);
    let mut v = Vec::new();
    if shape.block > shape.search {
        v.extend([
            (ZSTD_c_windowLog, p.windowLog as i32),
            (ZSTD_c_chainLog, p.chainLog as i32),
            (ZSTD_c_hashLog, p.hashLog as i32),
            (ZSTD_c_searchLog, p.searchLog as i32),
            (ZSTD_c_minMatch, p.minMatch as i32),
            (ZSTD_c_targetLength, p.targetLength as i32),
            (ZSTD_c_strategy, p.strategy as i32),
        ]);
    } else {
        // SAFETY: pure function of its arguments.
        let base = unsafe { sys::ZSTD_getCParams(level, shape.block as u64, 0) };
        if p.chainLog != base.chainLog {
            v.push((ZSTD_c_chainLog, p.chainLog as i32));
        }
        if p.hashLog != base.hashLog {
            v.push((ZSTD_c_hashLog, p.hashLog as i32));
        }
    }
    if post_block_splitter(level, shape.search) {
        v.push((SPLIT_AFTER_SEQUENCES, 1));
    }
    if !pre_block_splitter(level, shape) {
        v.push((BLOCK_SPLITTER_LEVEL, 1));
    }
    v
}

/// Whether `level` in a context of `shape` keeps libzstd's pre-block splitter
/// ([`BLOCK_SPLITTER_LEVEL`]): only the optimal parsers (btopt and up), which libzstd
/// gives their own splitting anyway. A source of one block (128 KiB and less) is never
/// split. On records of several blocks the splitter's fingerprinting is a poor trade for
/// the dfast to lazy2 strategies: `squeezefs bench --block 1M`, three alternating runs
/// each, splitter on → off:
/// * a tar of Linux 6.1 `drivers/net` (132 MB): zstd:3 +7% compression speed for −0.12%
///   ratio (4.867 → 4.861); zstd:6 and zstd:9 equal speed and +0.1% ratio;
/// * the Silesia subset: ratio 2.868 → 2.865 at zstd:3, 3.075 → 3.074 at zstd:9.
///
/// A level step trades ten times more ratio for the same speed. libzstd before 1.5.7,
/// which the distribution's zstd CLI and mksquashfs link, has no such splitter.
pub(crate) fn pre_block_splitter(level: i32, shape: Shape) -> bool {
    use sys::ZSTD_strategy::*;
    matches!(shaped_cparams(level, shape).strategy, ZSTD_btopt | ZSTD_btultra | ZSTD_btultra2)
}

/// Bytes a static CCtx needs to compress sources of up to `shape.block` bytes at `level`:
/// the estimate for [`shaped_cparams`] with the row-based match finder on.
/// `ZSTD_estimateCCtxSize_usingCParams` budgets for the larger of the row and chain match
/// finders (for greedy/lazy levels) because libzstd picks one at run time; we pin the row
/// finder (which libzstd picks anyway on x86-64 for windows above 16 KiB, so frames equal
/// the zstd CLI's) and budget exactly for it.
pub(crate) fn cctx_bytes(level: i32, shape: Shape) -> usize {
    let cp = shaped_cparams(level, shape);
    // SAFETY: the params object is created, used and freed here; all calls are checked.
    unsafe {
        let params = sys::ZSTD_createCCtxParams();
        if params.is_null() {
            return sys::ZSTD_estimateCCtxSize_usingCParams(cp);
        }
        let mut p = sys::ZSTD_getParams(level, shape.block as u64, 0);
        p.cParams = cp;
        let mut r = sys::ZSTD_CCtxParams_init_advanced(params, p);
        if !is_error(r) {
            r = sys::ZSTD_CCtxParams_setParameter(params, USE_ROW_MATCH_FINDER, 1);
        }
        if !is_error(r) && post_block_splitter(level, shape.search) {
            r = sys::ZSTD_CCtxParams_setParameter(params, SPLIT_AFTER_SEQUENCES, 1);
        }
        let bytes = if is_error(r) {
            sys::ZSTD_estimateCCtxSize_usingCParams(p.cParams)
        } else {
            sys::ZSTD_estimateCCtxSize_usingCCtxParams(params)
        };
        sys::ZSTD_freeCCtxParams(params);
        bytes
    }
}

/// Bytes a DCtx owns (`ZSTD_estimateDCtxSize`); single-shot decoding needs no window buffer.
pub(crate) fn dctx_bytes() -> usize {
    // SAFETY: pure function.
    unsafe { sys::ZSTD_estimateDCtxSize() }
}

pub(crate) struct Compressor {
    /// Backing store of the static CCtx; 8-aligned as libzstd requires. Never reallocated.
    _mem: Box<[u64]>,
    cctx: NonNull<sys::ZSTD_CCtx>,
    /// what the parameters are computed for
    shape: Shape,
    level: i32,
}

// SAFETY: the CCtx is only touched through &mut self; libzstd contexts may move between
// threads as long as one thread uses them at a time.
unsafe impl Send for Compressor {}

impl Compressor {
    pub(crate) fn new(bytes: usize, shape: Shape) -> Result<Compressor, CodecError> {
        let mut mem = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
        // SAFETY: buffer is 8-aligned, `bytes` long, and outlives the CCtx (same struct).
        let cctx = unsafe { sys::ZSTD_initStaticCCtx(mem.as_mut_ptr().cast(), mem.len() * 8) };
        let cctx = NonNull::new(cctx).ok_or(CodecError::OutOfMemory { alg: Algorithm::Zstd })?;
        Ok(Compressor { _mem: mem, cctx, shape, level: i32::MIN })
    }

    fn set(&mut self, param: sys::ZSTD_cParameter, value: i32) -> Result<(), CodecError> {
        // SAFETY: valid context.
        let r = unsafe { sys::ZSTD_CCtx_setParameter(self.cctx.as_ptr(), param, value) };
        if is_error(r) {
            self.level = i32::MIN;
            return Err(CodecError::Unsupported(format!("zstd parameter {param:?}={value}: {}", error_name(r))));
        }
        Ok(())
    }

    /// Reset to `level`'s parameters (only when the level changes: not per block).
    fn configure(&mut self, level: i32) -> Result<(), CodecError> {
        // SAFETY: valid context; no frame in progress between calls.
        let r = unsafe {
            sys::ZSTD_CCtx_reset(self.cctx.as_ptr(), sys::ZSTD_ResetDirective::ZSTD_reset_session_and_parameters)
        };
        if is_error(r) {
            return Err(CodecError::Unsupported(format!("zstd reset: {}", error_name(r))));
        }
        self.set(sys::ZSTD_cParameter::ZSTD_c_compressionLevel, level)?;
        // pin the match finder `cctx_bytes` budgeted for
        self.set(USE_ROW_MATCH_FINDER, 1)?;
        for (param, value) in overrides(level, self.shape) {
            self.set(param, value)?;
        }
        self.level = level;
        Ok(())
    }

    pub(crate) fn compress(&mut self, level: i32, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        if self.level != level {
            self.configure(level)?;
        }
        // SAFETY: valid context; pointers and lengths come from live slices.
        let r = unsafe {
            sys::ZSTD_compress2(self.cctx.as_ptr(), dst.as_mut_ptr().cast(), dst.len(), src.as_ptr().cast(), src.len())
        };
        if !is_error(r) {
            return Ok(r);
        }
        if is_dst_too_small(r) {
            return Err(CodecError::DstTooSmall);
        }
        Err(CodecError::Unsupported(format!("zstd compression failed: {}", error_name(r))))
    }
}

pub(crate) struct Decompressor {
    dctx: zstd_safe::DCtx<'static>,
}

impl Decompressor {
    pub(crate) fn new() -> Result<Decompressor, CodecError> {
        let dctx = zstd_safe::DCtx::try_create().ok_or(CodecError::OutOfMemory { alg: Algorithm::Zstd })?;
        Ok(Decompressor { dctx })
    }

    pub(crate) fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match self.dctx.decompress(dst, src) {
            Ok(n) => Ok(n),
            Err(code) if is_dst_too_small(code) => Err(CodecError::DstTooSmall),
            Err(code) => Err(CodecError::Corrupt { alg: Algorithm::Zstd, detail: error_name(code).to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: usize = 128 << 10;

    /// A record whose halves differ in statistics, as files' records often do: words, then a
    /// table of little-endian counters with noise.
    fn mixed_record() -> Vec<u8> {
        let words = ["squeeze ", "record ", "txg ", "extent ", "zstd ", "sector ", "packed ", "dirty\n"];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut v = Vec::with_capacity(RECORD);
        while v.len() < RECORD / 2 {
            v.extend_from_slice(words[(next() % 8) as usize].as_bytes());
        }
        let mut i: u32 = 0;
        while v.len() < RECORD {
            i += 1 + (next() % 3) as u32;
            v.extend_from_slice(&i.to_le_bytes());
            v.extend_from_slice(&((next() % 64) as u16).to_le_bytes());
        }
        v.truncate(RECORD);
        v
    }

    fn ours(level: i32, src: &[u8]) -> Vec<u8> {
        let mut c = Compressor::new(cctx_bytes(level, Shape::record(RECORD)), Shape::record(RECORD)).unwrap();
        let mut dst = vec![0u8; zstd_safe::compress_bound(src.len())];
        let n = c.compress(level, src, &mut dst).unwrap_or_else(|e| panic!("level {level}: {e}"));
        dst.truncate(n);
        dst
    }

    /// The static workspace `cctx_bytes` sizes must hold every level's parameters, including
    /// the post-block splitter's buffers (a static CCtx fails rather than grow).
    #[test]
    fn every_level_compresses_a_full_record_in_its_static_workspace() {
        let src = mixed_record();
        for level in (1..=22).chain([-1, -5]) {
            let frame = ours(level, &src);
            let mut d = Decompressor::new().unwrap();
            let mut back = vec![0u8; src.len()];
            assert_eq!(d.decompress(&frame, &mut back).unwrap(), src.len(), "level {level}");
            assert!(back == src, "level {level} round trip");
        }
    }

    #[test]
    fn the_lazy2_levels_split_blocks_and_beat_libzstds_table() {
        let src = mixed_record();
        for level in 1..=22 {
            assert_eq!(post_block_splitter(level, RECORD), (7..=10).contains(&level), "level {level}");
        }
        for level in 7..=10 {
            let mut stock = vec![0u8; zstd_safe::compress_bound(src.len())];
            let n = zstd_safe::compress(&mut stock[..], &src, level).unwrap();
            let mine = ours(level, &src).len();
            assert!(mine < n, "level {level}: {mine} bytes against libzstd's {n}");
        }
    }

    /// A frame of `src` from a plain context at `level` with the pre-block splitter at
    /// `splitter` (0: libzstd's choice, 1: off).
    fn plain(level: i32, splitter: i32, src: &[u8]) -> Vec<u8> {
        // SAFETY: the context is created, used and freed here; every call is checked.
        unsafe {
            let cctx = sys::ZSTD_createCCtx();
            assert!(!cctx.is_null());
            assert!(!is_error(sys::ZSTD_CCtx_setParameter(cctx, sys::ZSTD_cParameter::ZSTD_c_compressionLevel, level)));
            assert!(!is_error(sys::ZSTD_CCtx_setParameter(cctx, BLOCK_SPLITTER_LEVEL, splitter)));
            let mut dst = vec![0u8; zstd_safe::compress_bound(src.len())];
            let n = sys::ZSTD_compress2(cctx, dst.as_mut_ptr().cast(), dst.len(), src.as_ptr().cast(), src.len());
            sys::ZSTD_freeCCtx(cctx);
            assert!(!is_error(n), "{}", error_name(n));
            dst.truncate(n);
            dst
        }
    }

    /// 1 MiB records at the dfast to lazy2 levels are coded in whole 128 KiB blocks: the
    /// frame is the one libzstd makes with the pre-block splitter off, which differs from
    /// libzstd's default on data whose kind changes within a block.
    #[test]
    fn a_large_record_is_not_pre_split_below_the_optimal_parsers() {
        let shape = Shape::record(1 << 20);
        let mut src = Vec::with_capacity(shape.block);
        let mut seed = 1u64;
        while src.len() < shape.block {
            let mut text = mixed_record();
            text.truncate(48 << 10);
            src.extend_from_slice(&text);
            seed += 1;
            src.extend_from_slice(&crate::test_data::noise(seed, 24 << 10));
        }
        src.truncate(shape.block);
        for level in [3, 4, 6] {
            assert!(!pre_block_splitter(level, shape), "level {level}");
            let mut c = Compressor::new(cctx_bytes(level, shape), shape).unwrap();
            let mut dst = vec![0u8; zstd_safe::compress_bound(src.len())];
            let n = c.compress(level, &src, &mut dst).unwrap();
            assert!(dst[..n] == plain(level, 1, &src), "level {level}: not libzstd's unsplit frame");
            assert!(plain(level, 0, &src) != plain(level, 1, &src), "level {level}: the splitter changes nothing here");
        }
        assert!(pre_block_splitter(19, shape));
    }

    /// Bundle contexts: (bundle size, record size) as pools make them by default.
    const BUNDLES: [Shape; 3] = [
        Shape { block: 256 << 10, search: 128 << 10 },
        Shape { block: 2 << 20, search: 1 << 20 },
        Shape { block: 512 << 10, search: 128 << 10 },
    ];

    #[test]
    fn a_bundle_context_searches_as_its_record_over_the_bundles_window() {
        for shape in BUNDLES {
            for level in (1..=22).chain([-1, -5]) {
                let record = cparams(level, shape.search);
                let bundle = shaped_cparams(level, shape);
                // SAFETY: pure function of its arguments.
                let wide = unsafe { sys::ZSTD_getCParams(level, shape.block as u64, 0) };
                let at = format!("level {level}, {shape:?}");
                assert_eq!(bundle.windowLog, record.windowLog.max(wide.windowLog), "{at}");
                assert!(bundle.windowLog > record.windowLog || record.windowLog >= wide.windowLog, "{at}");
                let search = |p: &sys::ZSTD_compressionParameters| {
                    (p.chainLog, p.hashLog, p.searchLog, p.minMatch, p.targetLength, p.strategy as i32)
                };
                assert_eq!(search(&bundle), search(&record), "{at}");
            }
        }
        // the shape of a record context is the record's parameters, unchanged
        for level in 1..=22 {
            let a = shaped_cparams(level, Shape::record(RECORD));
            let b = cparams(level, RECORD);
            assert_eq!((a.windowLog, a.chainLog, a.hashLog), (b.windowLog, b.chainLog, b.hashLog), "level {level}");
        }
    }

    /// A static bundle context must hold its parameters at every level (window of the
    /// bundle, tables of the record), and its frames must decode.
    #[test]
    fn every_level_compresses_a_full_bundle_in_its_static_workspace() {
        for shape in BUNDLES {
            let mut src = Vec::with_capacity(shape.block);
            while src.len() < shape.block {
                let mut r = mixed_record();
                r.truncate(shape.block - src.len());
                src.extend_from_slice(&r);
            }
            for level in (1..=19).chain([-1, -5]) {
                let mut c = Compressor::new(cctx_bytes(level, shape), shape).unwrap();
                let mut dst = vec![0u8; zstd_safe::compress_bound(src.len())];
                let n = c.compress(level, &src, &mut dst).unwrap_or_else(|e| panic!("level {level}, {shape:?}: {e}"));
                let mut back = vec![0u8; src.len()];
                let got = Decompressor::new().unwrap().decompress(&dst[..n], &mut back).unwrap();
                assert!(got == src.len() && back == src, "level {level}, {shape:?}: round trip");
            }
        }
    }

    /// Matches reach past the record: a bundle whose second half repeats its first (noise,
    /// so only the repeat compresses) at a distance of twice the record size.
    #[test]
    fn a_bundle_finds_matches_farther_back_than_one_record() {
        let shape = Shape { block: 512 << 10, search: 128 << 10 };
        let half = crate::test_data::noise(0x2545_f491_4f6c_dd1d, shape.block / 2);
        let src = [half.clone(), half].concat();
        for level in [1, 3] {
            let mut c = Compressor::new(cctx_bytes(level, shape), shape).unwrap();
            let mut dst = vec![0u8; zstd_safe::compress_bound(src.len())];
            let n = c.compress(level, &src, &mut dst).unwrap();
            assert!(n < src.len() * 6 / 10, "level {level}: {n} bytes of {}", src.len());
        }
    }
}

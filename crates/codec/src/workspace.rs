//! Workspace pool (docs/design.md §8): codec contexts shared by all compress/decompress callers.
//!
//! A workspace is one codec context of a *family* (zstd/lz4/lz4hc/deflate/lzo compressor,
//! zstd/deflate decompressor) with a *capacity level*. Its memory is computed from the codec
//! (zstd: ZSTD_estimateCCtxSize_usingCParams for a `block_size` source, made monotonic over
//! levels; libdeflate: measured through a counting allocator; lz4: LZ4_sizeofState[HC]).
//!
//! States of a workspace:
//!   Busy  — lent to one caller (a `Lease`), used without holding the pool lock;
//!   Idle  — on the idle list, stamped with the time it was returned (list kept in LRU order);
//!   Freed — dropped, its bytes given back to the budget.
//! Plus one Reserve slot per family: Free (possibly caching the context last built in it) or
//! Lent. Its budget — the family's maximum-size workspace — is set aside at `new()` and never
//! given back, so a caller can always make progress however tight the bound.
//!
//! Transitions (all under one mutex; contexts are built and dropped outside it):
//!   request(family, level):
//!     1. Idle → Busy: the smallest idle workspace of the family that serves the level
//!        (zstd: capacity level ≥ level, scanning up as btrfs does; deflate: the same level,
//!        because a libdeflate compressor is bound to its level; others: any);
//!     2. new → Busy: if `used + size(level) + reserves ≤ max_bytes`;
//!     3. Idle → Freed (least recently used first, any family) until step 2 fits, then 2;
//!     4. Reserve Free → Lent: the family's reserve (rebuilt for the level if its cached
//!        context cannot serve it; always fits its budget);
//!     5. otherwise wait on the condition variable and retry from 1.
//!   release: Busy → Idle (or Reserve Lent → Free), then wake the waiters. The idle list is
//!     ordered by the last time a workspace served its *own* level: one that only served
//!     smaller levels keeps its old place and is reclaimed first (as in btrfs).
//!   every request/release first frees idle workspaces unused for `idle_timeout` (LRU end).
//!
//! No deadlock: a caller holds at most one lease at a time and returns it when its one
//! compression ends, so a reserve that is Lent always comes back; a waiter is only ever waiting
//! for its family's reserve (or anything returned before it). Bound: `used + reserves`
//! never exceeds `max_bytes` (raised to the reserves' sum if configured lower).
//!
//! Counters: besides the pool's own (`PoolStats`, under the mutex), the compression work done
//! through it — calls, source bytes, the calling threads' CPU time inside the codec — in
//! atomics outside the lock, for the throughput benchmark and, later, the auto controller
//! (docs/design.md §9: measured CPU time, not wall time).
//!
//! Tunables (`WorkspaceConfig`): max_bytes, idle_timeout, block_size, search_size.

use crate::algorithm::{Algorithm, DEFLATE_MAX_LEVEL, ZSTD_MAX_LEVEL};
use crate::backend::shape::Shape;
use crate::backend::{self, Ctx, Family};
use crate::codec::Codec;
use crate::error::CodecError;
use crate::thread_cpu::thread_cpu_ns;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct WorkspaceConfig {
    /// upper bound on total workspace memory, bytes
    pub max_bytes: usize,
    /// idle workspaces older than this are reclaimed
    pub idle_timeout: std::time::Duration,
    /// largest source `compress` accepts; zstd workspaces are sized for it (default 128 KiB)
    pub block_size: usize,
    /// the source length whose search each zstd level spends (`None`: the block size).
    /// Contexts that compress bundles of several records' tails set the record size: the
    /// level then searches as on one record, over a window of the whole bundle
    /// (backend/zstd.rs `shaped_cparams`).
    pub search_size: Option<usize>,
}

impl WorkspaceConfig {
    /// What this pool's contexts are built for.
    pub(crate) fn shape(&self) -> Shape {
        let block = self.block_size.max(1);
        Shape { block, search: self.search_size.unwrap_or(block).clamp(1, block) }
    }
}

impl Default for WorkspaceConfig {
    fn default() -> WorkspaceConfig {
        WorkspaceConfig {
            max_bytes: 64 << 20,
            // btrfs reclaims idle zstd workspaces after ~307 s; records come in bursts at
            // txg sync (every 5 s), so a shorter timeout still keeps them warm.
            idle_timeout: Duration::from_secs(60),
            block_size: 128 << 10,
            search_size: None,
        }
    }
}

/// Thread CPU time and wall time of one codec call ([`Workspaces::compress_measured`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallTime {
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

/// Pool counters, for tests and `squeezefs stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// the effective bound (config, raised to the reserves' budget if lower)
    pub max_bytes: usize,
    /// budget set aside for the per-family reserves
    pub reserve_bytes: usize,
    /// bytes of live non-reserve workspaces (busy + idle)
    pub used_bytes: usize,
    /// bytes of all live contexts, reserves included (≤ used + reserve ≤ max)
    pub live_bytes: usize,
    /// highest `live_bytes` seen
    pub peak_live_bytes: usize,
    pub idle: usize,
    pub busy: usize,
    pub created: u64,
    pub reclaimed: u64,
    pub reserve_lends: u64,
    pub waits: u64,
    /// `compress` calls that reached a codec (early aborts included: they cost the same work)
    pub compress_calls: u64,
    /// source bytes of those calls
    pub compress_src_bytes: u64,
    /// CPU time of the calling threads inside the codec for those calls, nanoseconds (what
    /// compression costs, apart from leasing, copying and waiting)
    pub compress_cpu_ns: u64,
}

/// Index of a zstd level in the size table: all negative levels share row 0 (libzstd derives
/// them from one parameter row; only the target length differs, not the memory).
fn zstd_row(level: i32) -> usize {
    level.clamp(0, ZSTD_MAX_LEVEL) as usize
}

/// Memory per level, computed once per context shape.
#[derive(Debug)]
struct SizeTable {
    /// monotonic: zstd[i] = max over rows ≤ i of the estimate
    zstd: [usize; ZSTD_MAX_LEVEL as usize + 1],
    deflate: [usize; DEFLATE_MAX_LEVEL as usize + 1],
    lz4: usize,
    lz4hc: usize,
    #[cfg_attr(not(feature = "lzo"), allow(dead_code))]
    lzo: usize,
    zstd_d: usize,
    deflate_d: usize,
}

impl SizeTable {
    fn new(shape: Shape) -> SizeTable {
        let mut zstd = [0; ZSTD_MAX_LEVEL as usize + 1];
        let mut running = 0;
        for (row, slot) in zstd.iter_mut().enumerate() {
            let level = if row == 0 { -1 } else { row as i32 };
            running = running.max(backend::zstd::cctx_bytes(level, shape));
            *slot = running;
        }
        let deflate = *deflate_sizes();
        SizeTable {
            zstd,
            deflate,
            lz4: backend::lz4::fast_state_bytes(),
            lz4hc: backend::lz4::hc_state_bytes(),
            lzo: lzo_bytes(),
            zstd_d: backend::zstd::dctx_bytes(),
            deflate_d: backend::deflate::decompressor_bytes(),
        }
    }

    fn bytes(&self, family: Family, level: i32) -> usize {
        match family {
            Family::ZstdC => self.zstd[zstd_row(level)],
            Family::DeflateC => self.deflate[level.clamp(1, DEFLATE_MAX_LEVEL) as usize],
            Family::Lz4C => self.lz4,
            Family::Lz4HcC => self.lz4hc,
            Family::LzoC => self.lzo,
            Family::ZstdD => self.zstd_d,
            Family::DeflateD => self.deflate_d,
        }
    }

    /// The family's largest workspace: its reserve budget.
    fn max_bytes(&self, family: Family) -> usize {
        match family {
            Family::ZstdC => self.zstd[ZSTD_MAX_LEVEL as usize],
            Family::DeflateC => self.deflate.iter().copied().max().unwrap_or(0),
            other => self.bytes(other, 0),
        }
    }
}

fn deflate_sizes() -> &'static [usize; DEFLATE_MAX_LEVEL as usize + 1] {
    static SIZES: OnceLock<[usize; DEFLATE_MAX_LEVEL as usize + 1]> = OnceLock::new();
    SIZES.get_or_init(|| {
        let mut s = [0; DEFLATE_MAX_LEVEL as usize + 1];
        for (level, slot) in s.iter_mut().enumerate().skip(1) {
            *slot = backend::deflate::compressor_bytes(level as i32);
        }
        s[0] = s[1];
        s
    })
}

fn lzo_bytes() -> usize {
    #[cfg(feature = "lzo")]
    {
        backend::lzo::WORK_MEM_BYTES
    }
    #[cfg(not(feature = "lzo"))]
    {
        0
    }
}

/// Memory of the workspace that serves `codec` for sources of up to `block_size` bytes
/// (monotonic over zstd levels; 0 for `none`). What `squeezefs bench` prints per level.
pub fn workspace_bytes(codec: Codec, block_size: usize) -> usize {
    static TABLES: OnceLock<Mutex<HashMap<usize, &'static SizeTable>>> = OnceLock::new();
    let Some(family) = Family::compressor(codec.alg) else { return 0 };
    if !codec.alg.is_built_in() {
        return 0;
    }
    let table = *TABLES
        .get_or_init(Default::default)
        .lock()
        .entry(block_size)
        .or_insert_with(|| Box::leak(Box::new(SizeTable::new(Shape::record(block_size)))));
    table.bytes(family, codec.level)
}

struct Workspace {
    family: Family,
    /// the level it was built for; serves levels per `serves`
    level: i32,
    bytes: usize,
    ctx: Ctx,
    /// the thread that used it last: among equally good idle workspaces a thread gets its
    /// own back, whose tables are still in that core's cache
    last_thread: std::thread::ThreadId,
    /// last time it served a request of its own size class; a bigger workspace lent to a
    /// smaller level does not refresh it (as in btrfs), so oversized workspaces age out
    last_fit: Instant,
}

impl Workspace {
    fn fits_exactly(&self, level: i32) -> bool {
        match self.family {
            Family::ZstdC => zstd_row(self.level) == zstd_row(level),
            _ => true,
        }
    }

    fn serves(&self, family: Family, level: i32) -> bool {
        self.family == family
            && match family {
                Family::ZstdC => zstd_row(self.level) >= zstd_row(level),
                Family::DeflateC => self.level == level,
                _ => true,
            }
    }
}

struct Idle {
    ws: Workspace,
    since: Instant,
}

enum Reserve {
    Free(Option<Workspace>),
    Lent,
}

struct State {
    /// LRU order: oldest first
    idle: Vec<Idle>,
    reserves: HashMap<Family, Reserve>,
    used: usize,
    live: usize,
    stats: PoolStats,
}

/// Pooled compression/decompression contexts, bounded memory (docs/design.md §8).
pub struct Workspaces {
    cfg: WorkspaceConfig,
    sizes: SizeTable,
    max_bytes: usize,
    reserve_bytes: usize,
    state: Mutex<State>,
    returned: Condvar,
    work: CompressWork,
}

/// Running totals of compression work, kept outside the pool lock (one update per call).
#[derive(Default)]
struct CompressWork {
    calls: AtomicU64,
    src_bytes: AtomicU64,
    cpu_ns: AtomicU64,
}

/// A workspace lent to one caller; goes back to the pool on drop.
struct Lease<'a> {
    pool: &'a Workspaces,
    ws: Option<Workspace>,
    from_reserve: bool,
}

impl Lease<'_> {
    fn ctx(&mut self) -> &mut Ctx {
        &mut self.ws.as_mut().expect("lease holds a workspace until dropped").ctx
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(ws) = self.ws.take() {
            self.pool.release(ws, self.from_reserve);
        }
    }
}

enum Plan {
    Reuse(Workspace),
    Create,
    UseReserve(Option<Workspace>),
}

impl Workspaces {
    pub fn new(cfg: WorkspaceConfig) -> Workspaces {
        let cfg = WorkspaceConfig { block_size: cfg.block_size.max(1), ..cfg };
        let sizes = SizeTable::new(cfg.shape());
        let reserve_bytes: usize = Family::all().map(|f| sizes.max_bytes(f)).sum();
        let max_bytes = cfg.max_bytes.max(reserve_bytes);
        let reserves = Family::all().map(|f| (f, Reserve::Free(None))).collect();
        Workspaces {
            sizes,
            max_bytes,
            reserve_bytes,
            state: Mutex::new(State {
                idle: Vec::new(),
                reserves,
                used: 0,
                live: 0,
                stats: PoolStats { max_bytes, reserve_bytes, ..PoolStats::default() },
            }),
            returned: Condvar::new(),
            work: CompressWork::default(),
            cfg,
        }
    }

    pub fn config(&self) -> &WorkspaceConfig {
        &self.cfg
    }

    /// Memory of the workspace that serves `codec` in this pool (monotonic over zstd levels).
    pub fn workspace_bytes(&self, codec: Codec) -> usize {
        Family::compressor(codec.alg).map_or(0, |f| self.sizes.bytes(f, codec.level))
    }

    pub fn stats(&self) -> PoolStats {
        let st = self.state.lock();
        PoolStats {
            used_bytes: st.used,
            live_bytes: st.live,
            idle: st.idle.len(),
            compress_calls: self.work.calls.load(Ordering::Relaxed),
            compress_src_bytes: self.work.src_bytes.load(Ordering::Relaxed),
            compress_cpu_ns: self.work.cpu_ns.load(Ordering::Relaxed),
            ..st.stats
        }
    }

    /// Free idle workspaces unused for `idle_timeout` (also done on every request/release;
    /// the engine may call this from a timer so that an idle filesystem gives memory back).
    pub fn reclaim_idle(&self) {
        let freed = {
            let mut st = self.state.lock();
            self.expire(&mut st, Instant::now())
        };
        drop(freed);
    }

    /// Compress `src` into `dst`; returns bytes written. `Err(DstTooSmall)` when the output
    /// would not fit (callers use that as the early abort: give `dst` the size you would accept).
    pub fn compress(&self, codec: Codec, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        self.compress_measured(codec, src, dst).0
    }

    /// [`Workspaces::compress`], also returning the calling thread's CPU time inside the codec
    /// for this call (0 when no codec ran: `none`, or a refused call) — the cost the auto
    /// controller measures per level — and the wall time of the same span: CPU ÷ wall is the
    /// share of a core the thread obtained while it demanded one (the CPU meter's measure of
    /// the cores squeezefs gets). The CPU figure is added to the pool's `compress_cpu_ns`.
    pub fn compress_measured(&self, codec: Codec, src: &[u8], dst: &mut [u8]) -> (Result<usize, CodecError>, CallTime) {
        let codec = match codec.validate() {
            Ok(c) => c,
            Err(e) => return (Err(e.into()), CallTime::default()),
        };
        let Some(family) = Family::compressor(codec.alg) else {
            let r = match dst.get_mut(..src.len()) {
                Some(out) => {
                    out.copy_from_slice(src);
                    Ok(src.len())
                }
                None => Err(CodecError::DstTooSmall),
            };
            return (r, CallTime::default());
        };
        if src.len() > self.cfg.block_size {
            return (Err(CodecError::SourceTooLarge { len: src.len(), max: self.cfg.block_size }), CallTime::default());
        }
        let mut lease = match self.lease(family, codec.level) {
            Ok(l) => l,
            Err(e) => return (Err(e), CallTime::default()),
        };
        let (wall0, cpu0) = (std::time::Instant::now(), thread_cpu_ns());
        let r = lease.ctx().compress(codec, src, dst);
        let cpu = thread_cpu_ns().saturating_sub(cpu0);
        let wall = u64::try_from(wall0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.work.calls.fetch_add(1, Ordering::Relaxed);
        self.work.src_bytes.fetch_add(src.len() as u64, Ordering::Relaxed);
        self.work.cpu_ns.fetch_add(cpu, Ordering::Relaxed);
        (r, CallTime { cpu_ns: cpu, wall_ns: wall })
    }

    /// Decompress `src` into `dst` (sized to the logical length); returns bytes written.
    pub fn decompress(&self, alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Result<usize, CodecError> {
        match Family::decompressor(alg) {
            None => backend::decompress_stateless(alg, src, dst),
            Some(family) => self.lease(family, 0)?.ctx().decompress(src, dst),
        }
    }

    /// Free idle workspaces past the timeout; returns them so they are dropped unlocked.
    fn expire(&self, st: &mut State, now: Instant) -> Vec<Idle> {
        let n = st.idle.iter().take_while(|i| now.duration_since(i.since) >= self.cfg.idle_timeout).count();
        let freed: Vec<Idle> = st.idle.drain(..n).collect();
        for i in &freed {
            st.used -= i.ws.bytes;
            st.live -= i.ws.bytes;
            st.stats.reclaimed += 1;
        }
        freed
    }

    fn plan(&self, st: &mut State, family: Family, level: i32, need: usize, freed: &mut Vec<Idle>) -> Option<Plan> {
        // 1. the smallest idle workspace that serves the level (exact first, then scan up);
        // among equals the caller's own, then the most recently returned
        let me = std::thread::current().id();
        let best = st
            .idle
            .iter()
            .enumerate()
            .filter(|(_, i)| i.ws.serves(family, level))
            .min_by_key(|(pos, i)| (i.ws.bytes, i.ws.last_thread != me, usize::MAX - pos))
            .map(|(pos, _)| pos);
        if let Some(pos) = best {
            let mut ws = st.idle.remove(pos).ws;
            ws.last_thread = me;
            if ws.fits_exactly(level) {
                ws.last_fit = Instant::now();
            }
            return Some(Plan::Reuse(ws));
        }
        // 2./3. a new one, evicting least recently used idle workspaces to make room (only if
        // that can make room: otherwise keep them for others and go to the reserve)
        let room = self.max_bytes - self.reserve_bytes;
        let idle_bytes: usize = st.idle.iter().map(|i| i.ws.bytes).sum();
        if st.used - idle_bytes + need <= room {
            while st.used + need > room {
                let victim = st.idle.remove(0);
                st.used -= victim.ws.bytes;
                st.live -= victim.ws.bytes;
                st.stats.reclaimed += 1;
                freed.push(victim);
            }
        }
        if st.used + need <= room {
            st.used += need;
            return Some(Plan::Create);
        }
        // 4. the family's reserve
        let slot = st.reserves.get_mut(&family).expect("every family has a reserve");
        if let Reserve::Free(cached) = slot {
            let cached = cached.take();
            *slot = Reserve::Lent;
            st.stats.reserve_lends += 1;
            return Some(Plan::UseReserve(cached));
        }
        None
    }

    fn lease(&self, family: Family, level: i32) -> Result<Lease<'_>, CodecError> {
        let need = self.sizes.bytes(family, level);
        let mut freed = Vec::new();
        let plan = {
            let mut st = self.state.lock();
            freed.extend(self.expire(&mut st, Instant::now()));
            loop {
                if let Some(plan) = self.plan(&mut st, family, level, need, &mut freed) {
                    st.stats.busy += 1;
                    break plan;
                }
                st.stats.waits += 1;
                self.returned.wait(&mut st);
            }
        };
        drop(freed);
        match plan {
            Plan::Reuse(ws) => Ok(Lease { pool: self, ws: Some(ws), from_reserve: false }),
            Plan::Create => match Ctx::create(family, level, need, self.cfg.shape()) {
                Ok(ctx) => {
                    self.note_created(need);
                    let ws = Workspace {
                        family,
                        level,
                        bytes: need,
                        ctx,
                        last_fit: Instant::now(),
                        last_thread: std::thread::current().id(),
                    };
                    Ok(Lease { pool: self, ws: Some(ws), from_reserve: false })
                }
                Err(e) => {
                    let mut st = self.state.lock();
                    st.used -= need;
                    st.stats.busy -= 1;
                    self.returned.notify_all();
                    Err(e)
                }
            },
            Plan::UseReserve(cached) => {
                let ws = match cached {
                    Some(ws) if ws.serves(family, level) => ws,
                    other => {
                        if let Some(old) = other {
                            self.state.lock().live -= old.bytes;
                            drop(old);
                        }
                        match Ctx::create(family, level, need, self.cfg.shape()) {
                            Ok(ctx) => {
                                self.note_created(need);
                                Workspace {
                                    family,
                                    level,
                                    bytes: need,
                                    ctx,
                                    last_fit: Instant::now(),
                                    last_thread: std::thread::current().id(),
                                }
                            }
                            Err(e) => {
                                let mut st = self.state.lock();
                                st.reserves.insert(family, Reserve::Free(None));
                                st.stats.busy -= 1;
                                self.returned.notify_all();
                                return Err(e);
                            }
                        }
                    }
                };
                Ok(Lease { pool: self, ws: Some(ws), from_reserve: true })
            }
        }
    }

    fn note_created(&self, bytes: usize) {
        let mut st = self.state.lock();
        st.live += bytes;
        st.stats.created += 1;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.live);
    }

    fn release(&self, ws: Workspace, from_reserve: bool) {
        let now = Instant::now();
        let freed = {
            let mut st = self.state.lock();
            st.stats.busy -= 1;
            if from_reserve {
                st.reserves.insert(ws.family, Reserve::Free(Some(ws)));
            } else {
                let since = ws.last_fit;
                let pos = st.idle.partition_point(|i| i.since <= since);
                st.idle.insert(pos, Idle { ws, since });
            }
            self.expire(&mut st, now)
        };
        self.returned.notify_all();
        drop(freed);
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// btrfs' memory per zstd level 1..=15 (KiB) from its level-support commit.
    const BTRFS_KIB: [usize; 15] =
        [780, 1004, 1260, 1260, 1388, 1516, 1516, 1772, 1772, 1772, 1772, 1772, 2284, 2547, 2547];

    #[test]
    fn zstd_workspaces_are_monotonic_and_within_the_btrfs_figures() {
        let t = SizeTable::new(Shape::record(128 << 10));
        for w in t.zstd.windows(2) {
            assert!(w[0] <= w[1]);
        }
        for (i, &kib) in BTRFS_KIB.iter().enumerate() {
            assert!(t.zstd[i + 1] <= kib * 1024, "level {}: {} KiB", i + 1, t.zstd[i + 1] / 1024);
        }
    }

    #[test]
    fn a_workspace_serves_its_level_and_every_level_below_on_any_source_size() {
        let block = 128 << 10;
        let t = SizeTable::new(Shape::record(block));
        let text: Vec<u8> = (0..block).map(|i| b"abcabdabeabfqq  xyz\n"[(i * 7 + i / 13) % 20]).collect();
        let mut dst = vec![0u8; zstd_safe::compress_bound(block)];
        for top in 1..=ZSTD_MAX_LEVEL {
            let mut c = backend::zstd::Compressor::new(t.zstd[top as usize], Shape::record(block)).unwrap();
            for level in [top, top - 1, 1, -1, -7].into_iter().filter(|&l| l != 0) {
                for len in [block, 10_000, 100] {
                    c.compress(level, &text[..len], &mut dst).unwrap_or_else(|e| panic!("{top}/{level}/{len}: {e}"));
                }
            }
        }
    }
}

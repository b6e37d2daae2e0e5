//! Python face of the decision engine (`pyclassify_core::engine`): glue only.
//!
//! `Model` is the mutable state that takes deltas (JSON, `pyclassify.engine` writes them);
//! `Engine` is one immutable snapshot of it, which answers flows and header batches and hands
//! native loops a capsule.

use std::sync::{Arc, Mutex};

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::capi::{EngineApi, CT_STATS_NAMES, ENGINE_ABI_VERSION, ENGINE_API, ENGINE_CAPSULE};
use pyclassify_core::conntrack::ConnTrack;
use pyclassify_core::conntrack::QuotedTuple;
use pyclassify_core::engine::forward::{classify_forward, Via};
use pyclassify_core::engine::judge::Segment;
use pyclassify_core::engine::lanes::{judge_lanes, DnsMessage, Lane, MAX_LANES};
use pyclassify_core::engine::spec::{Delta, Spec};
use pyclassify_core::engine::{
    Action, Addr, Decision, Defaults, Direction, Flow, FlowEnd, Judge, Model, PacketVerdict, Snapshot as Engine, Source,
};
use pyclassify_core::http::HttpConns;
use pyclassify_core::http::Request;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::conntrack::{checked_buffer, header_buffer, PyConnTrack};
use crate::errors::engine_error;

const VERDICT_SIZE: usize = std::mem::size_of::<PacketVerdict>();

/// One lane of `Engine.judge_lanes`: (engine, rows, headers, out, tracker, quotes, segments).
type LaneArgs<'py, 'a> = (
    PyRef<'py, PyEngine>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Option<PyRefMut<'py, PyConnTrack>>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);
const QUOTE_SIZE: usize = std::mem::size_of::<QuotedTuple>();

/// An immutable engine snapshot of a policy set and its inventory.
#[pyclass(name = "Engine", module = "pyclassify._engine", frozen)]
pub struct PyEngine {
    pub(crate) inner: Arc<Engine>,
}

/// The engine's mutable state: deltas in, snapshots out (`pyclassify_core::engine::Model`).
#[pyclass(name = "Model", module = "pyclassify._engine", frozen)]
pub struct PyModel {
    inner: Mutex<Model>,
}

#[pymethods]
impl PyModel {
    #[new]
    fn new() -> Self {
        PyModel { inner: Mutex::new(Model::new()) }
    }

    /// Applies one delta (JSON text or bytes: objects added or changed by id, ids removed)
    /// atomically, without the GIL: on an error nothing changes.
    fn apply(&self, py: Python<'_>, delta_json: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes: Vec<u8>;
        let text: &[u8] = if let Ok(b) = delta_json.cast::<pyo3::types::PyBytes>() {
            b.as_bytes()
        } else {
            bytes = delta_json.extract::<String>()?.into_bytes();
            &bytes
        };
        py.detach(|| {
            let delta = Delta::from_json(text).map_err(engine_error)?;
            let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            m.apply(delta).map_err(engine_error)
        })
    }

    /// What DNS answers taught (a `DomainFacts`, shared: learning goes on in it), for the
    /// domain rules of the snapshots handed out from now on; None forgets it.
    fn set_domain_facts(&self, facts: Option<PyRef<'_, crate::dns::PyDomainFacts>>) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        m.set_domain_facts(facts.map(|f| f.inner()));
    }

    /// The current state as an immutable `Engine`.
    fn snapshot(&self) -> PyEngine {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        PyEngine { inner: m.snapshot() }
    }

    /// Size figures: endpoints, identities, namespaces, policies, profiles, rules, selectors,
    /// programs, addresses, set_bytes, deltas, selector_evaluations.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner()).stats();
        vec![
            ("endpoints", s.endpoints as u64),
            ("identities", s.identities as u64),
            ("namespaces", s.namespaces as u64),
            ("policies", s.policies as u64),
            ("profiles", s.profiles as u64),
            ("rules", s.rules as u64),
            ("selectors", s.selectors as u64),
            ("programs", s.programs as u64),
            ("addresses", s.addresses as u64),
            ("set_bytes", s.set_bytes as u64),
            ("deltas", s.deltas),
            ("selector_evaluations", s.selector_evaluations),
        ]
    }
}

/// What the capsule of `Engine.capsule()` points at (`EngineRef` in native/engine_api.h): the
/// C function table and this engine, kept alive by the capsule (its destructor drops the Arc).
#[repr(C)]
struct EngineRef {
    api: *const EngineApi,
    engine: *const Engine,
}

/// Owns the engine for the capsule's lifetime. `repr(C)` with `refs` first: the capsule's
/// pointer is read from C as an `EngineRef*`.
#[repr(C)]
struct CapsuleEngine {
    #[allow(dead_code)] // read from C
    refs: EngineRef,
    _keep: Arc<Engine>,
}

// SAFETY: the pointers are to a static table and to an immutable engine owned by `_keep`.
unsafe impl Send for CapsuleEngine {}

const CAPSULE_NAME: &std::ffi::CStr = ENGINE_CAPSULE;

type PyLog = (Option<u32>, (&'static str, u32), u32);
type PyDecision = (bool, Option<u32>, Option<(&'static str, u32)>, Option<u32>, u8, Vec<PyLog>, bool);

fn source(s: Source) -> (&'static str, u32) {
    match s {
        Source::Policy(i) => ("policy", i),
        Source::Profile(i) => ("profile", i),
    }
}

fn decision(d: Decision) -> PyDecision {
    let logs = d.logs.into_iter().map(|l| (l.tier, source(l.source), l.rule)).collect();
    (d.allow, d.tier, d.source.map(source), d.rule, d.reason as u8, logs, d.awaits_request)
}

fn end(ip: Option<&str>, endpoint: Option<u32>) -> PyResult<FlowEnd> {
    let addr = ip.map(Addr::parse).transpose().map_err(engine_error)?;
    Ok(FlowEnd { addr, endpoint })
}

#[pymethods]
impl PyEngine {
    /// A snapshot of a model built from the whole-world spec written by
    /// `pyclassify.engine.engine_spec` (without the GIL).
    #[new]
    fn new(py: Python<'_>, spec_json: &str) -> PyResult<Self> {
        let inner = py.detach(|| {
            let spec = Spec::from_json(spec_json).map_err(engine_error)?;
            Model::from_spec(spec).map(|m| m.snapshot()).map_err(engine_error)
        })?;
        Ok(PyEngine { inner })
    }

    /// A PyCapsule named `pyclassify._engine.EngineRef` for native loops: an `EngineRef*` (the C
    /// function table `ENGINE_API` and this engine), valid while the capsule lives.
    fn capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let keep = Arc::clone(&self.inner);
        let value = CapsuleEngine { refs: EngineRef { api: &ENGINE_API, engine: Arc::as_ptr(&keep) }, _keep: keep };
        PyCapsule::new_with_value(py, value, CAPSULE_NAME)
    }

    /// `{"endpoints", "identities", "policies", "addresses", "sets", "generation"}`.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.inner.stats();
        vec![
            ("endpoints", s.endpoints as u64),
            ("identities", s.identities as u64),
            ("policies", s.policies as u64),
            ("addresses", s.addresses as u64),
            ("sets", s.sets as u64),
            ("generation", s.generation),
        ]
    }

    /// How the programs of the local identities are decided: `{"identities", "walked_identities",
    /// "programs", "compiled", "not_compiled", "walked_services", "walked_domains",
    /// "walked_memory", "bytes", "alternatives"}` (programs and profile lists per direction,
    /// each counted once; walked: decided rule by rule, and why).
    fn compile_stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.inner.compile_stats();
        vec![
            ("identities", s.identities as u64),
            ("walked_identities", s.walked_identities as u64),
            ("programs", s.programs as u64),
            ("compiled", s.compiled as u64),
            ("not_compiled", s.not_compiled as u64),
            ("walked_services", s.walked_services as u64),
            ("walked_domains", s.walked_domains as u64),
            ("walked_memory", s.walked_memory as u64),
            ("bytes", s.bytes as u64),
            ("alternatives", s.alternatives as u64),
        ]
    }

    /// The programs walked because their compiled form would take more than the memory bound:
    /// `(direction, policy ids, bytes it would take, identity ids holding it)` each.
    fn walked_for_memory(&self) -> Vec<(&'static str, Vec<u32>, u64, Vec<u32>)> {
        self.inner
            .walked_for_memory()
            .into_iter()
            .map(|(d, policies, bytes, ids)| {
                (if d == Direction::Ingress { "ingress" } else { "egress" }, policies, bytes as u64, ids)
            })
            .collect()
    }

    /// The endpoint id an address resolves to (None: an outside address).
    fn owner_of(&self, ip: &str) -> PyResult<Option<u32>> {
        Ok(self.inner.owner_of(Addr::parse(ip).map_err(engine_error)?))
    }

    /// The class of an address (see `class_prefixes`): addresses of one class, and endpoints of
    /// one identity, are judged alike.
    fn address_class(&self, ip: &str) -> PyResult<u32> {
        Ok(self.inner.address_class(Addr::parse(ip).map_err(engine_error)?))
    }

    /// The prefixes addresses are classed by, as CIDR text (unordered).
    fn class_prefixes(&self) -> Vec<String> {
        self.inner.class_prefixes().iter().map(|n| n.to_string()).collect()
    }

    /// The port boundaries, ascending: a port's class is how many of them are <= it.
    fn port_bounds(&self) -> Vec<u16> {
        self.inner.port_bounds().to_vec()
    }

    /// The identity of an endpoint id (None: no such endpoint).
    fn identity_of(&self, endpoint: u32) -> Option<u32> {
        self.inner.identity_of(endpoint)
    }

    /// The policy indices of `tier` that select endpoint `endpoint` in `direction`
    /// (`"ingress"`/`"egress"`), in evaluation order: what a decision at the end of that tier
    /// isolated the endpoint by.
    fn tier_policies(&self, endpoint: u32, direction: &str, tier: u32) -> PyResult<Vec<u32>> {
        let d = Direction::parse(direction).map_err(engine_error)?;
        self.inner.tier_policies(endpoint, d, tier).map_err(engine_error)
    }

    /// One flow: `(allowed, egress, ingress, awaits_request)`, each direction None or
    /// `(allowed, tier, ("policy"|"profile", index) | None, rule | None, reason, logs,
    /// awaits_request)`. `request`: the connection's HTTP request `(method, path)` (`http` rules).
    #[pyo3(signature = (src_ip, src_endpoint, dst_ip, dst_endpoint, protocol, sport, dport, icmp_type, icmp_code, pod_allow, host_allow, ts_ns=None, request=None))]
    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &self,
        src_ip: Option<&str>,
        src_endpoint: Option<u32>,
        dst_ip: Option<&str>,
        dst_endpoint: Option<u32>,
        protocol: u8,
        sport: Option<u16>,
        dport: Option<u16>,
        icmp_type: Option<u8>,
        icmp_code: Option<u8>,
        pod_allow: bool,
        host_allow: bool,
        ts_ns: Option<u64>,
        request: Option<(String, String)>,
    ) -> PyResult<(bool, Option<PyDecision>, Option<PyDecision>, bool)> {
        let flow = Flow {
            src: end(src_ip, src_endpoint)?,
            dst: end(dst_ip, dst_endpoint)?,
            protocol,
            sport,
            dport,
            icmp_type,
            icmp_code,
            ts_ns,
        };
        let request = request.map(|(method, path)| Request { method, path, host: None, version_minor: 1 });
        let v = self
            .inner
            .evaluate_request(&flow, request.as_ref(), Defaults { pod_allow, host_allow })
            .map_err(engine_error)?;
        Ok((v.allow, v.egress.map(decision), v.ingress.map(decision), v.awaits_request))
    }

    /// The compiled stages of one endpoint's side (`"ingress"`/`"egress"`, family 4 or 6), in
    /// evaluation order: `(tier | None, profile | None, tier default | None, rules, entries)`;
    /// rules are `(action, ("policy"|"profile", index), rule index)` by position; entries are
    /// `(src, (sport_lo, sport_hi), dst, (dport_lo, dport_hi), protocol, icmp_type, icmp_code,
    /// position, exact)` in priority order.
    fn compiled_listing(&self, endpoint: u32, direction: &str, family: u8) -> PyResult<Vec<PyStage>> {
        let d = match direction {
            "ingress" => Direction::Ingress,
            "egress" => Direction::Egress,
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown direction {other:?}"))),
        };
        let v6 = match family {
            4 => false,
            6 => true,
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown address family {other}"))),
        };
        let stages = self.inner.listing(endpoint, d, v6).map_err(engine_error)?;
        Ok(stages
            .into_iter()
            .map(|st| {
                let rules = st.rules.iter().map(|r| (action_name(r.action), source(r.source), r.rule)).collect();
                let mut entries: Vec<_> = st.entries.iter().collect();
                entries.sort_by_key(|(r, _)| (r.priority, r.id));
                let entries = entries
                    .into_iter()
                    .map(|(r, exact)| {
                        (
                            prefix_text(r.src.addr, r.src.len, v6),
                            (r.sport.lo, r.sport.hi),
                            prefix_text(r.dst.addr, r.dst.len, v6),
                            (r.dport.lo, r.dport.hi),
                            r.proto,
                            r.icmp_type,
                            r.icmp_code,
                            r.priority,
                            *exact,
                        )
                    })
                    .collect();
                (st.tier, st.profile, st.default.map(action_name), rules, entries)
            })
            .collect())
    }

    /// Judges a header batch into `out` (a `VERDICT_DTYPE` array, one record per header): the
    /// verdict, why (policy / established / malformed / invalid), the connection-tracking state,
    /// and each direction's deciding tier, policy or profile, and rule. With `tracker`, packets of
    /// connections it already allowed pass without policy, and allowed new connections start
    /// being tracked (time = each header's capture timestamp); `quotes` (`QUOTE_DTYPE`, parallel
    /// to `headers`) carries the flows ICMP errors quote. Runs without the GIL. Decisions go
    /// through the per-thread decision memo and, behind it, each side's compiled program;
    /// `memo=False` asks the compiled programs for every packet (a cold memo), and
    /// `interpret=True` walks the rules for every packet (the same verdicts: the benchmarks'
    /// baselines). `data` and `segments` (an
    /// (n, 3) int64 array of `[start, end)` in `data` and the TCP sequence number, parallel to
    /// `headers`: `_native.payload_spans`) give each packet's TCP payload to `http` rules, with a
    /// tracker: connections whose verdict awaits a request are admitted provisionally and their
    /// requests judged (`Judge::classify_tracked_http`); without them such connections are denied.
    #[pyo3(signature = (headers, out, pod_allow, host_allow, tracker=None, quotes=None, interpret=false, data=None, segments=None, memo=true))]
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        py: Python<'_>,
        headers: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        pod_allow: bool,
        host_allow: bool,
        tracker: Option<PyRefMut<'_, PyConnTrack>>,
        quotes: Option<&Bound<'_, PyAny>>,
        interpret: bool,
        data: Option<&Bound<'_, PyAny>>,
        segments: Option<&Bound<'_, PyAny>>,
        memo: bool,
    ) -> PyResult<()> {
        if (interpret || !memo) && tracker.is_some() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "interpret=True and memo=False are for untracked batches",
            ));
        }
        if segments.is_some() != data.is_some() || (segments.is_some() && tracker.is_none()) {
            return Err(pyo3::exceptions::PyValueError::new_err("data and segments go together, with a tracker"));
        }
        let hdrs = header_buffer(headers, "headers")?;
        let n = hdrs.item_count();
        let verdicts = checked_buffer(out, "out", VERDICT_SIZE, std::mem::align_of::<PacketVerdict>(), Some(n), true)?;
        let quoted = quotes
            .map(|q| checked_buffer(q, "quotes", QUOTE_SIZE, std::mem::align_of::<QuotedTuple>(), Some(n), false))
            .transpose()?;
        // the payload bytes, and [start, end, seq] per header
        let payload = data.map(|d| checked_buffer(d, "data", 1, 1, None, false)).transpose()?;
        let spans = segments.map(|s| checked_buffer(s, "segments", 8, 8, Some(3 * n), false)).transpose()?;
        let (h_ptr, v_ptr) = (hdrs.buf_ptr() as usize, verdicts.buf_ptr() as usize);
        let q_ptr = quoted.as_ref().map(|q| q.buf_ptr() as usize);
        let p_ptr = payload.as_ref().map(|p| (p.buf_ptr() as usize, p.item_count()));
        let s_ptr = spans.as_ref().map(|s| s.buf_ptr() as usize);
        let defaults = Defaults { pod_allow, host_allow };
        let mut tracker = tracker;
        let ct = tracker.as_mut().map(|t| {
            let t = &mut **t;
            (&mut t.inner, &mut t.http)
        });
        py.detach(move || {
            // SAFETY: the buffers were checked (item size, count, alignment, contiguity,
            // writability) and stay acquired until this function returns.
            let (hs, vs, qs) = unsafe {
                (
                    slice_of::<PacketHeader>(h_ptr, n),
                    std::slice::from_raw_parts_mut(v_ptr as *mut PacketVerdict, n),
                    q_ptr.map(|p| slice_of::<QuotedTuple>(p, n)),
                )
            };
            // SAFETY: as above.
            let segs: Option<Vec<Segment<'_>>> = match (p_ptr, s_ptr) {
                (Some((p, len)), Some(s)) => {
                    let (bytes, spans) = unsafe { (slice_of::<u8>(p, len), slice_of::<i64>(s, 3 * n)) };
                    Some(spans.chunks_exact(3).map(|c| segment(bytes, c[0], c[1], c[2])).collect())
                }
                _ => None,
            };
            match ct {
                Some((ct, http)) => {
                    let l7 = segs.as_deref().map(|s| (http, s));
                    self.inner.classify_tracked_http(ct, l7, hs, qs, vs, defaults)
                }
                None if interpret => {
                    for (h, o) in hs.iter().zip(vs.iter_mut()) {
                        *o = match self.inner.header_verdict_walked(h, defaults) {
                            Some(v) => PacketVerdict::judged(&v),
                            None => PacketVerdict::undecodable(h),
                        };
                    }
                }
                None if !memo => self.inner.classify_compiled(hs, vs, defaults),
                None => self.inner.classify_detailed(hs, vs, defaults),
            }
        });
        drop((hdrs, verdicts, quoted, payload, spans));
        Ok(())
    }

    /// Judges one batch in lanes (`pyclassify_core::engine::lanes`; replay), without the GIL.
    /// `batch`: the headers as captured; `lanes`: tuples of (engine, rows, headers, out,
    /// tracker, quotes, segments) — the batch rows the lane judges (int64, ascending), and
    /// parallel to them the headers it judges, its `VERDICT_DTYPE` output, its `ConnTrack` or
    /// None, the quoted flows (`QUOTE_DTYPE`) or None, the (k, 3) TCP segments in `data` or
    /// None. `dns` (an (m, 3) int64 array of row, `[start, end)` in `data`, by ascending row):
    /// DNS messages, each learned into this engine's domain facts once every lane has judged
    /// up to its row, if this engine's lanes let it through (`lanes`); then the result is
    /// (messages, new facts, malformed messages by `DNS_ERROR_NAMES`, messages not learned
    /// because policy denied them), else None.
    #[pyo3(signature = (batch, lanes, pod_allow, host_allow, data=None, dns=None))]
    #[allow(clippy::type_complexity)]
    fn judge_lanes(
        &self,
        py: Python<'_>,
        batch: &Bound<'_, PyAny>,
        lanes: Vec<LaneArgs<'_, '_>>,
        pod_allow: bool,
        host_allow: bool,
        data: Option<&Bound<'_, PyAny>>,
        dns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(u64, u64, Vec<u64>, u64)>> {
        let value_error = |m: String| Err(pyo3::exceptions::PyValueError::new_err(m));
        if lanes.len() > MAX_LANES {
            return value_error(format!("at most {MAX_LANES} lanes, got {}", lanes.len()));
        }
        let hdrs = header_buffer(batch, "batch")?;
        let n = hdrs.item_count();
        let payload = data.map(|d| checked_buffer(d, "data", 1, 1, None, false)).transpose()?;
        let dns_rows = dns.map(|d| checked_buffer(d, "dns", 8, 8, None, false)).transpose()?;
        let dns_len = dns_rows.as_ref().map_or(0, |d| d.item_count());
        if dns_len % 3 != 0 {
            return value_error("dns is (m, 3): row, start, end".into());
        }
        if (dns.is_some() || lanes.iter().any(|l| l.6.is_some())) && data.is_none() {
            return value_error("dns and segments read data: give it".into());
        }
        let mut buffers = Vec::new(); // held until the lanes are judged
        let mut raw = Vec::with_capacity(lanes.len());
        let mut trackers = Vec::with_capacity(lanes.len());
        for (i, (engine, rows, headers, out, tracker, quotes, segments)) in lanes.into_iter().enumerate() {
            let rows_buf = checked_buffer(&rows, &format!("lanes[{i}] rows"), 8, 8, None, false)?;
            let k = rows_buf.item_count();
            let h = checked_buffer(
                &headers,
                &format!("lanes[{i}] headers"),
                std::mem::size_of::<PacketHeader>(),
                std::mem::align_of::<PacketHeader>(),
                Some(k),
                false,
            )?;
            let v = checked_buffer(
                &out,
                &format!("lanes[{i}] out"),
                VERDICT_SIZE,
                std::mem::align_of::<PacketVerdict>(),
                Some(k),
                true,
            )?;
            let q = quotes
                .map(|q| {
                    checked_buffer(
                        &q,
                        &format!("lanes[{i}] quotes"),
                        QUOTE_SIZE,
                        std::mem::align_of::<QuotedTuple>(),
                        Some(k),
                        false,
                    )
                })
                .transpose()?;
            let s = segments
                .map(|s| checked_buffer(&s, &format!("lanes[{i}] segments"), 8, 8, Some(3 * k), false))
                .transpose()?;
            if s.is_some() && tracker.is_none() {
                return value_error(format!("lanes[{i}]: segments go with a tracker"));
            }
            // SAFETY: checked above (8-byte aligned contiguous int64s, k of them).
            let rs = unsafe { slice_of::<i64>(rows_buf.buf_ptr() as usize, k) };
            if rs.iter().any(|&r| r < 0 || r as u64 >= n as u64) || rs.windows(2).any(|w| w[0] >= w[1]) {
                return value_error(format!("lanes[{i}] rows must ascend within the batch's {n}"));
            }
            raw.push((
                Arc::clone(&engine.inner),
                [rows_buf.buf_ptr() as usize, h.buf_ptr() as usize, v.buf_ptr() as usize],
                k,
                q.as_ref().map(|q| q.buf_ptr() as usize),
                s.as_ref().map(|s| s.buf_ptr() as usize),
            ));
            trackers.push(tracker);
            buffers.push((rows_buf, h, v, q, s));
        }
        let mut cts: Vec<Option<(&mut ConnTrack, &mut HttpConns)>> = trackers
            .iter_mut()
            .map(|t| {
                t.as_mut().map(|t| {
                    let t = &mut **t;
                    (&mut t.inner, &mut t.http)
                })
            })
            .collect();
        let h_ptr = hdrs.buf_ptr() as usize;
        let p_ptr = payload.as_ref().map(|p| (p.buf_ptr() as usize, p.item_count()));
        let d_ptr = dns_rows.as_ref().map(|d| d.buf_ptr() as usize);
        let defaults = Defaults { pod_allow, host_allow };
        let tally = py.detach(|| {
            // SAFETY: every buffer was checked (item size, count, alignment, contiguity,
            // writability) and stays acquired until this function returns; each lane's output is
            // its own buffer (a numpy array given twice would be two views of one: the caller's
            // to avoid).
            let hs = unsafe { slice_of::<PacketHeader>(h_ptr, n) };
            let bytes = p_ptr.map_or(&[][..], |(p, len)| unsafe { slice_of::<u8>(p, len) });
            let segs: Vec<Option<Vec<Segment<'_>>>> = raw
                .iter()
                .map(|(_, _, k, _, s)| {
                    s.map(|s| {
                        let spans = unsafe { slice_of::<i64>(s, 3 * k) };
                        spans.chunks_exact(3).map(|c| segment(bytes, c[0], c[1], c[2])).collect()
                    })
                })
                .collect();
            let mut judged: Vec<Lane<'_>> = raw
                .iter()
                .zip(cts.iter_mut())
                .zip(segs.iter())
                .map(|(((engine, [r, h, v], k, q, _), ct), seg)| Lane {
                    engine,
                    rows: unsafe { slice_of::<i64>(*r, *k) },
                    headers: unsafe { slice_of::<PacketHeader>(*h, *k) },
                    quotes: q.map(|q| unsafe { slice_of::<QuotedTuple>(q, *k) }),
                    segments: seg.as_deref(),
                    tracker: ct.take(),
                    out: if *k == 0 {
                        &mut []
                    } else {
                        unsafe { std::slice::from_raw_parts_mut(*v as *mut PacketVerdict, *k) }
                    },
                })
                .collect();
            let messages: Vec<DnsMessage<'_>> = d_ptr.map_or_else(Vec::new, |d| {
                unsafe { slice_of::<i64>(d, dns_len) }
                    .chunks_exact(3)
                    .map(|c| DnsMessage {
                        index: usize::try_from(c[0]).unwrap_or(usize::MAX),
                        payload: segment(bytes, c[1], c[2], 0).data,
                    })
                    .collect()
            });
            judge_lanes(&mut judged, hs, &messages, &self.inner, defaults)
        });
        drop((hdrs, payload, dns_rows, buffers));
        Ok(dns.is_some().then(|| (tally.messages, tally.learned, tally.errors.to_vec(), tally.denied)))
    }

    /// Judges a header batch of routed traffic by a host endpoint's forward hook into `out`
    /// (`VERDICT_DTYPE`): `endpoint` (None: no host endpoint) is the subject of the side each
    /// packet crosses, `ingress` (it arrived by the endpoint's interface) or egress; `allow` 0
    /// where this hook drops the packet (`engine::forward`; the live forward loops' judgement).
    /// Runs without the GIL.
    #[pyo3(signature = (headers, out, endpoint, ingress, pod_allow, host_allow))]
    fn judge_via(
        &self,
        py: Python<'_>,
        headers: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        endpoint: Option<u32>,
        ingress: bool,
        pod_allow: bool,
        host_allow: bool,
    ) -> PyResult<()> {
        let hdrs = header_buffer(headers, "headers")?;
        let n = hdrs.item_count();
        let verdicts = checked_buffer(out, "out", VERDICT_SIZE, std::mem::align_of::<PacketVerdict>(), Some(n), true)?;
        let (h_ptr, v_ptr) = (hdrs.buf_ptr() as usize, verdicts.buf_ptr() as usize);
        let via = Via { endpoint, ingress };
        py.detach(move || {
            // SAFETY: the buffers were checked (item size, count, alignment, contiguity,
            // writability) and stay acquired until this function returns.
            let (hs, vs) = unsafe {
                (slice_of::<PacketHeader>(h_ptr, n), std::slice::from_raw_parts_mut(v_ptr as *mut PacketVerdict, n))
            };
            classify_forward(&self.inner, hs, via, vs, Defaults { pod_allow, host_allow });
        });
        drop((hdrs, verdicts));
        Ok(())
    }
}

/// One header's TCP segment from `[start, end)` of `bytes` (empty when out of bounds or none).
fn segment(bytes: &[u8], start: i64, end: i64, seq: i64) -> Segment<'_> {
    let data = usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(s, e)| bytes.get(s..e))
        .unwrap_or_default();
    Segment { seq: seq as u32, data }
}

type PyEntry = (String, (u16, u16), String, (u16, u16), Option<u8>, Option<u8>, Option<u8>, u32, bool);
type PyStage =
    (Option<u32>, Option<u32>, Option<&'static str>, Vec<(&'static str, (&'static str, u32), u32)>, Vec<PyEntry>);

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Allow => "Allow",
        Action::Deny => "Deny",
        Action::Pass => "Pass",
        Action::Log => "Log",
    }
}

fn prefix_text(addr: u128, len: u8, v6: bool) -> String {
    if v6 {
        format!("{}/{}", std::net::Ipv6Addr::from(addr), len)
    } else {
        format!("{}/{}", std::net::Ipv4Addr::from(addr as u32), len.saturating_sub(96))
    }
}

/// # Safety
/// `ptr` must point at `n` initialised, aligned `T`s that outlive the returned slice.
unsafe fn slice_of<'a, T>(ptr: usize, n: usize) -> &'a [T] {
    if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(ptr as *const T, n)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_class::<PyModel>()?;
    m.add("VERDICT_SIZE", VERDICT_SIZE)?;
    // PacketVerdict.reason of a frame that is not IP (passed)
    m.add("PACKET_NOT_IP", pyclassify_core::engine::PACKET_NOT_IP)?;
    // PacketVerdict.http codes and the names of HTTP stream errors (rust/core/src/engine/records.rs)
    m.add("HTTP_AWAITS", pyclassify_core::engine::HTTP_AWAITS)?;
    m.add("HTTP_REQUEST", pyclassify_core::engine::HTTP_REQUEST)?;
    m.add("HTTP_TABLE_FULL", pyclassify_core::engine::HTTP_TABLE_FULL)?;
    m.add("HTTP_ERROR", pyclassify_core::engine::HTTP_ERROR)?;
    m.add("HTTP_OUT_OF_ORDER", pyclassify_core::engine::HTTP_OUT_OF_ORDER)?;
    m.add("HTTP_ERROR_NAMES", pyclassify_core::http::HTTP_ERROR_NAMES.to_vec())?;
    m.add("ENGINE_ABI_VERSION", ENGINE_ABI_VERSION)?;
    // The order of the counters the C ABI's `ct_stats` writes (EngineClient.ct_stats names them).
    m.add("CT_STATS_NAMES", CT_STATS_NAMES.to_vec())?;
    Ok(())
}

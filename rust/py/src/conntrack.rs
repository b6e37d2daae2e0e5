//! Python class for the connection tracker (`pyclassify_core::conntrack`): glue only.
//!
//! Batches come in through the buffer protocol as numpy arrays (no per-packet Python objects)
//! and are tracked without the GIL.

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use pyclassify_core::batch::{PacketHeader, HEADER_SIZE};
use pyclassify_core::conntrack::{code, ConnTrack, CtConfig, FlowKey, QuotedTuple, Timeouts};
use pyclassify_core::http::{HttpConns, HTTP_ERROR_NAMES};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyTuple};

use crate::errors::conntrack_error;

const QUOTED_SIZE: usize = std::mem::size_of::<QuotedTuple>();

/// Connection tracker: the engine's own flow table (see `pyclassify_core::conntrack`).
///
/// Not shareable between threads while a call runs (a concurrent call raises RuntimeError).
#[pyclass(name = "ConnTrack", module = "pyclassify._engine")]
pub struct PyConnTrack {
    pub(crate) inner: ConnTrack,
    /// The connections admitted provisionally by `http` rules, and their request streams.
    pub(crate) http: HttpConns,
}

/// `(src, dst, sport, dport, proto)` with addresses as text (IPv4-mapped shown as IPv4).
type PyFlow = (String, String, u16, u16, u8);

fn addr_text(a: u128) -> String {
    let v6 = Ipv6Addr::from(a);
    match v6.to_ipv4_mapped() {
        Some(v4) => Ipv4Addr::from(v4).to_string(),
        None => v6.to_string(),
    }
}

fn py_flow(k: &FlowKey) -> PyFlow {
    (addr_text(k.src), addr_text(k.dst), k.sport, k.dport, k.proto)
}

fn timeouts_from(map: &Bound<'_, PyAny>) -> PyResult<Timeouts> {
    let mut t = Timeouts::default();
    let map =
        map.cast::<PyMapping>().map_err(|_| PyTypeError::new_err("timeouts must be a mapping of name to seconds"))?;
    for item in map.items()?.iter() {
        let (name, secs): (String, f64) = item.extract()?;
        let d = Duration::try_from_secs_f64(secs)
            .map_err(|_| PyValueError::new_err(format!("timeout {name}: {secs} is not a valid number of seconds")))?;
        let slot = match name.as_str() {
            "tcp_syn_sent" => &mut t.tcp_syn_sent,
            "tcp_syn_recv" => &mut t.tcp_syn_recv,
            "tcp_established" => &mut t.tcp_established,
            "tcp_fin_wait" => &mut t.tcp_fin_wait,
            "tcp_close_wait" => &mut t.tcp_close_wait,
            "tcp_last_ack" => &mut t.tcp_last_ack,
            "tcp_time_wait" => &mut t.tcp_time_wait,
            "tcp_close" => &mut t.tcp_close,
            "udp_unreplied" => &mut t.udp_unreplied,
            "udp_assured" => &mut t.udp_assured,
            "icmp" => &mut t.icmp,
            "generic" => &mut t.generic,
            other => return Err(PyValueError::new_err(format!("unknown timeout {other:?}"))),
        };
        *slot = d;
    }
    Ok(t)
}

fn timeouts_dict<'py>(py: Python<'py>, t: &Timeouts) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, v) in [
        ("tcp_syn_sent", t.tcp_syn_sent),
        ("tcp_syn_recv", t.tcp_syn_recv),
        ("tcp_established", t.tcp_established),
        ("tcp_fin_wait", t.tcp_fin_wait),
        ("tcp_close_wait", t.tcp_close_wait),
        ("tcp_last_ack", t.tcp_last_ack),
        ("tcp_time_wait", t.tcp_time_wait),
        ("tcp_close", t.tcp_close),
        ("udp_unreplied", t.udp_unreplied),
        ("udp_assured", t.udp_assured),
        ("icmp", t.icmp),
        ("generic", t.generic),
    ] {
        d.set_item(name, v.as_secs_f64())?;
    }
    Ok(d)
}

/// A header batch (`HEADER_DTYPE`, any length) as a checked buffer; `what` names it in errors.
pub(crate) fn header_buffer(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    checked_buffer(obj, what, HEADER_SIZE, std::mem::align_of::<PacketHeader>(), None, false)
}

/// A 1-D C-contiguous buffer of `n` items of `itemsize` bytes whose start is `align`-aligned.
pub(crate) fn checked_buffer(
    obj: &Bound<'_, PyAny>,
    what: &str,
    itemsize: usize,
    align: usize,
    n: Option<usize>,
    writable: bool,
) -> PyResult<PyUntypedBuffer> {
    let buf = PyUntypedBuffer::get(obj)
        .map_err(|e| PyTypeError::new_err(format!("{what} must support the buffer protocol (a numpy array): {e}")))?;
    if buf.dimensions() != 1 {
        return Err(PyValueError::new_err(format!("{what} must be 1-D, got {} dimensions", buf.dimensions())));
    }
    if buf.item_size() != itemsize {
        return Err(PyValueError::new_err(format!(
            "{what} must have {itemsize}-byte items, got itemsize {}",
            buf.item_size()
        )));
    }
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what} must be C-contiguous")));
    }
    if buf.item_count() > 0 && (buf.buf_ptr() as usize) % align != 0 {
        return Err(PyValueError::new_err(format!("{what} must be {align}-byte aligned")));
    }
    if let Some(n) = n {
        if buf.item_count() != n {
            return Err(PyValueError::new_err(format!(
                "{what} has {} items, the header batch has {n}",
                buf.item_count()
            )));
        }
    }
    if writable && buf.readonly() {
        return Err(PyValueError::new_err(format!("{what} is read-only")));
    }
    Ok(buf)
}

#[pymethods]
impl PyConnTrack {
    /// State code of a packet that may open a connection (judged by policy).
    #[classattr]
    const NEW: u8 = code::NEW;
    /// State code of a tracked connection's packet from its opener.
    #[classattr]
    const ESTABLISHED: u8 = code::ESTABLISHED;
    /// State code of a tracked connection's packet from the other side.
    #[classattr]
    const REPLY: u8 = code::REPLY;
    /// State code of an ICMP error about a tracked connection.
    #[classattr]
    const RELATED: u8 = code::RELATED;
    /// State code of an invalid packet (denied).
    #[classattr]
    const INVALID: u8 = code::INVALID;
    /// State code of a packet that is not tracked (judged by policy, per packet).
    #[classattr]
    const UNTRACKED: u8 = code::UNTRACKED;
    /// State code of a packet of a connection whose opening packet policy denied (denied).
    #[classattr]
    const DENIED: u8 = code::DENIED;
    /// State code of a packet that may open a TCP connection picked up mid-stream, judged in
    /// its own direction (its sender opened the connection).
    #[classattr]
    const NEW_PICKUP: u8 = code::NEW_PICKUP;
    /// State code of a server's packet that may open a TCP connection picked up mid-stream:
    /// judged as the client's connection, the packet's reverse.
    #[classattr]
    const NEW_PICKUP_REPLY: u8 = code::NEW_PICKUP_REPLY;
    /// Bytes per quoted tuple (the parallel array of ICMP error quotes).
    #[classattr]
    const QUOTED_SIZE: usize = QUOTED_SIZE;

    #[new]
    #[pyo3(signature = (*, max_entries = 262_144, tcp_loose = true, sweep_per_packet = 2, timeouts = None))]
    fn new(
        max_entries: usize,
        tcp_loose: bool,
        sweep_per_packet: usize,
        timeouts: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let timeouts = match timeouts {
            Some(t) => timeouts_from(t)?,
            None => Timeouts::default(),
        };
        let cfg = CtConfig { max_entries, tcp_loose, sweep_per_packet, timeouts };
        let inner = ConnTrack::new(cfg).map_err(|e| conntrack_error(&e))?;
        Ok(PyConnTrack { inner, http: HttpConns::default() })
    }

    /// Configuration as a dict (timeouts in seconds).
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.inner.config();
        let d = PyDict::new(py);
        d.set_item("max_entries", c.max_entries)?;
        d.set_item("tcp_loose", c.tcp_loose)?;
        d.set_item("sweep_per_packet", c.sweep_per_packet)?;
        d.set_item("timeouts", timeouts_dict(py, &c.timeouts)?)?;
        Ok(d)
    }

    /// Tracks a header batch (numpy array of HEADER_DTYPE) without the GIL.
    ///
    /// `verdicts`: policy's verdict per header (uint8/bool, nonzero = allow), read for NEW and
    /// UNTRACKED packets; allowed NEW packets are confirmed in batch order. `now_ns`: the clock
    /// for the whole batch, or None to use each header's `ts_ns` (replay). `quoted`: optional
    /// parallel array of 40-byte quoted tuples for ICMP errors. Returns `(states, allowed)`,
    /// two uint8 arrays: the state code per packet and 1 where the packet is allowed.
    #[pyo3(signature = (batch, verdicts, now_ns = None, quoted = None))]
    fn track<'py>(
        &mut self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        verdicts: &Bound<'py, PyAny>,
        now_ns: Option<u64>,
        quoted: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let hdr_buf = header_buffer(batch, "batch")?;
        let n = hdr_buf.item_count();
        let ver_buf = checked_buffer(verdicts, "verdicts", 1, 1, Some(n), false)?;
        let q_buf = match quoted {
            Some(q) => {
                Some(checked_buffer(q, "quoted", QUOTED_SIZE, std::mem::align_of::<QuotedTuple>(), Some(n), false)?)
            }
            None => None,
        };
        let np = py.import("numpy")?;
        let states = np.call_method1("zeros", (n, np.getattr("uint8")?))?;
        let allowed = np.call_method1("zeros", (n, np.getattr("uint8")?))?;
        let st_buf = checked_buffer(&states, "states", 1, 1, Some(n), true)?;
        let al_buf = checked_buffer(&allowed, "allowed", 1, 1, Some(n), true)?;
        if n > 0 {
            // Addresses as integers: raw pointers are not Send. The buffers stay alive (and are
            // released, which needs the GIL) here, outside the closure.
            let hp = hdr_buf.buf_ptr() as usize;
            let vp = ver_buf.buf_ptr() as usize;
            let qp = q_buf.as_ref().map(|b| b.buf_ptr() as usize);
            let sp = st_buf.buf_ptr() as usize;
            let ap = al_buf.buf_ptr() as usize;
            let inner = &mut self.inner;
            let result = py.detach(move || {
                // SAFETY: each buffer was checked above to be 1-D, C-contiguous, `n` (> 0) items
                // of the element's size, non-null and aligned for it; PacketHeader and
                // QuotedTuple are repr(C) without padding, so any bytes are valid values. The
                // buffers are held until after this closure returns; `states`/`allowed` are
                // fresh arrays nothing else references.
                let (hdrs, verd, q, st, al) = unsafe {
                    (
                        std::slice::from_raw_parts(hp as *const PacketHeader, n),
                        std::slice::from_raw_parts(vp as *const u8, n),
                        qp.map(|p| std::slice::from_raw_parts(p as *const QuotedTuple, n)),
                        std::slice::from_raw_parts_mut(sp as *mut u8, n),
                        std::slice::from_raw_parts_mut(ap as *mut u8, n),
                    )
                };
                inner.track_batch(hdrs, q, verd, now_ns, st, al)
            });
            drop((hdr_buf, ver_buf, q_buf, st_buf, al_buf));
            result.map_err(|e| conntrack_error(&e))?;
        }
        PyTuple::new(py, [states, allowed])
    }

    /// Removes timed-out entries among the next `budget` table slots; returns how many.
    #[pyo3(signature = (now_ns, budget = 4096))]
    fn expire(&mut self, now_ns: u64, budget: usize) -> usize {
        self.inner.expire(now_ns, budget)
    }

    /// Re-judges every tracked connection: `predicate(flow) -> bool` gets the original-direction
    /// `(src, dst, sport, dport, proto)` (ICMP queries: sport = identifier, dport = request type
    /// << 8) and says whether policy still allows it. Denied connections are marked revoked
    /// (their packets, either way, are dropped until they have been idle 120 s) and returned;
    /// revoked ones are not returned again. If the predicate raises, nothing changes. With `now_ns`, timed-out entries
    /// are dropped on the way. (A Python callable for now; the native engine will supply a
    /// native predicate that runs without the GIL.)
    #[pyo3(signature = (predicate, now_ns = None))]
    fn revalidate(&mut self, predicate: &Bound<'_, PyAny>, now_ns: Option<u64>) -> PyResult<Vec<PyFlow>> {
        let mut denied: HashSet<FlowKey> = HashSet::new();
        for f in self.inner.flows() {
            if !predicate.call1((py_flow(&f.key),))?.is_truthy()? {
                denied.insert(f.key);
            }
        }
        let revoked = self.inner.revalidate(now_ns.unwrap_or(0), |k| !denied.contains(k));
        Ok(revoked.iter().map(py_flow).collect())
    }

    /// Counters of the connections `http` rules admitted provisionally: `watched`, `requests`
    /// (heads read), `full` (denied: the table was full), `out_of_order` (segments after a gap,
    /// not read), `errors` (broken streams, denied, by `http` error name) and `entries`.
    fn http_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.http.stats();
        let d = PyDict::new(py);
        d.set_item("watched", s.watched)?;
        d.set_item("requests", s.requests)?;
        d.set_item("full", s.full)?;
        d.set_item("out_of_order", s.out_of_order)?;
        let errors = PyDict::new(py);
        for (name, n) in HTTP_ERROR_NAMES.iter().zip(s.errors) {
            errors.set_item(*name, n)?;
        }
        d.set_item("errors", errors)?;
        d.set_item("entries", self.http.len())?;
        Ok(d)
    }

    /// Every tracked connection as a dict (unordered).
    fn flows<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut out = Vec::new();
        for f in self.inner.flows() {
            let d = PyDict::new(py);
            d.set_item("flow", py_flow(&f.key))?;
            d.set_item("tcp_state", f.tcp_state.map(|s| s.as_str()))?;
            d.set_item("assured", f.assured)?;
            d.set_item("packets_orig", f.packets_orig)?;
            d.set_item("packets_reply", f.packets_reply)?;
            d.set_item("created_ns", f.created_ns)?;
            d.set_item("expires_ns", f.expires_ns)?;
            out.push(d);
        }
        Ok(out)
    }

    /// Counters as a dict (plus `entries`, the current size).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("packets", s.packets),
            ("new", s.new),
            ("established", s.established),
            ("reply", s.reply),
            ("related", s.related),
            ("invalid", s.invalid),
            ("untracked", s.untracked),
            ("inserts", s.inserts),
            ("insert_failed", s.insert_failed),
            ("expired", s.expired),
            ("early_drops", s.early_drops),
            ("revalidations", s.revalidations),
            ("revoked", s.revoked),
            ("restored", s.restored),
            ("denied", s.denied),
            ("pickups", s.pickups),
            ("denials", self.inner.denials() as u64),
        ] {
            d.set_item(k, v)?;
        }
        d.set_item("entries", self.inner.len())?;
        Ok(d)
    }

    /// Forgets every connection (counters are kept).
    fn clear(&mut self) {
        self.inner.clear();
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("ConnTrack(entries={}, max_entries={})", self.inner.len(), self.inner.config().max_entries)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyConnTrack>()?;
    Ok(())
}

//! Python face of `pyclassify_core::records` (flow records into the header batch): glue only.
//! Chunks are read without the GIL; each call hands back the batch it completed as the raw
//! bytes of `HEADER_DTYPE` and `FLOW_COUNTS_DTYPE` arrays.

use std::sync::Arc;

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::{Defaults, PacketVerdict};
use pyclassify_core::flows::ServiceIndex;
use pyclassify_core::records::judge::{LogKey, RecordJudge, Services};
use pyclassify_core::records::lines::{LineTables, Lines};
use pyclassify_core::records::tally::{DecisionKey, Measures};
use pyclassify_core::records::{detect, FlowCounts, Format, RecordBatch, Stream};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::conntrack::{checked_buffer, header_buffer};
use crate::engine::PyEngine;

fn as_bytes<T>(items: &[T]) -> &[u8] {
    // SAFETY: PacketHeader and FlowCounts are repr(C) records without padding (the ABI tests
    // hold them to that): every byte is initialized.
    unsafe { std::slice::from_raw_parts(items.as_ptr() as *const u8, std::mem::size_of_val(items)) }
}

/// A chunk of input: `bytes`, or a `bytearray` (or a `memoryview` of part of one) that the caller
/// refills from chunk to chunk, so reading a file does not fault fresh pages in for every chunk.
fn chunk_buffer(chunk: &Bound<'_, PyAny>) -> PyResult<PyUntypedBuffer> {
    checked_buffer(chunk, "chunk", 1, 1, None, false)
}

/// One input of flow records read chunk by chunk: `feed` returns the records each chunk
/// completes; the names they use (`names_since`) and the problems met (`problems`) accumulate.
#[pyclass(name = "RecordStream", module = "pyclassify._engine")]
pub struct PyRecordStream {
    inner: Stream,
    batch: RecordBatch,
}

#[pymethods]
impl PyRecordStream {
    #[new]
    fn new(format: &str) -> PyResult<Self> {
        let f = Format::from_name(format)
            .ok_or_else(|| PyValueError::new_err(format!("{format:?} is not a flow record format")))?;
        let inner = Stream::new(f)
            .ok_or_else(|| PyValueError::new_err(format!("{format} is not read record by record here")))?;
        Ok(PyRecordStream { inner, batch: RecordBatch::default() })
    }

    /// Reads what `chunk` completes (`last`: nothing follows); returns the records as
    /// (headers, counts) bytes, `HEADER_DTYPE` and `FLOW_COUNTS_DTYPE` arrays of one length.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        chunk: &Bound<'py, PyAny>,
        last: bool,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let held = chunk_buffer(chunk)?;
        let (inner, batch) = (&mut self.inner, &mut self.batch);
        batch.clear();
        // SAFETY: the buffer was checked (1-D, contiguous, byte items) and stays acquired (the
        // exporter cannot resize or free it) until `held` is dropped after the read.
        let (ptr, len) = (held.buf_ptr() as usize, held.len_bytes());
        py.detach(|| inner.feed(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }, last, batch));
        drop(held);
        Ok((
            PyBytes::new(py, as_bytes::<PacketHeader>(&batch.headers)),
            PyBytes::new(py, as_bytes::<FlowCounts>(&batch.counts)),
        ))
    }

    /// Reads what `chunk` completes (`last`: nothing follows) and keeps the records for
    /// `RecordJudge.judge_stream`; returns how many.
    fn read(&mut self, py: Python<'_>, chunk: &Bound<'_, PyAny>, last: bool) -> PyResult<usize> {
        let held = chunk_buffer(chunk)?;
        let (inner, batch) = (&mut self.inner, &mut self.batch);
        batch.clear();
        // SAFETY: as in `feed`.
        let (ptr, len) = (held.buf_ptr() as usize, held.len_bytes());
        py.detach(|| inner.feed(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }, last, batch));
        drop(held);
        Ok(batch.len())
    }

    /// How many names have been placed (`place`).
    #[getter]
    fn placed(&self) -> usize {
        self.inner.placed()
    }

    /// Places the next names, in order from `placed`: each (16-byte address, IP version) or None.
    fn place(&mut self, found: Vec<Option<(Vec<u8>, u8)>>) -> PyResult<()> {
        let mut out = Vec::with_capacity(found.len());
        for f in found {
            out.push(match f {
                None => None,
                Some((a, v)) => Some((address16(a)?, v)),
            });
        }
        self.inner.place(out);
        Ok(())
    }

    /// The names records used from number `start` on, as (kind, namespace, name).
    fn names_since(&self, start: usize) -> Vec<(String, String, String)> {
        self.inner.names.since(start).iter().map(|n| (n.kind.clone(), n.namespace.clone(), n.name.clone())).collect()
    }

    /// How many names records have used.
    #[getter]
    fn name_count(&self) -> usize {
        self.inner.names.len()
    }

    /// Records read so far.
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }

    /// (count per reason, [(reason, position, detail)] of the first few of each reason).
    fn problems(&self) -> (Vec<(String, u64)>, Vec<(String, u64, String)>) {
        let p = &self.inner.problems;
        (
            p.counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            p.first.iter().map(|(k, pos, d)| (k.to_string(), *pos, d.clone())).collect(),
        )
    }
}

fn address16(a: Vec<u8>) -> PyResult<[u8; 16]> {
    a.try_into().map_err(|a: Vec<u8>| PyValueError::new_err(format!("an address must be 16 bytes, got {}", a.len())))
}

type ServiceArg = (Vec<u8>, u8, u16, Vec<(Vec<u8>, u16)>);
type Kept<'py> = Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)>;

/// Flow records judged under one engine (replay, usage) or two (a diff's old and new), each
/// distinct decision once (`pyclassify_core::records::judge`), summed as they go.
#[pyclass(name = "RecordJudge", module = "pyclassify._engine")]
pub struct PyRecordJudge {
    inner: RecordJudge,
    ids: Vec<u32>,
}

impl PyRecordJudge {
    /// The records' verdicts and Service entries (`ids` of the batch judged last), with the
    /// headers and counts, as bytes.
    fn kept<'py>(&self, py: Python<'py>, headers: &[PacketHeader], counts: &[FlowCounts]) -> Kept<'py> {
        let mut verdicts = Vec::with_capacity(self.ids.len());
        let mut services: Vec<i64> = Vec::with_capacity(self.ids.len());
        for &i in &self.ids {
            match self.inner.entries.get(i as usize) {
                Some(e) => {
                    verdicts.push(e.verdicts[0]);
                    services.push(e.service);
                }
                None => {
                    verdicts.push(PacketVerdict::default());
                    services.push(-1);
                }
            }
        }
        Some((
            PyBytes::new(py, as_bytes(headers)),
            PyBytes::new(py, as_bytes(counts)),
            PyBytes::new(py, as_bytes(&verdicts)),
            PyBytes::new(py, as_bytes(&services)),
        ))
    }
}

#[pymethods]
impl PyRecordJudge {
    /// `engines`: one or two; `logs`: find the Log rules the first one's decisions passed;
    /// `services`: [(virtual address, protocol, port, [(backend address, port)...])], each
    /// address 16 bytes (IPv4 mapped), the first entry of equal keys winning.
    ///
    /// `keep_keys`: `fold` keeps the keys decided (their sums started over), for a judge used
    /// file after file under one policy set, `restart`ed between them.
    #[new]
    #[pyo3(signature = (engines, pod_allow, host_allow, logs=false, services=None, keep_keys=false))]
    fn new(
        engines: Vec<PyRef<'_, PyEngine>>,
        pod_allow: bool,
        host_allow: bool,
        logs: bool,
        services: Option<Vec<ServiceArg>>,
        keep_keys: bool,
    ) -> PyResult<Self> {
        if engines.is_empty() || engines.len() > 2 {
            return Err(PyValueError::new_err("one or two engines"));
        }
        let services = match services {
            None => None,
            Some(list) if list.is_empty() => None,
            Some(list) => {
                let mut keys = Vec::with_capacity(list.len());
                let mut backends = Vec::with_capacity(list.len());
                for (addr, protocol, port, to) in list {
                    keys.push((address16(addr)?, protocol, port));
                    backends.push(to.into_iter().map(|(a, p)| Ok((address16(a)?, p))).collect::<PyResult<Vec<_>>>()?);
                }
                Some(Arc::new(Services { index: ServiceIndex::new(keys), backends }))
            }
        };
        let snapshots = engines.iter().map(|e| e.inner.clone()).collect();
        let inner = RecordJudge::new(snapshots, Defaults { pod_allow, host_allow }, services, logs);
        Ok(PyRecordJudge { inner: if keep_keys { inner.keeping_keys() } else { inner }, ids: Vec::new() })
    }

    /// Judges the records `stream.read` kept (names it has placed filling in addresses), of
    /// input number `file`. `keep`: returns (headers, counts, verdicts, service entries) as
    /// bytes of `HEADER_DTYPE`, `FLOW_COUNTS_DTYPE`, `VERDICT_DTYPE` and int64 arrays (a record
    /// not placed has a zeroed verdict), for per-record output; else None.
    #[pyo3(signature = (stream, file, keep=false))]
    fn judge_stream<'py>(
        &mut self,
        py: Python<'py>,
        mut stream: PyRefMut<'_, PyRecordStream>,
        file: u32,
        keep: bool,
    ) -> Kept<'py> {
        let s = &mut *stream;
        let (inner, batch) = (&s.inner, &mut s.batch);
        let (judge, ids) = (&mut self.inner, &mut self.ids);
        py.detach(|| {
            inner.fill_addresses(batch);
            judge.add(file, &batch.headers, &batch.counts, keep.then_some(ids));
        });
        if keep {
            self.kept(py, &s.batch.headers, &s.batch.counts)
        } else {
            None
        }
    }

    /// Judges the records `columns.read` kept, of input number `file`; `keep` as
    /// `judge_stream`.
    #[pyo3(signature = (columns, file, keep=false))]
    fn judge_columns<'py>(
        &mut self,
        py: Python<'py>,
        columns: PyRef<'_, PyVpcColumns>,
        file: u32,
        keep: bool,
    ) -> Kept<'py> {
        let batch = &columns.batch;
        let (judge, ids) = (&mut self.inner, &mut self.ids);
        py.detach(|| judge.add(file, &batch.headers, &batch.counts, keep.then_some(ids)));
        if keep {
            self.kept(py, &batch.headers, &batch.counts)
        } else {
            None
        }
    }

    /// Judges a batch given as arrays: `headers` (`HEADER_DTYPE`) and `counts`
    /// (`FLOW_COUNTS_DTYPE`) of input number `file`; `keep` as `judge_stream`.
    #[pyo3(signature = (headers, counts, file, keep=false))]
    fn judge<'py>(
        &mut self,
        py: Python<'py>,
        headers: &Bound<'py, PyAny>,
        counts: &Bound<'py, PyAny>,
        file: u32,
        keep: bool,
    ) -> PyResult<Kept<'py>> {
        let h = header_buffer(headers, "headers")?;
        let n = h.item_count();
        let c = checked_buffer(
            counts,
            "counts",
            std::mem::size_of::<FlowCounts>(),
            std::mem::align_of::<FlowCounts>(),
            Some(n),
            false,
        )?;
        let (h_ptr, c_ptr) = (h.buf_ptr() as usize, c.buf_ptr() as usize);
        let (judge, ids) = (&mut self.inner, &mut self.ids);
        // SAFETY: both buffers were checked (item size, count, alignment, contiguity) and stay
        // acquired until this returns.
        let (hs, cs) = unsafe {
            if n == 0 {
                (&[][..], &[][..])
            } else {
                (
                    std::slice::from_raw_parts(h_ptr as *const PacketHeader, n),
                    std::slice::from_raw_parts(c_ptr as *const FlowCounts, n),
                )
            }
        };
        py.detach(|| judge.add(file, hs, cs, keep.then_some(ids)));
        let out = if keep { self.kept(py, hs, cs) } else { None };
        drop((h, c));
        Ok(out)
    }

    /// Folds what the distinct decisions summed into the totals (call before reading them).
    fn fold(&mut self, py: Python<'_>) {
        let judge = &mut self.inner;
        py.detach(|| judge.fold());
    }

    /// Starts every sum over (the keys a `keep_keys` judge decided stay).
    fn restart(&mut self, py: Python<'_>) {
        let judge = &mut self.inner;
        py.detach(|| judge.restart());
    }

    /// (totals, allowed, denied, unplaced, [no policy egress, ingress], outside), each
    /// [records, flows, packets, bytes].
    fn measures(&self) -> (Measures, Measures, Measures, Measures, [Measures; 2], Measures) {
        let t = &self.inner.tally;
        (t.totals, t.allowed, t.denied, t.unplaced, t.no_policy, self.inner.outside)
    }

    /// [((direction, tier, source_kind, source, rule, reason, allow), measures)].
    fn by_rule(&self) -> Vec<(DecisionKey, Measures)> {
        self.inner.tally.by_rule.iter().map(|(k, m)| (*k, *m)).collect()
    }

    /// [((direction, tier, source_kind, source, rule), measures)]: the Log rules the first
    /// engine's decisions passed (with `logs`).
    fn logged(&self) -> Vec<(LogKey, Measures)> {
        self.inner.logged.iter().map(|(k, m)| (*k, *m)).collect()
    }

    /// Judged records by [own verdict 0 none, 1 allow, 2 deny, 3 other][policy's 0 deny, 1 allow].
    fn reported(&self) -> [[u64; 2]; 4] {
        self.inner.tally.reported
    }

    /// The records kept as examples: [(kind 0 not placed / 1 outside / 2 the record's own verdict
    /// differs, file, header bytes, counts bytes, verdict bytes)], the first few of each kind.
    fn examples<'py>(
        &self,
        py: Python<'py>,
    ) -> Vec<(u8, u32, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        self.inner
            .examples
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.file,
                    PyBytes::new(py, as_bytes(std::slice::from_ref(&e.header))),
                    PyBytes::new(py, as_bytes(std::slice::from_ref(&e.counts))),
                    PyBytes::new(py, as_bytes(std::slice::from_ref(&e.verdict))),
                )
            })
            .collect()
    }

    /// (first, last) time the records cover, ns since the epoch (0: none known).
    fn time_range(&self) -> (u64, u64) {
        (self.inner.first_ns, self.inner.last_ns)
    }

    /// (distinct decisions made, each under every engine; records judged).
    fn stats(&self) -> (u64, u64) {
        (self.inner.decisions, self.inner.judged)
    }

    /// With two engines, after `fold`: the distinct records whose verdicts differ, as
    /// (header bytes, old verdict bytes, new verdict bytes, measures, first ns, last ns,
    /// [(file, position)] of the first records).
    #[allow(clippy::type_complexity)]
    fn flipped<'py>(
        &self,
        py: Python<'py>,
    ) -> Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Measures, u64, u64, Vec<(u32, u64)>)> {
        self.inner
            .flipped
            .iter()
            .map(|e| {
                (
                    PyBytes::new(py, as_bytes(std::slice::from_ref(&e.header))),
                    PyBytes::new(py, as_bytes(&e.verdicts[..1])),
                    PyBytes::new(py, as_bytes(&e.verdicts[1..])),
                    e.sums,
                    e.first_ns,
                    e.last_ns,
                    e.examples.clone(),
                )
            })
            .collect()
    }
}

/// Arrow buffers of one array: (buffer, validity or None, offset).
type ArrayArg<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>, usize);
/// (offsets, data, validity or None, offset, offset width 4 or 8, dictionary indices or None).
type TextArg<'py> =
    (Bound<'py, PyAny>, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>, usize, usize, Option<ArrayArg<'py>>);
/// (values, validity or None, offset, value width 4 or 8).
type IntArg<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>, usize, usize);
type ProblemsOut = (Vec<(String, u64)>, Vec<(String, u64, String)>);

/// Records of `T` (a repr(C) record without padding) copied out of `data`.
fn records_of<T: Copy>(data: &[u8], what: &str) -> PyResult<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if data.len() % size != 0 {
        return Err(PyValueError::new_err(format!(
            "{what}: {} bytes is not a whole number of {size}-byte records",
            data.len()
        )));
    }
    // SAFETY: `T` is plain data (every bit pattern a value); the reads are unaligned.
    Ok(data.chunks_exact(size).map(|r| unsafe { std::ptr::read_unaligned(r.as_ptr() as *const T) }).collect())
}

/// `replay --traffic --out`'s lines (`pyclassify_core::records::lines`), written a chunk at a
/// time from what `RecordJudge.judge(..., keep=True)` returns; the texts a line names (side
/// decisions, endpoints) learned once each, as JSON.
#[pyclass(name = "RecordLines", module = "pyclassify._engine")]
pub struct PyRecordLines {
    inner: Lines,
}

#[pymethods]
impl PyRecordLines {
    /// `protocols`: 256 protocol names, `orientations` and `reported` by their number,
    /// `services` one per Service entry: each as JSON text.
    #[new]
    fn new(
        protocols: Vec<String>,
        orientations: Vec<String>,
        reported: Vec<String>,
        services: Vec<String>,
    ) -> PyResult<Self> {
        if protocols.len() != 256 {
            return Err(PyValueError::new_err("a name for each of the 256 protocol numbers"));
        }
        Ok(PyRecordLines { inner: Lines::new(LineTables { protocols, orientations, reported, services }) })
    }

    /// What the lines of these records (bytes of `HEADER_DTYPE`, `FLOW_COUNTS_DTYPE`,
    /// `VERDICT_DTYPE`) need that was not learned: ([(direction, side bytes)], [address]).
    fn missing<'py>(
        &self,
        py: Python<'py>,
        headers: &[u8],
        counts: &[u8],
        verdicts: &[u8],
    ) -> PyResult<(Vec<(u8, Bound<'py, PyBytes>)>, Vec<Bound<'py, PyBytes>>)> {
        let (h, c, v) = (
            records_of::<PacketHeader>(headers, "headers")?,
            records_of::<FlowCounts>(counts, "counts")?,
            records_of::<PacketVerdict>(verdicts, "verdicts")?,
        );
        let m = py.detach(|| self.inner.missing(&h, &c, &v));
        Ok((
            m.sides.iter().map(|(d, s)| (*d, PyBytes::new(py, as_bytes(std::slice::from_ref(s))))).collect(),
            m.addresses.iter().map(|a| PyBytes::new(py, &a[..])).collect(),
        ))
    }

    /// Learns the decision text of a side (`direction` 0 egress / 1 ingress).
    fn learn_side(&mut self, direction: u8, side: &[u8], json: String) -> PyResult<()> {
        let s = records_of::<pyclassify_core::engine::SideVerdict>(side, "side")?;
        let [s] = s.as_slice() else { return Err(PyValueError::new_err("one side record")) };
        self.inner.learn_side(direction, s, json);
        Ok(())
    }

    /// Learns the endpoint text of an address (16 bytes).
    fn learn_owner(&mut self, address: Vec<u8>, json: String) -> PyResult<()> {
        self.inner.learn_owner(address16(address)?, json);
        Ok(())
    }

    /// The lines of these records, as UTF-8 bytes: `file` the input's name as JSON, `unit`
    /// `"line"` or `"byte"`; `services` bytes of an int64 array.
    fn write<'py>(
        &mut self,
        py: Python<'py>,
        headers: &[u8],
        counts: &[u8],
        verdicts: &[u8],
        services: &[u8],
        file: &str,
        unit: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (h, c, v) = (
            records_of::<PacketHeader>(headers, "headers")?,
            records_of::<FlowCounts>(counts, "counts")?,
            records_of::<PacketVerdict>(verdicts, "verdicts")?,
        );
        let s = records_of::<i64>(services, "services")?;
        if c.len() != h.len() || v.len() != h.len() || s.len() != h.len() {
            return Err(PyValueError::new_err("headers, counts, verdicts and services must be parallel"));
        }
        let mut out = String::with_capacity(h.len() * 400);
        let inner = &mut self.inner;
        py.detach(|| inner.write(&h, &c, &v, &s, file, unit, &mut out));
        Ok(PyBytes::new(py, out.as_bytes()))
    }

    /// The next line's index (lines written so far).
    #[getter]
    fn index(&self) -> u64 {
        self.inner.index
    }
}

/// A byte buffer (an Arrow buffer), acquired.
fn byte_buffer(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<pyo3::buffer::PyUntypedBuffer> {
    checked_buffer(obj, what, 1, 1, None, false)
}

fn bytes_of(b: &pyo3::buffer::PyUntypedBuffer) -> &[u8] {
    // SAFETY: a checked, C-contiguous byte buffer, held (acquired) as long as the slice is used.
    unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.item_count()) }
}

/// Reads Parquet columns into `out` (see `VpcColumns.read`).
fn read_vpc_columns<'py>(
    py: Python<'py>,
    rows: usize,
    first_row: u64,
    text: std::collections::HashMap<String, TextArg<'py>>,
    ints: std::collections::HashMap<String, IntArg<'py>>,
    out: &mut RecordBatch,
) -> PyResult<ProblemsOut> {
    use pyclassify_core::records::vpc::{ColumnBatch, IntColumn, Strings, TextColumn};
    let width_of = |name: &str, width: usize| {
        if width == 4 || width == 8 {
            Ok(width)
        } else {
            Err(PyValueError::new_err(format!("{name}: a value or offset is 4 or 8 bytes, not {width}")))
        }
    };
    type Held = (
        pyo3::buffer::PyUntypedBuffer,
        pyo3::buffer::PyUntypedBuffer,
        Option<pyo3::buffer::PyUntypedBuffer>,
        usize,
        usize,
        Option<(pyo3::buffer::PyUntypedBuffer, Option<pyo3::buffer::PyUntypedBuffer>, usize)>,
    );
    let mut held_text: std::collections::HashMap<&str, Held> = std::collections::HashMap::new();
    for (name, (offsets, data, valid, offset, width, indices)) in &text {
        let width = width_of(name, *width)?;
        let indices = match indices {
            None => None,
            Some((b, v, o)) => {
                Some((byte_buffer(b, "indices")?, v.as_ref().map(|v| byte_buffer(v, "validity")).transpose()?, *o))
            }
        };
        let valid = valid.as_ref().map(|v| byte_buffer(v, "validity")).transpose()?;
        held_text.insert(
            name,
            (byte_buffer(offsets, "offsets")?, byte_buffer(data, "data")?, valid, *offset, width, indices),
        );
    }
    let mut held_ints: std::collections::HashMap<
        &str,
        (pyo3::buffer::PyUntypedBuffer, Option<pyo3::buffer::PyUntypedBuffer>, usize, usize),
    > = std::collections::HashMap::new();
    for (name, (data, valid, offset, width)) in &ints {
        let width = width_of(name, *width)?;
        let valid = valid.as_ref().map(|v| byte_buffer(v, "validity")).transpose()?;
        held_ints.insert(name, (byte_buffer(data, name)?, valid, *offset, width));
    }
    let t = |n: &str| {
        held_text.get(n).map(|(o, d, v, offset, width, indices)| {
            let strings = Strings {
                offsets: bytes_of(o),
                data: bytes_of(d),
                valid: v.as_ref().map(bytes_of),
                offset: *offset,
                width: *width,
            };
            match indices {
                None => TextColumn::Plain(strings),
                Some((b, v, o)) => TextColumn::Dictionary {
                    values: strings,
                    indices: bytes_of(b),
                    valid: v.as_ref().map(bytes_of),
                    offset: *o,
                },
            }
        })
    };
    let i = |n: &str| {
        held_ints.get(n).map(|(d, v, offset, width)| IntColumn {
            data: bytes_of(d),
            valid: v.as_ref().map(bytes_of),
            offset: *offset,
            width: *width,
        })
    };
    let batch = ColumnBatch {
        srcaddr: t("srcaddr"),
        dstaddr: t("dstaddr"),
        pkt_srcaddr: t("pkt_srcaddr"),
        pkt_dstaddr: t("pkt_dstaddr"),
        action: t("action"),
        log_status: t("log_status"),
        srcport: i("srcport"),
        dstport: i("dstport"),
        protocol: i("protocol"),
        packets: i("packets"),
        bytes: i("bytes"),
        start: i("start"),
        end: i("end"),
        tcp_flags: i("tcp_flags"),
    };
    let mut problems = pyclassify_core::records::Problems::default();
    out.clear();
    py.detach(|| batch.read(rows, first_row, out, &mut problems));
    drop(batch);
    drop((held_text, held_ints));
    Ok((
        problems.counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        problems.first.iter().map(|(k, p, d)| (k.to_string(), *p, d.clone())).collect(),
    ))
}

/// The records of one batch of VPC Flow Logs' Parquet columns at a time, kept in Rust for
/// `RecordJudge.judge_columns` (the batch's memory is reused from one read to the next, so
/// a file's records cost no fresh pages and no copy into Python).
#[pyclass(name = "VpcColumns", module = "pyclassify._engine")]
#[derive(Default)]
pub struct PyVpcColumns {
    batch: RecordBatch,
}

#[pymethods]
impl PyVpcColumns {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Reads `rows` rows of columns, the first of them row `first_row` (from 1), in place of
    /// the records read before: `text` {name: (offsets, data, validity or None, offset,
    /// offset width 4 or 8, indices)} of Arrow `string` or `large_string` arrays' buffers
    /// (`srcaddr`, `dstaddr`, `pkt_srcaddr`, `pkt_dstaddr`, `action`, `log_status`); with
    /// `indices` (int32 buffer, validity or None, offset) the strings are a dictionary and each
    /// row an index into it; `ints` {name: (values, validity or None, offset, width 4 or 8)} of
    /// Arrow int32 or int64 arrays' buffers (`srcport`, `dstport`, `protocol`, `packets`,
    /// `bytes`, `start`, `end`, `tcp_flags`). The text reader's rules make the records; returns
    /// the problems (count per reason, the first few with their row).
    fn read<'py>(
        &mut self,
        py: Python<'py>,
        rows: usize,
        first_row: u64,
        text: std::collections::HashMap<String, TextArg<'py>>,
        ints: std::collections::HashMap<String, IntArg<'py>>,
    ) -> PyResult<ProblemsOut> {
        read_vpc_columns(py, rows, first_row, text, ints, &mut self.batch)
    }

    /// The records read last, as (headers, counts) bytes as `RecordStream.feed` gives them.
    fn arrays<'py>(&self, py: Python<'py>) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
        (
            PyBytes::new(py, as_bytes::<PacketHeader>(&self.batch.headers)),
            PyBytes::new(py, as_bytes::<FlowCounts>(&self.batch.counts)),
        )
    }

    fn __len__(&self) -> usize {
        self.batch.len()
    }
}

/// The format of an input whose first bytes are `head` (`"pcap"`, `"hubble"`, ...), or None.
#[pyfunction]
fn detect_format(head: &[u8]) -> Option<&'static str> {
    detect(head).map(Format::name)
}

/// Every input format as (name, what it is).
#[pyfunction]
fn record_formats() -> Vec<(&'static str, &'static str)> {
    Format::ALL.iter().map(|f| (f.name(), f.title())).collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecordStream>()?;
    m.add_class::<PyRecordJudge>()?;
    m.add_class::<PyRecordLines>()?;
    m.add_function(wrap_pyfunction!(detect_format, m)?)?;
    m.add_class::<PyVpcColumns>()?;
    m.add_function(wrap_pyfunction!(record_formats, m)?)?;
    Ok(())
}

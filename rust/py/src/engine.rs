//! Python face of the decision engine (`pyclassify_core::engine`): glue only.

use pyclassify_core::engine::{Addr, Decision, Defaults, Engine, Flow, FlowEnd, Source};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::batch::{header_slice, output_slice};
use crate::errors::engine_error;

/// An immutable compiled snapshot of a policy set and its inventory.
#[pyclass(name = "Engine", module = "pyclassify._engine", frozen)]
pub struct PyEngine {
    inner: Engine,
}

type PyLog = (Option<u32>, (&'static str, u32), u32);
type PyDecision = (bool, Option<u32>, Option<(&'static str, u32)>, Option<u32>, u8, Vec<PyLog>);

fn source(s: Source) -> (&'static str, u32) {
    match s {
        Source::Policy(i) => ("policy", i),
        Source::Profile(i) => ("profile", i),
    }
}

fn decision(d: Decision) -> PyDecision {
    let logs = d.logs.into_iter().map(|l| (l.tier, source(l.source), l.rule)).collect();
    (d.allow, d.tier, d.source.map(source), d.rule, d.reason as u8, logs)
}

fn end(ip: Option<&str>, endpoint: Option<u32>) -> PyResult<FlowEnd> {
    let addr = ip.map(Addr::parse).transpose().map_err(engine_error)?;
    Ok(FlowEnd { addr, endpoint })
}

#[pymethods]
impl PyEngine {
    /// Compiles the JSON spec written by `pyclassify.engine.engine_spec` (without the GIL).
    #[new]
    fn new(py: Python<'_>, spec_json: &str) -> PyResult<Self> {
        let inner = py.detach(|| Engine::from_json(spec_json)).map_err(engine_error)?;
        Ok(PyEngine { inner })
    }

    /// `{"endpoints", "policies", "rules", "entities", "addresses"}`.
    fn stats(&self) -> Vec<(&'static str, usize)> {
        let s = self.inner.stats();
        vec![
            ("endpoints", s.endpoints),
            ("policies", s.policies),
            ("rules", s.rules),
            ("entities", s.entities),
            ("addresses", s.addresses),
        ]
    }

    /// One flow: `(allowed, egress, ingress)`, each direction None or
    /// `(allowed, tier, ("policy"|"profile", index) | None, rule | None, reason, logs)`.
    #[pyo3(signature = (src_ip, src_endpoint, dst_ip, dst_endpoint, protocol, sport, dport, icmp_type, icmp_code, pod_allow, host_allow))]
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
    ) -> PyResult<(bool, Option<PyDecision>, Option<PyDecision>)> {
        let flow = Flow {
            src: end(src_ip, src_endpoint)?,
            dst: end(dst_ip, dst_endpoint)?,
            protocol,
            sport,
            dport,
            icmp_type,
            icmp_code,
        };
        let v = self
            .inner
            .evaluate(&flow, Defaults { pod_allow, host_allow })
            .map_err(engine_error)?;
        Ok((v.allow, v.egress.map(decision), v.ingress.map(decision)))
    }

    /// Verdicts for a header batch: `headers` is the batch's bytes (a uint8 view of a
    /// `HEADER_DTYPE` array), `out` a writable uint8 array of one byte per header. Runs
    /// without the GIL.
    fn classify(&self, py: Python<'_>, headers: PyBuffer<u8>, out: PyBuffer<u8>, pod_allow: bool, host_allow: bool) -> PyResult<()> {
        let hdrs = header_slice(py, &headers)?;
        let n = hdrs.len;
        let verdicts = output_slice(py, &out, n)?;
        let defaults = Defaults { pod_allow, host_allow };
        py.detach(|| {
            // SAFETY: both buffers stay acquired (and so alive and unmoved) until this returns.
            let (hdrs, verdicts) = unsafe { (hdrs.get(), verdicts.get()) };
            self.inner.classify_batch(hdrs, verdicts, defaults);
        });
        Ok(())
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    Ok(())
}
